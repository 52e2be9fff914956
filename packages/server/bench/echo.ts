// The raw `ws` echo baseline's server side: an HTTP server with a `ws` WebSocketServer on it,
// set up the way the xiaozhi gateway sets up its own (http.createServer, listen backlog 4096,
// perMessageDeflate off), and nothing else. Each connection's first text frame (the hello) is
// echoed; after that the server is the one sending: `roundTrip(i)` sends a frame shaped like a
// real `tools/call` envelope down connection i and resolves when the device process echoes it.
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { encodeEnvelope, encodeRequest } from '@xiaozhi-mcp/protocol';
import { type WebSocket, WebSocketServer } from 'ws';

interface Connection {
  ws: WebSocket;
  sessionId: string;
  nextId: number;
  /** Round trips in flight by request id: called with nothing on the echo, or with an error. */
  pending: Map<number, (error?: Error) => void>;
}

export class EchoServer {
  /** Connections whose hello has been echoed, in that order. */
  conns: Connection[] = [];
  hellos = 0;
  #http!: Server;
  #wss!: WebSocketServer;
  #onHello: (hellos: number) => void = () => {};

  static async start(onHello: (hellos: number) => void = () => {}): Promise<EchoServer> {
    const server = new EchoServer();
    server.#onHello = onHello;
    server.#http = createServer((_req, res) => res.writeHead(404).end());
    server.#wss = new WebSocketServer({
      noServer: true,
      perMessageDeflate: false,
      maxPayload: 128 * 1024,
    });
    server.#http.on('upgrade', (req, socket, head) => {
      server.#wss.handleUpgrade(req, socket, head, (ws) => server.#onConnection(ws));
    });
    // The gateway's backlog, so both storms meet the same accept queue.
    server.#http.listen({ port: 0, host: '127.0.0.1', backlog: 4096 });
    await once(server.#http, 'listening');
    return server;
  }

  get url() {
    return `ws://127.0.0.1:${(this.#http.address() as AddressInfo).port}/echo`;
  }

  #onConnection(ws: WebSocket) {
    ws.on('error', () => {});
    const conn: Connection = { ws, sessionId: crypto.randomUUID(), nextId: 1, pending: new Map() };
    ws.once('message', (data, isBinary) => {
      ws.send(data, { binary: isBinary });
      this.hellos++;
      this.conns.push(conn);
      ws.on('message', (frame) => {
        // Read the id back, as the session reads its reply: one JSON.parse of the echoed frame.
        const id = JSON.parse(frame.toString()).payload.id;
        const resolve = conn.pending.get(id);
        if (resolve !== undefined) {
          conn.pending.delete(id);
          resolve();
        }
      });
      this.#onHello(this.hellos);
    });
    ws.on('close', () => {
      for (const resolve of conn.pending.values()) resolve(new Error('echo connection closed'));
      conn.pending.clear();
    });
  }

  /** One round trip of a tools/call-sized frame over connection `i % conns`. */
  roundTrip(i: number, tool: string, args: Record<string, unknown>): Promise<void> {
    const conn = this.conns[i % this.conns.length] as Connection;
    const id = conn.nextId++;
    return new Promise((resolve, reject) => {
      conn.pending.set(id, (error) => (error ? reject(error) : resolve()));
      conn.ws.send(
        encodeEnvelope(
          conn.sessionId,
          encodeRequest(id, 'tools/call', { name: tool, arguments: args }),
        ),
      );
    });
  }

  /** WebSocket ping round trip on connection `i`, in milliseconds (the `ws` client answers pings). */
  ping(i: number, timeoutMs = 5000): Promise<number> {
    const { ws } = this.conns[i % this.conns.length] as Connection;
    return new Promise((resolve, reject) => {
      const started = performance.now();
      const timer = setTimeout(() => {
        ws.off('pong', onPong);
        reject(new Error(`no pong within ${timeoutMs} ms`));
      }, timeoutMs);
      const onPong = () => {
        clearTimeout(timer);
        resolve(performance.now() - started);
      };
      ws.once('pong', onPong);
      ws.ping();
    });
  }

  get connections() {
    return this.#wss.clients.size;
  }

  async stop() {
    for (const ws of this.#wss.clients) ws.terminate();
    this.#wss.close();
    this.#http.closeAllConnections();
    await new Promise<void>((resolve) => this.#http.close(() => resolve()));
    this.conns = [];
  }
}
