import { describe, expect, it, vi } from 'vitest';
import { catchProtocolError } from './ota.test-helper.js';
import { buildOtaReply } from './ota-reply.js';

const WS_URL = 'ws://192.168.1.10:8000/xiaozhi/v1/';
const FW_URL = 'http://192.168.1.10:8003/xiaozhi.bin';

describe('buildOtaReply', () => {
  it('maps camelCase options to the wire sections', () => {
    const reply = buildOtaReply(
      {
        websocket: { url: WS_URL, token: 'tok', version: 1 },
        serverTime: { now: new Date('2026-08-20T10:00:00.000Z'), timezoneOffsetMinutes: 480 },
        firmware: { version: '2.5.0', url: FW_URL },
        activation: { message: 'm', code: '123456', challenge: 'abc', timeoutMs: 5000 },
      },
      { currentVersion: '2.4.2' },
    );
    expect(reply).toEqual({
      activation: { message: 'm', code: '123456', challenge: 'abc', timeout_ms: 5000 },
      websocket: { url: WS_URL, token: 'tok', version: 1 },
      server_time: { timestamp: Date.parse('2026-08-20T10:00:00.000Z'), timezone_offset: 480 },
      firmware: { version: '2.5.0', url: FW_URL },
    });
  });

  it('writes timezone_offset in minutes, exactly as given', () => {
    const reply = buildOtaReply({
      serverTime: { now: 1_760_000_000_000, timezoneOffsetMinutes: -300 },
    });
    expect(reply.server_time).toEqual({ timestamp: 1_760_000_000_000, timezone_offset: -300 });
    const noOffset = buildOtaReply({ serverTime: { now: 1_760_000_000_000 } });
    expect(noOffset.server_time).toEqual({ timestamp: 1_760_000_000_000 });
  });

  it('defaults serverTime.now to the current time', () => {
    vi.useFakeTimers({ now: 1_770_000_000_123 });
    try {
      expect(buildOtaReply({ serverTime: {} }).server_time?.timestamp).toBe(1_770_000_000_123);
    } finally {
      vi.useRealTimers();
    }
  });

  it('maps mqtt options and force', () => {
    const reply = buildOtaReply(
      {
        mqtt: {
          endpoint: 'broker.local:1883',
          clientId: 'c',
          username: 'u',
          password: 'p',
          keepalive: 240,
          publishTopic: 'device-server',
        },
        firmware: { version: '2.5.0', url: FW_URL, force: true },
      },
      { currentVersion: '2.4.2' },
    );
    expect(reply).toEqual({
      mqtt: {
        endpoint: 'broker.local:1883',
        client_id: 'c',
        username: 'u',
        password: 'p',
        keepalive: 240,
        publish_topic: 'device-server',
      },
      firmware: { version: '2.5.0', url: FW_URL, force: 1 },
    });
    const unforced = buildOtaReply({ firmware: { version: '2.5.0', url: FW_URL, force: false } });
    expect(unforced.firmware).toEqual({ version: '2.5.0', url: FW_URL });
  });

  it('refuses a token too long for NVS', () => {
    const error = catchProtocolError(() =>
      buildOtaReply({ websocket: { url: WS_URL, token: 'x'.repeat(4000) } }),
    );
    expect(error.code).toBe('OTA_HAZARD');
    expect(error.field).toBe('websocket.token');
  });

  it('refuses a firmware version std::stoi would throw on', () => {
    const error = catchProtocolError(() =>
      buildOtaReply({ firmware: { version: 'v2.5.0', url: FW_URL } }),
    );
    expect(error.code).toBe('OTA_HAZARD');
    expect(error.field).toBe('firmware.version');
  });

  it('refuses forcing the running version', () => {
    const error = catchProtocolError(() =>
      buildOtaReply(
        { firmware: { version: '2.4.2', url: FW_URL, force: true } },
        { currentVersion: '2.4.2' },
      ),
    );
    expect(error.code).toBe('OTA_HAZARD');
    expect(error.field).toBe('firmware.force');
  });

  it('refuses a string websocket version smuggled past the types', () => {
    const version = '2' as unknown as 2;
    const error = catchProtocolError(() => buildOtaReply({ websocket: { url: WS_URL, version } }));
    expect(error.code).toBe('OTA_HAZARD');
    expect(error.field).toBe('websocket.version');
  });

  it('refuses options the device would ignore with OTA_INVALID', () => {
    const error = catchProtocolError(() => buildOtaReply({ websocket: { url: 'https://h/ws' } }));
    expect(error.code).toBe('OTA_INVALID');
    expect(error.field).toBe('websocket.url');
    const badTime = catchProtocolError(() => buildOtaReply({ serverTime: { now: Number.NaN } }));
    expect(badTime.code).toBe('OTA_INVALID');
    expect(badTime.field).toBe('server_time.timestamp');
  });
});
