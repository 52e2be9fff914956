/**
 * The gateway under hostile clients: a frame nested 5,000 deep does not stop the
 * server or another board's session, and a second client using a known board's Device-Id cannot
 * take its session (and so cannot receive its tool calls), whatever its token.
 */
import { once } from 'node:events';
import { connect } from 'node:net';
import { Writable } from 'node:stream';
import { VirtualBoard } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { toolResultText } from '@xiaozhi-mcp/protocol';
import { until } from '@xiaozhi-mcp/test-kit';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { type StartOptions, XiaozhiServer } from './server.js';

const HELLO =
  '{"type":"hello","version":1,"features":{"mcp":true},"transport":"websocket","audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}';
const INTRUDER = '00000000-0000-4000-8000-00000000beef';

let server: XiaozhiServer | undefined;
const boards: VirtualBoard[] = [];
const sockets: WebSocket[] = [];
let macCounter = 0;

afterEach(async () => {
  for (const ws of sockets.splice(0)) ws.terminate();
  for (const board of boards.splice(0)) board.powerOff();
  await server?.stop();
  server = undefined;
});

/** A server whose log lines are kept (the refusals must be logged). */
async function start(
  options: StartOptions = {},
): Promise<{ target: XiaozhiServer; log: string[] }> {
  const log: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      log.push(chunk.toString());
      done();
    },
  });
  server = await XiaozhiServer.start({
    port: 0,
    logger: pino({ level: 'info' }, stream),
    ...options,
  });
  return { target: server, log };
}

async function readyBoard(target: XiaozhiServer): Promise<VirtualBoard> {
  macCounter++;
  const board = new VirtualBoard({
    mac: `f4:12:fa:30:00:${macCounter.toString(16).padStart(2, '0')}`,
    wifi: { ssid: 'lab' },
    otaUrl: target.urls.ota,
    timing: FAST_TIMING,
  });
  boards.push(board);
  board.powerOn();
  await board.waitForState('idle', 5000);
  board.click();
  await target.registry.waitForReady(board.mac, 5000);
  return board;
}

/** Opens a raw WebSocket and says hello; resolves with it and what the server sent. */
async function rawDevice(
  target: XiaozhiServer,
  headers: Record<string, string>,
): Promise<{ ws: WebSocket; received: string[] }> {
  const ws = new WebSocket(target.urls.websocket, { headers });
  sockets.push(ws);
  ws.on('error', () => {});
  const received: string[] = [];
  ws.on('message', (data: Buffer) => received.push(data.toString()));
  await once(ws, 'open');
  ws.send(HELLO);
  return { ws, received };
}

/** The status of a refused upgrade, or 101 when it was accepted. */
function upgradeStatus(target: XiaozhiServer, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(target.urls.websocket, { headers });
    sockets.push(ws);
    ws.on('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0);
      res.resume();
    });
    ws.on('open', () => resolve(101));
    ws.on('error', (error) => reject(error));
  });
}

const deep = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;

async function volumeCallReachesBoard(target: XiaozhiServer, board: VirtualBoard, volume: number) {
  const result = await target.registry.callTool(board.mac, 'self.audio_speaker.set_volume', {
    volume,
  });
  expect(toolResultText(result)).toBe('true');
  expect(board.hardware.volume).toBe(volume);
}

describe('hostile frames', () => {
  it('a frame nested 5,000 deep stops neither the server nor another board', async () => {
    const { target } = await start({ auth: 'off', callTimeoutMs: 500 });
    const board = await readyBoard(target);
    const intruder = 'f4:12:fa:3f:00:01';
    const { ws, received } = await rawDevice(target, {
      'Device-Id': intruder,
      'Client-Id': INTRUDER,
    });
    await until(() => received.length >= 2, { what: 'the hello answer and the first MCP request' });
    const sessionId = JSON.parse(received[0] ?? '{}').session_id as string;
    const failed = once(target.registry, 'session-failed');
    // As a payload (in another member order than the firmware's), as a reply id, as a transport
    // message; `initialize` is left unanswered, so its timeout names the stray reply's id.
    ws.send(`{"type":"mcp","session_id":"${sessionId}","payload":${deep(5000)}}`);
    ws.send(
      `{"session_id":"${sessionId}","type":"mcp","payload":{"jsonrpc":"2.0","id":${deep(5000)},"result":{}}}`,
    );
    ws.send(`{"session_id":"${sessionId}","type":"listen","state":${deep(5000)}}`);
    const [record] = (await failed) as [{ deviceId: string; lastError: string }];
    expect(record.deviceId).toBe(intruder);
    expect(record.lastError).toMatch(/^initialize failed: initialize to f4:12:fa:3f:00:01/);

    await volumeCallReachesBoard(target, board, 33);
    const api = await fetch(`${target.urls.api}/devices`);
    expect(api.status).toBe(200);
  });

  it('a first frame nested 5,000 deep is a refused hello, nothing more', async () => {
    const { target } = await start({ auth: 'off' });
    const board = await readyBoard(target);
    const ws = new WebSocket(target.urls.websocket, {
      headers: { 'Device-Id': 'f4:12:fa:3f:00:02', 'Client-Id': INTRUDER },
    });
    sockets.push(ws);
    await once(ws, 'open');
    ws.send(`{"type":"hello","features":${deep(5000)}}`);
    const [code] = (await once(ws, 'close')) as [number];
    expect(code).toBe(1002);
    await volumeCallReachesBoard(target, board, 44);
  });

  it('a throwing registry listener neither crashes the server nor stops the session', async () => {
    const { target, log } = await start({ auth: 'off' });
    target.registry.on('connected', () => {
      throw new Error('listener bug');
    });
    const board = await readyBoard(target);
    await volumeCallReachesBoard(target, board, 21);
    expect(log.join('')).toContain('listener bug');
  });
});

describe('boards of one build', () => {
  it('share one parsed hello, and each session keeps it as the board sent it', async () => {
    const { target } = await start({ auth: 'off' });
    const one = await readyBoard(target);
    const two = await readyBoard(target);
    const a = target.registry.session(one.mac).info;
    const b = target.registry.session(two.mac).info;
    expect(b.helloText).toBe(a.helloText);
    expect(b.hello).toBe(a.hello);
    expect(JSON.parse(a.helloText)).toMatchObject({ type: 'hello', features: { mcp: true } });
    expect(a.hello.features?.mcp).toBe(true);
    // A board that says something else gets its own.
    const { ws } = await rawDevice(target, {
      'Device-Id': 'f4:12:fa:30:01:01',
      'Client-Id': INTRUDER,
      Authorization: 'Bearer x',
    });
    await until(() => target.registry.get('f4:12:fa:30:01:01')?.session !== undefined);
    const other = target.registry.session('f4:12:fa:30:01:01').info;
    expect(a.helloText).not.toBe(HELLO);
    expect(other.helloText).toBe(HELLO);
    expect(other.hello).not.toBe(a.hello);
    ws.terminate();
  });
});

describe('a second client using a known board’s Device-Id', () => {
  /** The board's session stays, and only the board receives the calls. */
  async function boardKeepsItsSession(
    target: XiaozhiServer,
    board: VirtualBoard,
    sessionId: string,
  ) {
    // No pause: the refusal was already answered, and the call's round trip through the server
    // comes after anything it still had queued, so the session is checked after the call.
    await volumeCallReachesBoard(target, board, 55);
    const record = target.registry.get(board.mac);
    expect(record?.session?.info.sessionId).toBe(sessionId);
    expect(record?.session?.info.clientId).toBe(board.uuid);
    expect(record?.clientId).toBe(board.uuid);
  }

  it('gets 403 at the OTA check, without the token, and it is logged', async () => {
    const { target, log } = await start();
    const board = await readyBoard(target);
    const sessionId = target.registry.get(board.mac)?.session?.info.sessionId ?? '';
    const response = await fetch(target.urls.ota, {
      method: 'POST',
      headers: {
        'Device-Id': board.mac,
        'Client-Id': INTRUDER,
        'Content-Type': 'application/json',
      },
      body: JSON.stringify({ application: { version: '2.4.2' } }),
    });
    expect(response.status).toBe(403);
    const text = await response.text();
    expect(text).not.toContain(target.tokenFor(board.mac) ?? 'no token');
    expect(JSON.parse(text).error).toContain(`xiaozhi-mcp devices forget ${board.mac}`);
    expect(log.join('')).toMatch(/OTA check refused: a known Device-Id with another Client-Id/);
    expect(target.registry.otaChecks().map((c) => c.clientId)).toEqual([board.uuid]);
    await boardKeepsItsSession(target, board, sessionId);
  });

  it.each([
    ['the board’s own OTA token', {}, (t: XiaozhiServer, b: VirtualBoard) => t.tokenFor(b.mac)],
    ['a static device token (--token)', { tokens: ['lab-token'] }, () => 'lab-token'],
    ['no token, with auth off', { auth: 'off' as const }, () => undefined],
  ])('cannot open a session with %s: 403, logged', async (_, options, token) => {
    const { target, log } = await start(options);
    const board = await readyBoard(target);
    const sessionId = target.registry.get(board.mac)?.session?.info.sessionId ?? '';
    const bearer = token(target, board);
    const status = await upgradeStatus(target, {
      'Device-Id': board.mac,
      'Client-Id': INTRUDER,
      ...(bearer === undefined ? {} : { Authorization: `Bearer ${bearer}` }),
    });
    expect(status).toBe(403);
    expect(log.join('')).toMatch(/WebSocket upgrade refused: a known Device-Id/);
    await boardKeepsItsSession(target, board, sessionId);
    // The board itself reconnects as before.
    expect(
      await upgradeStatus(target, {
        'Device-Id': board.mac,
        'Client-Id': board.uuid,
        ...(bearer === undefined ? {} : { Authorization: `Bearer ${bearer}` }),
      }),
    ).toBe(101);
  });

  it('is refused at its hello when it raced the first client of an unknown Device-Id', async () => {
    const { target, log } = await start({ auth: 'off' });
    const mac = 'f4:12:fa:3f:00:03';
    const first = new WebSocket(target.urls.websocket, {
      headers: { 'Device-Id': mac, 'Client-Id': '00000000-0000-4000-8000-000000000001' },
    });
    const second = new WebSocket(target.urls.websocket, {
      headers: { 'Device-Id': mac, 'Client-Id': INTRUDER },
    });
    sockets.push(first, second);
    await Promise.all([once(first, 'open'), once(second, 'open')]);
    first.send(HELLO);
    await once(first, 'message');
    second.send(HELLO);
    const [code] = (await once(second, 'close')) as [number];
    expect(code).toBe(1008);
    expect(target.registry.get(mac)?.clientId).toBe('00000000-0000-4000-8000-000000000001');
    expect(target.registry.get(mac)?.session?.closed).toBe(false);
    expect(log.join('')).toMatch(/session refused: a known Device-Id/);
  });

  it('is accepted once the operator forgets the device (its session closed, a new token)', async () => {
    const { target } = await start();
    const board = await readyBoard(target);
    const oldToken = target.tokenFor(board.mac);
    const session = target.registry.get(board.mac)?.session;
    const forgotten = await fetch(`${target.urls.api}/devices/${encodeURIComponent(board.mac)}`, {
      method: 'DELETE',
    });
    expect(forgotten.status).toBe(200);
    expect(await forgotten.json()).toEqual({ forgotten: board.mac });
    expect(session?.closed).toBe(true);
    expect(target.registry.get(board.mac)).toBeUndefined();
    expect(target.tokenFor(board.mac)).toBeUndefined();
    // The old token opens nothing now.
    expect(
      await upgradeStatus(target, {
        'Device-Id': board.mac,
        'Client-Id': board.uuid,
        Authorization: `Bearer ${oldToken}`,
      }),
    ).toBe(401);
    const again = await fetch(`${target.urls.api}/devices/${encodeURIComponent(board.mac)}`, {
      method: 'DELETE',
    });
    expect(again.status).toBe(404);
    // A re-flashed board (a new uuid) is a new device.
    const check = await fetch(target.urls.ota, {
      method: 'POST',
      headers: {
        'Device-Id': board.mac,
        'Client-Id': INTRUDER,
        'Content-Type': 'application/json',
      },
      body: JSON.stringify({ application: { version: '2.4.2' } }),
    });
    expect(check.status).toBe(200);
    const token = ((await check.json()) as { websocket: { token: string } }).websocket.token;
    expect(token).not.toBe(oldToken);
    expect(target.registry.get(board.mac)?.clientId).toBe(INTRUDER);
  });
});

describe('refused upgrades', () => {
  /** An upgrade request that keeps sending a body: the refusal must still close its socket. */
  async function refusedWhileSending(target: XiaozhiServer, path: string, headers: string) {
    // Half-open allowed: our FIN does not make this client end its side.
    const socket = connect({ port: target.port, host: '127.0.0.1', allowHalfOpen: true });
    await once(socket, 'connect');
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
        `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n${headers}` +
        'Content-Length: 300000\r\n\r\n',
    );
    let answer = '';
    socket.on('data', (chunk: Buffer) => {
      answer += chunk.toString();
    });
    socket.on('error', () => {});
    // Keeps sending, never ends its side: only the server can close this socket.
    const feeder = setInterval(() => {
      if (socket.writable) socket.write('x'.repeat(1000), () => {});
    }, 5);
    // Not events.once: the EPIPE of a write into the closed socket would reject it.
    await new Promise((resolve) => socket.once('close', resolve));
    clearInterval(feeder);
    return answer;
  }

  it('closes the socket of a refused upgrade that keeps sending, after answering it', async () => {
    const { target } = await start();
    expect(await refusedWhileSending(target, '/api/devices', '')).toMatch(/^HTTP\/1\.1 404 /);
    expect(await refusedWhileSending(target, '/xiaozhi/v1/', 'Device-Id: not-a-mac\r\n')).toMatch(
      /^HTTP\/1\.1 400 [\s\S]*Device-Id must be the board MAC/,
    );
  });

  it('stop() ends refused upgrades still lingering', async () => {
    const { target } = await start();
    // Half-open and silent: the client never ends its side, so only the server can let go.
    const socket = connect({ port: target.port, host: '127.0.0.1', allowHalfOpen: true });
    await once(socket, 'connect');
    socket.on('error', () => {});
    socket.write(
      'GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n',
    );
    await once(socket, 'data');
    await target.stop();
    server = undefined;
    socket.destroy();
  });
});
