/**
 * The one client of the HTTP API of a running `xiaozhi-mcp serve` (packages/server/README.md,
 * "HTTP API"; its wire types are the protocol's, module `api`): the bridge reaches boards
 * through it, and the CLI's `devices`, `tools` and `call` are written on it. Answers are
 * untrusted JSON, read with the protocol's readers. Whatever goes wrong is a
 * {@link BridgeError}:
 *
 * - `SERVER_UNREACHABLE`, `SERVER_TIMEOUT`: no answer (when the caller's own signal aborts the
 *   request, its reason is thrown instead);
 * - `UNAUTHORIZED`, `DEVICE_NOT_FOUND`, `API_ERROR`: an error answer, which keeps its status,
 *   the API's code and message, and whether the device itself answered;
 * - `API_ERROR` too for an answer that is not the API's: not JSON, without its list or result,
 *   a device list whose cursors go round.
 *
 * Its bounds are decided here, once. A request without the caller's signal gives up after
 * {@link REQUEST_TIMEOUT_MS}; a call after its `timeoutMs` plus {@link CALL_MARGIN_MS}, so that
 * the API's own 504 comes first, or after {@link CALL_TIMEOUT_DEFAULT_MS} when it leaves the
 * timeout to the server. `GET /devices` is read in the API's largest pages
 * (`devicesPageSize`).
 */
import {
  API_DEVICES_PAGE_MAX,
  type ApiCallRequest,
  type ApiDevice,
  type ApiForgetResponse,
  type ApiTool,
  readApiDevice,
  readApiError,
  readApiTool,
  readToolResult,
  type ToolResult,
} from '@xiaozhi-mcp/protocol';
import { BridgeError } from './errors.js';

/** Bound on a request the caller gives no signal for: the server answers these from memory. */
export const REQUEST_TIMEOUT_MS = 15_000;
/**
 * A call's own bound is its `timeoutMs` plus this much: the API answers 504 at `timeoutMs`;
 * this catches a server that answers nothing at all.
 */
export const CALL_MARGIN_MS = 5000;
/** Bound on a call that leaves its timeout to the server (whose own is configurable). */
export const CALL_TIMEOUT_DEFAULT_MS = 120_000;
/** At most this many pages of `GET /devices`: a server that keeps handing out cursors. */
const MAX_DEVICE_PAGES = 1000;

export interface ApiClientOptions {
  /** The server's base URL, or its API's; messages name the server as given here. */
  readonly server: string;
  /** The API's bearer token (`serve --api-token`). */
  readonly token?: string | undefined;
  readonly fetch?: typeof fetch;
  /**
   * Devices per page of `GET /devices`: the API's largest by default (fewest requests);
   * `'server'` sends no `limit`, taking the server's default page.
   */
  readonly devicesPageSize?: number | 'server';
}

/** `…/api` for a server's base URL (kept as is when it already ends with `/api`). */
export function apiBase(server: string): string {
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw new BridgeError(
      'CONFIG_INVALID',
      `--server must be a URL, got ${JSON.stringify(server)}`,
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new BridgeError('CONFIG_INVALID', `--server must be http:// or https://, got ${server}`);
  const path = url.pathname.replace(/\/+$/, '');
  url.pathname = path.endsWith('/api') ? path : `${path}/api`;
  url.search = '';
  url.hash = '';
  return url.toString();
}

/** An answer of the API: its status and its JSON object (`{}` for any other JSON). */
interface Answer {
  readonly status: number;
  readonly body: Record<string, unknown>;
}

export class ApiClient {
  /** The API's URL (`…/api`). */
  readonly base: string;
  /** The server as given, for messages. */
  readonly server: string;
  readonly devicesPageSize: number | 'server';
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(options: ApiClientOptions) {
    this.base = apiBase(options.server);
    this.server = options.server;
    const pageSize = options.devicesPageSize ?? API_DEVICES_PAGE_MAX;
    if (
      pageSize !== 'server' &&
      !(Number.isInteger(pageSize) && pageSize >= 1 && pageSize <= API_DEVICES_PAGE_MAX)
    )
      throw new BridgeError(
        'CONFIG_INVALID',
        `devicesPageSize must be an integer 1..${API_DEVICES_PAGE_MAX} or 'server', got ${pageSize}`,
      );
    this.devicesPageSize = pageSize;
    this.#token = options.token;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /**
   * Every device the server knows, through all pages of `GET /devices`, read into the
   * protocol's `ApiDevice` (an item without a `deviceId` is left out).
   */
  async devices(signal?: AbortSignal): Promise<ApiDevice[]> {
    const devices: ApiDevice[] = [];
    for (const item of await this.devicesAsSent(signal)) {
      const device = readApiDevice(item);
      if (device !== undefined) devices.push(device);
    }
    return devices;
  }

  /** The same list with every item as the server sent it: for output that shows the answer. */
  async devicesAsSent(signal?: AbortSignal): Promise<unknown[]> {
    const all: unknown[] = [];
    const cursors = new Set<string>();
    let cursor: string | undefined;
    for (let page = 0; page < MAX_DEVICE_PAGES; page++) {
      const query = new URLSearchParams();
      if (this.devicesPageSize !== 'server') query.set('limit', String(this.devicesPageSize));
      if (cursor !== undefined) query.set('cursor', cursor);
      const search = query.toString() === '' ? '' : `?${query}`;
      const { status, body } = await this.#request('GET', `/devices${search}`, signal);
      if (!Array.isArray(body.devices))
        throw this.#invalid(status, 'answered without a device list');
      for (const item of body.devices) all.push(item);
      const next = body.nextCursor;
      if (next === undefined || next === null) return all;
      if (typeof next !== 'string' || next === '')
        throw this.#invalid(
          status,
          `answered with a nextCursor that is not a string: ${quote(next)}`,
        );
      // A server that hands out a cursor twice would be followed forever.
      if (cursors.has(next))
        throw this.#invalid(status, `gave the device list cursor ${quote(next)} twice`);
      cursors.add(next);
      cursor = next;
    }
    throw this.#invalid(200, `handed out more than ${MAX_DEVICE_PAGES} pages of devices`);
  }

  /** `GET /devices/:id`; `DEVICE_NOT_FOUND` when the server has never seen it. */
  async device(deviceId: string, signal?: AbortSignal): Promise<ApiDevice> {
    const { status, body } = await this.#request('GET', devicePath(deviceId), signal);
    const device = readApiDevice(body.device);
    if (device === undefined) throw this.#invalid(status, 'answered without a device');
    return device;
  }

  /** `GET /devices/:id/tools`, user-only tools included (marked); a nameless one is left out. */
  async tools(deviceId: string, signal?: AbortSignal): Promise<ApiTool[]> {
    const { status, body } = await this.#request('GET', `${devicePath(deviceId)}/tools`, signal);
    if (!Array.isArray(body.tools)) throw this.#invalid(status, 'answered without a tool list');
    const tools: ApiTool[] = [];
    for (const item of body.tools) {
      const tool = readApiTool(item);
      if (tool !== undefined) tools.push(tool);
    }
    return tools;
  }

  /**
   * `POST /devices/:id/call`. `timeoutMs` is the API's bound on the device's reply (the
   * server's own when undefined); a `signal` replaces the client's bound on the request.
   */
  async call(
    deviceId: string,
    name: string,
    args: Record<string, unknown>,
    timeoutMs?: number,
    signal?: AbortSignal,
  ): Promise<ToolResult> {
    const request: ApiCallRequest = {
      name,
      arguments: args,
      ...(timeoutMs === undefined ? {} : { timeoutMs }),
    };
    const { status, body } = await this.#request(
      'POST',
      `${devicePath(deviceId)}/call`,
      signal,
      request,
      timeoutMs === undefined ? CALL_TIMEOUT_DEFAULT_MS : timeoutMs + CALL_MARGIN_MS,
    );
    const result = body.result;
    if (
      typeof result !== 'object' ||
      result === null ||
      !Array.isArray((result as { content?: unknown }).content)
    )
      throw this.#invalid(status, 'answered without a tool result');
    return readToolResult(result);
  }

  /**
   * `DELETE /devices/:id`: the server forgets the device (its record, token and Client-Id
   * pin); `DEVICE_NOT_FOUND` when it has never seen it.
   */
  async forget(deviceId: string, signal?: AbortSignal): Promise<ApiForgetResponse> {
    const { body } = await this.#request('DELETE', devicePath(deviceId), signal);
    return { forgotten: typeof body.forgotten === 'string' ? body.forgotten : deviceId };
  }

  async #request(
    method: 'GET' | 'POST' | 'DELETE',
    path: string,
    signal: AbortSignal | undefined,
    body?: unknown,
    boundMs = REQUEST_TIMEOUT_MS,
  ): Promise<Answer> {
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.#token !== undefined) headers.authorization = `Bearer ${this.#token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    // A timer of our own rather than AbortSignal.timeout: tests drive it with fake timers.
    const own = new AbortController();
    const timer = signal === undefined ? setTimeout(() => own.abort(), boundMs) : undefined;
    const bound = signal ?? own.signal;
    let response: Response;
    let text: string;
    try {
      response = await this.#fetch(`${this.base}${path}`, {
        method,
        headers,
        signal: bound,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      text = await response.text();
    } catch (error) {
      if (bound.aborted && signal !== undefined) throw signal.reason ?? error;
      if (bound.aborted)
        throw new BridgeError(
          'SERVER_TIMEOUT',
          `the server at ${this.server} did not answer within ${boundMs} ms`,
          { cause: error },
        );
      throw new BridgeError(
        'SERVER_UNREACHABLE',
        `cannot reach the server at ${this.server}: ${reasonOf(error)}`,
        { cause: error },
      );
    } finally {
      clearTimeout(timer);
    }
    const { status } = response;
    let json: unknown;
    try {
      json = text === '' ? {} : JSON.parse(text);
    } catch (error) {
      throw new BridgeError(
        'API_ERROR',
        `the server at ${this.server} answered HTTP ${status} with something that is not JSON (is it a xiaozhi-mcp server?)`,
        { status, cause: error },
      );
    }
    if (response.ok)
      return {
        status,
        body:
          typeof json === 'object' && json !== null && !Array.isArray(json)
            ? (json as Record<string, unknown>)
            : {},
      };
    const said = readApiError(json);
    const init = {
      status,
      apiCode: said.code,
      apiMessage: said.message ?? `HTTP ${status}`,
      fromDevice: said.fromDevice,
    };
    if (status === 401)
      throw new BridgeError(
        'UNAUTHORIZED',
        `the server at ${this.server} refused the API token (${this.#token === undefined ? 'none given: pass --token' : 'wrong token'}): ${init.apiMessage}`,
        init,
      );
    if (status === 404 && said.code === 'DEVICE_NOT_FOUND')
      throw new BridgeError('DEVICE_NOT_FOUND', init.apiMessage, init);
    // The device's own words are kept verbatim: they are what the client is shown.
    throw new BridgeError(
      'API_ERROR',
      said.fromDevice
        ? init.apiMessage
        : `${init.apiMessage} (${status}${said.code === undefined ? '' : ` ${said.code}`})`,
      init,
    );
  }

  /** An answer that is not the API's. */
  #invalid(status: number, what: string): BridgeError {
    return new BridgeError('API_ERROR', `the server at ${this.server} ${what}`, { status });
  }
}

/** `/devices/:id`, the id escaped as a path segment. */
function devicePath(deviceId: string): string {
  return `/devices/${encodeURIComponent(deviceId)}`;
}

/** A received value in a message: short, and never a throw (a value nested too deep to print). */
function quote(value: unknown): string {
  if (typeof value === 'object' && value !== null)
    return Array.isArray(value) ? 'an array' : 'an object';
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

/** Why fetch failed: it says only "fetch failed", the reason (ECONNREFUSED...) is its cause. */
function reasonOf(error: unknown): string {
  const cause = error instanceof Error && error.cause !== undefined ? error.cause : error;
  const message = cause instanceof Error ? cause.message : String(cause);
  const code =
    typeof cause === 'object' && cause !== null ? (cause as { code?: unknown }).code : undefined;
  if (typeof code !== 'string' || message.includes(code)) return message;
  return message === '' ? code : `${message} (${code})`;
}
