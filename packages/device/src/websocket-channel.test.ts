import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { buildDeviceHello, decodeAudioFrame } from '@xiaozhi-mcp/protocol';
import { until } from '@xiaozhi-mcp/test-kit';
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
    await until(() => received.length > 0, { what: 'the audio frame at the backend' });
    const frame = received[0] ?? Buffer.alloc(0);
    expect(frame.length).toBe(3 + { 1: 0, 2: 16, 3: 4 }[version]);
    expect([...decodeAudioFrame(version, new Uint8Array(frame)).payload]).toEqual([1, 2, 3]);
    channel.close();
  });

  it('sends text as a text frame with its exact UTF-8 bytes, up to 65,535 of them', async () => {
    wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await once(wss, 'listening');
    const received: { data: Buffer; binary: boolean }[] = [];
    wss.on('connection', (socket) => {
      socket.once('message', () =>
        socket.send('{"type":"hello","transport":"websocket","session_id":"s"}'),
      );
      socket.on('message', (data, binary) => received.push({ data: data as Buffer, binary }));
    });
    const channel = new WebsocketChannel({
      ...base,
      url: `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/`,
      token: '',
      hello: buildDeviceHello({ transport: 'websocket', version: 1 }),
      console: new BoardConsole(),
    });
    await channel.open();
    const texts = ['{"type":"mcp","payload":{"text":"音量 50 ✓"}}', `${'é'.repeat(32_767)}x`];
    for (const text of texts) expect(channel.sendText(text)).toBe(true);
    await until(() => received.length === 3, { what: 'the hello and both texts at the backend' });
    expect(received.slice(1).map(({ data, binary }) => [data.toString('utf8'), binary])).toEqual(
      texts.map((text) => [text, false]),
    );
    // Two bytes per é: the second text is exactly 65,535 bytes, the most a frame may carry.
    expect(received[2]?.data.length).toBe(65_535);
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

describe('WebsocketChannel receive bound (65,535 bytes, as the board)', () => {
  let wss: WebSocketServer | undefined;
  afterEach(() => wss?.close());

  /** A backend that says hello, then sends `after` frames; resolves the device socket's close code. */
  async function backend(after: (string | Buffer)[], before: (string | Buffer)[] = []) {
    const server = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    wss = server;
    await once(server, 'listening');
    const closeCode = new Promise<number>((resolve) => {
      server.on('connection', (socket) => {
        socket.on('close', (code) => resolve(code));
        socket.on('error', () => {});
        socket.once('message', () => {
          for (const frame of before) socket.send(frame);
          socket.send('{"type":"hello","transport":"websocket","session_id":"s"}');
          for (const frame of after) socket.send(frame);
        });
      });
    });
    const console = new BoardConsole();
    const channel = new WebsocketChannel({
      ...base,
      url: `ws://127.0.0.1:${(server.address() as AddressInfo).port}/`,
      token: '',
      hello: buildDeviceHello({ transport: 'websocket', version: 1 }),
      console,
      helloTimeoutMs: 1000,
    });
    return { channel, console, closeCode };
  }

  const historyBytes = (console: BoardConsole) =>
    console.history.reduce((sum, line) => sum + Buffer.byteLength(line.text), 0);

  /** An `stt` frame of exactly `size` bytes. */
  const sttFrame = (size: number) => {
    const empty = '{"type":"stt","text":""}';
    return `{"type":"stt","text":"${'x'.repeat(size - empty.length)}"}`;
  };

  it('takes a frame of 65,535 bytes', async () => {
    const { channel, closeCode } = await backend([sttFrame(65_535)]);
    const frames: unknown[] = [];
    channel.on('json', (frame) => frames.push(frame));
    await channel.open();
    await until(() => frames.length > 0, { what: 'the 65,535-byte frame' });
    expect(channel.isOpen).toBe(true);
    channel.close();
    expect(await closeCode).toBe(1006);
  });

  it('ends the session on a 1 MB frame after the hello: an error line, TCP dropped, no close frame', async () => {
    const { channel, console, closeCode } = await backend(['x'.repeat(1024 * 1024)]);
    const closed = once(channel, 'closed');
    const frames: unknown[] = [];
    channel.on('json', (frame) => frames.push(frame));
    await channel.open();
    expect(await closed).toEqual(['frame too large']);
    expect(channel.isOpen).toBe(false);
    expect(frames).toEqual([]);
    // The firmware drops TCP: the backend sees no close frame (1006), not 1009.
    expect(await closeCode).toBe(1006);
    const texts = console.history.map((line) => line.text.replace(/^(\w) \(\d+\) /, '$1 '));
    expect(texts).toContain('E WS: Received a frame over 65535 bytes');
    expect(texts.at(-1)).toBe('I WS: Websocket disconnected');
    expect(historyBytes(console)).toBeLessThan(4096);
  });

  it('ends the session on a binary frame over the bound too', async () => {
    const { channel, closeCode } = await backend([Buffer.alloc(65_536)]);
    const closed = once(channel, 'closed');
    await channel.open();
    expect(await closed).toEqual(['frame too large']);
    expect(await closeCode).toBe(1006);
  });

  it('fails the open on an oversized frame before the hello', async () => {
    const { channel, console } = await backend([], ['x'.repeat(1024 * 1024)]);
    await expect(channel.open()).rejects.toMatchObject({ code: 'WS_FRAME_TOO_LARGE' });
    expect(channel.isOpen).toBe(false);
    expect(historyBytes(console)).toBeLessThan(4096);
  });
});
