import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type DeviceFrame,
  encodeDeviceEnvelope,
  encodeEnvelope,
  MAX_FRAME_DEPTH,
  nestedDeeperThan,
  readBackendFrame,
  readDeviceFrame,
} from './envelope.js';
import { classifyJsonRpc } from './jsonrpc.js';

describe('envelope', () => {
  it('is written by the device as plain concatenation', () => {
    expect(encodeDeviceEnvelope('s1', '{"jsonrpc":"2.0"}')).toBe(
      '{"session_id":"s1","type":"mcp","payload":{"jsonrpc":"2.0"}}',
    );
    expect(encodeEnvelope('a"b', '{}')).toBe('{"session_id":"a\\"b","type":"mcp","payload":{}}');
  });

  it('is read by a backend even when the payload inside is invalid JSON', () => {
    const frame = readDeviceFrame(
      encodeDeviceEnvelope(
        's1',
        '{"jsonrpc":"2.0","id":49,"error":{"message":"Unknown tool: bad"name"}}',
      ),
    );
    expect(frame.kind).toBe('mcp');
    if (frame.kind !== 'mcp') return;
    expect(frame.sessionId).toBe('s1');
    expect(frame.message).toMatchObject({ kind: 'error', id: 49 });
    expect(frame.message.kind === 'error' && frame.message.error.message).toBe(
      'Unknown tool: bad"name',
    );
  });

  it('reads envelopes in other key orders and other transport messages', () => {
    const mcp = readDeviceFrame(
      '{"type":"mcp","payload":{"jsonrpc":"2.0","id":1,"result":{}},"session_id":"x"}',
    );
    expect(mcp).toMatchObject({ kind: 'mcp', sessionId: 'x', message: { kind: 'result', id: 1 } });
    expect(readDeviceFrame('{"session_id":"x","type":"listen","state":"start"}')).toMatchObject({
      kind: 'message',
      type: 'listen',
    });
    expect(readDeviceFrame('nope')).toMatchObject({ kind: 'invalid' });
    expect(readDeviceFrame('[1]')).toMatchObject({ kind: 'invalid' });
    expect(readDeviceFrame('{"no":"type"}')).toMatchObject({ kind: 'invalid' });
  });

  it('is read by the device with cJSON rules: payload must be an object', () => {
    expect(readBackendFrame('{"TYPE":"mcp","Payload":{"id":1}}')?.payload).toEqual({
      kind: 'object',
      entries: [['id', { kind: 'number', value: 1 }]],
    });
    expect(readBackendFrame('{"type":"mcp","payload":"{\\"id\\":1}"}')?.payload).toBeUndefined();
    expect(readBackendFrame('{"type":"tts","state":"start"}')?.type).toBe('tts');
    expect(readBackendFrame('not json')).toBeUndefined();
  });
});

// Hostile frames. Arbitraries live here, not in a shared module: the package ships
// everything under src/ that is not a test, and fast-check is only a devDependency.

/**
 * Any UTF-16 text, lone surrogates included, weighted toward JSON's own characters.
 * (fast-check's `binary` unit builds a table on first use that costs seconds.)
 */
const anyStringArb = fc.string({
  unit: fc.oneof(
    fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
    fc.constantFrom('{', '}', '[', ']', '"', '\\', ':', ',', ' ', 'a', '0'),
  ),
  maxLength: 60,
});

const nested = (depth: number, open = '[', close = ']', inner = '') =>
  `${open.repeat(depth)}${inner}${close.repeat(depth)}`;

const KINDS = ['mcp', 'message', 'invalid'];

function expectReadable(frame: DeviceFrame): void {
  expect(KINDS).toContain(frame.kind);
  if (frame.kind === 'mcp') expect(typeof frame.payloadText).toBe('string');
}

/** What a frame must read as when it is valid JSON: whatever JSON.parse makes of it. */
function expectAgreesWithJsonParse(text: string, frame: DeviceFrame): void {
  const parsed: unknown = JSON.parse(text);
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    expect(frame.kind).toBe('invalid');
    return;
  }
  const record = parsed as Record<string, unknown>;
  if (typeof record.type !== 'string') {
    expect(frame.kind).toBe('invalid');
    return;
  }
  if (record.type !== 'mcp') {
    expect(frame).toEqual({ kind: 'message', type: record.type, value: record });
    return;
  }
  expect(frame.kind).toBe('mcp');
  if (frame.kind !== 'mcp') return;
  expect(frame.sessionId).toBe(typeof record.session_id === 'string' ? record.session_id : '');
  // The payload's own text, cut out of the frame: it parses to exactly the payload.
  expect(JSON.parse(frame.payloadText)).toEqual(record.payload ?? null);
  if (record.payload !== undefined) expect(text).toContain(frame.payloadText);
  const expected = classifyJsonRpc(record.payload ?? null);
  expect(frame.message.kind).toBe(expected.kind);
  if (frame.message.kind === 'error' && expected.kind === 'error') {
    expect(frame.message.id).toBe(expected.id);
    expect(frame.message.error.message).toBe(expected.error.message);
  } else if (expected.kind !== 'error') {
    expect({ ...frame.message, resultText: undefined }).toEqual({
      ...expected,
      resultText: undefined,
    });
  }
}

const idArb = fc.oneof(fc.integer(), fc.string(), fc.constant(null), fc.double(), fc.boolean());
/** Payloads a device or an impostor may send: every JSON-RPC shape, foreign ids, wrong types. */
const payloadArb: fc.Arbitrary<unknown> = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.record(
    {
      jsonrpc: fc.constantFrom('2.0', '1.0', 2),
      id: idArb,
      method: fc.oneof(fc.constantFrom('tools/list', 'tools/call', 'initialize'), fc.string()),
      params: fc.jsonValue({ maxDepth: 2 }),
      result: fc.jsonValue({ maxDepth: 2 }),
      error: fc.oneof(
        fc.record({ message: fc.string(), code: fc.integer() }, { requiredKeys: [] }),
        fc.jsonValue({ maxDepth: 2 }),
      ),
    },
    { requiredKeys: ['jsonrpc'] },
  ),
);
const keyArb = fc.constantFrom(
  '"type"',
  '"payload"',
  '"session_id"',
  '"p\\u0061yload"',
  '"PAYLOAD"',
  '"x"',
  '"pay\\"load"',
);
const spaceArb = fc.constantFrom('', ' ', '\n', '\t ', '\r\n');
const valueTextArb = fc.oneof(
  fc.constantFrom('"mcp"', '"listen"', '"hello"', '"s1"', 'null', '1', '"{\\"}"'),
  payloadArb.map((v) => JSON.stringify(v) ?? 'null'),
  fc
    .tuple(payloadArb, fc.constantFrom(1, 2, '\t'))
    .map(([v, space]) => JSON.stringify(v, null, space) ?? 'null'),
);
/** Valid JSON objects with members in any order, duplicates, escaped keys and whitespace. */
const jsonFrameArb = fc
  .array(fc.tuple(spaceArb, keyArb, spaceArb, spaceArb, valueTextArb, spaceArb), { maxLength: 6 })
  .map(
    (members) =>
      `{${members.map(([a, key, b, c, value, d]) => `${a}${key}${b}:${c}${value}${d}`).join(',')}}`,
  );
/** Frames in the device's exact shape, sometimes with members after the payload. */
const deviceShapeArb = fc
  .tuple(
    anyStringArb,
    payloadArb,
    fc.option(fc.constantFrom(',"x":1', ',"payload":{}', ',"type":"listen"')),
  )
  .map(
    ([session, payload, tail]) =>
      `{"session_id":${JSON.stringify(session)},"type":"mcp","payload":${JSON.stringify(payload) ?? 'null'}${tail ?? ''}}`,
  );
/** Pieces of envelopes glued at random: broken quotes, escapes, unbalanced brackets. */
const fragmentArb = fc
  .array(
    fc.constantFrom(
      '{',
      '}',
      '[',
      ']',
      '"',
      '\\',
      '\\"',
      ':',
      ',',
      ' ',
      '\n',
      '\u2028',
      '\ud800',
      '\udc00',
      '{"session_id":"',
      '","type":"mcp","payload":',
      '"type":"mcp"',
      '"payload":',
      '{"jsonrpc":"2.0","id":1,"error":{"message":"',
      '{"jsonrpc":"2.0","id":1,"result":',
      '],"nextCursor":"',
      '"}}',
      'null',
      '-1',
    ),
    { maxLength: 40 },
  )
  .map((parts) => parts.join(''));
const badUtf8Arb = fc
  .uint8Array({ maxLength: 200 })
  .map((bytes) => new TextDecoder().decode(bytes));

describe('readDeviceFrame under hostile input', () => {
  it('reads an envelope whose payload is nested 900 deep, without re-serialising it', () => {
    // Another key order than the device's: the frame goes through JSON.parse.
    const payload = `{"jsonrpc":"2.0","id":4,"result":{"deep":${nested(900)}}}`;
    const text = `{"type":"mcp","payload":${payload},"session_id":"s"}`;
    const frame = readDeviceFrame(text);
    expect(frame).toMatchObject({ kind: 'mcp', sessionId: 's', payloadText: payload });
    expect(frame.kind === 'mcp' && frame.message).toMatchObject({
      kind: 'result',
      id: 4,
      resultText: `{"deep":${nested(900)}}`,
    });
    expect(readDeviceFrame(`{"type":"mcp","payload":${nested(990)}}`)).toMatchObject({
      kind: 'mcp',
      payloadText: nested(990),
      message: { kind: 'invalid' },
    });
  });

  it.each([1_001, 5_000, 100_000])(
    'refuses a frame nested %i deep unread, deeper than cJSON reads (no RangeError, no long parse)',
    (depth) => {
      const payload = `{"jsonrpc":"2.0","id":4,"result":{"deep":${nested(depth)}}}`;
      for (const text of [
        `{"type":"mcp","payload":${payload},"session_id":"s"}`,
        encodeDeviceEnvelope('s', `{"jsonrpc":"2.0","id":3,"error":${nested(depth)}}`),
        '['.repeat(depth),
      ]) {
        expect(readDeviceFrame(text)).toEqual({
          kind: 'invalid',
          reason: `frame is nested deeper than ${MAX_FRAME_DEPTH} levels`,
        });
      }
    },
  );

  it('counts depth outside strings only: brackets inside a string are text', () => {
    const text = `{"type":"listen","state":"${'['.repeat(5_000)}"}`;
    expect(nestedDeeperThan(text, MAX_FRAME_DEPTH)).toBe(false);
    expect(readDeviceFrame(text)).toMatchObject({ kind: 'message', type: 'listen' });
    expect(nestedDeeperThan('[[[]]]', 3)).toBe(false);
    expect(nestedDeeperThan('[[[[]]]]', 3)).toBe(true);
  });

  it("reads a deep error object in the device's own shape", () => {
    const frame = readDeviceFrame(
      encodeDeviceEnvelope('s', `{"jsonrpc":"2.0","id":3,"error":${nested(900)}}`),
    );
    expect(frame.kind === 'mcp' && frame.message).toMatchObject({ kind: 'error', id: 3 });
  });

  it('keeps the payload text exactly as sent, whitespace and escapes included', () => {
    const payload = '{ "jsonrpc" : "2.0", "id" : 1, "result" : { "x" : "\\u00e9" } }';
    const frame = readDeviceFrame(`{ "payload" : ${payload} , "type":"mcp" }`);
    expect(frame).toMatchObject({ kind: 'mcp', payloadText: payload });
    // JSON.parse keeps the last duplicate; so does the cut.
    const twice = readDeviceFrame('{"type":"mcp","payload":{"a":1},"p\\u0061yload":{"b":2}}');
    expect(twice).toMatchObject({ kind: 'mcp', payloadText: '{"b":2}' });
  });

  it('cuts the payload and result texts when first read, exact and the same on every read', () => {
    const result = '{"content":[{"type":"text","text":"true"}],"isError":false}';
    const payload = `{"jsonrpc":"2.0","id":7,"result":${result}}`;
    const text = encodeDeviceEnvelope('s', payload);
    const frame = readDeviceFrame(text);
    if (frame.kind !== 'mcp' || frame.message.kind !== 'result') throw new Error('not a result');
    // The message first: its result text is cut from the frame's payload text on demand.
    expect(frame.message.resultText).toBe(result);
    expect(frame.message.resultText).toBe(result);
    expect(frame.payloadText).toBe(payload);
    expect(frame.payloadText).toBe(payload);
    // In the other order, and through JSON (a transcript or a log writes frames so).
    const again = readDeviceFrame(text);
    if (again.kind !== 'mcp' || again.message.kind !== 'result') throw new Error('not a result');
    expect(again.payloadText).toBe(payload);
    expect(again.message.resultText).toBe(result);
    expect(JSON.parse(JSON.stringify(readDeviceFrame(text)))).toEqual({
      kind: 'mcp',
      sessionId: 's',
      payloadText: payload,
      message: { kind: 'result', id: 7, result: JSON.parse(result), resultText: result },
    });
    // An envelope without a payload reads as `null`, and a result not in the firmware's shape
    // has no exact text.
    expect(readDeviceFrame('{"type":"mcp"}')).toMatchObject({ kind: 'mcp', payloadText: 'null' });
    const spaced = readDeviceFrame(
      '{"type":"mcp","payload":{"jsonrpc":"2.0", "id":1,"result":{}}}',
    );
    expect(spaced.kind === 'mcp' && spaced.message).toMatchObject({ kind: 'result', id: 1 });
    expect(
      spaced.kind === 'mcp' && spaced.message.kind === 'result' && spaced.message.resultText,
    ).toBeUndefined();
  });

  it('reads a valid frame in the device shape as JSON.parse does, members after the payload included', () => {
    const frame = readDeviceFrame(
      '{"session_id":"s","type":"mcp","payload":{"jsonrpc":"2.0","id":1,"result":{}},"x":1}',
    );
    expect(frame).toMatchObject({
      kind: 'mcp',
      payloadText: '{"jsonrpc":"2.0","id":1,"result":{}}',
      message: { kind: 'result', id: 1 },
    });
  });

  it('does not throw on an envelope head with a 10 MB session id', () => {
    const text = `{"session_id":"${'a'.repeat(10_000_000)}`;
    expect(readDeviceFrame(text)).toMatchObject({ kind: 'invalid' });
    const escaped = `{"session_id":"${'\\"'.repeat(5_000_000)}","type":"mcp","payload":{"jsonrpc":"2.0","id":1,"error":{"message":"a"b"}}}`;
    expect(readDeviceFrame(escaped)).toMatchObject({
      kind: 'mcp',
      message: { kind: 'error', id: 1 },
    });
  });

  it('never throws for any string', () => {
    fc.assert(
      fc.property(fc.oneof(anyStringArb, fragmentArb, badUtf8Arb, deviceShapeArb), (text) =>
        expectReadable(readDeviceFrame(text)),
      ),
      { seed: 42, numRuns: 2000 },
    );
  });

  it('agrees with JSON.parse on every frame that is valid JSON', () => {
    fc.assert(
      fc.property(fc.oneof(jsonFrameArb, deviceShapeArb), (text) =>
        expectAgreesWithJsonParse(text, readDeviceFrame(text)),
      ),
      { seed: 42, numRuns: 1000 },
    );
  });

  it('cuts the payload of a device-shaped frame to the text the device wrote', () => {
    fc.assert(
      fc.property(anyStringArb, payloadArb, (session, payload) => {
        const payloadText = JSON.stringify(payload) ?? 'null';
        const frame = readDeviceFrame(encodeEnvelope(session, payloadText));
        expect(frame).toMatchObject({ kind: 'mcp', sessionId: session, payloadText });
      }),
      { seed: 42, numRuns: 500 },
    );
  });

  it('never throws on deep frames of every shape', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 900, max: 60_000 }),
        fc.constantFrom(['[', ']'], ['{"a":', '}'], ['[{"b":', '}]'], ['["', '"]']),
        fc.constantFrom(
          (deep: string) => `{"type":"mcp","payload":${deep}}`,
          (deep: string) => encodeDeviceEnvelope('s', deep),
          (deep: string) => encodeDeviceEnvelope('s', `{"jsonrpc":"2.0","id":1,"error":${deep}}`),
          (deep: string) =>
            encodeDeviceEnvelope(
              's',
              `{"jsonrpc":"2.0","id":1,"error":{"message":"x"y","d":${deep}}}`,
            ),
          (deep: string) => `{"type":"listen","state":${deep}}`,
          (deep: string) => deep,
        ),
        fc.boolean(),
        (depth, [open, close], frame, cut) => {
          const deep = nested(depth, open, close, open === '[' ? '' : '1');
          const text = frame(cut ? deep.slice(0, -1) : deep);
          expectReadable(readDeviceFrame(text));
        },
      ),
      { seed: 42, numRuns: 20 },
    );
  });
});
