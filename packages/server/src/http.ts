/** Small HTTP helpers shared by the OTA endpoint, the API and the server's front door. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { networkInterfaces } from 'node:os';

/**
 * How long a connection whose request body was refused keeps reading (and dropping) it after
 * the response: long enough for a client to see the response and stop sending.
 */
const LINGER_MS = 2000;

/** Requests whose body was refused part-way (or before it was read): their connection closes. */
const refusedBodies = new WeakSet<IncomingMessage>();

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    /** The `code` of the JSON error answer. */
    readonly code: string = status === 413 ? 'BODY_TOO_LARGE' : 'BAD_REQUEST',
  ) {
    super(message);
  }
}

/**
 * Reads a request body up to `limit` bytes. A larger body (by its `Content-Length`, or once it
 * passes the limit) rejects with `HttpError` 413 and is not read further; the response to the
 * request then closes the connection gently (see `sendJson`), so the client reads the 413.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const tooLarge = () => new HttpError(413, `request body over ${limit} bytes`);
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > limit) {
      refusedBodies.add(req);
      reject(tooLarge());
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const settle = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        settle();
        // Stop reading: nothing more is buffered, and TCP holds the client back until the answer.
        req.pause();
        refusedBodies.add(req);
        chunks.length = 0;
        reject(tooLarge());
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      settle();
      resolve(Buffer.concat(chunks).toString('utf8'));
    };
    const onError = (error: Error) => {
      settle();
      reject(error);
    };
    // A client that goes away mid-body: no 'end' will come.
    const onClose = () => {
      settle();
      reject(new HttpError(400, 'the client closed the connection before the body ended'));
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('close', onClose);
  });
}

/** True when the request has a body that was not (entirely) read. */
function bodyLeftUnread(req: IncomingMessage): boolean {
  if (refusedBodies.has(req)) return true;
  if (req.complete) return false;
  const length = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/**
 * Makes the end of the response close the connection without a reset. Node closes a
 * `Connection: close` response's socket with `destroySoon()`; closing a socket with unread bytes
 * makes the kernel send RST, and the client may lose the response (or see ECONNRESET while still
 * sending). Instead our side is half-closed after the response, and the rest of the body is
 * read and dropped until the client closes, for at most `LINGER_MS`.
 */
function closeAfterResponse(req: IncomingMessage): void {
  const socket = req.socket;
  socket.destroySoon = () => {
    socket.end();
    req.removeAllListeners('data');
    req.resume();
    socket.resume();
    const timer = setTimeout(() => socket.destroy(), LINGER_MS);
    timer.unref();
    socket.once('close', () => clearTimeout(timer));
  };
}

export function sendJson(
  res: ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
): void {
  const body = JSON.stringify(value);
  // A connection with a body still on the wire cannot carry another request: it closes.
  const unread = bodyLeftUnread(res.req);
  if (unread) closeAfterResponse(res.req);
  res.writeHead(status, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(body),
    ...headers,
    ...(unread ? { Connection: 'close' } : {}),
  });
  res.end(body);
}

/** Sends `{error: {code, message}}`. */
export function replyError(
  res: ServerResponse,
  status: number,
  code: string,
  message: string,
): void {
  sendJson(res, status, { error: { code, message } });
}

/** `host[:port]` as a URL would write it (lower case, no default port), or undefined when it is not one. */
export function hostKey(value: string): string | undefined {
  if (value === '' || /[\s/?#@\\]/.test(value)) return undefined;
  try {
    return new URL(`http://${value}`).host;
  } catch {
    return undefined;
  }
}

/** An `Origin` (`http(s)://host[:port]`, nothing more) as a URL would write it, or undefined. */
export function originKey(value: string): string | undefined {
  if (!/^https?:\/\/[^/?#@\s\\]+$/i.test(value)) return undefined;
  try {
    return new URL(value).origin;
  } catch {
    return undefined;
  }
}

const WILDCARD = new Set(['0.0.0.0', '::', '[::]']);

export interface OriginPolicyOptions {
  /** The bound address. */
  readonly host: string;
  /** The port listened on. */
  readonly port: number;
  readonly publicUrl: string | undefined;
  /** Origins (`http://host:port`) or hosts (`host[:port]`) accepted besides ours; `*`: any. */
  readonly allowed: readonly string[];
}

/**
 * Which `Origin` and `Host` headers the API accepts: the server's own (its bound host, the
 * loopback names and its public URL, at its port) and those configured. A page elsewhere in a
 * browser sends its own `Origin` (a cross-site POST needs no preflight with `text/plain`),
 * and a DNS name rebound to us arrives as a foreign `Host`.
 */
export class OriginPolicy {
  readonly #any: boolean;
  readonly #port: number;
  readonly #wildcard: boolean;
  /** Accepted as `Host`, and as the host of an `Origin` of either scheme. */
  readonly #hosts = new Set<string>();
  /** Hosts accepted only as `Host` (those of listed origins). */
  readonly #hostsOfOrigins = new Set<string>();
  readonly #origins = new Set<string>();

  constructor(options: OriginPolicyOptions) {
    this.#any = options.allowed.includes('*');
    this.#port = options.port;
    this.#wildcard = WILDCARD.has(options.host);
    const bound =
      options.host.includes(':') && !options.host.startsWith('[')
        ? `[${options.host}]`
        : options.host;
    for (const name of [bound, 'localhost', '127.0.0.1', '[::1]']) {
      const key = hostKey(`${name}:${options.port}`);
      if (key !== undefined) {
        this.#hostsOfOrigins.add(key);
        this.#origins.add(`http://${key}`);
      }
    }
    for (const entry of [
      ...(options.publicUrl === undefined ? [] : [options.publicUrl]),
      ...options.allowed,
    ]) {
      const origin = originKey(entry);
      if (origin !== undefined) {
        this.#origins.add(origin);
        this.#hostsOfOrigins.add(new URL(origin).host);
        continue;
      }
      const host = hostKey(entry);
      if (host !== undefined) this.#hosts.add(host);
    }
  }

  /** Why a request with these headers is refused, or undefined when it is accepted. */
  refusal(origin: string | undefined, host: string | undefined): string | undefined {
    if (this.#any) return undefined;
    // Browsers always send Host; a client that sends none is not a rebinding page.
    if (host !== undefined) {
      const key = hostKey(host);
      if (key === undefined || !this.#isOwnHost(key))
        return `Host ${JSON.stringify(host)} is not this server's (a DNS name pointed at it?); list it in allowedOrigins (--allow-origin) to accept it`;
    }
    if (origin !== undefined) {
      const key = originKey(origin);
      const accepted =
        key !== undefined &&
        (this.#origins.has(key) ||
          this.#hosts.has(new URL(key).host) ||
          (key.startsWith('http:') && this.#isOwnInterface(new URL(key).host)));
      if (!accepted)
        return `Origin ${JSON.stringify(origin)} is not this server's (a page from another site?); list it in allowedOrigins (--allow-origin) to accept it`;
    }
    return undefined;
  }

  #isOwnHost(key: string): boolean {
    return this.#hosts.has(key) || this.#hostsOfOrigins.has(key) || this.#isOwnInterface(key);
  }

  /** Bound to every address: each of this machine's addresses, at our port, is ours. */
  #isOwnInterface(key: string): boolean {
    if (!this.#wildcard) return false;
    for (const list of Object.values(networkInterfaces())) {
      for (const { address, family } of list ?? []) {
        const name = family === 'IPv6' ? `[${address.split('%')[0]}]` : address;
        if (hostKey(`${name}:${this.#port}`) === key) return true;
      }
    }
    return false;
  }
}
