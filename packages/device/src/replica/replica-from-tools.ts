/**
 * A replica written from a hand-made tools file: `{ board?, tools, defaults? }`, the tools in
 * the corpus README's shape. Its pages are the firmware pager's, both walks.
 */
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
  const draft: Record<string, unknown> = {
    schemaVersion: REPLICA_SCHEMA_VERSION,
    board: { ...REPLICA_BOARD_DEFAULTS, ...board },
    tools: file.tools,
    ...(file.defaults === undefined ? {} : { defaults: file.defaults }),
  };
  // Validate first: the pager needs well-formed tools, and errors should name the file's fields.
  validateReplica(draft, source);
  const replica = draft as unknown as ReplicaFile;
  // A tool too big for a page makes the walk end in the firmware's error reply, as on a board.
  const pages = producePages(replica.tools);
  return { ...replica, pages };
}
