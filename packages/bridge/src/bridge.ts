/**
 * The bridge: the boards on a running `xiaozhi-mcp serve`, reached through its HTTP API only,
 * served as one standard MCP server (the official SDK's low-level `Server`) per client
 * connection. It re-reads the boards and their tools every `pollMs`, and tells every connected
 * client `notifications/tools/list_changed` when boards come, go or change their tools.
 */
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import {
  CallToolRequestSchema,
  type CallToolResult,
  ErrorCode,
  ListToolsRequestSchema,
  type ListToolsResult,
} from '@modelcontextprotocol/sdk/types.js';
import { API_CALL_TIMEOUT_MAX_MS, type ApiDevice } from '@xiaozhi-mcp/protocol';
import { ApiClient, CALL_MARGIN_MS } from './api-client.js';
import {
  type BoardTools,
  boardsFingerprint,
  buildCatalog,
  type Catalog,
  decodeCursor,
  pageOf,
  type ServedTool,
} from './catalog.js';
import { BridgeError } from './errors.js';
import { callFailure, toCallToolResult, toolError } from './results.js';

/**
 * A JSON-RPC error reply to a client's request: the SDK's server sends `code` and `message` as
 * they are. Not the SDK's `McpError`, whose message already starts `MCP error <code>: `, which
 * the client puts before it once more.
 */
class RequestError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** Reported as `serverInfo.version` (package.test.ts keeps it equal to package.json's). */
export const BRIDGE_VERSION = '0.1.0';
export const BRIDGE_NAME = 'xiaozhi-mcp-bridge';

export const DEFAULT_POLL_MS = 2000;
export const DEFAULT_PAGE_SIZE = 100;
export const DEFAULT_CALL_TIMEOUT_MS = 30_000;
/** The API's bound on `timeoutMs`. */
export const MAX_CALL_TIMEOUT_MS = API_CALL_TIMEOUT_MAX_MS;
/** Bound on one re-read of the boards and their tools. */
const REFRESH_TIMEOUT_MS = 15_000;

export interface BridgeOptions {
  /** Base URL of a running `xiaozhi-mcp serve` (`/api` is appended unless it ends with it). */
  readonly server: string;
  /** API bearer token (`serve --api-token`). */
  readonly token?: string;
  /** Serve only this board (its Device-Id, the MAC); its tools keep their own names. */
  readonly device?: string;
  /** How often boards and their tools are re-read for list_changed (default 2000). */
  readonly pollMs?: number;
  /** Tools per `tools/list` page the bridge serves (default 100). */
  readonly pageSize?: number;
  /** Bound on a `tools/call` (default 30000), passed to the API as `timeoutMs`. */
  readonly callTimeoutMs?: number;
  /** Serve user-only tools too (`self.reboot`, `self.upgrade_firmware`, ...); default false. */
  readonly withUserTools?: boolean;
  readonly fetch?: typeof fetch;
  /** Where log lines go (default stderr); never stdout, which is the stdio transport's. */
  readonly log?: (line: string) => void;
}

interface Connection {
  readonly server: Server;
  initialized: boolean;
}

function positiveInteger(name: string, value: number | undefined, fallback: number, max: number) {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < 1 || v > max)
    throw new BridgeError('CONFIG_INVALID', `${name} must be an integer 1..${max}, got ${v}`);
  return v;
}

export class XiaozhiBridge {
  readonly pollMs: number;
  readonly pageSize: number;
  readonly callTimeoutMs: number;
  /** The board this bridge is pinned to, if any. */
  readonly device: string | undefined;
  readonly #api: ApiClient;
  readonly #withUserTools: boolean;
  readonly #log: (line: string) => void;
  readonly #connections = new Set<Connection>();
  readonly #lifetime = new AbortController();
  #catalog: Catalog;
  #fingerprint = '';
  #cache = new Map<string, { key: string; board: BoardTools }>();
  #refreshing: Promise<boolean> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #started = false;
  #closed = false;
  #failing = false;

  constructor(options: BridgeOptions) {
    this.#api = new ApiClient({
      server: options.server,
      token: options.token,
      ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
    });
    this.pollMs = positiveInteger('pollMs', options.pollMs, DEFAULT_POLL_MS, 3_600_000);
    this.pageSize = positiveInteger('pageSize', options.pageSize, DEFAULT_PAGE_SIZE, 10_000);
    this.callTimeoutMs = positiveInteger(
      'callTimeoutMs',
      options.callTimeoutMs,
      DEFAULT_CALL_TIMEOUT_MS,
      MAX_CALL_TIMEOUT_MS,
    );
    // The server keys devices by their MAC in lowercase.
    this.device = options.device?.toLowerCase();
    this.#withUserTools = options.withUserTools ?? false;
    this.#log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.#catalog = buildCatalog([], {
      generation: 0,
      many: this.many,
      withUserTools: this.#withUserTools,
    });
  }

  /** The API base URL the bridge talks to. */
  get api(): string {
    return this.#api.base;
  }

  /**
   * Whether names carry the board's MAC: whenever the bridge is not pinned to one board, so
   * that a name never changes under a client when a second board connects.
   */
  get many(): boolean {
    return this.device === undefined;
  }

  /** What is served now, in `tools/list` order. */
  get tools(): readonly ServedTool[] {
    return this.#catalog.tools;
  }

  /**
   * The first discovery. Fails with `SERVER_UNREACHABLE`, `UNAUTHORIZED` (the API refused the
   * token) or `DEVICE_NOT_FOUND` (`device` was never seen by the server); then re-reads every
   * `pollMs`.
   */
  async start(): Promise<void> {
    if (this.#started) return;
    await this.refresh();
    this.#started = true;
    this.#schedule();
  }

  /**
   * Re-reads the boards and their tools now; true when what is served changed (every
   * connected client has then been sent `notifications/tools/list_changed`).
   */
  refresh(): Promise<boolean> {
    if (this.#refreshing === undefined) {
      this.#refreshing = this.#refresh().finally(() => {
        this.#refreshing = undefined;
      });
    }
    return this.#refreshing;
  }

  /** A new MCP server for one client connection (stdio, or one Streamable HTTP session). */
  createServer(): Server {
    const server = new Server(
      { name: BRIDGE_NAME, version: BRIDGE_VERSION },
      {
        capabilities: { tools: { listChanged: true } },
        instructions:
          'Tools of xiaozhi ESP32 boards, called on the board itself. Tool names are the ' +
          "board's own with '.' written '-'" +
          (this.many ? ", after the board's MAC and '__'." : '.'),
      },
    );
    const connection: Connection = { server, initialized: false };
    server.oninitialized = () => {
      connection.initialized = true;
    };
    server.onclose = () => {
      this.#connections.delete(connection);
    };
    server.setRequestHandler(ListToolsRequestSchema, (request) =>
      this.#listTools(request.params?.cursor),
    );
    server.setRequestHandler(CallToolRequestSchema, (request, extra) =>
      this.#callTool(request.params.name, request.params.arguments ?? {}, extra.signal),
    );
    this.#connections.add(connection);
    return server;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#lifetime.abort(new Error('the bridge is closing'));
    const connections = [...this.#connections];
    this.#connections.clear();
    await Promise.all(connections.map((c) => c.server.close().catch(() => {})));
  }

  #schedule(): void {
    if (this.#closed) return;
    this.#timer = setTimeout(() => {
      this.refresh()
        .then(
          () => {
            if (this.#failing) this.#log('bridge: the server answers again');
            this.#failing = false;
          },
          (error: unknown) => {
            // Logged once per streak: the served list stays as it was until the server answers.
            if (!this.#failing && !this.#closed)
              this.#log(`bridge: re-reading the boards failed: ${(error as Error).message}`);
            this.#failing = true;
          },
        )
        .finally(() => this.#schedule());
    }, this.pollMs);
    // The transports keep the process alive, not the poll.
    this.#timer.unref();
  }

  async #refresh(): Promise<boolean> {
    if (this.#closed) return false;
    const signal = AbortSignal.any([
      this.#lifetime.signal,
      AbortSignal.timeout(REFRESH_TIMEOUT_MS),
    ]);
    const devices = await this.#devices(signal);
    const boards: BoardTools[] = [];
    const cache = new Map<string, { key: string; board: BoardTools }>();
    for (const device of devices) {
      if (!device.connected || !device.ready) continue;
      // A board's tools change only with a new session: re-read them only then.
      const key = `${device.sessions}|${device.connectedAt}|${device.toolCount}|${device.board}`;
      let entry = this.#cache.get(device.deviceId);
      if (entry?.key !== key) {
        let tools: BoardTools['tools'];
        try {
          tools = await this.#api.tools(device.deviceId, signal);
        } catch (error) {
          // Gone or not ready since it was listed: not served this round.
          if (error instanceof BridgeError && (error.status === 404 || error.status === 409))
            continue;
          throw error;
        }
        entry = { key, board: { deviceId: device.deviceId, board: device.board, tools } };
      }
      cache.set(device.deviceId, entry);
      boards.push(entry.board);
    }
    if (this.#closed) return false;
    this.#cache = cache;
    const fingerprint = boardsFingerprint(boards);
    if (fingerprint === this.#fingerprint) return false;
    this.#fingerprint = fingerprint;
    this.#catalog = buildCatalog(boards, {
      generation: this.#catalog.generation + 1,
      many: this.many,
      withUserTools: this.#withUserTools,
    });
    for (const lost of this.#catalog.collisions)
      this.#log(
        `bridge: ${lost.tool} on ${lost.deviceId} left out: its name ${lost.name} is taken`,
      );
    this.#log(`bridge: serving ${this.#catalog.tools.length} tools of ${boards.length} board(s)`);
    this.#notify();
    return true;
  }

  async #devices(signal: AbortSignal): Promise<ApiDevice[]> {
    if (this.device === undefined) return this.#api.devices(signal);
    try {
      return [await this.#api.device(this.device, signal)];
    } catch (error) {
      // Forgotten after start: nothing to serve until the server sees it again.
      if (this.#started && error instanceof BridgeError && error.code === 'DEVICE_NOT_FOUND')
        return [];
      if (error instanceof BridgeError && error.code === 'DEVICE_NOT_FOUND')
        throw new BridgeError(
          'DEVICE_NOT_FOUND',
          `the server at ${this.#api.base} has never seen device ${this.device}`,
          { cause: error, status: 404 },
        );
      throw error;
    }
  }

  #notify(): void {
    for (const connection of this.#connections) {
      if (!connection.initialized) continue;
      connection.server.sendToolListChanged().catch((error: unknown) => {
        this.#log(`bridge: list_changed not delivered: ${(error as Error).message}`);
      });
    }
  }

  #listTools(cursor: string | undefined): ListToolsResult {
    const catalog = this.#catalog;
    let offset = 0;
    if (cursor !== undefined) {
      const decoded = decodeCursor(cursor, catalog);
      if ('error' in decoded) throw new RequestError(ErrorCode.InvalidParams, decoded.error);
      offset = decoded.offset;
    }
    const page = pageOf(catalog, offset, this.pageSize);
    return {
      tools: page.tools.map((tool) => ({
        name: tool.name,
        title: tool.tool,
        description: tool.description,
        inputSchema: tool.inputSchema as ListToolsResult['tools'][number]['inputSchema'],
      })),
      ...(page.nextCursor === undefined ? {} : { nextCursor: page.nextCursor }),
    };
  }

  async #callTool(
    name: string,
    args: Record<string, unknown>,
    cancelled: AbortSignal,
  ): Promise<CallToolResult> {
    const served = this.#catalog.byName.get(name);
    if (served === undefined)
      throw new RequestError(ErrorCode.InvalidParams, `Unknown tool: ${name}`);
    const timeout = AbortSignal.timeout(this.callTimeoutMs + CALL_MARGIN_MS);
    // The client's cancellation (notifications/cancelled) aborts the API request, and the
    // server then drops its pending request to the board.
    const signal = AbortSignal.any([cancelled, timeout, this.#lifetime.signal]);
    try {
      const result = await this.#api.call(
        served.deviceId,
        served.tool,
        args,
        this.callTimeoutMs,
        signal,
      );
      return toCallToolResult(result);
    } catch (error) {
      if (cancelled.aborted) throw error; // the SDK answers nothing to a cancelled request
      if (this.#lifetime.signal.aborted)
        return toolError(`${served.tool} on ${served.deviceId}: the bridge is closing`);
      const failure = callFailure(error, {
        deviceId: served.deviceId,
        tool: served.tool,
        timedOut: timeout.aborted,
        timeoutMs: this.callTimeoutMs + CALL_MARGIN_MS,
      });
      if (failure.kind === 'result') return failure.result;
      throw new RequestError(
        failure.kind === 'invalid-params' ? ErrorCode.InvalidParams : ErrorCode.InternalError,
        failure.message,
      );
    }
  }
}
