/**
 * A small backend for the device package's own tests: an OTA endpoint and a WebSocket
 * endpoint on one 127.0.0.1 port chosen by the OS. It records what boards send and lets a
 * test drive the MCP side by hand. (The real backend is `@xiaozhi-mcp/server`.)
 */
import { once } from 'node:events';
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  type DeviceFrame,
  encodeEnvelope,
  encodeRequest,
  type JsonRpcMessage,
  readDeviceFrame,
} from '@xiaozhi-mcp/protocol';
import { type RawData, type WebSocket, WebSocketServer } from 'ws';

export interface OtaRequestRecord {
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

export interface TestBackendOptions {
  /** The OTA reply for a request; default: our WebSocket URL and no upgrade. */
  readonly otaReply?: (
    request: OtaRequestRecord,
    backend: TestBackend,
  ) => { status?: number; body: unknown };
  /** Files served by GET, e.g. firmware images. */
  readonly files?: Record<string, Uint8Array>;
  /** The server hello; default `{type:"hello",transport:"websocket",session_id}`. */
  readonly serverHello?: (
    deviceHello: Record<string, unknown>,
    sessionId: string,
  ) => unknown | undefined;
  readonly token?: string;
}

/** One device connection as the backend sees it. */
export class DeviceConnection {
  readonly frames: DeviceFrame[] = [];
  readonly texts: string[] = [];
  readonly binaries: Buffer[] = [];
  hello: Record<string, unknown> | undefined;
  closeCode: number | undefined;
  #waiters: (() => void)[] = [];
  #nextId = 1;

  constructor(
    readonly socket: WebSocket,
    readonly upgrade: IncomingMessage,
    readonly sessionId: string,
  ) {
    socket.on('message', (data: RawData, isBinary) => {
      if (isBinary) this.binaries.push(data as Buffer);
      else {
        const text = data.toString();
        this.texts.push(text);
        this.frames.push(readDeviceFrame(text));
      }
      for (const wake of this.#waiters.splice(0)) wake();
    });
    socket.on('close', (code) => {
      this.closeCode = code;
      for (const wake of this.#waiters.splice(0)) wake();
    });
  }

  /** Resolves once `predicate` holds, re-checked on every frame; bounded by `timeoutMs`. */
  async until<T>(predicate: () => T | undefined, timeoutMs = 5000, what = 'a frame'): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const value = predicate();
      if (value !== undefined && value !== false) return value;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`backend: no ${what} within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** MCP payload texts received so far (the envelope removed), in order. */
  get mcpPayloads(): string[] {
    return this.frames.flatMap((f) => (f.kind === 'mcp' ? [f.payloadText] : []));
  }

  sendPayload(payloadText: string): void {
    this.socket.send(encodeEnvelope(this.sessionId, payloadText));
  }

  /** Sends a request and resolves with its reply, matched by id. */
  async request(method: string, params?: unknown, timeoutMs = 5000): Promise<JsonRpcMessage> {
    const id = this.#nextId++;
    this.sendPayload(encodeRequest(id, method, params));
    return this.until(
      () =>
        this.frames.find(
          (f): f is Extract<DeviceFrame, { kind: 'mcp' }> =>
            f.kind === 'mcp' && 'id' in f.message && f.message.id === id,
        )?.message,
      timeoutMs,
      `reply to ${method} #${id}`,
    );
  }
}

export class TestBackend {
  readonly otaRequests: OtaRequestRecord[] = [];
  readonly connections: DeviceConnection[] = [];
  readonly upgrades: IncomingMessage[] = [];
  #server: Server;
  #wss = new WebSocketServer({ noServer: true });
  #sessions = 0;
  #connectionWaiters: (() => void)[] = [];
  readonly #options: TestBackendOptions;

  private constructor(options: TestBackendOptions) {
    this.#options = options;
    this.#server = createServer((req, res) => this.#http(req, res));
    this.#server.on('upgrade', (req, socket, head) => {
      this.upgrades.push(req);
      const token = this.#options.token;
      if (token !== undefined && req.headers.authorization !== `Bearer ${token}`) {
        socket.end('HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n');
        return;
      }
      this.#wss.handleUpgrade(req, socket, head, (ws) => this.#accept(ws, req));
    });
  }

  static async start(options: TestBackendOptions = {}): Promise<TestBackend> {
    const backend = new TestBackend(options);
    backend.#server.listen(0, '127.0.0.1');
    await once(backend.#server, 'listening');
    return backend;
  }

  get port(): number {
    return (this.#server.address() as AddressInfo).port;
  }
  get otaUrl(): string {
    return `http://127.0.0.1:${this.port}/xiaozhi/ota/`;
  }
  get wsUrl(): string {
    return `ws://127.0.0.1:${this.port}/xiaozhi/v1/`;
  }
  fileUrl(name: string): string {
    return `http://127.0.0.1:${this.port}/files/${name}`;
  }

  /** Resolves with the n-th connection (0-based) once it has said hello. */
  async connection(index = 0, timeoutMs = 5000): Promise<DeviceConnection> {
    const deadline = Date.now() + timeoutMs;
    while (this.connections[index]?.hello === undefined) {
      const left = deadline - Date.now();
      if (left <= 0)
        throw new Error(`backend: no connection #${index} with a hello within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 50));
        this.#connectionWaiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.connections[index] as DeviceConnection;
  }

  async close(): Promise<void> {
    for (const client of this.#wss.clients) client.terminate();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(ws: WebSocket, req: IncomingMessage): void {
    const sessionId = `session-${++this.#sessions}`;
    const connection = new DeviceConnection(ws, req, sessionId);
    this.connections.push(connection);
    ws.once('message', (data) => {
      connection.hello = JSON.parse(data.toString()) as Record<string, unknown>;
      const hello = this.#options.serverHello
        ? this.#options.serverHello(connection.hello, sessionId)
        : { type: 'hello', transport: 'websocket', session_id: sessionId };
      if (hello !== undefined) ws.send(JSON.stringify(hello));
      for (const wake of this.#connectionWaiters.splice(0)) wake();
    });
  }

  #http(req: IncomingMessage, res: import('node:http').ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const url = req.url ?? '/';
      if (req.method === 'GET' && url.startsWith('/files/')) {
        const file = this.#options.files?.[url.slice('/files/'.length)];
        if (file === undefined) {
          res.writeHead(404).end();
          return;
        }
        res.writeHead(200, {
          'Content-Type': 'application/octet-stream',
          'Content-Length': file.length,
        });
        res.end(file);
        return;
      }
      const record = { url, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      if (req.method === 'POST' && url.startsWith('/xiaozhi/ota/')) {
        this.otaRequests.push(record);
        const reply = this.#options.otaReply?.(record, this) ?? {
          body: {
            websocket: { url: this.wsUrl, token: this.#options.token ?? 'test-token', version: 1 },
            server_time: { timestamp: Date.now(), timezone_offset: 480 },
          },
        };
        const text = typeof reply.body === 'string' ? reply.body : JSON.stringify(reply.body);
        res.writeHead(reply.status ?? 200, { 'Content-Type': 'application/json' }).end(text);
        return;
      }
      res.writeHead(404).end();
    });
  }
}
