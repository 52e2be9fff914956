/**
 * The bridge over Streamable HTTP at `/mcp`: one SDK transport and one MCP server per session
 * (session ids from `randomUUID`), behind DNS-rebinding protection (403), the optional bearer
 * token (401) and a bound on request bodies (413), on 127.0.0.1 unless told otherwise.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import type { XiaozhiBridge } from './bridge.js';
import { BridgeError } from './errors.js';
import { allowedHostnames, bearerMatches, refuseHostOrOrigin } from './http-guard.js';

export const MCP_PATH = '/mcp';
/** Largest request body (the API takes call bodies up to 1 MiB). */
export const MAX_HTTP_BODY_BYTES = 1024 * 1024;
/**
 * Open sessions at most. A client that went away without DELETE leaves its session open, so
 * one more session closes the one used least recently (its client, if any, gets 404 and
 * initialises again) rather than locking every new client out.
 */
export const MAX_HTTP_SESSIONS = 256;

export interface HttpOptions {
  /** Address to bind (127.0.0.1 by default). */
  readonly host?: string;
  readonly port: number;
  /** Bearer token clients must send; none: no token asked. */
  readonly token?: string;
  /** More accepted `Host` names (hostname or host:port); `*` turns the check off. */
  readonly allowedHosts?: readonly string[];
  /** More accepted `Origin`s (`https://app.example`); `*` turns the check off. */
  readonly allowedOrigins?: readonly string[];
  readonly maxBodyBytes?: number;
  readonly maxSessions?: number;
}

class HttpRefusal extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly rpcCode = -32000,
  ) {
    super(message);
  }
}

function sendRpcError(
  res: ServerResponse,
  status: number,
  code: number,
  message: string,
  close: boolean,
): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const body = JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null });
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    ...(status === 401 ? { 'www-authenticate': 'Bearer' } : {}),
    // A body left unread must not be taken for the next request: this connection ends here.
    ...(close ? { connection: 'close' } : {}),
  });
  res.end(body);
}

async function readJson(req: IncomingMessage, limit: number): Promise<unknown> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit)
    throw new HttpRefusal(413, `request body over ${limit} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new HttpRefusal(413, `request body over ${limit} bytes`);
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new HttpRefusal(400, 'Parse error: the body is not JSON', -32700);
  }
}

export async function serveHttp(
  bridge: XiaozhiBridge,
  options: HttpOptions,
): Promise<{ url: string; close(): Promise<void> }> {
  const host = options.host ?? '127.0.0.1';
  const hostnames = allowedHostnames(host, options.allowedHosts);
  const allowedOrigins = options.allowedOrigins ?? [];
  const maxBody = options.maxBodyBytes ?? MAX_HTTP_BODY_BYTES;
  const maxSessions = options.maxSessions ?? MAX_HTTP_SESSIONS;
  const token = options.token === '' ? undefined : options.token;
  const sessions = new Map<string, StreamableHTTPServerTransport>();

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    if (path !== MCP_PATH)
      throw new HttpRefusal(404, `no MCP endpoint at ${path}; it is ${MCP_PATH}`);
    // Host and Origin first: a rebinding page learns nothing, not even that a token is asked.
    const refused = refuseHostOrOrigin(
      { host: req.headers.host, origin: req.headers.origin },
      hostnames,
      allowedOrigins,
    );
    if (refused !== undefined) throw new HttpRefusal(403, refused);
    if (token !== undefined && !bearerMatches(req.headers.authorization, token))
      throw new HttpRefusal(401, 'Unauthorized: a bearer token is required');
    const body = req.method === 'POST' ? await readJson(req, maxBody) : undefined;
    const sessionId = req.headers['mcp-session-id'];
    if (typeof sessionId === 'string') {
      const transport = sessions.get(sessionId);
      if (transport === undefined) throw new HttpRefusal(404, 'Session not found', -32001);
      // Most recently used last: the Map's order is the eviction order.
      sessions.delete(sessionId);
      sessions.set(sessionId, transport);
      await transport.handleRequest(req, res, body);
      return;
    }
    if (req.method !== 'POST' || !isInitializeRequest(body))
      throw new HttpRefusal(400, 'Bad Request: no valid session id (initialize first)');
    for (const [id, idle] of sessions) {
      if (sessions.size < maxSessions) break;
      sessions.delete(id);
      await idle.close().catch(() => {});
    }
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        sessions.set(id, transport);
      },
    });
    transport.onclose = () => {
      if (transport.sessionId !== undefined) sessions.delete(transport.sessionId);
    };
    await bridge.createServer().connect(transport);
    await transport.handleRequest(req, res, body);
  }

  const http = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      const close = !req.complete;
      if (error instanceof HttpRefusal)
        sendRpcError(res, error.status, error.rpcCode, error.message, close);
      else sendRpcError(res, 500, -32603, `Internal error: ${(error as Error).message}`, close);
    });
  });
  http.headersTimeout = 10_000;
  http.requestTimeout = 30_000;
  http.listen(options.port, host);
  try {
    await Promise.race([
      once(http, 'listening'),
      once(http, 'error').then(([error]) => {
        throw error;
      }),
    ]);
  } catch (error) {
    throw new BridgeError(
      'LISTEN_FAILED',
      `cannot listen on ${host}:${options.port}: ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
  const address = http.address() as AddressInfo;
  const urlHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return {
    url: `http://${urlHost}:${address.port}${MCP_PATH}`,
    close: async () => {
      const open = [...sessions.values()];
      sessions.clear();
      await Promise.all(open.map((t) => t.close().catch(() => {})));
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
