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
import { encodeDeviceError, encodeDeviceResult, type JsonRpcId } from './jsonrpc.js';
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

// Plain functions, not closures made per request: a busy board answers many.
function replyAction<H>(id: number, result: string): DeviceAction<H> {
  return { kind: 'reply', id, payload: encodeDeviceResult(id, result), log: undefined };
}

function failAction<H>(id: number, message: string, log: string): DeviceAction<H> {
  return { kind: 'reply', id, payload: encodeDeviceError(id, message), log };
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

  switch (method) {
    case 'initialize': {
      const vision = readVision(params);
      if (vision !== undefined) context.onVision?.(vision);
      return replyAction(id, initializeResult(context.board));
    }
    case 'tools/list': {
      const cursor = getItem(params, 'cursor');
      const withUserTools = getItem(params, 'withUserTools');
      const page = buildToolsPage(context.tools.tools, {
        cursor: cursor?.kind === 'string' ? cString(cursor.value) : undefined,
        withUserTools: withUserTools?.kind === 'bool' && withUserTools.value,
        budgetBytes: context.pageBudgetBytes,
      });
      return page.ok
        ? replyAction(id, page.result)
        : failAction(id, page.message, `tools/list: ${page.message}`);
    }
    case 'tools/call': {
      const call = validateToolCall(context.tools, params);
      if (!call.ok) return failAction(id, call.message, `tools/call: ${call.message}`);
      return { kind: 'call', id, tool: call.tool, handler: call.handler, values: call.values };
    }
    default:
      return failAction(
        id,
        `Method not implemented: ${method}`,
        `Method not implemented: ${method}`,
      );
  }
}

/**
 * The device's main loop: tasks run one at a time, in the order they were scheduled.
 * Scheduling from inside a task appends to the queue, which is what gives a successful
 * call its second hop.
 */
export class MainLoop {
  readonly #queue: (() => unknown)[] = [];
  #running = false;
  #stopped = false;
  #waiters: (() => void)[] = [];
  readonly #onError: (error: unknown) => void;
  // One bound drain per loop, not a closure and a promise per burst of tasks.
  readonly #drainNext = (): void => this.#drain();
  readonly #failed = (error: unknown): void => {
    this.#onError(error);
    this.#drain();
  };

  constructor(onError: (error: unknown) => void = () => {}) {
    this.#onError = onError;
  }

  /** Queues a task; the loop starts on a later microtask, so a burst queues up first. */
  schedule(task: () => unknown): void {
    if (this.#stopped) return;
    this.#queue.push(task);
    if (this.#running) return;
    this.#running = true;
    void Promise.resolve().then(this.#drainNext);
  }

  /** Resolves once the queue is empty. */
  async idle(): Promise<void> {
    while (this.#running) await new Promise<void>((resolve) => this.#waiters.push(resolve));
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

  // A task that returns a promise holds the loop until it settles; a synchronous one lets the
  // next task run at once (no microtask per task).
  #drain(): void {
    const queue = this.#queue;
    for (let task = queue.shift(); task !== undefined; task = queue.shift()) {
      let result: unknown;
      try {
        result = task();
      } catch (error) {
        this.#onError(error);
        continue;
      }
      if (isThenable(result)) {
        Promise.resolve(result).then(this.#drainNext, this.#failed);
        return;
      }
    }
    this.#running = false;
    const waiters = this.#waiters;
    if (waiters.length === 0) return;
    this.#waiters = [];
    for (const resolve of waiters) resolve();
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
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

/** A valid call waiting for its turn on the main loop, under either profile. */
interface PendingCall<H> {
  readonly id: JsonRpcId;
  readonly tool: Tool;
  readonly handler: H;
  readonly values: ArgumentValues;
}

/**
 * The one MCP request loop: dispatch by profile, then through the main loop, where replies
 * take one hop and a successful call two (run the tool, then send), so replies can leave in a
 * different order from the requests (match them by id). Tools run one at a time, in arrival
 * order.
 */
export class McpRequestLoop<H> implements DispatchContext<H> {
  readonly loop: MainLoop;
  readonly profile: McpProfile;
  /** Read at each request: a device adds tools after construction. */
  tools: ToolRegistry<H>;
  /** Read at each `initialize`: a board reports its new version after an OTA upgrade. */
  board: BoardIdentity;
  /** Read as each reply leaves; undefined drops it (no channel is open). */
  send: ((payload: string) => void) | undefined;
  readonly onVision: ((vision: VisionCapability) => void) | undefined;
  readonly pageBudgetBytes: number | undefined;
  readonly #options: McpRequestLoopOptions<H>;

  constructor(options: McpRequestLoopOptions<H>) {
    this.#options = options;
    this.profile = options.profile ?? 'firmware';
    this.tools = options.tools;
    this.board = options.board;
    this.send = options.send;
    this.onVision = options.onVision;
    this.pageBudgetBytes = options.pageBudgetBytes;
    this.loop = options.loop ?? new MainLoop();
  }

  /** Handles one MCP payload (the envelope's cJSON node, or the payload text). */
  receive(payload: CJsonNode | string): void {
    // The loop is its own dispatch context: nothing is built per request to describe the board.
    if (this.profile === 'strict') {
      // Standard JSON rules: the strict dispatcher reads the text, not cJSON's view of it.
      const text = typeof payload === 'string' ? payload : printCJsonNode(payload);
      const action = dispatchStrictRequest(text, this);
      if (action.kind === 'call') this.#schedule(action);
      else if (action.kind === 'reply') this.#reply(action.payload);
      return;
    }
    const action = dispatchMcpRequest(payload, this);
    if (action.kind === 'call') {
      this.#schedule(action);
      return;
    }
    if (action.log !== undefined) this.#options.log?.(action.log);
    if (action.kind === 'reply') this.#reply(action.payload);
  }

  /** Resolves once every scheduled run and reply has happened. */
  idle(): Promise<void> {
    return this.loop.idle();
  }

  #schedule(call: PendingCall<H>): void {
    this.loop.schedule(() => this.#run(call));
  }

  // The first hop: run the tool. A tool that returns a promise holds the loop until it settles.
  #run(call: PendingCall<H>): Promise<void> | undefined {
    this.#options.onToolCall?.(call.tool);
    let returned: ToolReturn | Promise<ToolReturn>;
    try {
      returned = this.#options.runTool(call.handler, call.values, call.tool);
    } catch (error) {
      this.#fail(call, error);
      return undefined;
    }
    if (!isThenable(returned)) {
      this.#answer(call, returned);
      return undefined;
    }
    return Promise.resolve(returned).then(
      (value) => this.#answer(call, value),
      (error: unknown) => this.#fail(call, error),
    );
  }

  // The second hop: the reply. Encoding can throw: a strict reply refuses a value that is no ToolReturn.
  #answer(call: PendingCall<H>, value: ToolReturn): void {
    let reply: string;
    try {
      reply =
        this.profile === 'strict'
          ? encodeStrictToolResult(call.id, value)
          : encodeDeviceResult(call.id as number, encodeToolResult(value));
    } catch (error) {
      this.#fail(call, error);
      return;
    }
    this.#reply(reply);
  }

  #fail(call: PendingCall<H>, error: unknown): void {
    const message = error instanceof Error ? error.message : textForMessage(error);
    this.#reply(
      this.profile === 'strict'
        ? encodeStrictToolError(call.id, message)
        : encodeDeviceError(call.id as number, message),
    );
  }

  #reply(payload: string): void {
    this.loop.schedule(() => this.send?.(payload));
  }
}
