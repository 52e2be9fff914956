import { describe, expect, it } from 'vitest';
import {
  encodeDeviceEnvelope,
  encodeEnvelope,
  readBackendFrame,
  readDeviceFrame,
} from './envelope.js';

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
