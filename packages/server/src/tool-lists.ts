/**
 * The tool lists of devices, one copy per distinct list: boards of one build list the same
 * tools, so a rig of them holds one list, released with the last record that holds it.
 */
import { createHash } from 'node:crypto';
import { deepFreeze } from './frozen.js';

/** A tool as the device lists it, with where it was found. */
export interface DeviceTool {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: Record<string, unknown>;
  /** Listed only with `withUserTools` (annotations.audience = ["user"]). */
  readonly userOnly: boolean;
  /** The tool object exactly as received. */
  readonly raw: Record<string, unknown>;
}

function toDeviceTool(raw: Record<string, unknown>, plainNames: ReadonlySet<string>): DeviceTool {
  const annotations = raw.annotations as { audience?: unknown } | undefined;
  const audience = Array.isArray(annotations?.audience) ? annotations.audience : [];
  const name = typeof raw.name === 'string' ? raw.name : '';
  return {
    name,
    description: typeof raw.description === 'string' ? raw.description : '',
    inputSchema: (typeof raw.inputSchema === 'object' && raw.inputSchema !== null
      ? raw.inputSchema
      : {}) as Record<string, unknown>,
    userOnly: audience.includes('user') || !plainNames.has(name),
    raw,
  };
}

interface SharedTools {
  readonly tools: readonly DeviceTool[];
  /** Records holding it. */
  refs: number;
}

/**
 * The key of a device's listing: a digest of the names it lists without `withUserTools` and of
 * every tool it lists with it. `all` must nest boundedly, so that serialising it cannot throw.
 */
export function toolListKey(
  plainNames: ReadonlySet<string>,
  all: readonly Record<string, unknown>[],
): string {
  const plain = [...plainNames].join('\n');
  // The same frozen tools (shared pages) as the last listing: the same key, without hashing.
  const last = lastKey;
  if (
    last !== undefined &&
    last.plain === plain &&
    last.tools.length === all.length &&
    all.every((tool, i) => tool === last.tools[i])
  )
    return last.key;
  const key = createHash('sha256')
    .update(plain)
    .update('\u0000')
    .update(JSON.stringify(all))
    .digest('base64');
  lastKey = all.every((tool) => Object.isFrozen(tool))
    ? { plain, tools: [...all], key }
    : undefined;
  return key;
}

/**
 * The last key made from frozen tools (deeply frozen, as shared pages are: they cannot change),
 * with what it was made from.
 */
let lastKey:
  | { readonly plain: string; readonly tools: readonly object[]; readonly key: string }
  | undefined;

/** The distinct tool lists held by device records, each counted by the records holding it. */
export class ToolLists {
  readonly #lists = new Map<string, SharedTools>();

  /** How many distinct lists are held. */
  get size(): number {
    return this.#lists.size;
  }

  /**
   * Takes one hold on the list under `key` (see {@link toolListKey}), made from `all` when no
   * record holds it yet, and returns it (frozen: every holder shares it).
   */
  hold(
    key: string,
    plainNames: ReadonlySet<string>,
    all: readonly Record<string, unknown>[],
  ): readonly DeviceTool[] {
    let shared = this.#lists.get(key);
    if (shared === undefined) {
      shared = {
        tools: Object.freeze(all.map((raw) => toDeviceTool(raw, plainNames))),
        refs: 0,
      };
      this.#lists.set(key, shared);
    }
    shared.refs++;
    return shared.tools;
  }

  /** Gives back one hold on the list under `key`; the last one releases it. */
  release(key: string): void {
    const shared = this.#lists.get(key);
    if (shared !== undefined && --shared.refs <= 0) this.#lists.delete(key);
  }
}

/** Longest page text shared; the firmware's pages are at most 8000 bytes. */
const SHARED_PAGE_MAX_CHARS = 16_384;

/**
 * `tools/list` results by their exact wire text: boards of one build send the same pages, and
 * share one deeply frozen copy, which the protocol's walker prints once (not once per board).
 * The most recent `max` distinct pages are kept.
 */
export class SharedPages {
  readonly #pages = new Map<string, unknown>();

  constructor(readonly max = 64) {}

  /** The shared copy of a page read from `text`, or `result` itself when it cannot be shared. */
  share(result: unknown, text: string | undefined): unknown {
    if (text === undefined || text.length > SHARED_PAGE_MAX_CHARS) return result;
    const shared = this.#pages.get(text);
    if (shared !== undefined) return shared;
    deepFreeze(result);
    this.#pages.set(text, result);
    for (const oldest of this.#pages.keys()) {
      if (this.#pages.size <= this.max) break;
      this.#pages.delete(oldest);
    }
    return result;
  }
}

/** Longest JSON text of a value shared by {@link SharedValues}. */
const SHARED_VALUE_MAX_CHARS = 16_384;

/**
 * What boards of one build report alike (their `initialize` result, the reports of their
 * `tools/list` walks), one deeply frozen copy per distinct JSON text: a rig of them holds one.
 * The most recent `max` distinct values are kept; a value still held by records stays with them.
 */
export class SharedValues {
  readonly #values = new Map<string, unknown>();

  constructor(readonly max = 64) {}

  /** The shared copy of `value` (frozen), or `value` itself when too large to share. */
  share<T>(value: T): T {
    const key = JSON.stringify(value);
    if (key === undefined || key.length > SHARED_VALUE_MAX_CHARS) return value;
    const shared = this.#values.get(key);
    if (shared !== undefined) return shared as T;
    deepFreeze(value);
    this.#values.set(key, value);
    for (const oldest of this.#values.keys()) {
      if (this.#values.size <= this.max) break;
      this.#values.delete(oldest);
    }
    return value;
  }
}
