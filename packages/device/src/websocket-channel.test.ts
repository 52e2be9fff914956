import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { buildDeviceHello, decodeAudioFrame } from '@xiaozhi-mcp/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { BoardConsole } from './console.js';
import { upgradeHeaders, WebsocketChannel } from './websocket-channel.js';

const base = {
  url: 'ws://127.0.0.1:8000/xiaozhi/v1/',
  version: 1 as const,
  deviceId: 'f4:12:fa:00:00:01',
  clientId: 'c',
};

describe('upgradeHeaders', () => {
  it('adds Bearer unless the token already has a space, and omits an empty token', () => {
    expect(upgradeHeaders({ ...base, token: 'abc' }).Authorization).toBe('Bearer abc');
    expect(upgradeHeaders({ ...base, token: 'Token abc' }).Authorization).toBe('Token abc');
    expect(upgradeHeaders({ ...base, token: '' }).Authorization).toBeUndefined();
  });

  it('puts no port in Host', () => {
    expect(upgradeHeaders({ ...base, token: '' })).toEqual({
      'Protocol-Version': '1',
      'Device-Id': 'f4:12:fa:00:00:01',
      'Client-Id': 'c',
      Host: '127.0.0.1',
    });
  });
});

describe('WebsocketChannel', () => {
  let wss: WebSocketServer | undefined;
  afterEach(() => wss?.close());

  it.each([1, 2, 3] as const)('frames audio for protocol version %d', async (version) => {
    wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(wss, 'listening');
    const received: Buffer[] = [];
    wss.on('connection', (socket) => {
      socket.once('message', () =>
        socket.send('{"type":"hello","transport":"websocket","session_id":"s"}'),
      );
      socket.on('message', (data, binary) => binary && received.push(data as Buffer));
    });
    const channel = new WebsocketChannel({
      ...base,
      url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/`,
      version,
      token: '',
      hello: buildDeviceHello({ transport: 'websocket', version }),
      console: new BoardConsole(),
    });
    await channel.open();
    expect(channel.sessionId).toBe('s');
    channel.sendAudio(new Uint8Array([1, 2, 3]), 160);
    while (received.length === 0) await new Promise((r) => setTimeout(r, 5));
    const frame = received[0] ?? Buffer.alloc(0);
    expect(frame.length).toBe(3 + { 1: 0, 2: 16, 3: 4 }[version]);
    expect([...decodeAudioFrame(version, new Uint8Array(frame)).payload]).toEqual([1, 2, 3]);
    channel.close();
  });

  it('drops MCP that arrives before the server hello is accepted, and refuses frames over 64 KiB', async () => {
    wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(wss, 'listening');
    wss.on('connection', (socket) => {
      socket.once('message', () => {
        socket.send('{"type":"mcp","payload":{"jsonrpc":"2.0","id":1,"method":"initialize"}}');
        socket.send('{"type":"hello","transport":"websocket"}');
      });
    });
    const console = new BoardConsole();
    const channel = new WebsocketChannel({
      ...base,
      url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/`,
      token: '',
      hello: buildDeviceHello({ transport: 'websocket', version: 1 }),
      console,
    });
    const frames: unknown[] = [];
    channel.on('json', (frame) => frames.push(frame));
    await channel.open();
    expect(frames).toEqual([]);
    expect(channel.sendText('x'.repeat(65_536))).toBe(false);
    expect(channel.isOpen).toBe(false);
  });
});
