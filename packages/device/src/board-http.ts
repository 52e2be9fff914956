/**
 * The board's HTTP client for the OTA check, activation and image download: one request per
 * connection, closed by the board once the reply is read, as the firmware's `Http` (on
 * esp_http_client) does. It is node:http with the request written header by header, so the
 * bytes on the wire stay those the boards have always sent (the ones `fetch` wrote: `host`,
 * `connection`, the caller's headers, then `accept`, `sec-fetch-mode`, `accept-encoding` and
 * `content-length`), without `fetch`'s streams, pool and abort signals, which cost a fleet of
 * virtual boards more CPU than the exchange itself.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { createConnection, type NetConnectOpts } from 'node:net';
import type { Readable } from 'node:stream';
import { constants, createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';

export interface BoardHttpRequest {
  readonly method: 'GET' | 'POST';
  /** Sent after `host` and `connection`, in this order, with these names. */
  readonly headers?: Readonly<Record<string, string>>;
  /** Sent as UTF-8, with its `content-length`. */
  readonly body?: string;
  /** Bound on the whole exchange, from the connect to the reply's last byte. */
  readonly timeoutMs: number;
}

export interface BoardHttpReply {
  readonly status: number;
  /** A reply header (lowercase name); the first one when repeated. */
  header(name: string): string | undefined;
  /** The body, decoded as `Content-Encoding` says (gzip, deflate, br). */
  readonly body: Readable;
  /** Stops reading: the connection is closed. */
  close(): void;
}

// Plain HTTP goes without an agent (its per-origin socket list costs a fleet connecting at
// once a scan per socket); over TLS an agent without keep-alive sets up SNI and closes each
// socket once its exchange is over.
const httpsAgent = new HttpsAgent({ keepAlive: false });

/**
 * The request's header lines, as `fetch` wrote them: `accept`, `accept-language`,
 * `sec-fetch-mode`, `user-agent` and `accept-encoding` fill in what the caller did not set.
 */
export function requestHeaderLines(
  url: URL,
  request: Pick<BoardHttpRequest, 'headers' | 'body'>,
): string[] {
  const lines = ['host', url.host, 'connection', 'keep-alive'];
  const given = new Set<string>();
  for (const [name, value] of Object.entries(request.headers ?? {})) {
    lines.push(name, value);
    given.add(name.toLowerCase());
  }
  if (!given.has('accept')) lines.push('accept', '*/*');
  if (!given.has('accept-language')) lines.push('accept-language', '*');
  lines.push('sec-fetch-mode', 'cors');
  if (!given.has('user-agent')) lines.push('user-agent', 'node');
  lines.push('accept-encoding', 'gzip, deflate');
  if (request.body !== undefined)
    lines.push('content-length', String(Buffer.byteLength(request.body)));
  return lines;
}

/** The body stream, through the decoders `Content-Encoding` names (applied last first). */
function decoded(response: IncomingMessage): Readable {
  const codings = (response.headers['content-encoding'] ?? '')
    .toLowerCase()
    .split(',')
    .map((coding) => coding.trim())
    .filter((coding) => coding !== '' && coding !== 'identity');
  let body: Readable = response;
  for (const coding of codings.reverse()) {
    // Lenient at the end, as fetch is: a body cut at a flush point still decodes.
    const flush = { flush: constants.Z_SYNC_FLUSH, finishFlush: constants.Z_SYNC_FLUSH };
    const decoder =
      coding === 'gzip' || coding === 'x-gzip'
        ? createGunzip(flush)
        : coding === 'deflate'
          ? createInflate(flush)
          : coding === 'br'
            ? createBrotliDecompress()
            : undefined;
    if (decoder === undefined) break;
    const source = body;
    source.on('error', (error) => decoder.destroy(error));
    body = source.pipe(decoder);
  }
  return body;
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
      const stream = decoded(response);
      body = stream;
      // Whoever reads the body sees its errors; one nobody reads must not take the process down.
      stream.on('error', () => {});
      stream.once('end', hangUp);
      stream.once('close', done);
      resolve({
        status: response.statusCode ?? 0,
        header: (name) => {
          const value = response.headers[name];
          return Array.isArray(value) ? value[0] : value;
        },
        body: stream,
        close: () => {
          done();
          req.destroy();
          if (stream !== response) stream.destroy();
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
