/**
 * The tools the bridge serves, as data: which boards and tools stand behind which names, and
 * the pages of `tools/list` with their cursors. No I/O here.
 *
 * A cursor is base64url of `{"g":<generation>,"o":<offset>}`: the generation of the catalog
 * it was cut from and where its page starts. Clients treat it as opaque (MCP pagination); the
 * bridge refuses one from an older generation (the list changed since: the client was sent
 * `notifications/tools/list_changed` and lists again from the start) or one it never wrote.
 */
import type { ApiTool } from '@xiaozhi-mcp/protocol';
import { toolNameFor } from './names.js';

/** One served board and its tools. */
export interface BoardTools {
  readonly deviceId: string;
  /** The build variant (`otto-robot`), when the server knows it. */
  readonly board: string | null;
  readonly tools: readonly ApiTool[];
}

/** A tool as the bridge serves it. */
export interface ServedTool {
  /** The name clients see ({@link toolNameFor}). */
  readonly name: string;
  readonly deviceId: string;
  /** The board's own name for it. */
  readonly tool: string;
  readonly description: string;
  /** Exactly as the board declared it. */
  readonly inputSchema: Record<string, unknown>;
  readonly userOnly: boolean;
}

export interface Catalog {
  readonly generation: number;
  /** Whether names carry the board's MAC (the bridge is not pinned to one board). */
  readonly many: boolean;
  readonly tools: readonly ServedTool[];
  readonly byName: ReadonlyMap<string, ServedTool>;
  /** Tools left out because their name was taken (a hash collision: never seen in practice). */
  readonly collisions: readonly ServedTool[];
}

export function buildCatalog(
  boards: readonly BoardTools[],
  options: { generation: number; many: boolean; withUserTools: boolean },
): Catalog {
  const tools: ServedTool[] = [];
  const byName = new Map<string, ServedTool>();
  const collisions: ServedTool[] = [];
  const sorted = [...boards].sort((a, b) => (a.deviceId < b.deviceId ? -1 : 1));
  for (const board of sorted) {
    for (const tool of board.tools) {
      if (tool.userOnly && !options.withUserTools) continue;
      const served: ServedTool = {
        name: toolNameFor(board.deviceId, tool.name, options.many),
        deviceId: board.deviceId,
        tool: tool.name,
        // With several boards a client shows one flat list: say whose tool it is.
        description: options.many
          ? `[${board.board ?? 'board'} ${board.deviceId}] ${tool.description}`
          : tool.description,
        inputSchema: tool.inputSchema,
        userOnly: tool.userOnly,
      };
      if (byName.has(served.name)) {
        collisions.push(served);
        continue;
      }
      byName.set(served.name, served);
      tools.push(served);
    }
  }
  return { generation: options.generation, many: options.many, tools, byName, collisions };
}

/** A stable text of what a set of boards serves, to tell whether anything changed. */
export function boardsFingerprint(boards: readonly BoardTools[]): string {
  return JSON.stringify(
    [...boards]
      .sort((a, b) => (a.deviceId < b.deviceId ? -1 : 1))
      .map((b) => [b.deviceId, b.board, b.tools]),
  );
}

export function encodeCursor(generation: number, offset: number): string {
  return Buffer.from(JSON.stringify({ g: generation, o: offset }), 'utf8').toString('base64url');
}

/** The offset a cursor names in this catalog, or a reason it names none. */
export function decodeCursor(
  cursor: string,
  catalog: Catalog,
): { offset: number } | { error: string } {
  let value: unknown;
  try {
    if (!/^[A-Za-z0-9_-]{1,200}$/.test(cursor)) throw new Error('not base64url');
    value = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    return { error: 'unknown cursor: not one this bridge wrote' };
  }
  const record = (typeof value === 'object' && value !== null ? value : {}) as Record<
    string,
    unknown
  >;
  const { g, o } = record;
  if (
    !Number.isSafeInteger(g) ||
    !Number.isSafeInteger(o) ||
    Object.keys(record).length !== 2 ||
    encodeCursor(g as number, o as number) !== cursor
  )
    return { error: 'unknown cursor: not one this bridge wrote' };
  if (g !== catalog.generation)
    return { error: 'stale cursor: the tool list changed since; list again from the start' };
  if ((o as number) <= 0 || (o as number) >= catalog.tools.length)
    return { error: 'unknown cursor: past the end of the tool list' };
  return { offset: o as number };
}

/** One `tools/list` page: `pageSize` tools from `offset`, and the cursor of the next page. */
export function pageOf(
  catalog: Catalog,
  offset: number,
  pageSize: number,
): { tools: readonly ServedTool[]; nextCursor?: string } {
  const end = offset + pageSize;
  return {
    tools: catalog.tools.slice(offset, end),
    ...(end < catalog.tools.length ? { nextCursor: encodeCursor(catalog.generation, end) } : {}),
  };
}
