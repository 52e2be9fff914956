/**
 * The board's settings storage, with the NVS rules the firmware trips over: keys of at most
 * 15 bytes, strings of at most 4000 bytes including the NUL, and typed entries (reading a
 * string key as an integer fails and the firmware's `Settings` falls back to the default).
 * It survives reboots; the firmware package maps it to a real NVS partition image.
 */
import { DeviceError } from './errors.js';

export const NVS_KEY_MAX_BYTES = 15;
export const NVS_STRING_MAX_BYTES = 4000; // including the terminating NUL

export type NvsValue =
  | { readonly type: 'string'; readonly value: string }
  | { readonly type: 'i32'; readonly value: number };

const utf8Length = (text: string) => Buffer.byteLength(text, 'utf8');

export class NvsStorage {
  readonly #namespaces = new Map<string, Map<string, NvsValue>>();

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
    if (value?.type === 'string' && utf8Length(value.value) + 1 > NVS_STRING_MAX_BYTES) {
      throw new DeviceError(
        'NVS_VALUE_TOO_LONG',
        `nvs: ${namespace}/${key} is longer than ${NVS_STRING_MAX_BYTES - 1} bytes (ESP_ERR_NVS_VALUE_TOO_LONG)`,
      );
    }
    let entries = this.#namespaces.get(namespace);
    if (value === undefined) {
      entries?.delete(key);
      return;
    }
    if (entries === undefined) {
      entries = new Map();
      this.#namespaces.set(namespace, entries);
    }
    entries.set(key, value);
  }

  /** Every namespace and entry, e.g. to write an NVS partition or to print. */
  entries(): { namespace: string; key: string; value: NvsValue }[] {
    return [...this.#namespaces].flatMap(([namespace, entries]) =>
      [...entries].map(([key, value]) => ({ namespace, key, value })),
    );
  }

  /** A plain copy: `{namespace: {key: value}}`. */
  toJSON(): Record<string, Record<string, string | number>> {
    const out: Record<string, Record<string, string | number>> = {};
    for (const { namespace, key, value } of this.entries()) {
      out[namespace] = { ...out[namespace], [key]: value.value };
    }
    return out;
  }

  /** Erases everything, as flashing a merged image at 0x0 does. */
  eraseAll(): void {
    this.#namespaces.clear();
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
    return entry?.type === 'string' ? entry.value : fallback;
  }

  /** A key stored as a string reads as the default: `nvs_get_i32` fails with a type mismatch. */
  getInt(key: string, fallback = 0): number {
    const entry = this.storage.read(this.namespace, key);
    return entry?.type === 'i32' ? entry.value : fallback;
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
