/**
 * The device's MCP server. The `firmware` profile answers exactly as xiaozhi-esp32 does
 * (it runs on the protocol core's `dispatchMcpRequest`); the `strict` profile answers like a
 * spec-compliant MCP server, for Node devices that talk to standard MCP clients.
 * Tools run one at a time on the board's main loop, in arrival order.
 */
import {
  type BoardIdentity,
  type CJsonNode,
  dispatchMcpRequest,
  encodeDeviceError,
  encodeDeviceResult,
  encodeToolResult,
  MainLoop,
  type PropertyValue,
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
}

export class McpServer {
  readonly loop: MainLoop;
  readonly profile: McpProfile;
  /** Set by `initialize`'s vision capability; `self.camera.take_photo` needs it. */
  vision: VisionCapability | undefined;
  #board: BoardIdentity;
  readonly #console: BoardConsole | undefined;
  readonly #onToolCall: ((tool: Tool) => void) | undefined;
  readonly #groups: Record<Group, { definition: ToolDefinition; handler: ToolHandler }[]> = {
    common: [],
    board: [],
    user: [],
  };
  #registry = new ToolRegistry<ToolHandler>();
  #send: ((payload: string) => void) | undefined;

  constructor(options: McpServerOptions) {
    this.#board = options.board;
    this.profile = options.profile ?? 'firmware';
    this.#console = options.console;
    this.#onToolCall = options.onToolCall;
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
    return this.#registry.tools;
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
    const entry = { definition, handler };
    const ordered = [...this.#groups.common, ...this.#groups.board, ...this.#groups.user];
    const insertAt =
      group === 'common'
        ? this.#groups.common.length
        : group === 'board'
          ? this.#groups.common.length + this.#groups.board.length
          : ordered.length;
    ordered.splice(insertAt, 0, entry);
    // Build the new registry first: a duplicate name throws and leaves the server as it was.
    const registry = new ToolRegistry<ToolHandler>();
    for (const item of ordered) registry.add(item.definition, item.handler);
    this.#groups[group].push(entry);
    this.#registry = registry;
    this.#console?.log(
      'I',
      'MCP',
      `Add tool: ${definition.name}${definition.userOnly ? ' [user]' : ''}`,
    );
    const tool = registry.find(definition.name)?.tool;
    if (tool === undefined) throw new Error(`tool ${definition.name} was not registered`);
    return tool;
  }

  #reply(payload: string): void {
    this.loop.schedule(() => this.#send?.(payload));
  }

  #handleFirmware(payload: CJsonNode | string): void {
    const action = dispatchMcpRequest(payload, {
      tools: this.#registry,
      board: this.#board,
      onVision: (vision) => {
        this.vision = vision;
      },
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
      tools: this.#registry,
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
