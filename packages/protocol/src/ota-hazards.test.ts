import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { anyText, catchProtocolError, hazards, onlyProtocolErrors } from './ota.test-helper.js';
import {
  OTA_NVS_KEY_MAX,
  OTA_NVS_STRING_MAX_BYTES,
  type OtaFinding,
  type OtaReplyContext,
  validateOtaReply,
} from './ota-hazards.js';
import { assertSafeOtaReply, buildOtaReply } from './ota-reply.js';

const WS_URL = 'ws://192.168.1.10:8000/xiaozhi/v1/';
const FW_URL = 'http://192.168.1.10:8003/xiaozhi.bin';
/** What takes a board off MQTT next to a websocket section (NVS keys are never erased). */
const BLANK_MQTT = { mqtt: { endpoint: '' } };

function only(findings: OtaFinding[], severity: OtaFinding['severity']): OtaFinding[] {
  return findings.filter((f) => f.severity === severity);
}

/** Asserts exactly one hazard on `field`, and that assertSafeOtaReply refuses it with that field. */
function expectHazard(reply: unknown, field: string, context: OtaReplyContext = {}): OtaFinding {
  const found = hazards(validateOtaReply(reply, context));
  expect(found.map((f) => f.field)).toEqual([field]);
  const [finding] = found;
  if (finding === undefined) throw new Error('unreachable');
  expect(finding.severity).toBe('hazard');
  expect(finding.message).toContain(field);
  const error = catchProtocolError(() => assertSafeOtaReply(reply, context));
  expect(error.code).toBe('OTA_HAZARD');
  expect(error.field).toBe(field);
  expect(error.message).toContain(field);
  return finding;
}

describe('constants', () => {
  it('match the NVS limits', () => {
    expect(OTA_NVS_KEY_MAX).toBe(15);
    expect(OTA_NVS_STRING_MAX_BYTES).toBe(3999);
  });
});

describe('hazard: NVS key longer than 15 bytes', () => {
  it('refuses a long key in websocket', () => {
    const finding = expectHazard(
      { websocket: { url: WS_URL, authorization_token: 'abc' } },
      'websocket.authorization_token',
    );
    expect(finding.message).toMatch(/19 bytes/);
  });

  it('refuses a long key in mqtt', () => {
    expectHazard(
      { mqtt: { endpoint: 'broker.local:1883', publish_topic_extra: 'x' } },
      'mqtt.publish_topic_extra',
    );
  });

  it('refuses a long key whatever its value type', () => {
    expectHazard(
      { websocket: { url: WS_URL, reconnect_interval: 5 } },
      'websocket.reconnect_interval',
    );
  });

  it('accepts exactly 15 bytes and refuses 16', () => {
    const key15 = 'k'.repeat(15);
    const key16 = 'k'.repeat(16);
    expect(hazards(validateOtaReply({ websocket: { url: WS_URL, [key15]: 'x' } }))).toEqual([]);
    expectHazard({ websocket: { url: WS_URL, [key16]: 'x' } }, `websocket.${key16}`);
  });

  it('counts key bytes, not characters', () => {
    const key = 'ключключ'; // 8 characters, 16 bytes
    expect(key.length).toBe(8);
    expectHazard({ mqtt: { endpoint: 'b:1883', [key]: 'x' } }, `mqtt.${key}`);
  });
});

describe('hazard: NVS string value over 3999 bytes', () => {
  it('accepts 3999 ASCII bytes and refuses 4000', () => {
    expect(
      hazards(validateOtaReply({ websocket: { url: WS_URL, token: 'a'.repeat(3999) } })),
    ).toEqual([]);
    expectHazard({ websocket: { url: WS_URL, token: 'a'.repeat(4000) } }, 'websocket.token');
  });

  it('counts UTF-8 bytes, not characters', () => {
    const fits = '€'.repeat(1333); // 1333 characters, 3999 bytes
    const tooLong = '€'.repeat(1334); // 1334 characters, 4002 bytes
    expect(hazards(validateOtaReply({ mqtt: { endpoint: 'b:1883', password: fits } }))).toEqual([]);
    const finding = expectHazard(
      { mqtt: { endpoint: 'b:1883', password: tooLong } },
      'mqtt.password',
    );
    expect(finding.message).toContain('4002');
  });

  it('counts surrogate pairs as 4 bytes', () => {
    const emoji = '😀'.repeat(1000); // 2000 UTF-16 units, 4000 bytes
    expect(emoji.length).toBe(2000);
    expectHazard({ websocket: { url: WS_URL, token: emoji } }, 'websocket.token');
  });
});

describe('hazard: firmware version the firmware cannot parse', () => {
  it.each([
    ['1.2.beta'],
    ['v2.0'],
    ['1..2'],
    [''],
    ['.1'],
    ['1.2.'],
    ['2.4.x'],
    ['2. 4'], // stricter than stoi, which skips leading space
    ['2.+4'], // stricter than stoi, which accepts a sign
  ])('refuses %j', (version) => {
    expectHazard({ firmware: { version, url: FW_URL } }, 'firmware.version');
  });

  it('refuses a segment past int32 (std::out_of_range)', () => {
    expectHazard({ firmware: { version: '1.2147483648.0', url: FW_URL } }, 'firmware.version');
    expect(
      hazards(validateOtaReply({ firmware: { version: '1.2147483647.0', url: FW_URL } })),
    ).toEqual([]);
    expectHazard(
      { firmware: { version: '99999999999999999999', url: FW_URL } },
      'firmware.version',
    );
  });

  it('refuses a bad version even without a url', () => {
    expectHazard({ firmware: { version: 'v2' } }, 'firmware.version');
  });

  it('reads keys case-insensitively, as cJSON_GetObjectItem does', () => {
    expectHazard({ Firmware: { VERSION: 'v2.0', url: FW_URL } }, 'Firmware.VERSION');
  });

  it('warns about a segment with trailing text, which stoi reads as its digits', () => {
    const findings = validateOtaReply({ firmware: { version: '2.5.0rc1', url: FW_URL } });
    expect(hazards(findings)).toEqual([]);
    expect(only(findings, 'warning')).toEqual([
      expect.objectContaining({
        field: 'firmware.version',
        message: expect.stringContaining('0rc1'),
      }),
    ]);
  });

  it("refuses any firmware section when the device's own version cannot be parsed", () => {
    expectHazard({ firmware: { version: '2.5.0', url: FW_URL } }, 'firmware', {
      currentVersion: 'v2.4',
    });
  });
});

describe('hazard: forced upgrade to the running version', () => {
  it('refuses force 1 with the version the device runs', () => {
    expectHazard({ firmware: { version: '2.4.2', url: FW_URL, force: 1 } }, 'firmware.force', {
      currentVersion: '2.4.2',
    });
  });

  it('compares as integers, so 2.04.2 is the running 2.4.2', () => {
    expectHazard({ firmware: { version: '2.04.2', url: FW_URL, force: 1 } }, 'firmware.force', {
      currentVersion: '2.4.2',
    });
  });

  it('treats force 1.5 as 1 (cJSON valueint truncates)', () => {
    expectHazard({ firmware: { version: '2.4.2', url: FW_URL, force: 1.5 } }, 'firmware.force', {
      currentVersion: '2.4.2',
    });
  });

  it('allows a forced downgrade or a forced upgrade', () => {
    for (const version of ['2.3.0', '2.5.0']) {
      const findings = validateOtaReply(
        { firmware: { version, url: FW_URL, force: 1 } },
        { currentVersion: '2.4.2' },
      );
      expect(findings).toEqual([]);
    }
  });

  it('does not count force true or "1", which the firmware ignores', () => {
    for (const force of [true, '1']) {
      const findings = validateOtaReply(
        { firmware: { version: '2.4.2', url: FW_URL, force } },
        { currentVersion: '2.4.2' },
      );
      expect(hazards(findings)).toEqual([]);
      expect(findings.map((f) => [f.field, f.severity])).toEqual([
        ['firmware.force', 'warning'],
        ['firmware.version', 'warning'],
      ]);
    }
  });

  it('warns when force is sent without a current version to check against', () => {
    const findings = validateOtaReply({ firmware: { version: '2.4.2', url: FW_URL, force: 1 } });
    expect(findings).toEqual([
      expect.objectContaining({ field: 'firmware.force', severity: 'warning' }),
    ]);
  });
});

describe('hazard: websocket.version as a string', () => {
  it('refuses "3"', () => {
    expectHazard({ websocket: { url: WS_URL, version: '3' } }, 'websocket.version');
  });

  it('reports a number outside 1..3 as an error, not a hazard', () => {
    const findings = validateOtaReply({ websocket: { url: WS_URL, version: 4 }, ...BLANK_MQTT });
    expect(findings.map((f) => [f.field, f.severity])).toEqual([['websocket.version', 'error']]);
  });
});

describe('non-hazard findings', () => {
  it('refuses a reply that is not an object with OTA_INVALID', () => {
    for (const reply of [null, [], 'text', 42]) {
      expect(validateOtaReply(reply)).toEqual([
        expect.objectContaining({ field: '', severity: 'error' }),
      ]);
      const error = catchProtocolError(() => assertSafeOtaReply(reply));
      expect(error.code).toBe('OTA_INVALID');
    }
  });

  it('reports a websocket url that is not ws:// or wss://', () => {
    for (const url of ['http://host/ws', 'WSS://host/', 'ws://', 42]) {
      const findings = validateOtaReply({ websocket: { url }, ...BLANK_MQTT });
      expect(findings.map((f) => [f.field, f.severity])).toEqual([['websocket.url', 'error']]);
    }
    const error = catchProtocolError(() => assertSafeOtaReply({ websocket: { url: 'http://h/' } }));
    expect(error.code).toBe('OTA_INVALID');
    expect(error.field).toBe('websocket.url');
  });

  it('reports a websocket section without url as a warning', () => {
    expect(validateOtaReply({ websocket: { token: 't' }, ...BLANK_MQTT })).toEqual([
      expect.objectContaining({ field: 'websocket', severity: 'warning' }),
    ]);
  });

  it('reports a non-number server_time.timestamp', () => {
    const findings = validateOtaReply({ server_time: { timestamp: '1760000000000' } });
    expect(findings.map((f) => [f.field, f.severity])).toEqual([
      ['server_time.timestamp', 'error'],
    ]);
  });

  it('warns about a timestamp in seconds', () => {
    const findings = validateOtaReply({ server_time: { timestamp: 1_760_000_000 } });
    expect(findings.map((f) => [f.field, f.severity])).toEqual([
      ['server_time.timestamp', 'warning'],
    ]);
  });

  it('warns about a timezone offset that looks like hours', () => {
    for (const offset of [8, -5, 14]) {
      const findings = validateOtaReply({
        server_time: { timestamp: 1_760_000_000_000, timezone_offset: offset },
      });
      expect(findings.map((f) => [f.field, f.severity])).toEqual([
        ['server_time.timezone_offset', 'warning'],
      ]);
    }
    for (const offset of [0, 480, -300, 345, 840]) {
      expect(
        validateOtaReply({
          server_time: { timestamp: 1_760_000_000_000, timezone_offset: offset },
        }),
      ).toEqual([]);
    }
  });

  it('reports a timezone offset in seconds as an error', () => {
    const findings = validateOtaReply({
      server_time: { timestamp: 1_760_000_000_000, timezone_offset: 28_800 },
    });
    expect(findings.map((f) => [f.field, f.severity])).toEqual([
      ['server_time.timezone_offset', 'error'],
    ]);
  });

  it('reports a firmware version without url', () => {
    const findings = validateOtaReply({ firmware: { version: '2.5.0' } });
    expect(findings.map((f) => [f.field, f.severity])).toEqual([['firmware', 'error']]);
  });

  it('warns when the firmware version is not newer and not forced', () => {
    for (const version of ['2.4.2', '2.4.1', '2.4']) {
      const findings = validateOtaReply(
        { firmware: { version, url: FW_URL } },
        { currentVersion: '2.4.2' },
      );
      expect(findings.map((f) => [f.field, f.severity])).toEqual([['firmware.version', 'warning']]);
    }
    expect(
      validateOtaReply(
        { firmware: { version: '2.4.2.1', url: FW_URL } },
        { currentVersion: '2.4.2' },
      ),
    ).toEqual([]);
  });

  it('warns when both websocket and mqtt are present (MQTT wins)', () => {
    const findings = validateOtaReply({
      websocket: { url: WS_URL },
      mqtt: { endpoint: 'broker.local:1883' },
    });
    expect(findings).toEqual([
      expect.objectContaining({
        field: 'websocket',
        severity: 'warning',
        message: expect.stringContaining('MQTT'),
      }),
    ]);
  });

  it('warns about members the firmware ignores or never reads', () => {
    const findings = validateOtaReply({
      websocket: { url: WS_URL, URL: 'ws://other/', enabled: true },
      ...BLANK_MQTT,
    });
    expect(findings.map((f) => [f.field, f.severity])).toEqual([
      ['websocket.URL', 'warning'],
      ['websocket.enabled', 'warning'],
    ]);
  });

  it('reports a known member stored with the wrong type', () => {
    const findings = validateOtaReply({ mqtt: { endpoint: 'b:1883', keepalive: '240', token: 5 } });
    expect(findings.map((f) => [f.field, f.severity])).toEqual([
      ['mqtt.keepalive', 'error'],
      ['mqtt.token', 'warning'],
    ]);
  });

  it('reports a section that is not an object', () => {
    expect(validateOtaReply({ firmware: '2.5.0' }).map((f) => [f.field, f.severity])).toEqual([
      ['firmware', 'error'],
    ]);
    expect(validateOtaReply({ mqtt: null }).map((f) => [f.field, f.severity])).toEqual([
      ['mqtt', 'warning'],
    ]);
  });

  it('warns about a second section differing only in case (cJSON reads the first)', () => {
    const findings = validateOtaReply({
      websocket: { url: WS_URL },
      WebSocket: { url: 'ws://other/' },
      ...BLANK_MQTT,
    });
    expect(findings).toEqual([
      expect.objectContaining({
        field: 'WebSocket',
        severity: 'warning',
        message: expect.stringContaining('first'),
      }),
    ]);
  });

  it('reports activation members of the wrong type', () => {
    const findings = validateOtaReply({ activation: { message: 'hi', code: 123456 } });
    expect(findings.map((f) => [f.field, f.severity])).toEqual([['activation.code', 'error']]);
  });
});

describe('mqtt and websocket: the transport a board ends up on', () => {
  // xiaozhi-esp32 main/protocols/mqtt_protocol.cc StartMqttClient: host before the first ':',
  // std::stoi of the rest as the port, 8883 (TLS) without one; a stored non-empty endpoint wins.
  const fields = (reply: unknown) =>
    validateOtaReply(reply).map((f) => [f.field, f.severity] as const);

  it('warns when websocket is offered without blanking mqtt.endpoint, and says how', () => {
    const reply = { websocket: { url: WS_URL, token: 't', version: 1 } };
    const findings = validateOtaReply(reply);
    expect(findings).toEqual([
      expect.objectContaining({ field: 'websocket', severity: 'warning' }),
    ]);
    expect(findings[0]?.message).toContain('"mqtt": {"endpoint": ""}');
    expect(findings[0]?.message).toContain('MQTT');
    // A warning, not an error: the reply is still sent.
    expect(() => assertSafeOtaReply(reply)).not.toThrow();
  });

  it('has nothing to say about websocket next to a blank mqtt endpoint', () => {
    expect(validateOtaReply({ websocket: { url: WS_URL }, mqtt: { endpoint: '' } })).toEqual([]);
  });

  it('warns about a blank that is not exactly the endpoint key (NVS keys are exact)', () => {
    expect(fields({ websocket: { url: WS_URL }, mqtt: { Endpoint: '' } })).toEqual([
      ['mqtt.Endpoint', 'warning'],
      ['mqtt', 'warning'],
      ['websocket', 'warning'],
    ]);
  });

  it('warns about a blank endpoint without websocket (the board keeps its old url)', () => {
    expect(fields({ mqtt: { endpoint: '' } })).toEqual([['mqtt.endpoint', 'warning']]);
  });

  it('warns about an endpoint without a port or on 8883: the board speaks TLS there', () => {
    for (const endpoint of ['broker.local', '192.168.1.10:8883']) {
      const findings = validateOtaReply({ mqtt: { endpoint } });
      expect(findings.map((f) => [f.field, f.severity])).toEqual([['mqtt.endpoint', 'warning']]);
      expect(findings[0]?.message).toContain('TLS');
    }
    expect(validateOtaReply({ mqtt: { endpoint: '192.168.1.10:1883' } })).toEqual([]);
  });

  it.each([
    'broker.local:',
    'broker.local:mqtt',
    '[::1]:1883',
    'fe80::1',
    'broker.local:99999999999',
  ])('refuses %j: std::stoi throws on its port and the board aborts at every boot', (endpoint) => {
    expectHazard({ mqtt: { endpoint } }, 'mqtt.endpoint');
  });

  it.each(['broker.local:0', 'broker.local:70000', 'broker.local:1883x', 'broker.local:-1'])(
    'reports %j as an error: no TCP port',
    (endpoint) => {
      expect(fields({ mqtt: { endpoint } })).toEqual([['mqtt.endpoint', 'error']]);
    },
  );

  it('builds the blanking reply', () => {
    expect(
      buildOtaReply({ websocket: { url: WS_URL, token: 't', version: 1 }, mqtt: { endpoint: '' } }),
    ).toEqual({ mqtt: { endpoint: '' }, websocket: { url: WS_URL, token: 't', version: 1 } });
  });
});

describe('a safe full reply', () => {
  const reply = {
    activation: { message: 'xiaozhi.me', code: '123456', challenge: 'c0ffee', timeout_ms: 30_000 },
    websocket: { url: 'wss://api.example.com/xiaozhi/v1/', token: 'test-token', version: 3 },
    mqtt: { endpoint: '' },
    server_time: { timestamp: 1_760_000_000_000, timezone_offset: 480 },
    firmware: { version: '2.5.0', url: 'https://example.com/xiaozhi.bin' },
  };

  it('has no findings at all', () => {
    expect(validateOtaReply(reply, { currentVersion: '2.4.2' })).toEqual([]);
    expect(() => assertSafeOtaReply(reply, { currentVersion: '2.4.2' })).not.toThrow();
  });

  it('passes with an mqtt section too', () => {
    const mqttReply = {
      mqtt: {
        endpoint: 'broker.local:1883',
        client_id: 'GID_test@@@a0_85_e3_f4_12_7c@@@c3a1e2f0-4d5b-4e6a-9b7c-1d2e3f4a5b6c',
        username: 'u',
        password: 'p',
        keepalive: 240,
        publish_topic: 'device-server',
      },
      server_time: { timestamp: 1_760_000_000_000, timezone_offset: 0 },
    };
    expect(validateOtaReply(mqttReply)).toEqual([]);
  });

  it('passes with an empty reply (every section optional)', () => {
    expect(validateOtaReply({})).toEqual([]);
  });
});

describe('NVS limits (properties)', () => {
  // `version` is left out: as a string it is a hazard of its own.
  const shortKey = fc
    .string({ minLength: 1, maxLength: OTA_NVS_KEY_MAX, unit: 'binary-ascii' })
    .filter((key) => key !== 'version');
  const value = fc.oneof(
    fc.string({ maxLength: 200, unit: 'grapheme' }),
    fc.integer({ min: 0, max: OTA_NVS_STRING_MAX_BYTES }).map((n) => 'a'.repeat(n)),
  );

  it('never reports a hazard for keys <= 15 bytes and strings <= 3999 bytes', () => {
    fc.assert(
      fc.property(fc.dictionary(shortKey, value, { maxKeys: 8 }), fc.boolean(), (members, ws) => {
        const fitting = Object.fromEntries(
          Object.entries(members).filter(([, v]) => Buffer.byteLength(v, 'utf8') <= 3999),
        );
        const reply = ws ? { websocket: fitting } : { mqtt: fitting };
        expect(hazards(validateOtaReply(reply))).toEqual([]);
      }),
    );
  });

  it('always reports a hazard on a key over 15 bytes, naming it', () => {
    const longKey = fc.string({ minLength: 16, maxLength: 40, unit: 'grapheme' });
    fc.assert(
      fc.property(longKey, fc.string({ maxLength: 20 }), fc.boolean(), (key, v, ws) => {
        const name = ws ? 'websocket' : 'mqtt';
        const findings = hazards(validateOtaReply({ [name]: { [key]: v } }));
        expect(findings.map((f) => f.field)).toEqual([`${name}.${key}`]);
      }),
    );
  });

  it('reports a string hazard exactly when UTF-8 bytes exceed 3999', () => {
    fc.assert(
      fc.property(
        fc.constantFrom('a', 'é', '€', '😀'),
        fc.integer({ min: 900, max: 4100 }),
        (unit, count) => {
          const token = unit.repeat(count);
          const expected = Buffer.byteLength(token, 'utf8') > 3999;
          const findings = hazards(validateOtaReply({ websocket: { url: WS_URL, token } }));
          expect(findings.length > 0).toBe(expected);
        },
      ),
    );
  });
});

describe('firmware.url', () => {
  const at = (reply: unknown, context: OtaReplyContext) =>
    validateOtaReply(reply, context).filter((f) => f.field === 'firmware.url');

  it('may be empty when the offered version is the running one (the usual "no upgrade")', () => {
    expect(at({ firmware: { version: '2.4.2', url: '' } }, { currentVersion: '2.4.2' })).toEqual(
      [],
    );
  });

  it('is an error when the device would download from it', () => {
    expect(at({ firmware: { version: '2.5.0', url: '' } }, { currentVersion: '2.4.2' })).toEqual([
      expect.objectContaining({ severity: 'error' }),
    ]);
    expect(
      at({ firmware: { version: '2.4.2', url: 'ftp://x', force: 1 } }, { currentVersion: '2.4.1' }),
    ).toEqual([expect.objectContaining({ severity: 'error' })]);
  });

  it('is a warning when the running version is not known', () => {
    expect(at({ firmware: { version: '2.4.2', url: '' } }, {})).toEqual([
      expect.objectContaining({ severity: 'warning' }),
    ]);
  });
});

// Hostile replies: OTA_INVALID/OTA_HAZARD or nothing, whatever comes in.

describe('hostile OTA input', () => {
  it('validates any reply without throwing, and asserts with OTA errors only', () => {
    const sectionArb = fc.dictionary(
      fc.oneof(
        fc.string({ maxLength: 20 }),
        fc.constantFrom('url', 'version', 'force', 'endpoint'),
      ),
      fc.oneof(
        fc.jsonValue({ maxDepth: 2 }),
        fc.constantFrom('1.2.3', 'x.1', '99999999999', 1, 1.5),
      ),
      { maxKeys: 5 },
    );
    fc.assert(
      fc.property(
        fc.oneof(
          fc.jsonValue({ maxDepth: 3 }),
          fc.dictionary(
            fc.constantFrom('websocket', 'MQTT', 'firmware', 'server_time', 'activation', 'x'),
            fc.oneof(sectionArb, fc.jsonValue({ maxDepth: 1 })),
            { maxKeys: 5 },
          ),
        ),
        fc.option(fc.oneof(anyText, fc.constantFrom('2.4.2', '1.0')), { nil: undefined }),
        (reply, currentVersion) => {
          const context = currentVersion === undefined ? {} : { currentVersion };
          validateOtaReply(reply, context);
          onlyProtocolErrors(() => assertSafeOtaReply(reply, context));
        },
      ),
      { seed: 42, numRuns: 1000 },
    );
  });
});
