/**
 * A DeviceSession is guarded: no frame the device sends and no listener that throws
 * escapes the socket's handlers or breaks the request in flight; a timeout outside Node's timer
 * range and parameters that cannot be serialised are refused before anything is sent.
 */
import { EventEmitter } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import type { WebSocket } from 'ws';
import { DeviceSession } from './device-session.js';
import { ServerError } from './errors.js';

/** A socket the test plays the device on: `sent` holds what the session wrote. */
class FakeSocket extends EventEmitter {
  readonly OPEN = 1;
  readyState = 1;
  readonly sent: string[] = [];
  send(text: string, callback?: (error?: Error) => void): void {
    this.sent.push(text);
    callback?.();
  }
  terminate(): void {
    this.emit('close', 1006);
  }
  ping(): void {
    queueMicrotask(() => this.emit('pong'));
  }
  /** A text frame from the device. */
  device(text: string): void {
    this.emit('message', Buffer.from(text), false);
  }
}

const sessions: DeviceSession[] = [];
afterEach(() => {
  for (const session of sessions.splice(0)) session.close();
});

function open(onError?: (error: unknown, where: string) => void, callTimeoutMs = 2000) {
  const socket = new FakeSocket();
  const session = new DeviceSession(
    socket as unknown as WebSocket,
    {
      deviceId: 'f4:12:fa:60:00:01',
      clientId: 'c',
      sessionId: 'sid',
      protocolVersion: 1,
      hello: { type: 'hello', version: 1, transport: 'websocket' } as never,
      helloText: '{}',
      remoteAddress: undefined,
    },
    { callTimeoutMs, ...(onError === undefined ? {} : { onError }) },
  );
  sessions.push(session);
  return { socket, session };
}

const deep = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
const reply = (id: number, result: string) =>
  `{"session_id":"sid","type":"mcp","payload":{"jsonrpc":"2.0","id":${id},"result":${result}}}`;

describe('a DeviceSession over a WebSocket', () => {
  it('measures a ping round trip', async () => {
    const { session } = open();
    expect(session.canPing).toBe(true);
    const ms = await session.ping(1000);
    expect(ms).toBeGreaterThanOrEqual(0);
  });

  it('fails a request at once when the socket is no longer open', async () => {
    const { socket, session } = open();
    socket.readyState = 2;
    const error = await session.request('tools/list', {}).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ServerError);
    expect((error as ServerError).code).toBe('DEVICE_DISCONNECTED');
    expect((error as Error).message).toMatch(/send to f4:12:fa:60:00:01 failed: .*not open/);
    expect(socket.sent).toEqual([]);
    expect(session.pending).toBe(0);
  });

  it('settles replies that come back out of order, with several requests in flight', async () => {
    const { socket, session } = open();
    const calls = [1, 2, 3].map((n) => session.request('tools/call', { name: `t${n}` }));
    expect(session.pending).toBe(3);
    for (const id of [2, 3, 1]) socket.device(reply(id, `{"n":${id}}`));
    await expect(Promise.all(calls)).resolves.toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
    expect(session.pending).toBe(0);
  });
});

describe('a guarded DeviceSession', () => {
  it('takes frames nested 5,000 deep without throwing, and the request in flight still settles', async () => {
    const errors: string[] = [];
    const { socket, session } = open((_, where) => errors.push(where));
    const call = session.request('tools/call', { name: 'x' });
    for (const frame of [
      `{"type":"mcp","session_id":"sid","payload":${deep(5000)}}`,
      `{"session_id":"sid","type":"mcp","payload":{"jsonrpc":"2.0","id":${deep(5000)},"result":{}}}`,
      `{"session_id":"sid","type":"listen","state":${deep(5000)}}`,
      `${deep(5000)}`,
    ])
      expect(() => socket.device(frame)).not.toThrow();
    socket.device(reply(1, '{"ok":true}'));
    await expect(call).resolves.toEqual({ ok: true });
  });

  it('a reply whose id is nested 5,000 deep does not break the timeout that follows', async () => {
    const { socket, session } = open();
    const call = session.request('tools/call', { name: 'x' }, { timeoutMs: 50 });
    socket.device(
      `{"session_id":"sid","type":"mcp","payload":{"jsonrpc":"2.0","id":${deep(5000)},"result":{}}}`,
    );
    const error = await call.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ServerError);
    expect((error as ServerError).code).toBe('REQUEST_TIMEOUT');
  });

  it('a listener that throws is reported, and neither the session nor other listeners stop', async () => {
    const errors: string[] = [];
    const { socket, session } = open((error, where) =>
      errors.push(`${where}: ${(error as Error).message}`),
    );
    const seen: string[] = [];
    for (const event of ['frame', 'message', 'stray'] as const) {
      session.on(event, () => {
        throw new Error(`${event} listener bug`);
      });
      session.on(event, () => seen.push(event));
    }
    const call = session.request('tools/call', { name: 'x' });
    expect(() =>
      socket.device('{"session_id":"sid","type":"listen","state":"start"}'),
    ).not.toThrow();
    expect(() => socket.device(reply(99, '{}'))).not.toThrow();
    socket.device(reply(1, '"done"'));
    await expect(call).resolves.toBe('done');
    expect(seen).toEqual(['frame', 'frame', 'message', 'frame', 'stray', 'frame']);
    expect(errors).toContain("a 'message' listener threw: message listener bug");
    expect(errors).toContain("a 'stray' listener threw: stray listener bug");
  });

  it.each([
    ['1e10', 1e10],
    ['NaN', Number.NaN],
    ['Infinity', Number.POSITIVE_INFINITY],
    ['0', 0],
    ['-5', -5],
  ])('refuses timeoutMs %s before sending anything', async (_, timeoutMs) => {
    const { socket, session } = open();
    await expect(session.request('tools/call', {}, { timeoutMs })).rejects.toThrow(RangeError);
    expect(session.pending).toBe(0);
    expect(socket.sent).toEqual([]);
  });

  it('one call after another on the call timeout: each answered call settles, an unanswered one times out, and the next goes on', async () => {
    const { socket, session } = open(undefined, 40);
    const answer = () => {
      const id = JSON.parse(socket.sent.at(-1) as string).payload.id as number;
      socket.device(reply(id, '{"content":[{"type":"text","text":"ok"}],"isError":false}'));
    };
    for (let i = 0; i < 3; i++) {
      const call = session.callTool('self.get_device_status');
      answer();
      await expect(call).resolves.toMatchObject({ isError: false });
    }
    const silent = await session.callTool('self.get_device_status').catch((e: unknown) => e);
    expect((silent as ServerError).code).toBe('REQUEST_TIMEOUT');
    expect((silent as ServerError).message).toMatch(/got no reply within 40 ms/);
    // A call with a timeout of its own beside one on the call timeout: each keeps its own.
    const first = session.callTool('self.get_device_status');
    const own = session.callTool('self.get_device_status', {}, { timeoutMs: 20 });
    const ownError = await own.catch((e: unknown) => e);
    expect((ownError as ServerError).message).toMatch(/within 20 ms/);
    const firstError = await first.catch((e: unknown) => e);
    expect((firstError as ServerError).message).toMatch(/within 40 ms/);
    const after = session.callTool('self.get_device_status');
    answer();
    await expect(after).resolves.toMatchObject({ isError: false });
    expect(session.pending).toBe(0);
    expect(session.stats.timeouts).toBe(3);
  });

  it('refuses parameters that cannot be serialised, with nothing left pending', async () => {
    const { socket, session } = open();
    let params: unknown = 1;
    for (let i = 0; i < 20_000; i++) params = [params];
    await expect(session.request('tools/call', params)).rejects.toThrow(TypeError);
    expect(session.pending).toBe(0);
    expect(socket.sent).toEqual([]);
  });
});
