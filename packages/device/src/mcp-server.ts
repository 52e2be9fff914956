/**
 * The device's MCP server: tool registration in the firmware's listing order, typed tool
 * arguments, and console logging, on the protocol core's {@link McpRequestLoop}, which owns
 * the request handling for both profiles (`firmware`: exactly as xiaozhi-esp32; `strict`: a
 * spec-compliant MCP server, for Node devices that talk to standard MCP clients).
 * Tools run one at a time on the board's main loop, in arrival order.
 */
import {
  type BoardIdentity,
  type CJsonNode,
  defineTool,
  MainLoop,
  type McpProfile,
  McpRequestLoop,
  type Property,
  type PropertyValue,
  type Tool,
  type ToolDefinition,
  ToolRegistry,
  type ToolReturn,
  type VisionCapability,
} from '@xiaozhi-mcp/protocol';
import type { BoardConsole } from './console.js';

export type { McpProfile };

// Boards of one preset declare identical tools; a fleet of virtual boards shares one copy of each.
// Looked up by name, then compared field by field: cheaper than a key made of the whole definition.
const toolCache = new Map<string, Tool[]>();

function sameProperties(a: readonly Property[], b: readonly Property[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const p = a[i] as unknown as Record<string, unknown>;
    const q = b[i] as unknown as Record<string, unknown>;
    const keys = Object.keys(p);
    if (keys.length !== Object.keys(q).length) return false;
    for (const key of keys) if (p[key] !== q[key]) return false;
  }
  return true;
}

function sharedTool(definition: Omit<ToolDefinition, 'userOnly'>, userOnly: boolean): Tool {
  let tools = toolCache.get(definition.name);
  for (const tool of tools ?? []) {
    if (
      tool.description === definition.description &&
      tool.userOnly === userOnly &&
      sameProperties(tool.properties, definition.properties ?? [])
    )
      return tool;
  }
  const tool = defineTool({ ...definition, userOnly });
  // A tool defineTool rewrote (its properties normalised) is not matched again: never reused wrong.
  if (tools === undefined) {
    tools = [];
    toolCache.set(definition.name, tools);
  }
  tools.push(tool);
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
// The firmware lists common tools first, then the board's own, then the user-only ones.
const GROUPS: readonly Group[] = ['common', 'board', 'user'];

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
  readonly #console: BoardConsole | undefined;
  readonly #requests: McpRequestLoop<ToolHandler>;
  readonly #groups: Record<Group, { tool: Tool; handler: ToolHandler }[]> = {
    common: [],
    board: [],
    user: [],
  };

  constructor(options: McpServerOptions) {
    const console = options.console;
    this.#console = console;
    this.#requests = new McpRequestLoop<ToolHandler>({
      profile: options.profile ?? 'firmware',
      tools: new ToolRegistry<ToolHandler>(),
      board: options.board,
      runTool: (handler, values) => handler(new ToolArguments(values)),
      log: (line) => console?.log('E', 'MCP', line),
      onToolCall: options.onToolCall,
      onVision: (vision) => {
        this.vision = vision;
      },
      pageBudgetBytes: options.pageBudgetBytes,
      loop: options.loop ?? new MainLoop((error) => console?.log('E', 'MCP', String(error))),
    });
    this.loop = this.#requests.loop;
    this.profile = this.#requests.profile;
  }

  /** A common tool: listed first, as the firmware lists its common tools. */
  addCommonTool(definition: Omit<ToolDefinition, 'userOnly'>, handler: ToolHandler): Tool {
    return this.#add('common', sharedTool(definition, false), handler);
  }

  /** A board tool: listed after the common tools. */
  addTool(definition: Omit<ToolDefinition, 'userOnly'>, handler: ToolHandler): Tool {
    return this.#add('board', sharedTool(definition, false), handler);
  }

  /** A user-only tool: listed last and only with `withUserTools`, but always callable. */
  addUserOnlyTool(definition: Omit<ToolDefinition, 'userOnly'>, handler: ToolHandler): Tool {
    return this.#add('user', sharedTool(definition, true), handler);
  }

  get tools(): readonly Tool[] {
    return this.#requests.tools.tools;
  }

  get board(): BoardIdentity {
    return this.#requests.board;
  }

  /** After an OTA upgrade the board runs a new version; `initialize` reports it. */
  set board(board: BoardIdentity) {
    this.#requests.board = board;
  }

  /** Where replies go; undefined drops them (no channel is open). */
  setSender(send: ((payload: string) => void) | undefined): void {
    this.#requests.send = send;
  }

  /** Handles one MCP payload from the envelope (a cJSON node) or as text. */
  handlePayload(payload: CJsonNode | string): void {
    this.#requests.receive(payload);
  }

  /** Resolves once every queued tool run and reply has happened. */
  idle(): Promise<void> {
    return this.#requests.idle();
  }

  #add(group: Group, tool: Tool, handler: ToolHandler): Tool {
    const groups = this.#groups;
    const listedLast =
      group === 'user' ||
      (groups.user.length === 0 && (group === 'board' || groups.board.length === 0));
    if (listedLast) {
      // The usual registration order: append (ToolRegistry refuses a duplicate unchanged).
      this.#requests.tools.add(tool, handler);
    } else {
      // A tool listed before ones already registered: rebuild the registry in listing order.
      const registry = new ToolRegistry<ToolHandler>();
      for (const g of GROUPS) {
        for (const entry of this.#groups[g]) registry.add(entry.tool, entry.handler);
        if (g === group) registry.add(tool, handler);
      }
      this.#requests.tools = registry;
    }
    groups[group].push({ tool, handler });
    this.#console?.log('I', 'MCP', `Add tool: ${tool.name}${tool.userOnly ? ' [user]' : ''}`);
    return tool;
  }
}
