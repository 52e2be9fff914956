import { readBackendFrame } from '@xiaozhi-mcp/protocol';
import { describe, expect, it } from 'vitest';
import {
  audioVersion,
  clickAction,
  type FrameAction,
  frameAction,
  rewriteReply,
  withoutFields,
} from './session.js';

function actionOf(text: string): FrameAction {
  const frame = readBackendFrame(text);
  if (frame === undefined) throw new Error(`not a frame: ${text}`);
  return frameAction(frame);
}

describe('frameAction (Application::OnIncomingJson)', () => {
  it('hands an mcp payload object to the MCP server and drops anything else', () => {
    expect(actionOf('{"type":"mcp","payload":{"jsonrpc":"2.0"}}').kind).toBe('mcp');
    expect(actionOf('{"type":"mcp","payload":"{}"}')).toEqual({ kind: 'none' });
  });

  it('follows tts, stt, llm and system', () => {
    expect(actionOf('{"type":"tts","state":"start"}')).toEqual({ kind: 'speak' });
    expect(actionOf('{"type":"tts","state":"stop"}')).toEqual({ kind: 'listen' });
    expect(actionOf('{"type":"tts","state":"sentence_start","text":"hi"}')).toEqual({
      kind: 'log',
      level: 'I',
      text: '<< hi',
    });
    expect(actionOf('{"type":"tts","state":"other"}')).toEqual({ kind: 'none' });
    expect(actionOf('{"type":"stt","text":"hello"}')).toEqual({
      kind: 'log',
      level: 'I',
      text: '>> hello',
    });
    expect(actionOf('{"type":"llm","emotion":"happy"}')).toEqual({ kind: 'none' });
    expect(actionOf('{"type":"system","command":"reboot"}')).toEqual({ kind: 'reboot' });
    expect(actionOf('{"type":"system","command":"halt"}')).toEqual({
      kind: 'log',
      level: 'W',
      text: 'Unknown system command: halt',
    });
  });

  it('shows an alert only with status, message and emotion, and logs unknown types', () => {
    expect(actionOf('{"type":"alert","status":"s","message":"m","emotion":"e"}')).toEqual({
      kind: 'log',
      level: 'W',
      text: 'Alert s: m [e]',
    });
    expect(actionOf('{"type":"alert","status":"s"}')).toEqual({
      kind: 'log',
      level: 'W',
      text: 'Alert command requires status, message and emotion',
    });
    expect(actionOf('{"type":"goodbye"}')).toEqual({
      kind: 'log',
      level: 'W',
      text: 'Unknown message type: goodbye',
    });
  });
});

describe('clickAction (Application::ToggleChatState)', () => {
  it('opens from idle, closes from listening, aborts speech and skips activation', () => {
    expect(clickAction('idle')).toBe('open');
    expect(clickAction('listening')).toBe('close');
    expect(clickAction('speaking')).toBe('abort');
    expect(clickAction('activating')).toBe('cancel-activation');
    for (const state of ['off', 'starting', 'connecting', 'upgrading', 'download'] as const)
      expect(clickAction(state)).toBe('none');
  });
});

describe('audioVersion', () => {
  it('takes 2 and 3 as stored and anything else as 1', () => {
    expect([0, 1, 2, 3, 4].map(audioVersion)).toEqual([1, 1, 2, 3, 1]);
  });
});

describe('the fault knobs that change what the board sends', () => {
  const none = { initializeWithout: [], cursorLoop: false };

  it('leaves fields out of the hello, by dotted path, without touching the original', () => {
    const hello = {
      type: 'hello',
      features: { mcp: true, glyph_push: false },
      transport: 'websocket',
    };
    expect(withoutFields(hello, ['transport', 'features.mcp', 'no.such'])).toEqual({
      type: 'hello',
      features: { glyph_push: false },
    });
    expect(hello.transport).toBe('websocket');
  });

  it('drops initialize result fields and loops tools/list cursors, leaving other replies alone', () => {
    const init =
      '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"b","version":"1"}}}';
    expect(JSON.parse(rewriteReply(init, { ...none, initializeWithout: ['serverInfo'] }))).toEqual({
      jsonrpc: '2.0',
      id: 1,
      result: { protocolVersion: '2024-11-05', capabilities: { tools: {} } },
    });
    const page = '{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"a"},{"name":"b"}]}}';
    expect(JSON.parse(rewriteReply(page, { ...none, cursorLoop: true })).result.nextCursor).toBe(
      'a',
    );
    expect(rewriteReply(init, none)).toBe(init);
    expect(rewriteReply(page, { ...none, initializeWithout: ['serverInfo'] })).toBe(page);
    const unescaped = '{"jsonrpc":"2.0","id":3,"error":{"message":"Unknown tool: a"b"}}';
    expect(rewriteReply(unescaped, { ...none, cursorLoop: true })).toBe(unescaped);
  });
});
