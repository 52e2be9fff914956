/**
 * The WebSocket gateway: authenticates the upgrade (401 before it, when auth is on), reads
 * Device-Id, Client-Id and Protocol-Version, waits for the device's hello, answers with a
 * server hello that always carries `transport` and a session id, and only then hands the
 * connection to the registry, which starts MCP.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { buildServerHello, type DeviceHello, parseDeviceHello } from '@xiaozhi-mcp/protocol';
import type { Logger } from 'pino';
import { type WebSocket, WebSocketServer } from 'ws';
import type { ServerConfig } from './config.js';
import { DeviceSession } from './device-session.js';
import type { DeviceRegistry } from './registry.js';

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

function reject(socket: Duplex, status: number, reason: string): void {
  const body = JSON.stringify({ error: reason });
  socket.end(
    `HTTP/1.1 ${status} ${status === 401 ? 'Unauthorized' : status === 404 ? 'Not Found' : 'Bad Request'}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

/** The token of an `Authorization` header: `Bearer <t>`, or the raw value (the firmware sends it as given when it has a space). */
export function tokenOf(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  return header.startsWith('Bearer ') ? header.slice('Bearer '.length) : header;
}

export class Gateway {
  readonly #wss: WebSocketServer;
  readonly #alive = new WeakMap<WebSocket, number>();
  #pinger: NodeJS.Timeout | undefined;

  constructor(
    readonly config: ServerConfig,
    readonly registry: DeviceRegistry,
    readonly isTokenValid: (deviceId: string, token: string | undefined) => boolean,
    readonly logger: Logger,
  ) {
    this.#wss = new WebSocketServer({
      noServer: true,
      maxPayload: config.maxFrameBytes,
      perMessageDeflate: false,
    });
    if (config.pingIntervalMs > 0) {
      this.#pinger = setInterval(() => this.#pingAll(), config.pingIntervalMs);
      this.#pinger.unref();
    }
  }

  get connections(): number {
    return this.#wss.clients.size;
  }

  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const deviceId = String(req.headers['device-id'] ?? '').toLowerCase();
    const clientId = String(req.headers['client-id'] ?? '');
    const version = Number(req.headers['protocol-version'] ?? 1);
    if (!MAC.test(deviceId)) {
      reject(socket, 400, 'Device-Id must be the board MAC, aa:bb:cc:dd:ee:ff');
      return;
    }
    if (
      this.config.auth === 'token' &&
      !this.isTokenValid(deviceId, tokenOf(req.headers.authorization))
    ) {
      this.logger.warn(
        { deviceId, remote: req.socket.remoteAddress },
        'WebSocket upgrade refused: bad or missing token',
      );
      reject(socket, 401, 'missing or wrong token: use the one from the OTA reply');
      return;
    }
    this.#wss.handleUpgrade(req, socket, head, (ws) =>
      this.#onConnection(ws, req, deviceId, clientId, [1, 2, 3].includes(version) ? version : 1),
    );
  }

  #onConnection(
    ws: WebSocket,
    req: IncomingMessage,
    deviceId: string,
    clientId: string,
    protocolVersion: number,
  ): void {
    this.#alive.set(ws, 0);
    ws.on('pong', () => this.#alive.set(ws, 0));
    ws.on('error', () => {});
    const refuse = (text: string | undefined, reason: string) =>
      this.registry.refuseHello({
        at: new Date().toISOString(),
        deviceId,
        clientId,
        protocolVersion,
        text,
        reason,
      });
    const timer = setTimeout(() => {
      this.logger.warn({ deviceId }, 'no hello from the device in time; closing');
      ws.terminate();
      refuse(undefined, `no hello within ${this.config.helloTimeoutMs} ms`);
    }, this.config.helloTimeoutMs);
    ws.once('message', (data, isBinary) => {
      clearTimeout(timer);
      let hello: DeviceHello;
      const text = isBinary ? undefined : data.toString();
      try {
        if (text === undefined) throw new Error('the first frame is binary, not a hello');
        hello = parseDeviceHello(text);
      } catch (error) {
        this.logger.warn({ deviceId, err: error }, 'bad device hello; closing');
        ws.close(1002, 'expected a hello');
        refuse(text, error instanceof Error ? error.message : String(error));
        return;
      }
      const sessionId = randomUUID();
      // The server hello goes out before any MCP; buildServerHello cannot omit transport.
      ws.send(
        JSON.stringify(
          buildServerHello({
            transport: 'websocket',
            sessionId,
            audioParams: { sample_rate: 24000, frame_duration: 60 },
          }),
        ),
      );
      const session = new DeviceSession(
        ws,
        {
          deviceId,
          clientId,
          sessionId,
          protocolVersion,
          hello,
          helloText: text,
          remoteAddress: req.socket.remoteAddress,
        },
        { callTimeoutMs: this.config.callTimeoutMs },
      );
      session.on('closed', (reason) =>
        this.logger.info({ deviceId, sessionId, reason }, 'device disconnected'),
      );
      this.logger.info({ deviceId, sessionId, protocolVersion }, 'device connected');
      if (hello.features?.mcp === false)
        this.logger.warn({ deviceId }, 'device hello says it has no MCP');
      this.registry.attach(session);
    });
  }

  // Relaxed keep-alive: a device is dropped only after missing two pings in a row.
  #pingAll(): void {
    for (const ws of this.#wss.clients) {
      const missed = this.#alive.get(ws) ?? 0;
      if (missed >= 2) {
        ws.terminate();
        continue;
      }
      this.#alive.set(ws, missed + 1);
      ws.ping();
    }
  }

  close(): void {
    clearInterval(this.#pinger);
    for (const ws of this.#wss.clients) ws.terminate();
    this.#wss.close();
  }
}
