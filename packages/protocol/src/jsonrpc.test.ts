import { describe, expect, it } from 'vitest';
import { CODELESS_ERROR_CODE, WireError } from './errors.js';
import {
  classifyJsonRpc,
  encodeDeviceError,
  encodeDeviceResult,
  encodeRequest,
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
