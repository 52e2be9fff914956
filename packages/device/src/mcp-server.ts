/**
 * The device's MCP server. The `firmware` profile answers exactly as xiaozhi-esp32 does
 * (it runs on the protocol core's `dispatchMcpRequest`); the `strict` profile answers like a
 * spec-compliant MCP server, for Node devices that talk to standard MCP clients.
 * Tools run one at a time on the board's main loop, in arrival order.
 */
import {
  type BoardIdentity,
  type CJsonNode,
  defineTool,
  dispatchMcpRequest,
  encodeDeviceError,
  encodeDeviceResult,
  encodeToolResult,
  MainLoop,
  type PropertyValue,
  ProtocolError,
  printCJsonNode,
  type Tool,
  type ToolDefinition,
  ToolRegistry,
  type ToolReturn,
  type VisionCapability,
} from '@xiaozhi-mcp/protocol';
import type { BoardConsole } from './console.js';
import { dispatchStrictRequest, encodeStrictToolError, encodeStrictToolResult } from './strict.js';

export type McpProfile = 'firmware' | 'strict';

// Boards of one preset declare identical tools; a fleet of virtual boards shares one copy of each.
const toolCache = new Map<string, Tool>();
function sharedTool(definition: ToolDefinition): Tool {
  const key = JSON.stringify(definition);
  let tool = toolCache.get(key);
  if (tool === undefined) {
    tool = defineTool(definition);
    toolCache.set(key, tool);
  }
  return tool;
}

/** The values a tool receives, one per declared property (defaults applied). */
export class ToolArguments {
  constructor(readonly values: ReadonlyMap<string, PropertyValue>) {}

  string(name: string): string {
    return this.#typed(name, 'string');
  }
  integer(name: string): number {
    return this.#typed(name, 'number');
  }
  boolean(name: string): boolean {
    return this.#typed(name, 'boolean');
  }

  #typed<T extends 'string' | 'number' | 'boolean'>(
    name: string,
    type: T,
  ): T extends 'string' ? string : T extends 'number' ? number : boolean {
    const value = this.values.get(name);
    if (typeof value !== type) throw new Error(`Tool argument ${name} is not a ${type}`);
    return value as T extends 'string' ? string : T extends 'number' ? number : boolean;
  }
}

/** A tool's callback. A thrown error becomes an error reply carrying its message. */
export type ToolHandler = (args: ToolArguments) => ToolReturn | Promise<ToolReturn>;

type Group = 'common' | 'board' | 'user';

export interface McpServerOptions {
  readonly board: BoardIdentity;
  readonly profile?: McpProfile;
  /** Where the `MCP:` log lines go (tool registration, dropped and failed requests). */
  readonly console?: BoardConsole;
  readonly loop?: MainLoop;
  /** Called on the main loop as a valid call starts, before its tool runs (fault injection, metrics). */
  readonly onToolCall?: (tool: Tool) => void;
  /** A wrong page budget: a board that pages wrong (fault knob). */
  readonly pageBudgetBytes?: number;
}

export class McpServer {
  readonly loop: MainLoop;
  readonly profile: McpProfile;
  /** Set by `initialize`'s vision capability; `self.camera.take_photo` needs it. */
  vision: VisionCapability | undefined;
  #board: BoardIdentity;
  readonly #console: BoardConsole | undefined;
  readonly #onToolCall: ((tool: Tool) => void) | undefined;
  readonly #pageBudgetBytes: number | undefined;
  readonly #groups: Record<Group, { tool: Tool; handler: ToolHandler }[]> = {
    common: [],
    board: [],
    user: [],
  };
  #registry: ToolRegistry<ToolHandler> | undefined;
  #send: ((payload: string) => void) | undefined;

  constructor(options: McpServerOptions) {
    this.#board = options.board;
    this.profile = options.profile ?? 'firmware';
    this.#console = options.console;
    this.#onToolCall = options.onToolCall;
    this.#pageBudgetBytes = options.pageBudgetBytes;
    this.loop =
      options.loop ?? new MainLoop((error) => this.#console?.log('E', 'MCP', String(error)));
  }

  /** A common tool: listed first, as the firmware lists its common tools. */
  addCommonTool(definition: Omit<ToolDefinition, 'userOnly'>, handler: ToolHandler): Tool {
    return this.#add('common', { ...definition, userOnly: false }, handler);
  }

  /** A board tool: listed after the common tools. */
  addTool(definition: Omit<ToolDefinition, 'userOnly'>, handler: ToolHandler): Tool {
    return this.#add('board', { ...definition, userOnly: false }, handler);
  }

  /** A user-only tool: listed last and only with `withUserTools`, but always callable. */
  addUserOnlyTool(definition: Omit<ToolDefinition, 'userOnly'>, handler: ToolHandler): Tool {
    return this.#add('user', { ...definition, userOnly: true }, handler);
  }

  get tools(): readonly Tool[] {
    return this.#tools.tools;
  }

  get board(): BoardIdentity {
    return this.#board;
  }

  /** After an OTA upgrade the board runs a new version; `initialize` reports it. */
  set board(board: BoardIdentity) {
    this.#board = board;
  }

  /** Where replies go; undefined drops them (no channel is open). */
  setSender(send: ((payload: string) => void) | undefined): void {
    this.#send = send;
  }

  /** Handles one MCP payload from the envelope (a cJSON node) or as text. */
  handlePayload(payload: CJsonNode | string): void {
    if (this.profile === 'strict') this.#handleStrict(payload);
    else this.#handleFirmware(payload);
  }

  /** Resolves once every queued tool run and reply has happened. */
  idle(): Promise<void> {
    return this.loop.idle();
  }

  #add(group: Group, definition: ToolDefinition, handler: ToolHandler): Tool {
    const tool = sharedTool(definition);
    const taken = [...this.#groups.common, ...this.#groups.board, ...this.#groups.user].some(
      (e) => e.tool.name === tool.name,
    );
    if (taken)
      throw new ProtocolError('DUPLICATE_TOOL', `tool ${tool.name} is already registered`, {
        field: 'name',
      });
    this.#groups[group].push({ tool, handler });
    this.#registry = undefined;
    this.#console?.log('I', 'MCP', `Add tool: ${tool.name}${tool.userOnly ? ' [user]' : ''}`);
    return tool;
  }

  // Common tools first, then board tools, then user-only tools, as the firmware lists them.
  get #tools(): ToolRegistry<ToolHandler> {
    if (this.#registry === undefined) {
      const registry = new ToolRegistry<ToolHandler>();
      for (const entry of [...this.#groups.common, ...this.#groups.board, ...this.#groups.user])
        registry.add(entry.tool, entry.handler);
      this.#registry = registry;
    }
    return this.#registry;
  }

  #reply(payload: string): void {
    this.loop.schedule(() => this.#send?.(payload));
  }

  #handleFirmware(payload: CJsonNode | string): void {
    const action = dispatchMcpRequest(payload, {
      tools: this.#tools,
      board: this.#board,
      onVision: (vision) => {
        this.vision = vision;
      },
      ...(this.#pageBudgetBytes === undefined ? {} : { pageBudgetBytes: this.#pageBudgetBytes }),
    });
    if (action.kind !== 'call') {
      if (action.log !== undefined) this.#console?.log('E', 'MCP', action.log);
      if (action.kind === 'reply') this.#reply(action.payload);
      return;
    }
    this.loop.schedule(async () => {
      this.#onToolCall?.(action.tool);
      let reply: string;
      try {
        reply = encodeDeviceResult(
          action.id,
          encodeToolResult(await action.handler(new ToolArguments(action.values))),
        );
      } catch (error) {
        reply = encodeDeviceError(
          action.id,
          error instanceof Error ? error.message : String(error),
        );
      }
      this.#reply(reply);
    });
  }

  #handleStrict(payload: CJsonNode | string): void {
    const text = typeof payload === 'string' ? payload : printCJsonNode(payload);
    const action = dispatchStrictRequest(text, {
      tools: this.#tools,
      board: this.#board,
      onVision: (vision) => {
        this.vision = vision;
      },
    });
    if (action.kind === 'drop') return;
    if (action.kind === 'reply') {
      this.#reply(action.payload);
      return;
    }
    this.loop.schedule(async () => {
      this.#onToolCall?.(action.tool);
      let reply: string;
      try {
        reply = encodeStrictToolResult(
          action.id,
          await action.handler(new ToolArguments(action.values)),
        );
      } catch (error) {
        reply = encodeStrictToolError(
          action.id,
          error instanceof Error ? error.message : String(error),
        );
      }
      this.#reply(reply);
    });
  }
}
