import { describe, expect, it } from 'vitest';
import { assertConfigSafe, resolveConfig } from './config.js';

describe('resolveConfig', () => {
  it('fills the defaults: loopback, token auth, relaxed pings, 30 s calls', () => {
    expect(resolveConfig()).toMatchObject({
      host: '127.0.0.1',
      auth: 'token',
      callTimeoutMs: 30_000,
      pingIntervalMs: 60_000,
      websocketVersion: 1,
    });
  });

  it.each([
    [{ port: 70000 }, /port/],
    [{ prefix: 'xiaozhi' }, /prefix/],
    [{ auth: 'maybe' as 'off' }, /auth/],
    [{ timezoneOffsetMinutes: 8.5 }, /timezoneOffsetMinutes/],
    [{ callTimeoutMs: 0 }, /callTimeoutMs/],
    [{ publicUrl: 'http://h:1/path' }, /publicUrl/],
    [{ tokens: ['has space'] }, /tokens/],
  ])('refuses %j naming the field', (partial, field) => {
    expect(() => resolveConfig(partial)).toThrow(
      expect.objectContaining({ code: 'CONFIG_INVALID', message: expect.stringMatching(field) }),
    );
  });

  it('refuses a websocket version that is not the number 1, 2 or 3 as a hazard', () => {
    expect(() => resolveConfig({ websocketVersion: 4 as 1 })).toThrow(
      expect.objectContaining({ code: 'CONFIG_HAZARD' }),
    );
  });
});

describe('assertConfigSafe', () => {
  it('accepts the defaults and refuses a WebSocket URL too long for NVS', () => {
    expect(() =>
      assertConfigSafe(resolveConfig(), 'ws://127.0.0.1:8000/xiaozhi/v1/'),
    ).not.toThrow();
    expect(() => assertConfigSafe(resolveConfig(), `ws://h/${'p'.repeat(4000)}`)).toThrow(
      expect.objectContaining({
        code: 'CONFIG_HAZARD',
        message: expect.stringContaining('websocket.url'),
      }),
    );
  });
});
