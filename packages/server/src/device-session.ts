/**
 * One device connection and the MCP client that talks to it. Requests carry a per-device
 * numeric id (the firmware drops string ids) and are registered before they are sent;
 * replies are matched by id in any order; an error reply, codeless or unescaped, rejects
 * with the protocol's `WireError` carrying the device's message; every pending request is
 * rejected at once with `DEVICE_DISCONNECTED` when the socket drops. Nothing the device sends,
 * and no event listener, can throw out of the socket's handlers: such an error is reported to
 * `onError` and the session goes on.
 */
import { EventEmitter } from 'node:events';
import {
  type DeviceFrame,
  type DeviceHello,
  encodeEnvelope,
  encodeRequest,
  readDeviceFrame,
  readToolResult,
  type ToolResult,
  type ToolsListParams,
  type ToolsWalk,
  walkToolsPages,
} from '@xiaozhi-mcp/protocol';
import type { WebSocket } from 'ws';
import {
  type DeviceLink,
  type DeviceLinkHandlers,
  type DeviceTransport,
  toDeviceLink,
} from './device-link.js';
import { ServerError } from './errors.js';
import { SharedPages } from './tool-lists.js';

export interface RequestOptions {
  /** Default: the session's call timeout (30 s unless configured); 1 ms to 24.8 days (Node's timer). */
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

/**
 * What a request's caller gets of a result, given it and the reply (whose exact `resultText` is
 * cut only when a reader asks for it).
 */
type Reader = (result: unknown, reply: { readonly resultText: string | undefined }) => unknown;

/** tools/list pages, shared by the sessions whose boards send the same ones. */
const SHARED_PAGES = new SharedPages();
const sharePage: Reader = (result, reply) => SHARED_PAGES.share(result, reply.resultText);

/**
 * A new promise's functions, left here by the one shared executor and read at once: no
 * executor closure (and no context for it) per request.
 */
const captured: { resolve: (result: unknown) => void; reject: (error: Error) => void } = {
  resolve: () => {},
  reject: () => {},
};
const CAPTURE = (resolve: (result: unknown) => void, reject: (error: Error) => void): void => {
  captured.resolve = resolve;
  captured.reject = reject;
};

/** A request in flight: a class, not closures, since every call makes one. */
class Pending {
  /** Its own deadline; undefined when it runs on the session's reused timer. */
  timer: NodeJS.Timeout | undefined;
  /** Removes the abort listener (requests with a signal only). */
  cleanup: (() => void) | undefined;

  constructor(
    readonly session: DeviceSession,
    readonly id: number,
    readonly method: string,
    readonly timeoutMs: number,
    /** Its place among the session's sends (a stray counts the sends before it). */
    readonly sentAt: number,
    readonly resolve: (result: unknown) => void,
    readonly reject: (error: Error) => void,
    /** What the caller gets of the result (callTool's reading), instead of the result itself. */
    readonly read: Reader | undefined,
  ) {}
}

/** `initialize`'s result as the device sent it. */
export interface InitializeResult {
  readonly protocolVersion: string;
  readonly capabilities: Record<string, unknown>;
  readonly serverInfo: { readonly name: string; readonly version: string };
}

export interface DeviceSessionInfo {
  readonly deviceId: string;
  readonly clientId: string;
  readonly sessionId: string;
  /** `Protocol-Version` of the upgrade request (audio framing). */
  readonly protocolVersion: number;
  readonly hello: DeviceHello;
  /** The hello as the device sent it. */
  readonly helloText: string;
  readonly remoteAddress: string | undefined;
  /** How the board is connected; default: the link's. */
  readonly transport?: DeviceTransport;
}

export interface DeviceSessionEvents {
  closed: [reason: string];
  /** Every text frame in either direction, as sent or received (for transcripts). */
  frame: [direction: 'in' | 'out', text: string];
  /** A transport message other than an MCP reply (listen, abort, goodbye...). */
  message: [DeviceFrame];
  /** An MCP frame that matched no pending request (late, unknown id, unreadable). */
  stray: [DeviceFrame];
}

export interface SessionStats {
  requests: number;
  replies: number;
  errors: number;
  timeouts: number;
  strays: number;
  audioFrames: number;
  audioBytes: number;
}

// The firmware reads ids as a C int; stay inside int32 so they echo back unchanged.
const MAX_ID = 2_147_483_647;
/** Node's timers overflow past this (and then fire at once). */
export const MAX_TIMEOUT_MS = 2_147_483_647;

export interface DeviceSessionOptions {
  /** Default bound on each request. */
  readonly callTimeoutMs?: number;
  /**
   * Where an error that must not escape the socket's handlers goes (default: stderr); called
   * with the session as `this`, so one function can serve every session.
   */
  readonly onError?: (this: DeviceSession, error: unknown, where: string) => void;
}

/** A JSON-RPC id as the device sent it, short and safe to print (it may be any JSON). */
function describeId(id: unknown): string {
  if (typeof id === 'number' || id === null) return String(id);
  if (typeof id === 'string') return JSON.stringify(id.length > 64 ? `${id.slice(0, 64)}…` : id);
  return Array.isArray(id) ? 'an array' : `a ${typeof id}`;
}

const STDERR_ON_ERROR = (error: unknown, where: string) =>
  process.stderr.write(`xiaozhi-mcp session: ${where}: ${String(error)}\n`);

export class DeviceSession extends EventEmitter<DeviceSessionEvents> {
  readonly info: DeviceSessionInfo;
  readonly stats: SessionStats = {
    requests: 0,
    replies: 0,
    errors: 0,
    timeouts: 0,
    strays: 0,
    audioFrames: 0,
    audioBytes: 0,
  };
  readonly #link: DeviceLink;
  /**
   * Requests in flight: the first in `#one`, the others (rarely any) in `#more`, made on
   * demand. A board mostly has one request at a time: no map is touched for it.
   */
  #one: Pending | undefined;
  #more: Map<number, Pending> | undefined;
  readonly #callTimeoutMs: number;
  readonly #onError: (this: DeviceSession, error: unknown, where: string) => void;
  #nextId = 1;
  #closedReason: string | undefined;
  /** Requests sent so far: orders strays and requests without reading a clock per call. */
  #sends = 0;
  /** Replies that matched no pending request, lately, with the sends before each: a timeout names them. */
  #strayReplies: { readonly id: string; readonly at: number }[] | undefined;
  /** The envelope's text up to the payload, for the session id it was made with. */
  #head = '';
  #headSessionId: string | undefined;
  /**
   * The deadline of `#one` when it has the session's call timeout: one timer per session,
   * re-armed per request (no timer object per call), unref'd while no request waits on it.
   */
  #oneTimer: NodeJS.Timeout | undefined;

  /**
   * `connection`: a WebSocket, or any {@link DeviceLink} (an MQTT connection): the session is
   * the same whatever carries it.
   */
  constructor(
    connection: WebSocket | DeviceLink,
    info: DeviceSessionInfo,
    options: DeviceSessionOptions = {},
  ) {
    super();
    const link = toDeviceLink(connection);
    this.#link = link;
    this.info = info.transport === undefined ? { ...info, transport: link.transport } : info;
    this.#callTimeoutMs = options.callTimeoutMs ?? 30_000;
    this.#onError = options.onError ?? STDERR_ON_ERROR;
    link.listen(new DeviceSession.#Handlers(this));
  }

  /** How the board is connected. */
  get transport(): DeviceTransport {
    return this.#link.transport;
  }

  get closed(): boolean {
    return this.#closedReason !== undefined;
  }

  /** Requests in flight. */
  get pending(): number {
    return (this.#one === undefined ? 0 : 1) + (this.#more?.size ?? 0);
  }

  /** Sends a JSON-RPC request and resolves with its `result`. */
  request(method: string, params?: unknown, options: RequestOptions = {}): Promise<unknown> {
    return this.#request(method, params, options, undefined);
  }

  #request(
    method: string,
    params: unknown,
    options: RequestOptions,
    read: Reader | undefined,
  ): Promise<unknown> {
    if (this.#closedReason !== undefined) {
      return Promise.reject(
        new ServerError(
          'DEVICE_DISCONNECTED',
          `device ${this.info.deviceId} is disconnected (${this.#closedReason})`,
        ),
      );
    }
    const signal = options.signal;
    if (signal?.aborted) {
      return Promise.reject(
        new ServerError('REQUEST_ABORTED', `${method} to ${this.info.deviceId} was aborted`, {
          cause: signal.reason,
        }),
      );
    }
    const timeoutMs = options.timeoutMs ?? this.#callTimeoutMs;
    if (!Number.isFinite(timeoutMs) || timeoutMs < 1 || timeoutMs > MAX_TIMEOUT_MS) {
      // Past Node's timer range the timeout would fire at once (or never, for NaN).
      return Promise.reject(
        new RangeError(`timeoutMs must be 1..${MAX_TIMEOUT_MS} ms, got ${String(timeoutMs)}`),
      );
    }
    const id = this.#nextId;
    let text: string;
    try {
      text = this.#envelope(encodeRequest(id, method, params));
    } catch (error) {
      // Parameters that cannot be serialised (too deep, a BigInt...): nothing is sent.
      return Promise.reject(
        new TypeError(
          `${method} to ${this.info.deviceId}: the parameters cannot be sent as JSON (${(error as Error).message})`,
          { cause: error },
        ),
      );
    }
    this.#nextId = this.#nextId >= MAX_ID ? 1 : this.#nextId + 1;
    const promise = new Promise<unknown>(CAPTURE);
    const pending = new Pending(
      this,
      id,
      method,
      timeoutMs,
      ++this.#sends,
      captured.resolve,
      captured.reject,
      read,
    );
    const onSessionTimer = this.#one === undefined && timeoutMs === this.#callTimeoutMs;
    if (!onSessionTimer) pending.timer = setTimeout(DeviceSession.#expire, timeoutMs, pending);
    else if (this.#oneTimer === undefined)
      this.#oneTimer = setTimeout(DeviceSession.#expireOne, timeoutMs, this);
    else this.#oneTimer.ref().refresh();
    if (signal !== undefined) {
      const onAbort = () => {
        this.#settle(id)?.reject(
          new ServerError('REQUEST_ABORTED', `${method} to ${this.info.deviceId} was aborted`, {
            cause: signal.reason,
          }),
        );
      };
      signal.addEventListener('abort', onAbort, { once: true });
      pending.cleanup = () => signal.removeEventListener('abort', onAbort);
    }
    // Registered before the send, so a reply can never arrive unexpected.
    if (this.#one === undefined) this.#one = pending;
    else {
      this.#more ??= new Map();
      this.#more.set(id, pending);
    }
    this.stats.requests++;
    if (this.listenerCount('frame') > 0) this.#emit('frame', 'out', text);
    this.#link.send(text, this.#sendDone);
    return promise;
  }

  /**
   * What the link says of a send. A send fails only on a connection going down: every request
   * still in flight on it fails with it.
   */
  readonly #sendDone = (error?: Error | null): void => {
    if (error === undefined || error === null) return;
    for (const pending of this.#inFlight()) {
      this.#settle(pending.id)?.reject(
        new ServerError(
          'DEVICE_DISCONNECTED',
          `send to ${this.info.deviceId} failed: ${error.message}`,
          { cause: error },
        ),
      );
    }
  };

  /** `text` as the payload of an MCP envelope with the session id (read at each send). */
  #envelope(payloadText: string): string {
    const sessionId = this.info.sessionId;
    if (sessionId !== this.#headSessionId) {
      // The protocol's envelope around an empty payload, less its closing brace; copied, as a
      // slice would keep the whole envelope it was cut from for the session's life.
      this.#head = Buffer.from(encodeEnvelope(sessionId, '').slice(0, -1)).toString();
      this.#headSessionId = sessionId;
    }
    return `${this.#head}${payloadText}}`;
  }

  /** The session's timer fired: `#one`'s deadline passed, if `#one` runs on it. */
  static #expireOne(session: DeviceSession): void {
    const pending = session.#one;
    if (pending !== undefined && pending.timer === undefined) DeviceSession.#expire(pending);
  }

  /** A request's deadline passed. */
  static #expire(pending: Pending): void {
    const session = pending.session;
    if (session.#lookup(pending.id) !== pending) return;
    session.stats.timeouts++;
    session.#settle(pending.id);
    const { method, id, timeoutMs } = pending;
    // A reply under another id is a wrong id, not a silent device: say so.
    const strays = (session.#strayReplies ?? [])
      .filter((stray) => stray.at >= pending.sentAt)
      .map((stray) => stray.id);
    pending.reject(
      new ServerError(
        'REQUEST_TIMEOUT',
        strays.length > 0
          ? `${method} to ${session.info.deviceId}: a reply with id ${strays.join(', ')}, expected ${id} (no reply with id ${id} within ${timeoutMs} ms)`
          : `${method} to ${session.info.deviceId} got no reply within ${timeoutMs} ms`,
      ),
    );
  }

  /**
   * The link's handlers for a session: one small object, not closures, per session; inside the
   * class body, so they reach its private side.
   */
  static readonly #Handlers = class implements DeviceLinkHandlers {
    constructor(readonly session: DeviceSession) {}

    text(text: string): void {
      // One frame's trouble stays in this handler: never the process, never another session.
      try {
        this.session.#onText(text);
      } catch (error) {
        this.session.#report(error, 'reading a device frame');
      }
    }

    binary(bytes: Uint8Array): void {
      // Audio is accepted, counted and dropped: this backend speaks MCP, not speech.
      this.session.stats.audioFrames++;
      this.session.stats.audioBytes += bytes.length;
    }

    closed(reason: string): void {
      this.session.#onClose(reason);
    }
  };

  /** `initialize`, offering the vision endpoint when one is configured. */
  initialize(
    vision?: { url: string; token?: string },
    options: RequestOptions = {},
  ): Promise<InitializeResult> {
    return this.#request(
      'initialize',
      {
        protocolVersion: '2024-11-05',
        capabilities: vision === undefined ? {} : { vision },
        clientInfo: { name: 'xiaozhi-mcp', version: '0.1.0' },
      },
      options,
      (result) => {
        const record = result as Partial<InitializeResult> | null;
        if (
          typeof record?.serverInfo?.name !== 'string' ||
          typeof record.serverInfo.version !== 'string'
        ) {
          throw new ServerError(
            'INVALID_REPLY',
            `initialize reply from ${this.info.deviceId} has no serverInfo name and version`,
          );
        }
        return record as InitializeResult;
      },
    ) as Promise<InitializeResult>;
  }

  /** Walks every `tools/list` page (the protocol core checks each page's budget). */
  listTools(withUserTools: boolean, options?: RequestOptions): Promise<ToolsWalk> {
    return walkToolsPages(
      (params: ToolsListParams) => this.#request('tools/list', params, options ?? {}, sharePage),
      { withUserTools },
    );
  }

  /** Calls a tool; the result's content is standard MCP content (firmware images unwrapped). */
  callTool(
    name: string,
    args: Record<string, unknown> = {},
    options: RequestOptions = {},
  ): Promise<ToolResult> {
    // The result is read as it is settled: no second promise per call.
    return this.#request(
      'tools/call',
      { name, arguments: args },
      options,
      readToolResult,
    ) as Promise<ToolResult>;
  }

  /** Sends a transport message as is (e.g. `{"type":"system","command":"reboot"}`). */
  sendMessage(message: Record<string, unknown>): void {
    const text = JSON.stringify({ session_id: this.info.sessionId, ...message });
    this.#emit('frame', 'out', text);
    this.#link.send(text);
  }

  /** Sends a raw text frame as is (robustness checks send malformed requests on purpose). */
  sendRaw(text: string): void {
    this.#emit('frame', 'out', text);
    this.#link.send(text);
  }

  /** Whether {@link ping} can measure anything: WebSocket can, MQTT (only clients ping) cannot. */
  get canPing(): boolean {
    return this.#link.ping !== undefined;
  }

  /** Round trip of a WebSocket ping, in milliseconds (the device answers pings). */
  ping(timeoutMs = 5000): Promise<number> {
    const link = this.#link;
    if (link.ping === undefined)
      return Promise.reject(
        new ServerError(
          'REQUEST_TIMEOUT',
          `${this.info.deviceId} is on ${this.#link.transport}, which has no server ping`,
        ),
      );
    return link.ping(timeoutMs).catch((error: unknown) => {
      throw new ServerError(
        'REQUEST_TIMEOUT',
        `no pong from ${this.info.deviceId} within ${timeoutMs} ms`,
        { cause: error },
      );
    });
  }

  /** Closes the connection; pending requests are rejected with `DEVICE_DISCONNECTED`. */
  close(reason = 'closed by the server'): void {
    this.#link.terminate();
    this.#onClose(reason);
  }

  #lookup(id: number): Pending | undefined {
    return this.#one?.id === id ? this.#one : this.#more?.get(id);
  }

  /** The requests in flight. */
  #inFlight(): Pending[] {
    const all = this.#one === undefined ? [] : [this.#one];
    if (this.#more !== undefined) all.push(...this.#more.values());
    return all;
  }

  #settle(id: number): Pending | undefined {
    const pending = this.#lookup(id);
    if (pending === undefined) return undefined;
    if (pending === this.#one) this.#one = undefined;
    else this.#more?.delete(id);
    if (pending.timer !== undefined) clearTimeout(pending.timer);
    // Only `#one` runs on the session's timer; idle, it must not hold the process open.
    else this.#oneTimer?.unref();
    pending.cleanup?.();
    return pending;
  }

  #onText(text: string): void {
    if (this.listenerCount('frame') > 0) this.#emit('frame', 'in', text);
    const frame = readDeviceFrame(text);
    if (frame.kind !== 'mcp') {
      this.#emit('message', frame);
      return;
    }
    const { message } = frame;
    if ((message.kind === 'result' || message.kind === 'error') && typeof message.id === 'number') {
      const pending = this.#settle(message.id);
      if (pending !== undefined) {
        this.stats.replies++;
        if (message.kind === 'result') {
          if (pending.read === undefined) pending.resolve(message.result);
          else {
            try {
              pending.resolve(pending.read(message.result, message));
            } catch (error) {
              pending.reject(error instanceof Error ? error : new Error(String(error)));
            }
          }
        } else {
          this.stats.errors++;
          pending.reject(message.error);
        }
        return;
      }
    }
    this.stats.strays++;
    if (message.kind === 'result' || message.kind === 'error') {
      this.#strayReplies ??= [];
      this.#strayReplies.push({ id: describeId(message.id), at: this.#sends });
      if (this.#strayReplies.length > 16) this.#strayReplies.shift();
    }
    this.#emit('stray', frame);
  }

  /** Emits to every listener; one that throws is reported and stops neither the others nor us. */
  #emit<K extends keyof DeviceSessionEvents>(event: K, ...args: DeviceSessionEvents[K]): void {
    for (const listener of this.rawListeners(event as never) as ((...a: unknown[]) => void)[]) {
      try {
        listener.apply(this, args);
      } catch (error) {
        this.#report(error, `a '${event}' listener threw`);
      }
    }
  }

  #report(error: unknown, where: string): void {
    try {
      this.#onError(error, where);
    } catch {
      // A reporter that throws has nowhere left to report to.
    }
  }

  #onClose(reason: string): void {
    if (this.#closedReason !== undefined) return;
    this.#closedReason = reason;
    clearTimeout(this.#oneTimer);
    for (const { id } of this.#inFlight()) {
      const pending = this.#settle(id);
      pending?.reject(
        new ServerError(
          'DEVICE_DISCONNECTED',
          `device ${this.info.deviceId} disconnected during ${pending.method} (${reason})`,
        ),
      );
    }
    this.#emit('closed', reason);
  }
}
