/**
 * A replica written from a hand-made tools file: `{ board?, tools, defaults? }`, the tools in
 * the corpus README's shape. Its pages are the firmware pager's, both walks.
 */
import { type JsonValue, printCJson } from '@xiaozhi-mcp/protocol';
import {
  REPLICA_SCHEMA_VERSION,
  type ReplicaBoard,
  ReplicaError,
  type ReplicaFile,
  validateReplica,
} from './replica-file.js';
import { producePages } from './replica-pages.js';

/** The identity a tools file's board gets for what it leaves out. */
export const REPLICA_BOARD_DEFAULTS: Readonly<ReplicaBoard> = Object.freeze({
  variant: 'replica',
  firmwareVersion: '1.0.0',
  chip: 'esp32s3',
  flashSizeMb: 16,
});

type Answer = { text: string; isError?: boolean };

/** What a corpus tool's `returns` sends, as a replica default (an image has no text form). */
function returnsAnswer(returns: unknown): Answer | undefined {
  if (typeof returns !== 'object' || returns === null) return undefined;
  const { kind, value } = returns as { kind?: unknown; value?: unknown };
  switch (kind) {
    case 'bool':
      return typeof value === 'boolean' ? { text: value ? 'true' : 'false' } : undefined;
    case 'int':
      return Number.isInteger(value) ? { text: String(value) } : undefined;
    case 'string':
      return typeof value === 'string' ? { text: value } : undefined;
    case 'throw':
      return typeof value === 'string' ? { text: value, isError: true } : undefined;
    case 'json':
      return { text: typeof value === 'string' ? value : printCJson(value as JsonValue) };
    default:
      return undefined;
  }
}

/**
 * A corpus case's tool definitions carry what their callback returns (`returns`, `echo_args`):
 * a replica keeps the definition and states the return as the tool's default.
 */
function corpusTools(raw: unknown): { tools: unknown; defaults: Record<string, Answer> } {
  if (!Array.isArray(raw)) return { tools: raw, defaults: {} };
  const defaults: Record<string, Answer> = {};
  const tools = raw.map((tool: unknown) => {
    if (typeof tool !== 'object' || tool === null || Array.isArray(tool)) return tool;
    const { returns, echo_args: _echo, ...definition } = tool as Record<string, unknown>;
    const answer = returnsAnswer(returns);
    if (answer !== undefined && typeof definition.name === 'string')
      defaults[definition.name] = answer;
    return definition;
  });
  return { tools, defaults };
}

/**
 * Reads a tools file (an object with `tools`, or a bare array of tools) and returns a checked
 * replica; its pages are what a walker numbering its requests from 1 receives (plain walk
 * first), error replies included where the firmware sends one. Throws {@link ReplicaError} naming the field, e.g. `tools[3].properties[0].min`.
 */
export function replicaFromTools(toolsFileText: string, source?: string): ReplicaFile {
  const label = source === undefined ? 'tools file' : `tools file ${source}`;
  let value: unknown;
  try {
    value = JSON.parse(toolsFileText);
  } catch (cause) {
    throw new ReplicaError(
      'REPLICA_INVALID',
      '(root)',
      `${label} is not valid JSON: ${cause instanceof Error ? cause.message : String(cause)}`,
      { cause },
    );
  }
  const file = (Array.isArray(value) ? { tools: value } : value) as Record<string, unknown> | null;
  if (typeof file !== 'object' || file === null) {
    throw new ReplicaError('REPLICA_INVALID', '(root)', `${label} must be an object with "tools"`);
  }
  const board = typeof file.board === 'object' && file.board !== null ? file.board : {};
  const { tools, defaults } = corpusTools(file.tools);
  const statedOk =
    file.defaults === undefined || (typeof file.defaults === 'object' && file.defaults !== null);
  // A tools file's own defaults win over what `returns` says; a bad one is passed on to be named.
  const answers = statedOk
    ? { ...defaults, ...(file.defaults as object | undefined) }
    : file.defaults;
  const draft: Record<string, unknown> = {
    schemaVersion: REPLICA_SCHEMA_VERSION,
    board: { ...REPLICA_BOARD_DEFAULTS, ...board },
    tools,
    ...(statedOk && Object.keys(answers as object).length === 0 ? {} : { defaults: answers }),
  };
  // Validate first: the pager needs well-formed tools, and errors should name the file's fields.
  validateReplica(draft, source);
  const replica = draft as unknown as ReplicaFile;
  // A tool too big for a page makes the walk end in the firmware's error reply, as on a board.
  const pages = producePages(replica.tools);
  return { ...replica, pages };
}
