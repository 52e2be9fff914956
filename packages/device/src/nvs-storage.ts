/**
 * The board's settings storage, with the NVS rules the firmware trips over: keys of at most
 * 15 bytes, strings of at most 4000 bytes including the NUL, and typed entries (reading a
 * string key as an integer fails and the firmware's `Settings` falls back to the default).
 * It survives reboots; the firmware package maps it to a real NVS partition image.
 */
import type { NvsEntry, NvsType } from '@xiaozhi-mcp/firmware';
import { DeviceError } from './errors.js';

export const NVS_KEY_MAX_BYTES = 15;
export const NVS_STRING_MAX_BYTES = 4000; // including the terminating NUL

/** An entry's NVS type and value; `Settings` reads integers only from `i32` entries, as the firmware does. */
export interface NvsValue {
  readonly type: NvsType;
  readonly value: string | number | bigint | Uint8Array;
}

const utf8Length = (text: string) => Buffer.byteLength(text, 'utf8');

export class NvsStorage {
  readonly #namespaces = new Map<string, Map<string, NvsValue>>();
  readonly #listeners = new Set<() => void>();

  constructor(initial: Readonly<Record<string, Readonly<Record<string, string | number>>>> = {}) {
    for (const [namespace, entries] of Object.entries(initial)) {
      const settings = this.open(namespace);
      for (const [key, value] of Object.entries(entries)) {
        if (typeof value === 'number') settings.setInt(key, value);
        else settings.setString(key, value);
      }
    }
  }

  /** The firmware's `Settings(namespace)`. */
  open(namespace: string): Settings {
    return new Settings(this, namespace);
  }

  /** @internal */
  read(namespace: string, key: string): NvsValue | undefined {
    return this.#namespaces.get(namespace)?.get(key);
  }

  /** Called after every change (a board backed by flash writes its NVS partition). */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Replaces everything with entries read from an NVS partition (keeps their types). */
  load(entries: readonly NvsEntry[]): void {
    this.#namespaces.clear();
    for (const entry of entries) {
      let namespace = this.#namespaces.get(entry.namespace);
      if (namespace === undefined) {
        namespace = new Map();
        this.#namespaces.set(entry.namespace, namespace);
      }
      namespace.set(entry.key, { type: entry.type, value: entry.value });
    }
  }

  /** Every entry in the firmware package's NVS form, ready for `writeNvsPartition`. */
  nvsEntries(): NvsEntry[] {
    return this.entries().map(({ namespace, key, value }) => ({
      namespace,
      key,
      type: value.type,
      value: value.value,
    }));
  }

  /** @internal */
  write(namespace: string, key: string, value: NvsValue | undefined): void {
    for (const name of [namespace, key]) {
      if (utf8Length(name) > NVS_KEY_MAX_BYTES) {
        throw new DeviceError(
          'NVS_KEY_TOO_LONG',
          `nvs: "${name}" is longer than ${NVS_KEY_MAX_BYTES} bytes (ESP_ERR_NVS_KEY_TOO_LONG)`,
        );
      }
    }
    if (typeof value?.value === 'string' && utf8Length(value.value) + 1 > NVS_STRING_MAX_BYTES) {
      throw new DeviceError(
        'NVS_VALUE_TOO_LONG',
        `nvs: ${namespace}/${key} is longer than ${NVS_STRING_MAX_BYTES - 1} bytes (ESP_ERR_NVS_VALUE_TOO_LONG)`,
      );
    }
    let entries = this.#namespaces.get(namespace);
    if (value === undefined) {
      if (entries?.delete(key)) this.#changed();
      return;
    }
    if (entries === undefined) {
      entries = new Map();
      this.#namespaces.set(namespace, entries);
    }
    entries.set(key, value);
    this.#changed();
  }

  #changed(): void {
    for (const listener of this.#listeners) listener();
  }

  /** Every namespace and entry, e.g. to write an NVS partition or to print. */
  entries(): { namespace: string; key: string; value: NvsValue }[] {
    return [...this.#namespaces].flatMap(([namespace, entries]) =>
      [...entries].map(([key, value]) => ({ namespace, key, value })),
    );
  }

  /** A plain copy: `{namespace: {key: value}}` (64-bit integers as decimal strings, blobs as hex). */
  toJSON(): Record<string, Record<string, string | number>> {
    const out: Record<string, Record<string, string | number>> = {};
    for (const { namespace, key, value } of this.entries()) {
      const plain =
        typeof value.value === 'bigint'
          ? value.value.toString()
          : value.value instanceof Uint8Array
            ? Buffer.from(value.value).toString('hex')
            : value.value;
      out[namespace] = { ...out[namespace], [key]: plain };
    }
    return out;
  }

  /** Erases everything, as flashing a merged image at 0x0 does. */
  eraseAll(): void {
    this.#namespaces.clear();
    this.#changed();
  }
}

/** The firmware's `Settings` class: typed getters with defaults, setters that enforce NVS limits. */
export class Settings {
  constructor(
    readonly storage: NvsStorage,
    readonly namespace: string,
  ) {}

  getString(key: string, fallback = ''): string {
    const entry = this.storage.read(this.namespace, key);
    return entry?.type === 'string' && typeof entry.value === 'string' ? entry.value : fallback;
  }

  /** A key stored as anything but i32 reads as the default: `nvs_get_i32` fails with a type mismatch. */
  getInt(key: string, fallback = 0): number {
    const entry = this.storage.read(this.namespace, key);
    return entry?.type === 'i32' && typeof entry.value === 'number' ? entry.value : fallback;
  }

  setString(key: string, value: string): void {
    this.storage.write(this.namespace, key, { type: 'string', value });
  }

  setInt(key: string, value: number): void {
    this.storage.write(this.namespace, key, { type: 'i32', value: value | 0 });
  }

  eraseKey(key: string): void {
    this.storage.write(this.namespace, key, undefined);
  }
}
