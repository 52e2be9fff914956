/**
 * The replica file's shape and its error: what every replica module shares (and imports
 * nothing local, so none of them import each other in a circle).
 */
export const REPLICA_SCHEMA_VERSION = 1;

/** The members of a replica's `board`, in the file's order (replica.schema.json's). */
export const REPLICA_BOARD_FIELDS = [
  'variant',
  'name',
  'firmwareVersion',
  'chip',
  'flashSizeMb',
  'mac',
  'protocolVersion',
  'transport',
] as const;

/** A tool property in the firmware's terms; `min`/`max` only on integers, always together. */
export interface ReplicaProperty {
  name: string;
  type: 'boolean' | 'integer' | 'string';
  default?: boolean | number | string;
  min?: number;
  max?: number;
}

/** A tool as the corpus README defines one: listing order is the array's order. */
export interface ReplicaTool {
  name: string;
  description: string;
  user_only?: boolean;
  properties?: ReplicaProperty[];
}

export interface ReplicaBoard {
  variant: string;
  name?: string;
  firmwareVersion: string;
  chip: string;
  flashSizeMb: number;
  mac?: string;
  protocolVersion?: number;
  transport?: 'websocket' | 'mqtt';
}

export interface ReplicaCall {
  tool: string;
  arguments: Record<string, unknown>;
  /** The `tools/call` reply payload text as sent. */
  reply: string;
  delayMs: number;
}

export interface ReplicaFile {
  /** Where editors find replica.schema.json. */
  $schema?: string;
  schemaVersion: 1;
  board: ReplicaBoard;
  /** The device hello's text as sent. */
  hello?: string;
  /** The `initialize` reply payload text as sent. */
  initialize?: string;
  tools: ReplicaTool[];
  /** `tools/list` reply payload texts, in walk order; an empty walk was not recorded. */
  pages?: { plain: string[]; withUserTools: string[] };
  calls?: ReplicaCall[];
  /** Per tool, what an unrecorded call answers. */
  defaults?: Record<string, { text: string; isError?: boolean }>;
}

/** What a {@link ReplicaError} can say; each is in the README's error table. */
export const REPLICA_ERROR_CODES = [
  'REPLICA_SCHEMA_VERSION',
  'REPLICA_INVALID',
  'REPLICA_SECRET',
  'REPLICA_PAGES_DIFFER',
] as const;
export type ReplicaErrorCode = (typeof REPLICA_ERROR_CODES)[number];

/** A replica refused: `field` is the path in the file, e.g. `tools[3].properties[0].min`. */
export class ReplicaError extends Error {
  override readonly name = 'ReplicaError';
  constructor(
    readonly code: ReplicaErrorCode,
    readonly field: string,
    message: string,
    options: { cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
  }
}
