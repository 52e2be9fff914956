import { describe, expect, it } from 'vitest';
import { allowedHostnames, bearerMatches, refuseHostOrOrigin } from './http-guard.js';

describe('refuseHostOrOrigin', () => {
  const loopback = allowedHostnames('127.0.0.1');

  it('accepts loopback names at any port and refuses every other Host', () => {
    for (const host of ['localhost', 'localhost:3000', '127.0.0.1:1', '[::1]:8080', 'LOCALHOST'])
      expect(refuseHostOrOrigin({ host }, loopback), host).toBeUndefined();
    for (const host of ['evil.example', 'localhost.evil.example', '127.0.0.2', '[::2]', 'a b', ''])
      expect(refuseHostOrOrigin({ host }, loopback), host).toMatch(/^Invalid Host/);
    expect(refuseHostOrOrigin({}, loopback)).toBe('Missing Host header');
  });

  it('accepts the bound address itself, never a wildcard', () => {
    expect(
      refuseHostOrOrigin({ host: '10.1.2.3:8080' }, allowedHostnames('10.1.2.3')),
    ).toBeUndefined();
    expect(
      refuseHostOrOrigin({ host: '[fd00::1]:80' }, allowedHostnames('fd00::1')),
    ).toBeUndefined();
    expect(refuseHostOrOrigin({ host: '0.0.0.0' }, allowedHostnames('0.0.0.0'))).toMatch(
      /Invalid Host/,
    );
    expect(refuseHostOrOrigin({ host: 'anything' }, allowedHostnames('::', ['*']))).toBeUndefined();
  });

  it('accepts no Origin, loopback origins and listed ones; refuses the rest', () => {
    const host = 'localhost:1';
    for (const origin of [
      undefined,
      'http://localhost:6274',
      'https://127.0.0.1',
      'http://[::1]:9',
    ])
      expect(refuseHostOrOrigin({ host, origin }, loopback), String(origin)).toBeUndefined();
    for (const origin of [
      'https://evil.example',
      'null',
      'file://',
      'chrome-extension://x',
      'http://localhost.evil',
    ])
      expect(refuseHostOrOrigin({ host, origin }, loopback), origin).toMatch(/^Invalid Origin/);
    expect(
      refuseHostOrOrigin({ host, origin: 'https://app.lab' }, loopback, ['https://app.lab']),
    ).toBeUndefined();
    expect(refuseHostOrOrigin({ host, origin: 'https://x' }, loopback, ['*'])).toBeUndefined();
  });
});

describe('bearerMatches', () => {
  it('wants exactly `Bearer <token>`', () => {
    expect(bearerMatches('Bearer s3cret', 's3cret')).toBe(true);
    expect(bearerMatches('bearer s3cret', 's3cret')).toBe(true);
    for (const header of [
      undefined,
      '',
      's3cret',
      'Bearer',
      'Bearer s3cre',
      'Bearer s3cret2',
      'Basic s3cret',
    ])
      expect(bearerMatches(header, 's3cret'), String(header)).toBe(false);
  });
});
