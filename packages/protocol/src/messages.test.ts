import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ProtocolError } from './errors.js';
import {
  buildDeviceHello,
  buildServerHello,
  type DeviceMessage,
  encodeDeviceMessage,
  encodeServerMessage,
  parseDeviceHello,
  parseDeviceMessage,
  parseServerHello,
  parseServerMessage,
  type ServerHelloOptions,
  type ServerMessage,
  TRANSPORT_MESSAGE_TYPES,
} from './messages.js';

function caught(fn: () => unknown): ProtocolError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ProtocolError);
    return err as ProtocolError;
  }
  throw new Error('expected a ProtocolError, nothing was thrown');
}

function expectRejected(fn: () => unknown, field: string | undefined, message?: string | RegExp) {
  const err = caught(fn);
  expect(err.code).toBe('INVALID_MESSAGE');
  expect(err.field).toBe(field);
  if (message !== undefined) expect(err.message).toMatch(message);
  return err;
}

const KEY = '0123456789abcdef0123456789abcdef';
const NONCE = '01000000aabbccdd0000000000000000';
const AUDIO = { format: 'opus', sample_rate: 16000, channels: 1, frame_duration: 60 };
const AUDIO_JSON = '{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}';

describe('device hello', () => {
  it('builds the exact bytes the WebSocket firmware sends', () => {
    expect(encodeDeviceMessage(buildDeviceHello())).toBe(
      `{"type":"hello","version":1,"features":{"mcp":true,"glyph_push":false},"transport":"websocket","audio_params":${AUDIO_JSON}}`,
    );
  });

  it('builds the MQTT hello: version 3, transport before features', () => {
    expect(encodeDeviceMessage(buildDeviceHello({ transport: 'udp' }))).toBe(
      `{"type":"hello","version":3,"transport":"udp","features":{"mcp":true,"glyph_push":false},"audio_params":${AUDIO_JSON}}`,
    );
  });

  it('merges audioParams over the defaults and validates the result', () => {
    expect(buildDeviceHello({ version: 2, audioParams: { frame_duration: 20 } })).toEqual({
      type: 'hello',
      version: 2,
      features: { mcp: true, glyph_push: false },
      transport: 'websocket',
      audio_params: { ...AUDIO, frame_duration: 20 },
    });
    expectRejected(
      () => buildDeviceHello({ audioParams: { frame_duration: 0 } }),
      'audio_params.frame_duration',
    );
    expectRejected(() => buildDeviceHello({ version: 4 as 1 }), 'version');
  });

  it('puts aec first in features and keeps unknown features', () => {
    const hello = parseDeviceHello(
      `{"type":"hello","version":2,"features":{"mcp":true,"future":{"x":1},"aec":true},"transport":"websocket","audio_params":${AUDIO_JSON}}`,
    );
    expect(encodeDeviceMessage(hello)).toBe(
      `{"type":"hello","version":2,"features":{"aec":true,"mcp":true,"future":{"x":1}},"transport":"websocket","audio_params":${AUDIO_JSON}}`,
    );
  });

  it('keeps a "__proto__" feature as plain data', () => {
    const hello = parseDeviceHello(
      `{"type":"hello","version":1,"features":{"__proto__":{"polluted":true}},"transport":"websocket","audio_params":${AUDIO_JSON}}`,
    );
    expect(Object.getPrototypeOf(hello.features)).toBe(Object.prototype);
    expect(Object.keys(hello.features ?? {})).toEqual(['__proto__']);
    expect(encodeDeviceMessage(hello)).toContain('"features":{"__proto__":{"polluted":true}}');
  });

  it('accepts a hello without features (old firmware) and drops a seed-style session_id', () => {
    const hello = parseDeviceHello({
      type: 'hello',
      session_id: 'seed',
      version: 1,
      transport: 'websocket',
      audio_params: AUDIO,
    });
    expect(hello).toEqual({
      type: 'hello',
      version: 1,
      transport: 'websocket',
      audio_params: AUDIO,
    });
    expect('session_id' in hello).toBe(false);
  });

  it('names the offending field', () => {
    const base = { type: 'hello', version: 1, transport: 'websocket', audio_params: AUDIO };
    expectRejected(
      () => parseDeviceHello({ ...base, audio_params: { ...AUDIO, sample_rate: '16k' } }),
      'audio_params.sample_rate',
      'hello: audio_params.sample_rate must be a positive integer, got "16k"',
    );
    expectRejected(() => parseDeviceHello({ ...base, version: 4 }), 'version', /1, 2, 3/);
    expectRejected(() => parseDeviceHello({ ...base, transport: 'tcp' }), 'transport');
    expectRejected(() => parseDeviceHello({ ...base, audio_params: undefined }), 'audio_params');
    expectRejected(
      () => parseDeviceHello({ ...base, audio_params: { ...AUDIO, channels: 1.5 } }),
      'audio_params.channels',
    );
    expectRejected(
      () => parseDeviceHello({ ...base, audio_params: { ...AUDIO, format: 7 } }),
      'audio_params.format',
    );
    expectRejected(() => parseDeviceHello({ ...base, features: [] }), 'features');
    expectRejected(
      () => parseDeviceHello({ ...base, features: { mcp: 'yes' } }),
      'features.mcp',
      /features\.mcp must be a boolean, got "yes"/,
    );
    expectRejected(() => parseDeviceHello({ ...base, type: 'listen' }), 'type');
  });
});

describe('device messages', () => {
  it('encodes listen with session_id first, exactly as the firmware does', () => {
    expect(
      encodeDeviceMessage({ session_id: 'abc', type: 'listen', state: 'start', mode: 'auto' }),
    ).toBe('{"session_id":"abc","type":"listen","state":"start","mode":"auto"}');
  });

  it('omits undefined optional fields', () => {
    expect(
      encodeDeviceMessage({ session_id: '', type: 'listen', state: 'stop', mode: undefined }),
    ).toBe('{"session_id":"","type":"listen","state":"stop"}');
  });

  // Frames as Protocol::Send* concatenates them; encode(parse(x)) must give x back.
  it.each([
    '{"session_id":"s1","type":"listen","state":"start","mode":"realtime"}',
    '{"session_id":"s1","type":"listen","state":"start","mode":"manual"}',
    '{"session_id":"","type":"listen","state":"stop"}',
    '{"session_id":"s1","type":"listen","state":"detect","text":"你好小智"}',
    '{"session_id":"s1","type":"abort"}',
    '{"session_id":"s1","type":"abort","reason":"wake_word_detected"}',
    '{"session_id":"s1","type":"mcp","payload":{"jsonrpc":"2.0","id":1,"result":{}}}',
    '{"session_id":"","type":"goodbye"}',
  ])('round-trips the firmware frame %s byte for byte', (text) => {
    expect(encodeDeviceMessage(parseDeviceMessage(text))).toBe(text);
  });

  it('round-trips every device message type as objects', () => {
    const messages: DeviceMessage[] = [
      buildDeviceHello(),
      buildDeviceHello({ transport: 'udp', features: { aec: true, mcp: true } }),
      { session_id: 'a', type: 'listen', state: 'detect', text: 'hi' },
      { session_id: 'a', type: 'abort', reason: 'wake_word_detected' },
      { session_id: 'a', type: 'mcp', payload: { jsonrpc: '2.0', id: 3, result: { ok: true } } },
      { session_id: 'a', type: 'goodbye' },
    ];
    for (const message of messages) {
      expect(parseDeviceMessage(encodeDeviceMessage(message))).toEqual(message);
    }
  });

  it('round-trips listen messages with arbitrary text', () => {
    fc.assert(
      fc.property(
        fc.string(),
        fc.string(),
        fc.constantFrom('start' as const, 'stop' as const, 'detect' as const),
        fc.option(fc.constantFrom('auto' as const, 'manual' as const, 'realtime' as const), {
          nil: undefined,
        }),
        (session_id, text, state, mode) => {
          const message = { session_id, type: 'listen' as const, state, mode, text };
          const parsed = parseDeviceMessage(encodeDeviceMessage(message));
          expect(parsed).toEqual(
            mode === undefined ? { session_id, type: 'listen', state, text } : message,
          );
        },
      ),
    );
  });

  it('requires session_id on every device message but the hello', () => {
    for (const type of ['listen', 'abort', 'mcp', 'goodbye']) {
      expectRejected(
        () => parseDeviceMessage({ type, state: 'stop', payload: {} }),
        'session_id',
        `${type}: session_id must be a string, got undefined`,
      );
    }
  });

  it.each([
    ['listen state', { type: 'listen', state: 'go' }, 'state'],
    ['listen mode', { type: 'listen', state: 'start', mode: 'push' }, 'mode'],
    ['listen text', { type: 'listen', state: 'detect', text: 5 }, 'text'],
    ['abort reason', { type: 'abort', reason: null }, 'reason'],
    ['mcp string payload', { type: 'mcp', payload: '{"id":1}' }, 'payload'],
    ['mcp array payload', { type: 'mcp', payload: [] }, 'payload'],
    ['mcp missing payload', { type: 'mcp' }, 'payload'],
    ['session_id not a string', { type: 'goodbye', session_id: 1 }, 'session_id'],
  ])('rejects a bad %s', (_name, fields, field) => {
    expectRejected(() => parseDeviceMessage({ session_id: 's', ...fields }), field);
  });

  it('rejects types the device never sends', () => {
    for (const type of ['tts', 'custom', 'system', 'unknown']) {
      expectRejected(
        () => parseDeviceMessage({ session_id: 's', type, state: 'start', payload: {} }),
        'type',
        /a device message type/,
      );
    }
    expectRejected(() => parseDeviceMessage('{"session_id":"s"}'), 'type');
  });

  it('refuses to encode an invalid message', () => {
    const bad = { session_id: 's', type: 'listen', state: 'begin' } as unknown as DeviceMessage;
    expectRejected(() => encodeDeviceMessage(bad), 'state');
  });
});

describe('server hello', () => {
  it('accepts the minimal websocket hello', () => {
    expect(parseServerHello('{"type":"hello","transport":"websocket"}')).toEqual({
      type: 'hello',
      transport: 'websocket',
    });
  });

  it('keeps session_id and audio_params, drops what the board ignores', () => {
    const hello = parseServerHello({
      type: 'hello',
      version: 1,
      transport: 'websocket',
      session_id: 'S',
      audio_params: { sample_rate: 24000, frame_duration: 60 },
      udp: { server: 'x' },
    });
    expect(hello).toEqual({
      type: 'hello',
      transport: 'websocket',
      session_id: 'S',
      audio_params: { sample_rate: 24000, frame_duration: 60 },
    });
  });

  it.each([
    ['missing', '{"type":"hello"}', 'got undefined'],
    ['null', '{"type":"hello","transport":null}', 'got null'],
    ['a number', '{"type":"hello","transport":1}', 'got 1'],
    ['an unknown string', '{"type":"hello","transport":"tcp"}', 'got "tcp"'],
  ])('rejects a transport that is %s (it would crash or stall the board)', (_name, text, got) => {
    expectRejected(
      () => parseServerHello(text),
      'transport',
      `hello: transport must be a string ("websocket" or "udp"), ${got}`,
    );
    expectRejected(() => parseServerMessage(text), 'transport');
  });

  it('builder refuses a hello without transport, at compile time and at run time', () => {
    expectRejected(
      // @ts-expect-error transport is required
      () => buildServerHello({ sessionId: 'x' }),
      'transport',
      /transport must be a string/,
    );
    expectRejected(() => buildServerHello(undefined as unknown as ServerHelloOptions), 'transport');
    expectRejected(
      () => buildServerHello({ transport: null } as unknown as ServerHelloOptions),
      'transport',
    );
  });

  it('builder requires sessionId and udp for the udp transport', () => {
    // @ts-expect-error udp and sessionId are required for transport udp
    expectRejected(() => buildServerHello({ transport: 'udp' }), 'session_id');
    expectRejected(
      // @ts-expect-error udp is required for transport udp
      () => buildServerHello({ transport: 'udp', sessionId: 'S' }),
      'udp',
    );
  });

  it('builds websocket hellos with the key order type, transport, session_id, audio_params', () => {
    expect(encodeServerMessage(buildServerHello({ transport: 'websocket' }))).toBe(
      '{"type":"hello","transport":"websocket"}',
    );
    expect(
      encodeServerMessage(
        buildServerHello({
          transport: 'websocket',
          sessionId: 'S',
          audioParams: { frame_duration: 60, sample_rate: 24000 },
        }),
      ),
    ).toBe(
      '{"type":"hello","transport":"websocket","session_id":"S","audio_params":{"sample_rate":24000,"frame_duration":60}}',
    );
  });

  it('builds the udp hello of docs/protocol.md §5', () => {
    const hello = buildServerHello({
      transport: 'udp',
      sessionId: 'S',
      audioParams: AUDIO,
      udp: { server: '192.168.1.10', port: 8888, key: KEY, nonce: NONCE },
    });
    expect(encodeServerMessage(hello)).toBe(
      `{"type":"hello","transport":"udp","session_id":"S","audio_params":${AUDIO_JSON},"udp":{"server":"192.168.1.10","port":8888,"key":"${KEY}","nonce":"${NONCE}"}}`,
    );
    expect(parseServerMessage(encodeServerMessage(hello))).toEqual(hello);
  });

  describe('udp hello validation', () => {
    const good = {
      type: 'hello',
      transport: 'udp',
      session_id: 'S',
      udp: { server: 'h', port: 1, key: KEY, nonce: NONCE },
    };
    const withUdp = (udp: Record<string, unknown>) => ({ ...good, udp: { ...good.udp, ...udp } });

    it('accepts upper-case hex and the port range ends', () => {
      expect(parseServerHello(withUdp({ key: KEY.toUpperCase(), port: 65535 }))).toMatchObject({
        udp: { key: KEY.toUpperCase(), port: 65535 },
      });
      expect(parseServerHello(good)).toEqual(good);
    });

    it.each([
      ['key too short', { key: KEY.slice(1) }, 'udp.key'],
      ['key too long', { key: `${KEY}00` }, 'udp.key'],
      ['key not hex', { key: `${KEY.slice(1)}g` }, 'udp.key'],
      ['key missing', { key: undefined }, 'udp.key'],
      ['nonce not hex', { nonce: `${NONCE.slice(1)}z` }, 'udp.nonce'],
      ['nonce a number', { nonce: 1 }, 'udp.nonce'],
      ['port 0', { port: 0 }, 'udp.port'],
      ['port 65536', { port: 65536 }, 'udp.port'],
      ['port a string', { port: '8888' }, 'udp.port'],
      ['server empty', { server: '' }, 'udp.server'],
    ])('rejects %s', (_name, udp, field) => {
      expectRejected(() => parseServerHello(withUdp(udp)), field);
    });

    it('keeps key material out of the error text', () => {
      const err = expectRejected(
        () => parseServerHello(withUdp({ key: KEY.slice(1) })),
        'udp.key',
        'hello: udp.key must be 32 hex characters (16 bytes), got a string of 31 characters',
      );
      expect(err.message).not.toContain(KEY.slice(1));
    });

    it('requires session_id and udp', () => {
      expectRejected(() => parseServerHello({ ...good, session_id: undefined }), 'session_id');
      expectRejected(() => parseServerHello({ ...good, udp: undefined }), 'udp');
      expectRejected(() => parseServerHello({ ...good, udp: 'h:1' }), 'udp');
    });
  });

  it('validates audio_params', () => {
    const hello = { type: 'hello', transport: 'websocket' };
    expectRejected(
      () => parseServerHello({ ...hello, audio_params: { sample_rate: 0 } }),
      'audio_params.sample_rate',
    );
    expectRejected(
      () => parseServerHello({ ...hello, audio_params: { frame_duration: 60.5 } }),
      'audio_params.frame_duration',
    );
    expectRejected(() => parseServerHello({ ...hello, audio_params: 16000 }), 'audio_params');
    expectRejected(() => parseServerHello({ ...hello, session_id: 42 }), 'session_id');
  });
});

describe('server messages', () => {
  it('round-trips every server message type', () => {
    const messages: ServerMessage[] = [
      { type: 'hello', transport: 'websocket', session_id: 'S' },
      { session_id: 'S', type: 'mcp', payload: { jsonrpc: '2.0', id: 1, method: 'tools/list' } },
      { type: 'mcp', payload: { jsonrpc: '2.0', method: 'notifications/initialized' } },
      { session_id: 'S', type: 'tts', state: 'start' },
      { type: 'tts', state: 'sentence_start', text: 'Hello' },
      { type: 'tts', state: 'stop' },
      { type: 'stt', text: 'what time is it' },
      { type: 'llm', emotion: 'happy', text: '😀' },
      { type: 'llm', emotion: 'neutral' },
      { type: 'system', command: 'reboot' },
      { type: 'alert', status: 'Warning', message: 'Battery low', emotion: 'sad' },
      { type: 'goodbye' },
      { session_id: 'S', type: 'goodbye' },
      { type: 'custom', payload: { anything: [1, 2] } },
      { type: 'unknown', rawType: 'iot', raw: { type: 'iot', commands: [] } },
    ];
    for (const message of messages) {
      expect(parseServerMessage(encodeServerMessage(message))).toEqual(message);
    }
  });

  it('puts session_id first and then the fields in a fixed order', () => {
    const tts = parseServerMessage(
      '{"text":"hi","type":"tts","session_id":"s","state":"sentence_start"}',
    );
    expect(encodeServerMessage(tts)).toBe(
      '{"session_id":"s","type":"tts","state":"sentence_start","text":"hi"}',
    );
    const alert = parseServerMessage('{"emotion":"e","message":"m","status":"s","type":"alert"}');
    expect(encodeServerMessage(alert)).toBe(
      '{"type":"alert","status":"s","message":"m","emotion":"e"}',
    );
  });

  it('drops unknown fields of known types', () => {
    expect(parseServerMessage('{"type":"stt","text":"x","extra":1}')).toEqual({
      type: 'stt',
      text: 'x',
    });
  });

  it('parses types the board does not handle as unknown, and sends them back unchanged', () => {
    const text = '{"type":"iot","commands":[{"name":"Lamp"}],"session_id":"s"}';
    const message = parseServerMessage(text);
    expect(message).toEqual({ type: 'unknown', rawType: 'iot', raw: JSON.parse(text) });
    expect(encodeServerMessage(message)).toBe(text);
    // Device-only types are unknown to the board when a server sends them.
    expect(parseServerMessage('{"type":"listen","state":"start"}')).toMatchObject({
      type: 'unknown',
      rawType: 'listen',
    });
    expect(parseServerMessage('{"type":"unknown"}')).toMatchObject({
      type: 'unknown',
      rawType: 'unknown',
    });
  });

  it('still rejects a message without a string type', () => {
    expectRejected(
      () => parseServerMessage('{"state":"start"}'),
      'type',
      /message: type must be a string/,
    );
    expectRejected(() => parseServerMessage('{"type":5}'), 'type');
  });

  it('validates an unknown wrapper whose raw type the board handles', () => {
    const sneaky = { type: 'unknown', rawType: 'hello', raw: { type: 'hello' } } as const;
    expectRejected(() => encodeServerMessage(sneaky), 'transport');
    expect(
      encodeServerMessage({ type: 'unknown', rawType: 'tts', raw: { state: 'stop', type: 'tts' } }),
    ).toBe('{"type":"tts","state":"stop"}');
  });

  it.each([
    ['tts without state (null dereference on the board)', { type: 'tts' }, 'state'],
    ['tts with sentence_end', { type: 'tts', state: 'sentence_end' }, 'state'],
    ['tts text', { type: 'tts', state: 'sentence_start', text: ['a'] }, 'text'],
    ['stt without text', { type: 'stt' }, 'text'],
    ['llm without emotion', { type: 'llm', text: 'x' }, 'emotion'],
    ['system without command', { type: 'system' }, 'command'],
    ['alert without message', { type: 'alert', status: 's', emotion: 'e' }, 'message'],
    [
      'alert with numeric status',
      { type: 'alert', status: 1, message: 'm', emotion: 'e' },
      'status',
    ],
    ['custom without payload', { type: 'custom' }, 'payload'],
    ['mcp with a string payload', { type: 'mcp', payload: '{}' }, 'payload'],
    ['goodbye with numeric session_id', { type: 'goodbye', session_id: 7 }, 'session_id'],
  ])('rejects %s', (_name, message, field) => {
    expectRejected(() => parseServerMessage(message), field);
    expectRejected(() => encodeServerMessage(message as unknown as ServerMessage), field);
  });
});

describe('input handling', () => {
  it('reports invalid JSON as INVALID_JSON', () => {
    for (const parse of [
      parseDeviceMessage,
      parseServerMessage,
      parseDeviceHello,
      parseServerHello,
    ]) {
      const err = caught(() => parse('{"type":"hello",'));
      expect(err.code).toBe('INVALID_JSON');
      expect(err.cause).toBeInstanceOf(SyntaxError);
    }
  });

  it('rejects JSON that is not an object', () => {
    for (const input of ['[]', 'null', '"hello"', '42', [], null, 7]) {
      expectRejected(() => parseServerMessage(input), undefined, /must be a JSON object/);
      expectRejected(() => parseDeviceMessage(input), undefined);
    }
  });

  it('accepts already parsed objects as well as text', () => {
    const text = '{"session_id":"s","type":"abort"}';
    expect(parseDeviceMessage(JSON.parse(text))).toEqual(parseDeviceMessage(text));
  });
});

// Hostile frames: a parser throws ProtocolError or nothing, whatever it is given.

/** Runs `fn`; anything thrown must be a ProtocolError. Returns what `fn` returned, if anything. */
function onlyProtocolErrors<T>(fn: () => T): T | undefined {
  try {
    return fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ProtocolError);
    return undefined;
  }
}

const PARSERS = [parseDeviceMessage, parseServerMessage, parseDeviceHello, parseServerHello];
const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;

const anyText = fc.string({
  unit: fc.oneof(
    fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
    fc.constantFrom('{', '}', '[', ']', '"', ':', ',', '"type"', '"hello"', '"mcp"'),
  ),
  maxLength: 60,
});
const anyField = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  fc.constantFrom(
    'start',
    'stop',
    'detect',
    'auto',
    'websocket',
    'udp',
    1,
    2,
    3,
    16000,
    60,
    'opus',
  ),
  fc.string({ maxLength: 40 }),
  fc.constant('x'.repeat(100_000)),
);
/** Every message type with any mix of its fields, right and wrong. */
const messageArb = fc.record(
  {
    type: fc.oneof(fc.constantFrom(...TRANSPORT_MESSAGE_TYPES), anyField),
    session_id: anyField,
    version: anyField,
    transport: anyField,
    features: fc.oneof(fc.dictionary(fc.string(), anyField, { maxKeys: 4 }), anyField),
    audio_params: fc.oneof(
      fc.record(
        { format: anyField, sample_rate: anyField, channels: anyField, frame_duration: anyField },
        { requiredKeys: [] },
      ),
      anyField,
    ),
    udp: fc.oneof(
      fc.record({ server: anyField, port: anyField, key: anyField, nonce: anyField }),
      anyField,
    ),
    payload: anyField,
    state: anyField,
    mode: anyField,
    text: anyField,
    reason: anyField,
    emotion: anyField,
    command: anyField,
    status: anyField,
    message: anyField,
  },
  { requiredKeys: ['type'] },
);

describe('hostile input', () => {
  it('throws nothing but ProtocolError for any text', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          anyText,
          fc.uint8Array({ maxLength: 120 }).map((b) => new TextDecoder().decode(b)),
        ),
        (text) => {
          for (const parse of PARSERS) onlyProtocolErrors(() => parse(text));
        },
      ),
      { seed: 42, numRuns: 500 },
    );
  });

  it('throws nothing but ProtocolError for any message of any type, and re-encodes what it accepts', () => {
    fc.assert(
      fc.property(fc.oneof(messageArb, fc.jsonValue({ maxDepth: 3 })), (value) => {
        for (const input of [value, JSON.stringify(value)]) {
          const device = onlyProtocolErrors(() => parseDeviceMessage(input));
          if (device !== undefined)
            expect(parseDeviceMessage(encodeDeviceMessage(device))).toEqual(device);
          const server = onlyProtocolErrors(() => parseServerMessage(input));
          if (server !== undefined) onlyProtocolErrors(() => encodeServerMessage(server));
          onlyProtocolErrors(() => parseDeviceHello(input));
          onlyProtocolErrors(() => parseServerHello(input));
        }
      }),
      { seed: 42, numRuns: 300 },
    );
  });

  it.each([5_000, 100_000])(
    'reads members nested %i deep, and refuses to re-encode them with INVALID_MESSAGE',
    (depth) => {
      const mcp = parseDeviceMessage(
        `{"session_id":"s","type":"mcp","payload":{"deep":${nested(depth)}}}`,
      );
      expect(mcp.type).toBe('mcp');
      const error = caught(() => encodeDeviceMessage(mcp));
      expect(error.code).toBe('INVALID_MESSAGE');
      const hello = parseDeviceHello(
        `{"type":"hello","version":1,"features":{"mcp":true,"odd":${nested(depth)}},"transport":"websocket","audio_params":${AUDIO_JSON}}`,
      );
      expect(hello.features?.mcp).toBe(true);
      const custom = parseServerMessage(`{"type":"custom","payload":{"deep":${nested(depth)}}}`);
      expect(caught(() => encodeServerMessage(custom)).code).toBe('INVALID_MESSAGE');
      const unknown = parseServerMessage(`{"type":"weird","deep":${nested(depth)}}`);
      expect(caught(() => encodeServerMessage(unknown)).code).toBe('INVALID_MESSAGE');
    },
  );
});
