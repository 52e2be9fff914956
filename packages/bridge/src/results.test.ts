import { describe, expect, it } from 'vitest';
import { BridgeError } from './errors.js';
import { callFailure, toCallToolResult, toMcpContent } from './results.js';

const CALL = {
  deviceId: 'f4:12:fa:00:00:01',
  tool: 'self.lamp.turn_on',
  timedOut: false,
  timeoutMs: 35_000,
};

describe('toCallToolResult', () => {
  it('passes text, image and audio content through and keeps isError', () => {
    expect(
      toCallToolResult({
        content: [
          { type: 'text', text: '{"volume":30}' },
          { type: 'image', data: 'iVBORw0KGgo=', mimeType: 'image/png' },
          { type: 'audio', data: 'T2dnUw==', mimeType: 'audio/ogg' },
        ],
        isError: false,
      }),
    ).toEqual({
      content: [
        { type: 'text', text: '{"volume":30}' },
        { type: 'image', data: 'iVBORw0KGgo=', mimeType: 'image/png' },
        { type: 'audio', data: 'T2dnUw==', mimeType: 'audio/ogg' },
      ],
      isError: false,
    });
    expect(toCallToolResult({ content: [], isError: true })).toEqual({
      content: [],
      isError: true,
    });
  });

  it('keeps an item of no MCP type as its JSON text', () => {
    expect(toMcpContent({ type: 'unknown', value: 42 })).toEqual({
      type: 'text',
      text: '{"type":"unknown","value":42}',
    });
    expect(toMcpContent({ type: 'image', image: '{"broken"' })).toEqual({
      type: 'text',
      text: '{"type":"image","image":"{\\"broken\\""}',
    });
    expect(toMcpContent(null)).toEqual({ type: 'text', text: 'null' });
  });
});

describe('callFailure', () => {
  it("gives the board's own error message verbatim as an isError result", () => {
    const error = new BridgeError('API_ERROR', 'Unknown tool: a"b\nc', {
      status: 502,
      apiCode: -32000,
      fromDevice: true,
    });
    expect(callFailure(error, CALL)).toEqual({
      kind: 'result',
      result: { content: [{ type: 'text', text: 'Unknown tool: a"b\nc' }], isError: true },
    });
  });

  it('says which call failed when the board is gone, silent or unreachable', () => {
    const cases: [BridgeError, RegExp][] = [
      [
        new BridgeError('API_ERROR', 'device gone (409 DEVICE_DISCONNECTED)', {
          status: 409,
          apiCode: 'DEVICE_DISCONNECTED',
        }),
        /^self\.lamp\.turn_on on f4:12:fa:00:00:01: device gone \(409 DEVICE_DISCONNECTED\)$/,
      ],
      [new BridgeError('API_ERROR', 'no reply (504 REQUEST_TIMEOUT)', { status: 504 }), /no reply/],
      [new BridgeError('DEVICE_NOT_FOUND', 'no device', { status: 404 }), /no device/],
      [new BridgeError('SERVER_UNREACHABLE', 'cannot reach ECONNREFUSED'), /ECONNREFUSED/],
    ];
    for (const [error, text] of cases) {
      const failure = callFailure(error, CALL);
      expect(failure.kind, error.message).toBe('result');
      if (failure.kind !== 'result') continue;
      expect(failure.result.isError).toBe(true);
      expect((failure.result.content[0] as { text: string }).text).toMatch(text);
    }
    const late = callFailure(new Error('aborted'), { ...CALL, timedOut: true });
    expect(late).toMatchObject({ kind: 'result', result: { isError: true } });
    expect(JSON.stringify(late)).toContain('no answer within 35000 ms');
  });

  it('answers requests the API refused as protocol errors', () => {
    expect(callFailure(new BridgeError('API_ERROR', 'bad', { status: 400 }), CALL)).toEqual({
      kind: 'invalid-params',
      message: 'bad',
    });
    expect(callFailure(new BridgeError('UNAUTHORIZED', 'token', { status: 401 }), CALL)).toEqual({
      kind: 'internal',
      message: 'token',
    });
    expect(callFailure(new TypeError('odd'), CALL)).toEqual({ kind: 'internal', message: 'odd' });
  });
});
