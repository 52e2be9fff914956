/**
 * The MCP request loop, free of I/O: which payloads are dropped, what each request is answered
 * with, and the order in which replies leave the device (docs/protocol.md §2 and §3). The `firmware`
 * profile is the firmware's `McpServer::ParseMessage` exactly; the `strict` profile
 * (strict.ts) answers like a spec-compliant MCP server. The device SDK and the tests that
 * replay the golden corpus both run on {@link McpRequestLoop}.
 */

import { type ArgumentValues, validateToolCall } from './arguments.js';
import { type CJsonNode, cString, getItem, parseCJson, printCJsonNode, toCInt } from './cjson.js';
import { textForMessage } from './errors.js';
import { encodeDeviceError, encodeDeviceResult } from './jsonrpc.js';
import type { BoardIdentity, DispatchContext, VisionCapability } from './mcp-context.js';
import { buildToolsPage } from './paging.js';
import { encodeToolResult, type ToolReturn } from './results.js';
import { dispatchStrictRequest, encodeStrictToolError, encodeStrictToolResult } from './strict.js';
import type { Tool, ToolRegistry } from './tools.js';

/** `firmware`: byte for byte what xiaozhi-esp32 sends. `strict`: a spec-compliant MCP server. */
export type McpProfile = 'firmware' | 'strict';

export type DeviceAction<H> =
  /** The device sends nothing; `log` is the line the firmware logs, if any. */
  | { readonly kind: 'drop'; readonly log: string | undefined }
  /** A reply sent after one hop through the main loop. */
  | {
      readonly kind: 'reply';
      readonly id: number;
      readonly payload: string;
      readonly log: string | undefined;
    }
  /** A valid call: run the tool on the main loop, then send its reply (two hops). */
  | {
      readonly kind: 'call';
      readonly id: number;
      readonly tool: Tool;
      readonly handler: H;
      readonly values: ArgumentValues;
    };

/** `initialize`'s result: it never negotiates. */
export function initializeResult(board: BoardIdentity): string {
  // BOARD_NAME is a compile-time literal and the version a C string: both go in unescaped.
  return `{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"${board.name}","version":"${board.version}"}}`;
}

function readVision(params: CJsonNode | undefined): VisionCapability | undefined {
  const vision = getItem(getItem(params, 'capabilities'), 'vision');
  const url = getItem(vision, 'url');
  if (vision?.kind !== 'object' || url?.kind !== 'string') return undefined;
  const token = getItem(vision, 'token');
  return {
    url: cString(url.value),
    token: token?.kind === 'string' ? cString(token.value) : undefined,
  };
}

/**
 * Decides what the device does with one MCP payload. The rules are checked in the
 * firmware's order; the first that fails decides. `payload` is the envelope's
 * `payload` (a cJSON node) or a payload text; anything but an object is dropped.
 */
export function dispatchMcpRequest<H>(
  payload: CJsonNode | string,
  context: DispatchContext<H>,
): DeviceAction<H> {
  const root = typeof payload === 'string' ? parseCJson(payload) : payload;
  if (root?.kind !== 'object') return { kind: 'drop', log: undefined };

  const version = getItem(root, 'jsonrpc');
  if (version?.kind !== 'string' || cString(version.value) !== '2.0') {
    return { kind: 'drop', log: 'Invalid JSONRPC version' };
  }
  const methodNode = getItem(root, 'method');
  if (methodNode?.kind !== 'string') return { kind: 'drop', log: 'Missing method' };
  const method = cString(methodNode.value);
  if (method.startsWith('notifications')) return { kind: 'drop', log: undefined };
  const params = getItem(root, 'params');
  if (params !== undefined && params.kind !== 'object') {
    return { kind: 'drop', log: `Invalid params for method: ${method}` };
  }
  const idNode = getItem(root, 'id');
  if (idNode?.kind !== 'number') return { kind: 'drop', log: `Invalid id for method: ${method}` };
  const id = toCInt(idNode.value);

  const reply = (result: string): DeviceAction<H> => ({
    kind: 'reply',
    id,
    payload: encodeDeviceResult(id, result),
    log: undefined,
  });
  const fail = (message: string, log?: string): DeviceAction<H> => ({
    kind: 'reply',
    id,
    payload: encodeDeviceError(id, message),
    log,
  });

  switch (method) {
    case 'initialize': {
      const vision = readVision(params);
      if (vision !== undefined) context.onVision?.(vision);
      return reply(initializeResult(context.board));
    }
    case 'tools/list': {
      const cursor = getItem(params, 'cursor');
      const withUserTools = getItem(params, 'withUserTools');
      const page = buildToolsPage(context.tools.tools, {
        cursor: cursor?.kind === 'string' ? cString(cursor.value) : undefined,
        withUserTools: withUserTools?.kind === 'bool' && withUserTools.value,
        budgetBytes: context.pageBudgetBytes,
      });
      return page.ok ? reply(page.result) : fail(page.message, `tools/list: ${page.message}`);
    }
    case 'tools/call': {
      const call = validateToolCall(context.tools, params);
      if (!call.ok) return fail(call.message, `tools/call: ${call.message}`);
      return { kind: 'call', id, tool: call.tool, handler: call.handler, values: call.values };
    }
    default:
      return fail(`Method not implemented: ${method}`, `Method not implemented: ${method}`);
  }
}

/**
 * The device's main loop: tasks run one at a time, in the order they were scheduled.
 * Scheduling from inside a task appends to the queue, which is what gives a successful
 * call its second hop.
 */
export class MainLoop {
  readonly #queue: (() => unknown)[] = [];
  #running: Promise<void> | undefined;
  #stopped = false;
  readonly #onError: (error: unknown) => void;

  constructor(onError: (error: unknown) => void = () => {}) {
    this.#onError = onError;
  }

  /** Queues a task; the loop starts on a later microtask, so a burst queues up first. */
  schedule(task: () => unknown): void {
    if (this.#stopped) return;
    this.#queue.push(task);
    this.#running ??= Promise.resolve().then(() => this.#drain());
  }

  /** Resolves once the queue is empty. */
  async idle(): Promise<void> {
    while (this.#running) await this.#running;
  }

  get pending(): number {
    return this.#queue.length;
  }

  /**
   * Stops the loop as a reset does: queued tasks are dropped and later ones ignored. A task
   * already running finishes, but nothing it schedules will run.
   */
  stop(): void {
    this.#stopped = true;
    this.#queue.length = 0;
  }

  get stopped(): boolean {
    return this.#stopped;
  }

  async #drain(): Promise<void> {
    for (let task = this.#queue.shift(); task !== undefined; task = this.#queue.shift()) {
      try {
        await task();
      } catch (error) {
        this.#onError(error);
      }
    }
    this.#running = undefined;
  }
}

export type ToolRunner<H> = (
  handler: H,
  values: ArgumentValues,
  tool: Tool,
) => ToolReturn | Promise<ToolReturn>;

export interface McpRequestLoopOptions<H> extends DispatchContext<H> {
  /** `firmware` unless told otherwise. */
  readonly profile?: McpProfile;
  /** Runs a tool's handler. A thrown error becomes the profile's error reply with its message. */
  readonly runTool: ToolRunner<H>;
  /** Sends one reply payload (the device wraps it in the envelope); see {@link McpRequestLoop.send}. */
  readonly send?: (payload: string) => void;
  /** The firmware's `ESP_LOGE` lines (`MCP:` tag) for dropped and failed requests. */
  readonly log?: (line: string) => void;
  /** Called on the main loop as a valid call starts, before its tool runs. */
  readonly onToolCall?: ((tool: Tool) => void) | undefined;
  /** The board's main loop, when other work shares it; else the loop gets its own. */
  readonly loop?: MainLoop;
}

/** A dispatched request, the same shape under both profiles. */
type LoopAction<H> =
  | { readonly kind: 'drop'; readonly log: string | undefined }
  | { readonly kind: 'reply'; readonly payload: string; readonly log: string | undefined }
  | {
      readonly kind: 'call';
      readonly tool: Tool;
      readonly handler: H;
      readonly values: ArgumentValues;
      readonly result: (value: ToolReturn) => string;
      readonly error: (message: string) => string;
    };

/**
 * The one MCP request loop: dispatch by profile, then through the main loop, where replies
 * take one hop and a successful call two (run the tool, then send), so replies can leave in a
 * different order from the requests (match them by id). Tools run one at a time, in arrival
 * order.
 */
export class McpRequestLoop<H> {
  readonly loop: MainLoop;
  readonly profile: McpProfile;
  /** Read at each request: a device adds tools after construction. */
  tools: ToolRegistry<H>;
  /** Read at each `initialize`: a board reports its new version after an OTA upgrade. */
  board: BoardIdentity;
  /** Read as each reply leaves; undefined drops it (no channel is open). */
  send: ((payload: string) => void) | undefined;
  readonly #options: McpRequestLoopOptions<H>;

  constructor(options: McpRequestLoopOptions<H>) {
    this.#options = options;
    this.profile = options.profile ?? 'firmware';
    this.tools = options.tools;
    this.board = options.board;
    this.send = options.send;
    this.loop = options.loop ?? new MainLoop();
  }

  /** Handles one MCP payload (the envelope's cJSON node, or the payload text). */
  receive(payload: CJsonNode | string): void {
    const action = this.#dispatch(payload);
    if (action.kind !== 'call') {
      if (action.log !== undefined) this.#options.log?.(action.log);
      if (action.kind === 'reply') this.#reply(action.payload);
      return;
    }
    this.loop.schedule(async () => {
      this.#options.onToolCall?.(action.tool);
      let reply: string;
      try {
        // Encoding is inside the try: a strict reply refuses a value that is no ToolReturn.
        reply = action.result(
          await this.#options.runTool(action.handler, action.values, action.tool),
        );
      } catch (error) {
        reply = action.error(error instanceof Error ? error.message : textForMessage(error));
      }
      this.#reply(reply);
    });
  }

  /** Resolves once every scheduled run and reply has happened. */
  idle(): Promise<void> {
    return this.loop.idle();
  }

  #reply(payload: string): void {
    this.loop.schedule(() => this.send?.(payload));
  }

  #dispatch(payload: CJsonNode | string): LoopAction<H> {
    const { onVision, pageBudgetBytes } = this.#options;
    const context: DispatchContext<H> = {
      tools: this.tools,
      board: this.board,
      onVision,
      pageBudgetBytes,
    };
    if (this.profile === 'strict') {
      // Standard JSON rules: the strict dispatcher reads the text, not cJSON's view of it.
      const text = typeof payload === 'string' ? payload : printCJsonNode(payload);
      const action = dispatchStrictRequest(text, context);
      if (action.kind !== 'call') return { ...action, log: undefined };
      const { id } = action;
      return {
        ...action,
        result: (value) => encodeStrictToolResult(id, value),
        error: (message) => encodeStrictToolError(id, message),
      };
    }
    const action = dispatchMcpRequest(payload, context);
    if (action.kind !== 'call') return action;
    const { id } = action;
    return {
      ...action,
      result: (value) => encodeDeviceResult(id, encodeToolResult(value)),
      error: (message) => encodeDeviceError(id, message),
    };
  }
}
