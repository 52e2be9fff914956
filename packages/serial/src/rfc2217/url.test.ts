import { describe, expect, it } from 'vitest';
import { SerialError } from '../errors.js';
import { formatRfc2217Url, isRfc2217Url, parseRfc2217Signature, parseRfc2217Url } from './url.js';

function invalid(text: string): SerialError {
  try {
    parseRfc2217Url(text);
  } catch (error) {
    expect(error).toBeInstanceOf(SerialError);
    return error as SerialError;
  }
  throw new Error(`${text} was accepted`);
}

describe('parseRfc2217Url', () => {
  it('takes host:port, an IPv4 address, an IPv6 address in brackets, any case of scheme', () => {
    expect(parseRfc2217Url('rfc2217://lab-pi.local:4000')).toEqual({
      host: 'lab-pi.local',
      port: 4000,
      ignoreSetControl: false,
    });
    expect(parseRfc2217Url('RFC2217://192.168.1.20:2217/')).toEqual({
      host: '192.168.1.20',
      port: 2217,
      ignoreSetControl: false,
    });
    expect(parseRfc2217Url(' rfc2217://[::1]:4000 ')).toEqual({
      host: '::1',
      port: 4000,
      ignoreSetControl: false,
    });
    expect(parseRfc2217Url('rfc2217://Host.Example:1')).toMatchObject({ host: 'host.example' });
    expect(parseRfc2217Url('rfc2217://h:65535').port).toBe(65_535);
  });

  it("takes pyserial's ?ign_set_control and refuses its other options", () => {
    expect(parseRfc2217Url('rfc2217://h:4000?ign_set_control')).toEqual({
      host: 'h',
      port: 4000,
      ignoreSetControl: true,
    });
    expect(invalid('rfc2217://h:4000?logging=debug').message).toMatch(
      /unknown option "logging=debug" \(only ign_set_control\)/,
    );
  });

  it('refuses what is not host:port, as OPTION_INVALID saying what is wrong', () => {
    const cases: [string, RegExp][] = [
      ['rfc2217://h', /the port is missing/],
      ['rfc2217://h:', /the port is missing/],
      ['rfc2217://:4000', /the host is missing/],
      ['rfc2217://h:0', /port 0 is not between 1 and 65535/],
      ['rfc2217://h:65536', /port 65536 is not between 1 and 65535/],
      ['rfc2217://h:40a0', /port "40a0" is not a number/],
      ['rfc2217://h:4000/dev/ttyUSB0', /a path after host:port/],
      ['rfc2217://user@h:4000', /user info/],
      ['rfc2217://::1:4000', /IPv6 address goes in brackets/],
      ['rfc2217://[::1', /no closing \]/],
      ['rfc2217://[::1]4000', /expected :<port>/],
      ['rfc2217://[zz]:4000', /not an IPv6 address/],
      ['rfc2217://h_x:4000', /not a host name/],
      ['rfc2217://h:4000#x', /fragment/],
      ['tcp://h:4000', /does not start with rfc2217:\/\//],
    ];
    for (const [text, why] of cases) {
      const error = invalid(text);
      expect(error.code, text).toBe('OPTION_INVALID');
      expect(error.message, text).toMatch(why);
      expect(error.message, text).toMatch(/expected rfc2217:\/\/<host>:<port>/);
    }
  });
});

describe('formatRfc2217Url', () => {
  it('spells a URL one way: lower case, IPv6 in brackets, the option kept', () => {
    expect(formatRfc2217Url(parseRfc2217Url('RFC2217://Pi:4000/'))).toBe('rfc2217://pi:4000');
    expect(formatRfc2217Url(parseRfc2217Url('rfc2217://[::1]:4000'))).toBe('rfc2217://[::1]:4000');
    expect(formatRfc2217Url(parseRfc2217Url('rfc2217://pi:4000?IGN_SET_CONTROL'))).toBe(
      'rfc2217://pi:4000?ign_set_control',
    );
  });

  it('isRfc2217Url looks at the scheme only', () => {
    expect(isRfc2217Url('RFC2217://x')).toBe(true);
    expect(isRfc2217Url('/dev/ttyUSB0')).toBe(false);
    expect(isRfc2217Url('virtual:desk')).toBe(false);
  });
});

describe('parseRfc2217Signature', () => {
  it("reads port and kind from `xiaozhi-mcp port serve`'s signature", () => {
    expect(parseRfc2217Signature('xiaozhi-mcp port serve port=/dev/ttyUSB0 kind=usb-uart')).toEqual(
      { label: '/dev/ttyUSB0', kind: 'usb-uart' },
    );
    expect(
      parseRfc2217Signature('xiaozhi-mcp port serve kind=usb-serial-jtag port=virtual:a'),
    ).toEqual({ label: 'virtual:a', kind: 'usb-serial-jtag' });
  });

  it('ignores an unknown kind, unknown keys, and any other server', () => {
    expect(parseRfc2217Signature('xiaozhi-mcp port serve kind=floppy extra=1')).toEqual({});
    expect(parseRfc2217Signature('ser2net port=2000 kind=usb-uart')).toEqual({});
    expect(parseRfc2217Signature('')).toEqual({});
  });
});
