/**
 * The bridge's only way to boards: the HTTP API of a running `xiaozhi-mcp serve`
 * (packages/server/README.md, "HTTP API"). Its answers are read as untrusted JSON; an error
 * answer `{error: {code, message}}` becomes a {@link BridgeError} that keeps the status, the
 * API's code and whether the device itself answered (`source: "device"`).
 */
import type { ApiTool } from './catalog.js';
import { BridgeError } from './errors.js';

/** What the bridge reads of a device in `GET /devices` and `GET /devices/:id`. */
export interface ApiDevice {
  readonly deviceId: string;
  readonly board: string | null;
  readonly connected: boolean;
  readonly ready: boolean;
  readonly sessions: number;
  readonly connectedAt: string | number | null;
  readonly toolCount: number;
}

/** A `tools/call` result as the API returns it (standard MCP content). */
export interface ApiCallResult {
  readonly content: readonly unknown[];
  readonly isError: boolean;
}

/** How long a listing request may take; a call has its own bound. */
const LIST_TIMEOUT_MS = 15_000;
/** `GET /devices` page size: the API's largest. */
const DEVICES_PAGE = 1000;

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

function asDevice(value: unknown): ApiDevice | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const d = value as Record<string, unknown>;
  if (typeof d.deviceId !== 'string') return undefined;
  return {
    deviceId: d.deviceId,
    board: typeof d.board === 'string' ? d.board : null,
    connected: d.connected === true,
    ready: d.ready === true,
    sessions: typeof d.sessions === 'number' ? d.sessions : 0,
    connectedAt:
      typeof d.connectedAt === 'string' || typeof d.connectedAt === 'number' ? d.connectedAt : null,
    toolCount: typeof d.toolCount === 'number' ? d.toolCount : 0,
  };
}

function asTool(value: unknown): ApiTool | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const t = value as Record<string, unknown>;
  if (typeof t.name !== 'string') return undefined;
  return {
    name: t.name,
    description: typeof t.description === 'string' ? t.description : '',
    inputSchema:
      typeof t.inputSchema === 'object' && t.inputSchema !== null && !Array.isArray(t.inputSchema)
        ? (t.inputSchema as Record<string, unknown>)
        : { type: 'object' },
    userOnly: t.userOnly === true,
  };
}

export class ApiClient {
  readonly base: string;
  readonly #token: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(options: { server: string; token?: string | undefined; fetch?: typeof fetch }) {
    this.base = apiBase(options.server);
    this.#token = options.token;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /** Every device the server knows, through all pages of `GET /devices`. */
  async devices(signal?: AbortSignal): Promise<ApiDevice[]> {
    const all: ApiDevice[] = [];
    let cursor: string | undefined;
    // Bounded: a server that keeps handing out cursors cannot keep the bridge here forever.
    for (let page = 0; page < 1000; page++) {
      const query = `limit=${DEVICES_PAGE}${cursor === undefined ? '' : `&cursor=${encodeURIComponent(cursor)}`}`;
      const body = (await this.#request('GET', `/devices?${query}`, undefined, signal)) as {
        devices?: unknown;
        nextCursor?: unknown;
      };
      for (const item of Array.isArray(body.devices) ? body.devices : []) {
        const device = asDevice(item);
        if (device !== undefined) all.push(device);
      }
      if (typeof body.nextCursor !== 'string' || body.nextCursor === cursor) return all;
      cursor = body.nextCursor;
    }
    return all;
  }

  /** `GET /devices/:id`; `DEVICE_NOT_FOUND` when the server has never seen it. */
  async device(deviceId: string, signal?: AbortSignal): Promise<ApiDevice> {
    const body = (await this.#request(
      'GET',
      `/devices/${devicePath(deviceId)}`,
      undefined,
      signal,
    )) as {
      device?: unknown;
    };
    const device = asDevice(body.device);
    if (device === undefined)
      throw new BridgeError('API_ERROR', `GET /devices/${deviceId} answered without a device`);
    return device;
  }

  /** `GET /devices/:id/tools`, user-only tools included (marked). */
  async tools(deviceId: string, signal?: AbortSignal): Promise<ApiTool[]> {
    const body = (await this.#request(
      'GET',
      `/devices/${devicePath(deviceId)}/tools`,
      undefined,
      signal,
    )) as { tools?: unknown };
    const tools: ApiTool[] = [];
    for (const item of Array.isArray(body.tools) ? body.tools : []) {
      const tool = asTool(item);
      if (tool !== undefined) tools.push(tool);
    }
    return tools;
  }

  /** `POST /devices/:id/call`; `timeoutMs` is the API's own bound on the device's reply. */
  async call(
    deviceId: string,
    name: string,
    args: Record<string, unknown>,
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<ApiCallResult> {
    const body = (await this.#request(
      'POST',
      `/devices/${devicePath(deviceId)}/call`,
      { name, arguments: args, timeoutMs },
      signal,
    )) as { result?: unknown };
    const result = (typeof body.result === 'object' && body.result !== null ? body.result : {}) as {
      content?: unknown;
      isError?: unknown;
    };
    return {
      content: Array.isArray(result.content) ? result.content : [],
      isError: result.isError === true,
    };
  }

  async #request(
    method: 'GET' | 'POST',
    path: string,
    body: unknown,
    signal: AbortSignal | undefined,
  ): Promise<unknown> {
    const url = `${this.base}${path}`;
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.#token !== undefined) headers.authorization = `Bearer ${this.#token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const bound = signal ?? AbortSignal.timeout(LIST_TIMEOUT_MS);
    let response: Response;
    let text: string;
    try {
      response = await this.#fetch(url, {
        method,
        headers,
        signal: bound,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      text = await response.text();
    } catch (error) {
      if (bound.aborted) throw bound.reason ?? error;
      throw new BridgeError(
        'SERVER_UNREACHABLE',
        `cannot reach the xiaozhi-mcp server at ${this.base}: ${describe(error)}`,
        { cause: error },
      );
    }
    let json: unknown;
    try {
      json = text === '' ? {} : JSON.parse(text);
    } catch (error) {
      throw new BridgeError(
        'API_ERROR',
        `${method} ${url} answered ${response.status} with a body that is not JSON`,
        { status: response.status, cause: error },
      );
    }
    if (response.ok) return typeof json === 'object' && json !== null ? json : {};
    const error = ((json as { error?: unknown }).error ?? {}) as Record<string, unknown>;
    const message = typeof error.message === 'string' ? error.message : response.statusText;
    const apiCode =
      typeof error.code === 'string' || typeof error.code === 'number' ? error.code : undefined;
    const init = {
      status: response.status,
      ...(apiCode === undefined ? {} : { apiCode }),
      fromDevice: error.source === 'device',
    };
    if (response.status === 401)
      throw new BridgeError(
        'UNAUTHORIZED',
        `the xiaozhi-mcp server at ${this.base} refused the API token (${this.#token === undefined ? 'none given: pass --token' : 'wrong token'}): ${message}`,
        init,
      );
    if (response.status === 404 && apiCode === 'DEVICE_NOT_FOUND')
      throw new BridgeError('DEVICE_NOT_FOUND', message, init);
    // The device's own words are kept verbatim: they are what the client is shown.
    throw new BridgeError(
      'API_ERROR',
      init.fromDevice
        ? message
        : `${message} (${response.status}${apiCode === undefined ? '' : ` ${apiCode}`})`,
      init,
    );
  }
}

/** A device id in a path: a MAC's colons are fine there and easier to read in messages. */
function devicePath(deviceId: string): string {
  return encodeURIComponent(deviceId).replaceAll('%3A', ':');
}

function describe(error: unknown): string {
  const cause = (error as { cause?: { code?: unknown; message?: unknown } }).cause;
  if (cause !== undefined && typeof cause.code === 'string') return cause.code;
  return error instanceof Error ? error.message : String(error);
}
