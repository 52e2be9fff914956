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
    [{ headersTimeoutMs: 5000, requestTimeoutMs: 1000 }, /headersTimeoutMs/],
    [{ allowedOrigins: ['http://lab.example/path'] }, /allowedOrigins/],
    [{ allowedOrigins: ['ftp://lab.example'] }, /allowedOrigins/],
    [{ allowedOrigins: ['user@lab.example'] }, /allowedOrigins/],
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

describe('the API on a network address', () => {
  it.each(['0.0.0.0', '::', '192.168.1.5', 'lab.example', '128.0.0.1'])(
    'refuses to bind %s with no API token, naming apiTokens and the two ways out',
    (host) => {
      expect(() => resolveConfig({ host })).toThrow(
        expect.objectContaining({
          code: 'CONFIG_HAZARD',
          message: expect.stringMatching(/^config apiTokens: .*--api-token.*--auth off/),
        }),
      );
    },
  );

  it.each(['127.0.0.1', '127.3.2.1', 'localhost', 'LocalHost', '::1', '[::1]', '::ffff:127.0.0.1'])(
    'leaves the API open on loopback %s',
    (host) => {
      expect(resolveConfig({ host }).apiTokens).toEqual([]);
    },
  );

  it('binds a network address with an API token, or with auth off given on purpose', () => {
    expect(resolveConfig({ host: '0.0.0.0', apiTokens: ['t'] }).host).toBe('0.0.0.0');
    expect(resolveConfig({ host: '0.0.0.0', auth: 'off' }).auth).toBe('off');
    // Device tokens do not guard the API.
    expect(() => resolveConfig({ host: '0.0.0.0', tokens: ['t'] })).toThrow(/apiTokens/);
  });

  it('accepts origins, hosts and * in allowedOrigins', () => {
    expect(
      resolveConfig({ allowedOrigins: ['http://lab.example:3000', 'lab.example', '*'] })
        .allowedOrigins,
    ).toHaveLength(3);
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

describe('MQTT and UDP', () => {
  it('offers WebSocket and binds no broker by default; mqtt or an MQTT port turn it on', () => {
    expect(resolveConfig()).toMatchObject({
      transport: 'websocket',
      mqttBroker: false,
      mqttPort: 1883,
      udpPort: 0,
      mqttKeepaliveS: 240,
    });
    expect(resolveConfig({ transport: 'mqtt' }).mqttBroker).toBe(true);
    expect(resolveConfig({ mqttPort: 0 }).mqttBroker).toBe(true);
    expect(resolveConfig({ mqttPort: 0, mqttBroker: false }).mqttBroker).toBe(false);
  });

  it.each([
    [{ transport: 'udp' as 'mqtt' }, /transport/],
    [{ transport: 'mqtt' as const, mqttBroker: false }, /mqttBroker/],
    [{ mqttPort: 70000 }, /mqttPort/],
    [{ udpPort: -1 }, /udpPort/],
    // xiaozhi-esp32 mqtt_protocol.cc: the board speaks TLS on 8883.
    [{ mqttPort: 8883 }, /mqttPort: 8883 is where boards speak TLS/],
    [{ port: 1883, mqttPort: 1883 }, /mqttPort: must differ from port/],
    [{ mqttKeepaliveS: 0 }, /mqttKeepaliveS/],
    [{ mqttKeepaliveS: 65536 }, /mqttKeepaliveS/],
  ])('refuses %j naming the field', (partial, field) => {
    expect(() => resolveConfig(partial)).toThrow(
      expect.objectContaining({ code: 'CONFIG_INVALID', message: expect.stringMatching(field) }),
    );
  });

  it('refuses an MQTT endpoint boards would abort on (an IPv6 host: std::stoi of its port throws)', () => {
    const config = resolveConfig({ transport: 'mqtt' });
    expect(() =>
      assertConfigSafe(config, 'ws://127.0.0.1:8000/xiaozhi/v1/', '127.0.0.1:1883'),
    ).not.toThrow();
    expect(() => assertConfigSafe(config, 'ws://[::1]:8000/xiaozhi/v1/', '::1:1883')).toThrow(
      expect.objectContaining({
        code: 'CONFIG_HAZARD',
        message: expect.stringContaining('mqtt.endpoint'),
      }),
    );
  });
});
