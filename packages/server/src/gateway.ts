/**
 * The WebSocket gateway: authenticates the upgrade (401 before it, when auth is on), reads
 * Device-Id, Client-Id and Protocol-Version, waits for the device's hello, answers with a
 * server hello that always carries `transport` and a session id, and only then hands the
 * connection to the registry, which starts MCP.
 *
 * A known Device-Id is taken only with the Client-Id it is pinned to (whatever the token): a
 * second client using a board's Device-Id is refused with 403 and logged, and the board's
 * session is untouched. Nothing a client sends can throw out of the handlers.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { buildServerHello, type DeviceHello, parseDeviceHello } from '@xiaozhi-mcp/protocol';
import type { Logger } from 'pino';
import { type RawData, type WebSocket, WebSocketServer } from 'ws';
import type { ServerConfig } from './config.js';
import { clip } from './device-bounds.js';
import { DeviceSession } from './device-session.js';
import { deepFreeze } from './frozen.js';
import type { DeviceRegistry } from './registry.js';

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;
/** The firmware sends a UUID; anything printable up to 64 bytes is taken (and pinned). */
const CLIENT_ID = /^[\x21-\x7e]{0,64}$/;
const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  500: 'Internal Server Error',
};

/**
 * How long a refused upgrade may keep sending before its socket is closed. Its request body
 * is drained meanwhile, so the client reads our answer instead of a reset, and a client that
 * never stops sending cannot hold the socket (or `stop()`).
 */
const REFUSAL_LINGER_MS = 1000;

/** What a client using a known board's Device-Id is told (the OTA endpoint says the same). */
export function pinnedMessage(deviceId: string): string {
  return `device ${deviceId} is known with another Client-Id: if this board was re-flashed (a new uuid), release it with \`xiaozhi-mcp devices forget ${deviceId}\` (DELETE /api/devices/${deviceId})`;
}

/** The token of an `Authorization` header: `Bearer <t>`, or the raw value (the firmware sends it as given when it has a space). */
export function tokenOf(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  return header.startsWith('Bearer ') ? header.slice('Bearer '.length) : header;
}

/** What an error on a session's socket does here: nothing (its session hears of the close). */
const ignoreError = (): void => {};

export class Gateway {
  readonly #wss: WebSocketServer;
  readonly #alive = new WeakMap<WebSocket, number>();
  #pinger: NodeJS.Timeout | undefined;
  /** Refused upgrades still lingering; `close()` ends them. */
  readonly #refused = new Set<Duplex>();
  #lastHello: { readonly hello: DeviceHello; readonly text: string } | undefined;
  /** Every session's 'closed' listener (the session is `this`). */
  readonly #onSessionClosed: (this: DeviceSession, reason: string) => void;
  /** Every session's error reporter (the session is `this`). */
  readonly #onSessionError: (this: DeviceSession, error: unknown, where: string) => void;
  /** Every connection's 'pong' listener (the socket is `this`). */
  readonly #onPong: (this: WebSocket) => void;

  constructor(
    readonly config: ServerConfig,
    readonly registry: DeviceRegistry,
    readonly isTokenValid: (deviceId: string, token: string | undefined) => boolean,
    readonly logger: Logger,
  ) {
    const alive = this.#alive;
    this.#onPong = function (this: WebSocket) {
      alive.set(this, 0);
    };
    this.#onSessionError = function (this: DeviceSession, error: unknown, where: string) {
      const { deviceId, sessionId } = this.info;
      logger.error({ deviceId, sessionId, err: error }, `session: ${where}`);
    };
    this.#onSessionClosed = function (this: DeviceSession, reason: string) {
      if (!logger.isLevelEnabled('info')) return;
      const { deviceId, sessionId } = this.info;
      logger.info({ deviceId, sessionId, reason }, 'device disconnected');
    };
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
    try {
      this.#upgrade(req, socket, head);
    } catch (error) {
      this.logger.error({ err: error }, 'WebSocket upgrade failed');
      socket.destroy();
    }
  }

  #upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const deviceId = String(req.headers['device-id'] ?? '').toLowerCase();
    const clientId = String(req.headers['client-id'] ?? '');
    const version = Number(req.headers['protocol-version'] ?? 1);
    if (!MAC.test(deviceId)) {
      this.refuse(socket, 400, 'Device-Id must be the board MAC, aa:bb:cc:dd:ee:ff');
      return;
    }
    if (!CLIENT_ID.test(clientId)) {
      this.refuse(
        socket,
        400,
        'Client-Id must be the board uuid (at most 64 printable characters)',
      );
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
      this.refuse(socket, 401, 'missing or wrong token: use the one from the OTA reply');
      return;
    }
    // Whatever the token (a static one is shared by every board), a known Device-Id is its own
    // board's only: the uuid it keeps in NVS.
    if (!this.registry.acceptsClient(deviceId, clientId)) {
      this.#refusedClient(deviceId, clientId, req.socket.remoteAddress, 'WebSocket upgrade');
      this.refuse(socket, 403, pinnedMessage(deviceId));
      return;
    }
    const remote = req.socket.remoteAddress;
    this.#wss.handleUpgrade(req, socket, head, (ws) => {
      try {
        this.#onConnection(
          ws,
          remote,
          deviceId,
          clientId,
          [1, 2, 3].includes(version) ? version : 1,
        );
      } catch (error) {
        this.logger.error({ deviceId, err: error }, 'setting up a WebSocket connection failed');
        ws.terminate();
      }
    });
  }

  #refusedClient(
    deviceId: string,
    clientId: string,
    remote: string | undefined,
    what: string,
  ): void {
    this.logger.warn(
      {
        deviceId,
        clientId,
        pinnedClientId: this.registry.get(deviceId)?.clientId,
        remote,
      },
      `${what} refused: a known Device-Id with another Client-Id (a second client, or a re-flashed board)`,
    );
  }

  /**
   * A connection waiting for its hello. What stays on it for the session's life (the pong and
   * error listeners) is shared by every connection: the upgrade request, the hello timer and
   * the closures of this wait are garbage once the hello is in.
   */
  #onConnection(
    ws: WebSocket,
    remote: string | undefined,
    deviceId: string,
    clientId: string,
    protocolVersion: number,
  ): void {
    this.#alive.set(ws, 0);
    ws.on('pong', this.#onPong);
    ws.on('error', ignoreError);
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
      try {
        this.logger.warn({ deviceId }, 'no hello from the device in time; closing');
        ws.terminate();
        refuse(undefined, `no hello within ${this.config.helloTimeoutMs} ms`);
      } catch (error) {
        this.logger.error({ deviceId, err: error }, 'closing a silent connection failed');
      }
    }, this.config.helloTimeoutMs);
    ws.once('message', (data, isBinary) => {
      clearTimeout(timer);
      try {
        this.#onHello(ws, remote, deviceId, clientId, protocolVersion, refuse, data, isBinary);
      } catch (error) {
        // Never out of a 'message' handler: that would take every board down.
        this.logger.error({ deviceId, err: error }, 'handling the device hello failed; closing');
        ws.terminate();
      }
    });
  }

  /** A hello as read before: boards of one build send the same one, and share it (frozen). */
  #readHello(text: string): { hello: DeviceHello; text: string } {
    const last = this.#lastHello;
    if (last !== undefined && last.text === text) return last;
    const read = { hello: deepFreeze(parseDeviceHello(text)), text };
    this.#lastHello = read;
    return read;
  }

  #onHello(
    ws: WebSocket,
    remote: string | undefined,
    deviceId: string,
    clientId: string,
    protocolVersion: number,
    refuse: (text: string | undefined, reason: string) => void,
    data: RawData,
    isBinary: boolean,
  ): void {
    let hello: DeviceHello;
    let text = isBinary ? undefined : data.toString();
    try {
      if (text === undefined) throw new Error('the first frame is binary, not a hello');
      ({ hello, text } = this.#readHello(text));
    } catch (error) {
      const reason = clip(error instanceof Error ? error.message : String(error), 300);
      this.logger.warn({ deviceId, reason }, 'bad device hello; closing');
      ws.close(1002, 'expected a hello');
      refuse(text, reason);
      return;
    }
    // Another client may have taken this unknown Device-Id since the upgrade.
    if (!this.registry.acceptsClient(deviceId, clientId)) {
      this.#refusedClient(deviceId, clientId, remote, 'session');
      ws.close(1008, 'Device-Id is known with another Client-Id');
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
    // The record's strings where the session's are the same: held once per board, not per holder.
    const known = this.registry.get(deviceId);
    const seenFrom = known?.lastOtaCheck?.remoteAddress;
    const session = new DeviceSession(
      ws,
      {
        deviceId: known?.deviceId === deviceId ? known.deviceId : deviceId,
        clientId: known?.clientId === clientId ? known.clientId : clientId,
        sessionId,
        protocolVersion,
        hello,
        helloText: text,
        remoteAddress: seenFrom === remote ? seenFrom : remote,
        transport: 'websocket',
      },
      {
        callTimeoutMs: this.config.callTimeoutMs,
        onError: this.#onSessionError,
      },
    );
    session.on('closed', this.#onSessionClosed);
    if (this.logger.isLevelEnabled('info'))
      this.logger.info({ deviceId, sessionId, protocolVersion }, 'device connected');
    if (hello.features?.mcp === false)
      this.logger.warn({ deviceId }, 'device hello says it has no MCP');
    this.registry.attach(session);
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

  /**
   * Answers an upgrade request with an HTTP error and closes its socket: at once when the
   * client ends, else after {@link REFUSAL_LINGER_MS}. Node no longer tracks an upgrade's
   * socket, so nothing else would ever close it.
   */
  refuse(socket: Duplex, status: number, reason?: string): void {
    const body = reason === undefined ? '' : JSON.stringify({ error: reason });
    this.#refused.add(socket);
    const timer = setTimeout(() => socket.destroy(), REFUSAL_LINGER_MS);
    timer.unref();
    socket.once('close', () => {
      clearTimeout(timer);
      this.#refused.delete(socket);
    });
    socket.on('data', () => {});
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Bad Request'}\r\n` +
        `${body === '' ? '' : 'Content-Type: application/json\r\n'}Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }

  close(): void {
    for (const socket of this.#refused) socket.destroy();
    clearInterval(this.#pinger);
    for (const ws of this.#wss.clients) ws.terminate();
    this.#wss.close();
  }
}
