/**
 * The server's HTTP front door under hostile clients: API tokens apart from device tokens,
 * Origin/Host checks (cross-site POST, DNS rebinding), 413 that the client can read, 400 for
 * malformed paths, header/request timeouts, the connection cap, and handlers that never let an
 * error reach the process.
 */
import { once } from 'node:events';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { VirtualBoard, type VirtualBoardOptions } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { toolResultText } from '@xiaozhi-mcp/protocol';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { type StartOptions, XiaozhiServer } from './server.js';

let server: XiaozhiServer | undefined;
const boards: VirtualBoard[] = [];
const sockets: Socket[] = [];

afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  for (const board of boards.splice(0)) board.powerOff();
  await server?.stop();
  server = undefined;
});

async function startServer(options: StartOptions = {}): Promise<XiaozhiServer> {
  server = await XiaozhiServer.start({ port: 0, logLevel: 'silent', ...options });
  return server;
}

async function connectBoard(
  target: XiaozhiServer,
  options: VirtualBoardOptions = {},
): Promise<VirtualBoard> {
  const board = new VirtualBoard({
    mac: 'f4:12:fa:20:00:01',
    wifi: { ssid: 'lab' },
    otaUrl: target.urls.ota,
    timing: FAST_TIMING,
    ...options,
  });
  boards.push(board);
  board.powerOn();
  await board.waitForState('idle', 5000);
  board.click();
  await target.registry.waitForReady(board.mac, 5000);
  return board;
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One request with exactly these headers (`Host` included), as a browser or a script would send it. */
function send(
  port: number,
  path: string,
  options: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: options.method ?? 'GET',
        headers: { Host: `127.0.0.1:${port}`, ...options.headers },
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          body += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

function errorCode(answer: Answer): unknown {
  return (JSON.parse(answer.body) as { error: { code: unknown } }).error.code;
}

/** A raw TCP client: what it sent is up to the test, what it received is collected. */
async function rawClient(port: number): Promise<{ socket: Socket; received: () => string }> {
  const socket = connect(port, '127.0.0.1');
  sockets.push(socket);
  let received = '';
  socket.on('data', (data: Buffer) => {
    received += data.toString('latin1');
  });
  await once(socket, 'connect');
  return { socket, received: () => received };
}

describe('API tokens', () => {
  it('requires an API token whenever one is configured, whatever auth is; device tokens do not open the API', async () => {
    for (const auth of ['token', 'off'] as const) {
      const target = await startServer({ auth, tokens: ['device-t'], apiTokens: ['api-t'] });
      const devices = (authorization?: string) =>
        send(target.port, '/api/devices', {
          headers: authorization === undefined ? {} : { Authorization: authorization },
        });
      for (const refused of [
        await devices(),
        await devices('Bearer device-t'),
        await devices('Bearer api-'),
      ]) {
        expect(refused.status).toBe(401);
        expect(errorCode(refused)).toBe('UNAUTHORIZED');
      }
      expect((await devices('Bearer api-t')).status).toBe(200);
      await target.stop();
      server = undefined;
    }
  });

  it('leaves the API open on loopback with no API token, device tokens or not', async () => {
    const target = await startServer({ tokens: ['device-t'] });
    expect((await send(target.port, '/api/devices')).status).toBe(200);
  });

  it('still accepts a configured device token at the upgrade', async () => {
    const target = await startServer({ tokens: ['device-t'], apiTokens: ['api-t'] });
    const refused = new WebSocket(target.urls.websocket, {
      headers: { 'Device-Id': 'f4:12:fa:20:00:09', Authorization: 'Bearer api-t' },
    });
    refused.on('error', () => {});
    const [, response] = (await once(refused, 'unexpected-response')) as [
      unknown,
      { statusCode: number },
    ];
    expect(response.statusCode).toBe(401);
    refused.terminate();
    const ws = new WebSocket(target.urls.websocket, {
      headers: { 'Device-Id': 'f4:12:fa:20:00:09', Authorization: 'Bearer device-t' },
    });
    await once(ws, 'open');
    ws.terminate();
  });
});

describe('Origin and Host of API requests', () => {
  it('refuses a cross-origin text/plain POST with 403 before reading its body: the tool does not run', async () => {
    const target = await startServer();
    const board = await connectBoard(target);
    const path = `/api/devices/${encodeURIComponent(board.mac)}/call`;
    const crossSite = await send(target.port, path, {
      method: 'POST',
      headers: { Origin: 'http://evil.example', 'Content-Type': 'text/plain' },
      body: JSON.stringify({ name: 'self.lamp.turn_on' }),
    });
    expect(crossSite.status).toBe(403);
    expect(errorCode(crossSite)).toBe('FORBIDDEN_ORIGIN');
    expect(toolResultText(await target.registry.callTool(board.mac, 'self.lamp.get_state'))).toBe(
      '{"power": false}',
    );

    // The answer comes before the body does: it is never read.
    const { socket, received } = await rawClient(target.port);
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${target.port}\r\nOrigin: http://evil.example\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n`,
    );
    await until(() => received().includes('\r\n\r\n'), { what: 'the answer', seen: received });
    expect(received()).toMatch(/^HTTP\/1\.1 403 /);
  });

  it('refuses a rebound DNS name in Host with 403, and accepts our own forms', async () => {
    const target = await startServer();
    const { port } = target;
    for (const host of [
      `evil.example:${port}`,
      'evil.example',
      `127.0.0.1:${port + 1}`,
      `127.0.0.1.evil.example:${port}`,
    ]) {
      const answer = await send(port, '/api/devices', { headers: { Host: host } });
      expect(answer.status, host).toBe(403);
      expect(errorCode(answer)).toBe('FORBIDDEN_ORIGIN');
    }
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`]) {
      expect((await send(port, '/api/devices', { headers: { Host: host } })).status, host).toBe(
        200,
      );
    }
    for (const origin of [`http://localhost:${port}`, `http://127.0.0.1:${port}`]) {
      expect((await send(port, '/api/devices', { headers: { Origin: origin } })).status).toBe(200);
    }
    for (const origin of ['null', `https://localhost:${port}`, `http://localhost:${port + 1}`]) {
      expect((await send(port, '/api/devices', { headers: { Origin: origin } })).status).toBe(403);
    }
    // Our own CLI and fetch send no Origin.
    expect((await fetch(`${target.urls.api}/devices`)).status).toBe(200);
  });

  it('accepts the public URL and configured origins and hosts; * accepts any', async () => {
    const target = await startServer({
      publicUrl: 'https://lab.example',
      allowedOrigins: ['http://tools.example:3000', 'proxy.example:8080'],
    });
    const { port } = target;
    for (const headers of [
      { Host: 'lab.example', Origin: 'https://lab.example' },
      { Host: `127.0.0.1:${port}`, Origin: 'http://tools.example:3000' },
      { Host: 'proxy.example:8080', Origin: 'https://proxy.example:8080' },
    ]) {
      expect((await send(port, '/api/devices', { headers })).status, headers.Origin).toBe(200);
    }
    expect(
      (await send(port, '/api/devices', { headers: { Origin: 'http://tools.example:3001' } }))
        .status,
    ).toBe(403);
    await target.stop();

    const open = await startServer({ allowedOrigins: ['*'] });
    const answer = await send(open.port, '/api/devices', {
      headers: { Host: 'evil.example', Origin: 'http://evil.example' },
    });
    expect(answer.status).toBe(200);
  });

  it('leaves the OTA endpoint alone: boards send Host without the port (docs/protocol.md §4)', async () => {
    const target = await startServer({ apiTokens: ['api-t'] });
    const answer = await send(target.port, '/xiaozhi/ota/', {
      method: 'POST',
      headers: {
        Host: '192.168.1.10',
        'Device-Id': 'f4:12:fa:20:00:02',
        'Client-Id': 'c0000000-0000-4000-8000-000000000002',
        'Content-Type': 'application/json',
      },
      body: JSON.stringify({ application: { version: '2.4.2' } }),
    });
    expect(answer.status).toBe(200);
  });
});

describe('HTTP edges', () => {
  it('answers a body over the limit with a 413 the client reads, then closes the connection', async () => {
    const target = await startServer();
    const headers = {
      'Device-Id': 'f4:12:fa:20:00:03',
      'Client-Id': 'c0000000-0000-4000-8000-000000000003',
      'Content-Type': 'application/json',
    };
    const response = await fetch(target.urls.ota, {
      method: 'POST',
      headers,
      body: 'x'.repeat(300 * 1024),
    });
    expect(response.status).toBe(413);
    expect(response.headers.get('connection')).toBe('close');
    expect(await response.json()).toEqual({
      error: { code: 'BODY_TOO_LARGE', message: expect.stringContaining('body over') },
    });

    // A client still sending a long chunked body sees the answer and a clean close, no reset.
    const { socket, received } = await rawClient(target.port);
    const errors: string[] = [];
    socket.on('error', (error: NodeJS.ErrnoException) => errors.push(error.code ?? error.message));
    socket.write(
      `POST /xiaozhi/ota/ HTTP/1.1\r\nHost: 127.0.0.1:${target.port}\r\nDevice-Id: f4:12:fa:20:00:03\r\nTransfer-Encoding: chunked\r\n\r\n`,
    );
    const chunk = 'y'.repeat(64 * 1024);
    for (let i = 0; i < 64; i++) socket.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`);
    socket.write('0\r\n\r\n');
    await once(socket, 'close');
    expect(received()).toMatch(/^HTTP\/1\.1 413 /);
    expect(received()).toMatch(/\r\nConnection: close\r\n/i);
    expect(errors).toEqual([]);

    // The server carries on.
    expect((await fetch(`${target.urls.api}/devices`)).status).toBe(200);
  });

  it('answers a malformed %-escape in the path with 400, not 500', async () => {
    const target = await startServer();
    for (const path of [
      '/xiaozhi/firmware/%E0%A4%A',
      '/xiaozhi/firmware/a%zz.bin',
      '/api/devices/%zz',
      '/api/devices/%E0%A4%A/tools',
    ]) {
      const answer = await send(target.port, path);
      expect(answer.status, path).toBe(400);
      expect(errorCode(answer)).toBe('BAD_REQUEST');
    }
  });

  it('closes connections that never finish their request headers (slow loris)', async () => {
    const target = await startServer({ headersTimeoutMs: 300, requestTimeoutMs: 1000 });
    const clients = await Promise.all([1, 2, 3, 4, 5].map(() => rawClient(target.port)));
    for (const { socket } of clients) socket.write('GET /api/devices HTTP/1.1\r\nHost: 127');
    // And one whose headers are done but whose body never is: the request timeout.
    const body = await rawClient(target.port);
    body.socket.write(
      `POST /xiaozhi/ota/ HTTP/1.1\r\nHost: 127.0.0.1\r\nDevice-Id: f4:12:fa:20:00:05\r\nContent-Length: 100\r\n\r\n{`,
    );
    await Promise.all([...clients, body].map(({ socket }) => once(socket, 'close')));
    // The server carries on.
    expect((await fetch(`${target.urls.api}/devices`)).status).toBe(200);
  });

  it('answers an API call that takes longer than the request timeout: it bounds receiving the request only', async () => {
    const target = await startServer({ headersTimeoutMs: 200, requestTimeoutMs: 200 });
    const board = await connectBoard(target, {
      faults: { dropReply: (payload) => payload.includes('"text":"true"') },
    });
    const answer = await send(target.port, `/api/devices/${encodeURIComponent(board.mac)}/call`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ name: 'self.lamp.turn_on', timeoutMs: 600 }),
    });
    expect(answer.status).toBe(504);
  });

  it('leaves WebSocket sessions alone: the timeouts bound requests, not upgraded connections', async () => {
    const target = await startServer({ auth: 'off', headersTimeoutMs: 100, requestTimeoutMs: 100 });
    const ws = new WebSocket(target.urls.websocket, {
      headers: { 'Device-Id': 'f4:12:fa:20:00:06', 'Client-Id': 'c' },
    });
    await once(ws, 'open');
    ws.send(
      '{"type":"hello","version":1,"features":{"mcp":true},"transport":"websocket","audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}',
    );
    await once(ws, 'message');
    // A plain request left unfinished after the session opened: once Node's connection timer has
    // cut it, the timer has also passed over the older, idle session.
    const stalled = await rawClient(target.port);
    stalled.socket.write(`GET /api/devices HTTP/1.1\r\nHost: 127.0.0.1:${target.port}\r\n`);
    await until(() => stalled.socket.closed, {
      what: 'the timeout to cut the unfinished request',
      seen: stalled.received,
    });
    expect(stalled.received()).toMatch(/^HTTP\/1\.1 408 /);
    expect(ws.readyState).toBe(WebSocket.OPEN);
    ws.terminate();
  });

  it('refuses connections over maxConnections', async () => {
    const target = await startServer({ maxConnections: 2 });
    const held = await Promise.all([rawClient(target.port), rawClient(target.port)]);
    // Answered, so counted; kept alive, so held.
    for (const { socket } of held)
      socket.write(`GET /api/devices HTTP/1.1\r\nHost: 127.0.0.1:${target.port}\r\n\r\n`);
    await until(() => held.every(({ received }) => received().startsWith('HTTP/1.1 200')), {
      what: 'the held connections answered',
    });
    await expect(send(target.port, '/api/devices')).rejects.toThrow();
    for (const { socket } of held) expect(socket.destroyed).toBe(false);
    for (const { socket } of held) socket.destroy();
    // The server counts them gone once it sees them close.
    const answer = await until(() => send(target.port, '/api/devices'), {
      what: 'a connection accepted again',
      intervalMs: 20,
    });
    expect(answer).toMatchObject({ status: 200 });
  });
});

describe('guarded handlers', () => {
  it('survives clients that reset right after an upgrade request, on any path', async () => {
    const target = await startServer();
    for (const path of ['/nowhere', '/xiaozhi/v1/']) {
      for (let i = 0; i < 3; i++) {
        const { socket } = await rawClient(target.port);
        await new Promise<void>((resolve) =>
          socket.write(
            `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nDevice-Id: f4:12:fa:20:00:04\r\n\r\n`,
            () => resolve(),
          ),
        );
        socket.resetAndDestroy();
      }
    }
    // No pause: the resets reached the server's sockets before this request does, and it
    // answers only after handling what came first.
    expect((await fetch(`${target.urls.api}/devices`)).status).toBe(200);
  });

  it('answers 500 whatever a handler throws, and cuts a response it cannot finish', async () => {
    const target = await startServer();
    const { firmware } = target;
    firmware.get = () => {
      throw undefined;
    };
    const failed = await send(target.port, '/xiaozhi/firmware/a.bin');
    expect(failed.status).toBe(500);
    expect(errorCode(failed)).toBe('INTERNAL');

    firmware.get = () =>
      ({
        size: 10,
        get bytes(): Uint8Array {
          throw new Error('the image went away');
        },
      }) as ReturnType<typeof firmware.get>;
    await expect(send(target.port, '/xiaozhi/firmware/a.bin')).rejects.toThrow();
    expect((await fetch(`${target.urls.api}/devices`)).status).toBe(200);
  });
});
