import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CODELESS_ERROR_CODE, ProtocolError, WireError } from './errors.js';
import {
  classifyJsonRpc,
  encodeDeviceError,
  encodeDeviceResult,
  encodeErrorReply,
  encodeNotification,
  encodeRequest,
  encodeResultReply,
  type JsonRpcMessage,
  readJsonRpc,
} from './jsonrpc.js';

describe('classifyJsonRpc', () => {
  it('tells requests, notifications, results and errors apart', () => {
    expect(classifyJsonRpc({ jsonrpc: '2.0', id: 1, method: 'tools/list' })).toMatchObject({
      kind: 'request',
      id: 1,
    });
    expect(classifyJsonRpc({ jsonrpc: '2.0', method: 'notifications/initialized' })).toMatchObject({
      kind: 'notification',
    });
    expect(classifyJsonRpc({ jsonrpc: '2.0', id: 'a', result: {} })).toMatchObject({
      kind: 'result',
      id: 'a',
    });
    const error = classifyJsonRpc({
      jsonrpc: '2.0',
      id: 2,
      error: { code: -32601, message: 'nope' },
    });
    expect(error.kind === 'error' && [error.error.code, error.error.codeless]).toEqual([
      -32601,
      false,
    ]);
  });

  it('refuses what is not JSON-RPC 2.0', () => {
    expect(classifyJsonRpc([1])).toMatchObject({ kind: 'invalid' });
    expect(classifyJsonRpc({ jsonrpc: '1.0', id: 1, method: 'x' })).toMatchObject({
      kind: 'invalid',
    });
    expect(classifyJsonRpc({ jsonrpc: '2.0', id: null, method: 'x' })).toMatchObject({
      kind: 'invalid',
    });
    expect(classifyJsonRpc({ jsonrpc: '2.0', id: 1 })).toMatchObject({ kind: 'invalid' });
  });
});

describe('readJsonRpc: what devices really send', () => {
  it('normalises an error without code to the local code and keeps the original', () => {
    const reply = readJsonRpc(
      '{"jsonrpc":"2.0","id":35,"error":{"message":"Unknown tool: self.nope"}}',
    );
    expect(reply.kind).toBe('error');
    if (reply.kind !== 'error') return;
    expect(reply.id).toBe(35);
    expect(reply.error).toBeInstanceOf(WireError);
    expect(reply.error.code).toBe(CODELESS_ERROR_CODE);
    expect(reply.error.codeless).toBe(true);
    expect(reply.error.recovered).toBe(false);
    expect(reply.error.original).toEqual({ message: 'Unknown tool: self.nope' });
    expect(reply.error.message).toBe('Unknown tool: self.nope');
  });

  it.each([
    [
      'a quote',
      '{"jsonrpc":"2.0","id":49,"error":{"message":"Unknown tool: bad"name"}}',
      49,
      'Unknown tool: bad"name',
    ],
    [
      'a backslash',
      '{"jsonrpc":"2.0","id":50,"error":{"message":"Unknown tool: back\\slash"}}',
      50,
      'Unknown tool: back\\slash',
    ],
    [
      'quote and backslash',
      '{"jsonrpc":"2.0","id":51,"error":{"message":"Unexpected "status" \\ 404"}}',
      51,
      'Unexpected "status" \\ 404',
    ],
    [
      'a newline',
      '{"jsonrpc":"2.0","id":-3,"error":{"message":"line one\nline two"}}',
      -3,
      'line one\nline two',
    ],
    [
      'a method name',
      '{"jsonrpc":"2.0","id":52,"error":{"message":"Method not implemented: no"such/method"}}',
      52,
      'Method not implemented: no"such/method',
    ],
  ])('recovers id and text from an unescaped error message with %s', (_, text, id, message) => {
    expect(() => JSON.parse(text)).toThrow();
    const reply = readJsonRpc(text);
    expect(reply.kind).toBe('error');
    if (reply.kind !== 'error') return;
    expect(reply.id).toBe(id);
    expect(reply.error.message).toBe(message);
    expect(reply.error.recovered).toBe(true);
    expect(reply.error.codeless).toBe(true);
  });

  it('recovers an unescaped error from a later firmware that adds a code', () => {
    const reply = readJsonRpc(
      '{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Unknown tool: a"b"}}',
    );
    expect(reply.kind === 'error' && [reply.id, reply.error.code, reply.error.message]).toEqual([
      7,
      -32602,
      'Unknown tool: a"b',
    ]);
  });

  it('recovers a tools/list page whose nextCursor names a tool with a quote', () => {
    const text =
      '{"jsonrpc":"2.0","id":9,"result":{"tools":[{"name":"a","description":"d","inputSchema":{"type":"object","properties":{}}}],"nextCursor":"b"c"}}';
    const reply = readJsonRpc(text);
    expect(reply.kind).toBe('result');
    if (reply.kind !== 'result') return;
    expect(reply.id).toBe(9);
    expect((reply.result as { nextCursor: string }).nextCursor).toBe('b"c');
    expect(reply.resultText).toBe(text.slice('{"jsonrpc":"2.0","id":9,"result":'.length, -1));
  });

  it('keeps the exact result text of a firmware reply', () => {
    const reply = readJsonRpc('{"jsonrpc":"2.0","id":1,"result":{"tools":[],"x":"\\u00e9"}}');
    expect(reply.kind === 'result' && reply.resultText).toBe('{"tools":[],"x":"\\u00e9"}');
  });

  it('calls other broken text invalid instead of throwing', () => {
    for (const text of [
      '',
      '{"jsonrpc":"2.0","id":1,"error":{"message":"cut',
      'garbage',
      '{"jsonrpc":"2.0","id":1,"result":{',
    ]) {
      expect(readJsonRpc(text).kind, text).toBe('invalid');
    }
  });
});

describe('encoders', () => {
  it('write the firmware reply shapes by concatenation', () => {
    expect(encodeDeviceResult(4, '{"a":1}')).toBe('{"jsonrpc":"2.0","id":4,"result":{"a":1}}');
    expect(encodeDeviceError(4, 'x"y')).toBe('{"jsonrpc":"2.0","id":4,"error":{"message":"x"y"}}');
  });

  it('write requests with jsonrpc, id, method, params in that order', () => {
    expect(encodeRequest(1, 'tools/list', { cursor: 'a' })).toBe(
      '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"a"}}',
    );
    expect(encodeRequest(2, 'initialize')).toBe('{"jsonrpc":"2.0","id":2,"method":"initialize"}');
  });
});

// Hostile replies: every read linear, nothing thrown.

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

const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;

/**
 * The recovery as it was before the linear reader, kept as the reference: the linear reader must give
 * exactly its results. Its patterns backtrack, so it only sees small inputs here.
 */
function referenceRecovery(text: string): JsonRpcMessage | undefined {
  const FIRMWARE_RESULT = /^\{"jsonrpc":"2\.0","id":(-?\d+),"result":([\s\S]*)\}$/;
  const FIRMWARE_ERROR = /^\{"jsonrpc":"2\.0","id":(-?\d+),"error":\{"message":"([\s\S]*)"\}\}$/;
  const CODED_ERROR =
    /^\{"jsonrpc":"2\.0","id":(-?\d+|"[^"]*"|null),"error":\{"code":(-?\d+),"message":"([\s\S]*)"\}\}$/;
  const UNESCAPED_CURSOR = /^([\s\S]*\]),"nextCursor":"([\s\S]*)"\}$/;
  const plain = FIRMWARE_ERROR.exec(text);
  if (plain) {
    const [, id = '0', message = ''] = plain;
    return { kind: 'error', id: Number(id), error: new WireError(message, { recovered: true }) };
  }
  const coded = CODED_ERROR.exec(text);
  if (coded) {
    const [, rawId = 'null', code = '0', message = ''] = coded;
    const id = rawId === 'null' ? null : rawId.startsWith('"') ? rawId.slice(1, -1) : Number(rawId);
    return {
      kind: 'error',
      id,
      error: new WireError(message, { code: Number(code), recovered: true }),
    };
  }
  const result = FIRMWARE_RESULT.exec(text);
  const cursor = result ? UNESCAPED_CURSOR.exec(result[2] ?? '') : null;
  if (result && cursor) {
    try {
      const page = JSON.parse(`${cursor[1]}}`) as Record<string, unknown>;
      return {
        kind: 'result',
        id: Number(result[1]),
        result: { ...page, nextCursor: cursor[2] },
        resultText: result[2],
      };
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** `readJsonRpc` before the linear reader; resultText of valid JSON came from FIRMWARE_RESULT too. */
function referenceRead(text: string): JsonRpcMessage {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return (
      referenceRecovery(text) ?? {
        kind: 'invalid',
        reason: 'not valid JSON and not a known firmware reply shape',
      }
    );
  }
  const message = classifyJsonRpc(value);
  if (message.kind !== 'result') return message;
  const exact = /^\{"jsonrpc":"2\.0","id":(-?\d+),"result":([\s\S]*)\}$/.exec(text);
  return { ...message, resultText: exact?.[2] };
}

/** A message as plain data, errors included, for comparing two readers. */
function plain(message: JsonRpcMessage | undefined): unknown {
  if (message?.kind !== 'error') return message;
  const { error } = message;
  return { ...message, error: [error.message, error.code, error.codeless, error.recovered] };
}

const REPLY_HEADS = [
  '{"jsonrpc":"2.0","id":-7,"result":',
  '{"jsonrpc":"2.0","id":3,"error":{"message":"',
  '{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"',
  '{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"',
  '{"jsonrpc":"2.0","id":',
];
const REPLY_PIECES = [
  ...REPLY_HEADS,
  '{"tools":[',
  '{"name":"a"}',
  '],"nextCursor":"',
  '"}',
  '"}}',
  '}',
  ']',
  '"',
  '\\',
  ',',
  '1',
  'b"c',
  '\n',
];
/** Firmware reply heads and tails around pieces glued at random: where the recovery bites. */
const replyFragmentArb = fc
  .tuple(
    fc.constantFrom('', ...REPLY_HEADS),
    fc.array(fc.constantFrom(...REPLY_PIECES), { maxLength: 10 }),
    fc.constantFrom('', '}', '"}', '"}}', ']}', '"}}}'),
  )
  .map(([head, pieces, tail]) => head + pieces.join('') + tail);

describe('readJsonRpc under hostile replies', () => {
  const head = '{"jsonrpc":"2.0","id":9,"result":';

  it.each([128 * 1024, 1024 * 1024])(
    'reads a %i-character reply crafted against the cursor recovery',
    (size) => {
      // Many cursor markers and no closing quote: a backtracking pattern tries every pair.
      const marker = '],"nextCursor":"';
      const text = `${head}${marker.repeat(Math.floor(size / marker.length))}x}`;
      expect(readJsonRpc(text)).toMatchObject({ kind: 'invalid' });
      const page = `{"tools":[${'],"nextCursor":"'.repeat(Math.floor(size / 16))}"}`;
      expect(readJsonRpc(`${head}${page}}`).kind).toBe('invalid');
    },
  );

  it('recovers a cursor at the last marker, as the greedy pattern did', () => {
    for (const text of [
      `${head}{"tools":[{"name":"a"}],"nextCursor":"b"c"}}`,
      `${head}{"tools":[],"nextCursor":"a],"nextCursor":"b"}}`,
      `${head}{"tools":[{"name":"x"}],"nextCursor":"}`,
      `${head}{"tools":[{"name":"x"}],"nextCursor":""}}`,
    ]) {
      expect(plain(readJsonRpc(text)), text).toEqual(plain(referenceRead(text)));
    }
  });

  it('reads exactly as the old patterns did', () => {
    let recovered = 0;
    fc.assert(
      fc.property(replyFragmentArb, (text) => {
        const expected = referenceRead(text);
        if (expected.kind !== 'invalid') recovered++;
        expect(plain(readJsonRpc(text))).toEqual(plain(expected));
      }),
      { seed: 42, numRuns: 1500 },
    );
    // The fragments do reach the recovery, not only its refusals.
    expect(recovered).toBeGreaterThan(50);
  });

  it('never throws for any text', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          anyStringArb,
          replyFragmentArb,
          fc.uint8Array({ maxLength: 200 }).map((b) => new TextDecoder().decode(b)),
        ),
        (text) => {
          expect(['request', 'notification', 'result', 'error', 'invalid']).toContain(
            readJsonRpc(text).kind,
          );
        },
      ),
      { seed: 42, numRuns: 2000 },
    );
  });

  it.each([5_000, 100_000])('reads an error member nested %i deep', (depth) => {
    const reply = readJsonRpc(`{"jsonrpc":"2.0","id":1,"error":${nested(depth)}}`);
    expect(reply.kind).toBe('error');
    if (reply.kind !== 'error') return;
    expect(reply.id).toBe(1);
    expect(reply.error.message.length).toBeLessThan(2000);
    expect(reply.error.original).toBeInstanceOf(Array);
  });

  it('classifies any JSON value without throwing, with a bounded error text', () => {
    fc.assert(
      fc.property(
        fc.record(
          {
            jsonrpc: fc.constantFrom('2.0', '2', null),
            id: fc.oneof(fc.integer(), fc.string(), fc.double(), fc.constant(null), fc.jsonValue()),
            method: fc.oneof(fc.string(), fc.jsonValue({ maxDepth: 1 })),
            result: fc.jsonValue({ maxDepth: 3 }),
            error: fc.jsonValue({ maxDepth: 3 }),
          },
          { requiredKeys: [] },
        ),
        (value) => {
          const message = classifyJsonRpc(value);
          if (message.kind === 'error') expect(message.error.message.length).toBeLessThan(1010);
        },
      ),
      { seed: 42, numRuns: 1000 },
    );
  });

  it('refuses to encode what JSON cannot hold with INVALID_MESSAGE, not a RangeError', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = [deep];
    for (const encode of [
      () => encodeRequest(1, 'tools/call', { name: 'x', arguments: { a: deep } }),
      () => encodeNotification('x', deep),
      () => encodeResultReply(1, deep),
      () => encodeErrorReply(1, -32000, 'x', deep),
    ]) {
      expect(encode).toThrow(ProtocolError);
      try {
        encode();
      } catch (error) {
        expect((error as ProtocolError).code).toBe('INVALID_MESSAGE');
      }
    }
  });
});
