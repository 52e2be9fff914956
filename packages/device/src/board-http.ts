/**
 * The board's HTTP client for the OTA check, activation and image download, as firmware 2.x
 * sends them: xiaozhi-esp32's `Ota` goes through esp-ml307's `HttpClient` (from 3.0 on; the
 * Wi-Fi boards' `EspNetwork::CreateHttp`), which writes its request over a plain TCP/TLS socket
 * itself — not esp_http_client, which the 1.x firmware (esp-ml307 < 3) used. One request per
 * connection (`Connection: close`: `Ota` never turns keep-alive on), closed by the board once
 * the reply is read; no `Accept-Encoding`, and no decoder for a `Content-Encoding` reply. It is
 * node:http with the request written header by header, without `fetch`'s streams, pool and
 * abort signals, which cost a fleet of virtual boards more CPU than the exchange itself.
 */
import { request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { createConnection, type NetConnectOpts } from 'node:net';
import type { Readable } from 'node:stream';

export interface BoardHttpRequest {
  readonly method: 'GET' | 'POST';
  /**
   * Set one by one as `HttpClient::SetHeader` sets them: sent after `Host`, sorted by their
   * lowercase names, with the casing given; a later name that differs only in case replaces
   * the earlier one, casing and all.
   */
  readonly headers?: Readonly<Record<string, string>>;
  /** Sent as UTF-8, with its `Content-Length`. */
  readonly body?: string;
  /** Bound on the whole exchange, from the connect to the reply's last byte. */
  readonly timeoutMs: number;
}

export interface BoardHttpReply {
  readonly status: number;
  /** A reply header (lowercase name); the first one when repeated. */
  header(name: string): string | undefined;
  /** The body's bytes as they came: like the firmware, nothing decodes a `Content-Encoding`. */
  readonly body: Readable;
  /** Stops reading: the connection is closed. */
  close(): void;
}

// Plain HTTP goes without an agent (its per-origin socket list costs a fleet connecting at
// once a scan per socket); over TLS an agent without keep-alive sets up SNI and closes each
// socket once its exchange is over.
const httpsAgent = new HttpsAgent({ keepAlive: false });

/**
 * The request's header lines (name, value, name, value…) as esp-ml307's
 * `HttpClient::BuildHttpRequest` writes them: `Host` (with the port when not the scheme's
 * default), the headers set, in the order of their lowercase names (a `std::map`), then
 * `Content-Length` when there is a body (`0` for a POST or PUT with an empty one) and
 * `Connection: close`, each only if not set. Nothing else: no `Accept`, `Accept-Encoding` or
 * default `User-Agent`. (A POST without content is sent chunked by the firmware, written by
 * the caller piece by piece; this client has no such writes, so its POSTs have a body.)
 */
export function requestHeaderLines(
  url: URL,
  request: Pick<BoardHttpRequest, 'method' | 'headers' | 'body'>,
): string[] {
  const set = new Map<string, readonly [string, string]>();
  for (const [name, value] of Object.entries(request.headers ?? {}))
    set.set(name.toLowerCase(), [name, value]);
  const lines = ['Host', url.host];
  // Header names are ASCII tokens: JS's default sort is std::string's byte order.
  for (const key of [...set.keys()].sort()) lines.push(...(set.get(key) ?? []));
  if (!set.has('content-length')) {
    if (request.body !== undefined && request.body !== '')
      lines.push('Content-Length', String(Buffer.byteLength(request.body)));
    else if (request.method === 'POST' && !set.has('transfer-encoding'))
      lines.push('Content-Length', '0');
  }
  if (!set.has('connection')) lines.push('Connection', 'close');
  return lines;
}

/**
 * Sends one request and resolves with the reply once its head is in. Rejects when the
 * connection fails or the bound passes first; after that, the bound ends the body with an error.
 */
export function boardHttp(target: string, request: BoardHttpRequest): Promise<BoardHttpReply> {
  let url: URL;
  try {
    url = new URL(target);
  } catch (error) {
    return Promise.reject(error);
  }
  const https = url.protocol === 'https:';
  if (!https && url.protocol !== 'http:')
    return Promise.reject(new Error(`unsupported URL scheme ${url.protocol}`));
  return new Promise((resolve, reject) => {
    let body: Readable | undefined;
    const req = (https ? httpsRequest : httpRequest)(url, {
      method: request.method,
      ...(https
        ? { agent: httpsAgent }
        : { createConnection: (options: object) => createConnection(options as NetConnectOpts) }),
      setHost: false,
      headers: requestHeaderLines(url, request),
    });
    const timer = setTimeout(() => {
      const error = new Error(`no complete reply within ${request.timeoutMs} ms`);
      req.destroy(error);
      body?.destroy(error);
    }, request.timeoutMs);
    timer.unref();
    const done = () => clearTimeout(timer);
    // One request per connection: the board closes it once the reply is in.
    const hangUp = () => {
      done();
      req.destroy();
    };
    // A connection that fails after the reply's head ends the body instead: nothing to reject.
    req.on('error', (error) => {
      done();
      reject(error);
    });
    req.once('response', (response) => {
      body = response;
      // Whoever reads the body sees its errors; one nobody reads must not take the process down.
      response.on('error', () => {});
      response.once('end', hangUp);
      response.once('close', done);
      resolve({
        status: response.statusCode ?? 0,
        header: (name) => {
          const value = response.headers[name];
          return Array.isArray(value) ? value[0] : value;
        },
        body: response,
        close: () => {
          done();
          req.destroy();
        },
      });
    });
    req.end(request.body);
  });
}

/**
 * The body as text (UTF-8, a BOM dropped, bad bytes replaced, as `Response.text()` reads it),
 * or undefined when it is over `limit` bytes: then the rest is not read and the connection is
 * closed.
 */
export function readText(reply: BoardHttpReply, limit: number): Promise<string | undefined> {
  const declared = Number(reply.header('content-length') ?? Number.NaN);
  if (declared > limit) {
    reply.close();
    return Promise.resolve(undefined);
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const { body } = reply;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        body.off('data', onData);
        reply.close();
        resolve(undefined);
        return;
      }
      chunks.push(chunk);
    };
    body.on('data', onData);
    body.on('error', reject);
    body.once('end', () => resolve(utf8.decode(Buffer.concat(chunks, size))));
  });
}

/** Reads and drops the rest of a body (a reply whose content does not matter). */
export function discard(reply: BoardHttpReply): void {
  reply.body.resume();
}

const utf8 = new TextDecoder();
