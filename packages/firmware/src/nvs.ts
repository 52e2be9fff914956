/**
 * ESP-IDF NVS partitions (format version 2): written byte for byte as ESP-IDF's
 * `nvs_partition_gen.py generate` writes them, and read back as the NVS library reads them.
 *
 * Layout (all little-endian):
 * - 4096-byte pages. Page header (32 bytes): state u32 (0xFFFFFFFF erased, 0xFFFFFFFE active,
 *   0xFFFFFFFC full, 0xFFFFFFF8 freeing, 0xFFFFFFF0 corrupt), sequence number u32, version u8
 *   (0xFE for v2, 0xFF for v1), 19 bytes 0xFF, CRC32 of bytes 4..27.
 * - Entry state bitmap (32 bytes at 32): 2 bits per entry, entry i in byte i/4 at bit 2*(i%4);
 *   0b11 empty, 0b10 written, 0b00 erased.
 * - 126 entries of 32 bytes from offset 64: namespace index u8, type u8, span u8, chunk index
 *   u8 (0xFF = any), CRC32 of bytes 0..3 and 8..31, key (15 bytes + NUL, zero padded), data
 *   (8 bytes). Integers fill the data field from its start, the rest stays 0xFF.
 *   Strings (0x21) and blob chunks (0x42) put size u16, 0xFFFF and the CRC32 of the payload in
 *   the data field; the payload follows in the next span-1 entries, its tail padded with 0xFF.
 *   A blob index (0x48) holds total size u32, chunk count u8, first chunk index u8.
 * - Namespaces are U8 entries in namespace 0: key = name, value = index (1..254).
 *
 * Every CRC32 is zlib's crc32 started from 0xFFFFFFFF (`esp_rom_crc32_le(0xffffffff, ...)`).
 */
import { Buffer } from 'node:buffer';
import { crc32 } from 'node:zlib';
import { FirmwareError } from './errors.js';

export type NvsType =
  | 'u8'
  | 'i8'
  | 'u16'
  | 'i16'
  | 'u32'
  | 'i32'
  | 'u64'
  | 'i64'
  | 'string'
  | 'blob';

export interface NvsEntry {
  namespace: string;
  key: string;
  type: NvsType;
  /** number for 8..32-bit integers, bigint for u64/i64, string, Uint8Array for blobs. */
  value: number | bigint | string | Uint8Array;
}

export interface NvsPageInfo {
  index: number;
  state: 'empty' | 'active' | 'full' | 'freeing' | 'corrupt';
  /** Undefined for an erased page, which has no header. */
  sequence: number | undefined;
  version: number | undefined;
  /** True for an erased page (no header to check). */
  headerCrcValid: boolean;
  /** Entries marked written in the state bitmap. */
  entriesUsed: number;
}

export const NVS_PAGE_SIZE = 4096;
export const NVS_ENTRY_SIZE = 32;
export const NVS_ENTRIES_PER_PAGE = 126;
/** Keys and namespace names: 15 bytes, the 16th is the NUL. */
export const NVS_MAX_KEY_LENGTH = 15;
/** Strings, NUL included: one page of data entries (Page::CHUNK_MAX_SIZE). */
export const NVS_MAX_STRING_SIZE = 4000;
/** The NVS library's blob limit (127 chunks of 4000 bytes). */
export const NVS_MAX_BLOB_SIZE = 508_000;
/** Index 0 holds the namespace entries themselves and 255 means "any". */
export const NVS_MAX_NAMESPACES = 254;
/** The generator's minimum for a read/write partition: two data pages and the reserved one. */
export const NVS_MIN_PARTITION_SIZE = 0x3000;

const HEADER_CRC_START = 4;
const HEADER_CRC_OFFSET = 28;
const BITMAP_OFFSET = 32;
const FIRST_ENTRY_OFFSET = 64;

const STATE_ERASED_PAGE = 0xffff_ffff;
const STATE_ACTIVE = 0xffff_fffe;
const STATE_FULL = 0xffff_fffc;
const STATE_FREEING = 0xffff_fff8;
const STATE_CORRUPT = 0xffff_fff0;
const VERSION2 = 0xfe;
const VERSION1 = 0xff;

const ENTRY_EMPTY = 0b11;
const ENTRY_WRITTEN = 0b10;

const CHUNK_ANY = 0xff;
const TYPE_SZ = 0x21;
const TYPE_BLOB_V1 = 0x41;
const TYPE_BLOB_DATA = 0x42;
const TYPE_BLOB_IDX = 0x48;

type IntType = Exclude<NvsType, 'string' | 'blob'>;

interface IntSpec {
  code: number;
  bytes: number;
  signed: boolean;
}

const INT_TYPES: Record<IntType, IntSpec> = {
  u8: { code: 0x01, bytes: 1, signed: false },
  i8: { code: 0x11, bytes: 1, signed: true },
  u16: { code: 0x02, bytes: 2, signed: false },
  i16: { code: 0x12, bytes: 2, signed: true },
  u32: { code: 0x04, bytes: 4, signed: false },
  i32: { code: 0x14, bytes: 4, signed: true },
  u64: { code: 0x08, bytes: 8, signed: false },
  i64: { code: 0x18, bytes: 8, signed: true },
};

const INT_BY_CODE = new Map<number, IntType>(
  Object.entries(INT_TYPES).map(([name, spec]) => [spec.code, name as IntType]),
);

function isIntType(type: string): type is IntType {
  return Object.hasOwn(INT_TYPES, type);
}

function intRange(spec: IntSpec): { min: bigint; max: bigint } {
  const bits = BigInt(spec.bytes * 8);
  return spec.signed
    ? { min: -(1n << (bits - 1n)), max: (1n << (bits - 1n)) - 1n }
    : { min: 0n, max: (1n << bits) - 1n };
}

/** The NVS CRC32: zlib's crc32 seeded with 0xFFFFFFFF, as the generator and the ROM compute it. */
function nvsCrc(data: Uint8Array): number {
  // Empty input leaves the seed unchanged (as in Python); Node 20 returns 0 for an empty view
  // of a zero-length ArrayBuffer, so answer it here.
  if (data.length === 0) return 0xffff_ffff;
  return crc32(data, 0xffff_ffff) >>> 0;
}

function view(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

const utf8 = new TextEncoder();

function hex32(value: number): string {
  return `0x${value.toString(16).padStart(8, '0')}`;
}

function invalid(message: string): FirmwareError {
  return new FirmwareError('NVS_INVALID', message);
}

function checkName(name: unknown, what: string, where: string): Uint8Array {
  if (typeof name !== 'string' || name.length === 0) {
    throw invalid(`${where}: ${what} must be a non-empty string`);
  }
  const bytes = utf8.encode(name);
  if (bytes.includes(0)) throw invalid(`${where}: ${what} "${name}" contains NUL`);
  if (bytes.length > NVS_MAX_KEY_LENGTH) {
    throw invalid(
      `${where}: ${what} "${name}" is ${bytes.length} bytes, at most ${NVS_MAX_KEY_LENGTH} allowed`,
    );
  }
  return bytes;
}

function describe(entry: { namespace?: unknown; key?: unknown }): string {
  return `entry ${String(entry.namespace)}/${String(entry.key)}`;
}

/**
 * Throws `NVS_INVALID` when the entry cannot be stored: names empty or over 15 bytes, an
 * unknown type, a value of the wrong kind or out of its type's range, a string over 4000
 * bytes (with its NUL) or holding NUL, a blob over 508000 bytes.
 */
export function validateNvsEntry(entry: NvsEntry): void {
  const where = describe(entry);
  checkName(entry.namespace, 'namespace', where);
  checkName(entry.key, 'key', where);
  const { type, value } = entry;
  if (isIntType(type)) {
    intValue(type, value, where);
  } else if (type === 'string') {
    stringPayload(value, where);
  } else if (type === 'blob') {
    blobPayload(value, where);
  } else {
    throw invalid(`${where}: unknown type "${String(type)}"`);
  }
}

function intValue(type: IntType, value: unknown, where: string): bigint {
  let big: bigint;
  if (typeof value === 'bigint') {
    big = value;
  } else if (typeof value === 'number' && Number.isSafeInteger(value)) {
    big = BigInt(value);
  } else {
    throw invalid(`${where}: ${type} value must be an integer, got ${String(value)}`);
  }
  const { min, max } = intRange(INT_TYPES[type]);
  if (big < min || big > max) {
    throw invalid(`${where}: ${big} is out of range for ${type} (${min}..${max})`);
  }
  return big;
}

/** The stored string: UTF-8 and the terminating NUL the NVS library expects. */
function stringPayload(value: unknown, where: string): Uint8Array {
  if (typeof value !== 'string') throw invalid(`${where}: string value must be a string`);
  const encoded = utf8.encode(value);
  if (encoded.includes(0)) throw invalid(`${where}: string contains NUL`);
  const payload = new Uint8Array(encoded.length + 1);
  payload.set(encoded);
  if (payload.length > NVS_MAX_STRING_SIZE) {
    throw invalid(
      `${where}: string is ${payload.length} bytes with its NUL, at most ${NVS_MAX_STRING_SIZE} allowed`,
    );
  }
  return payload;
}

function blobPayload(value: unknown, where: string): Uint8Array {
  if (!(value instanceof Uint8Array)) throw invalid(`${where}: blob value must be a Uint8Array`);
  if (value.length > NVS_MAX_BLOB_SIZE) {
    throw invalid(`${where}: blob is ${value.length} bytes, at most ${NVS_MAX_BLOB_SIZE} allowed`);
  }
  return value;
}

/** An entry's 32 bytes with its CRC, which covers everything but the CRC field itself. */
function makeItem(
  ns: number,
  type: number,
  span: number,
  chunkIndex: number,
  key: Uint8Array,
  data: Uint8Array,
): Uint8Array {
  const item = new Uint8Array(NVS_ENTRY_SIZE);
  item[0] = ns;
  item[1] = type;
  item[2] = span;
  item[3] = chunkIndex;
  item.set(key, 8); // bytes 8..23 stay zero after the key
  item.set(data, 24);
  view(item).setUint32(4, itemCrc(item), true);
  return item;
}

function itemCrc(item: Uint8Array): number {
  const covered = new Uint8Array(28);
  covered.set(item.subarray(0, 4), 0);
  covered.set(item.subarray(8, 32), 4);
  return nvsCrc(covered);
}

/** Data field of a string or blob chunk: size u16, 0xFFFF, payload CRC32. */
function varLengthData(payload: Uint8Array): Uint8Array {
  const data = new Uint8Array(8).fill(0xff);
  view(data).setUint16(0, payload.length, true);
  view(data).setUint32(4, nvsCrc(payload), true);
  return data;
}

function entriesFor(size: number): number {
  return Math.ceil(size / NVS_ENTRY_SIZE);
}

/** Follows nvs_partition_gen.py's page filling decisions step by step so the bytes match. */
class PartitionWriter {
  readonly bytes: Uint8Array;
  /** The last page is reserved for the library's garbage collection and stays erased. */
  private readonly dataPages: number;
  private page = 0;
  private entry = 0;

  constructor(size: number) {
    this.bytes = new Uint8Array(size).fill(0xff);
    this.dataPages = size / NVS_PAGE_SIZE - 1;
    this.initPage();
  }

  private get base(): number {
    return this.page * NVS_PAGE_SIZE;
  }

  private initPage(): void {
    const header = this.bytes.subarray(this.base, this.base + 32);
    const dv = view(header);
    dv.setUint32(0, STATE_ACTIVE, true);
    dv.setUint32(4, this.page, true);
    header[8] = VERSION2;
    dv.setUint32(
      HEADER_CRC_OFFSET,
      nvsCrc(header.subarray(HEADER_CRC_START, HEADER_CRC_OFFSET)),
      true,
    );
  }

  /** The generator marks a page FULL only when it opens the next one; the last used page stays ACTIVE. */
  private nextPage(what: string): void {
    if (this.page + 1 >= this.dataPages) {
      throw new FirmwareError(
        'NVS_FULL',
        `${what} does not fit: a ${this.bytes.length}-byte partition has ${this.dataPages} data pages (the last page is reserved)`,
      );
    }
    view(this.bytes).setUint32(this.base, STATE_FULL, true);
    this.page += 1;
    this.entry = 0;
    this.initPage();
  }

  private put(data: Uint8Array, entryCount: number): void {
    this.bytes.set(data, this.base + FIRST_ENTRY_OFFSET + this.entry * NVS_ENTRY_SIZE);
    for (let i = 0; i < entryCount; i++) {
      const bit = this.entry * 2;
      const at = this.base + BITMAP_OFFSET + (bit >> 3);
      this.bytes[at] = (this.bytes[at] ?? 0xff) & ~(1 << (bit & 7));
      this.entry += 1;
    }
  }

  writePrimitive(ns: number, code: number, key: Uint8Array, data: Uint8Array, what: string): void {
    if (this.entry >= NVS_ENTRIES_PER_PAGE) this.nextPage(what);
    this.put(makeItem(ns, code, 1, CHUNK_ANY, key, data), 1);
  }

  writeString(ns: number, key: Uint8Array, payload: Uint8Array, what: string): void {
    const total = entriesFor(payload.length) + 1;
    // The generator moves a string that would reach the page's last entry (>=, not >). It
    // fails outright on a string filling a whole page; the library accepts it, so we write it.
    if (this.entry > 0 && this.entry + total >= NVS_ENTRIES_PER_PAGE) this.nextPage(what);
    this.put(makeItem(ns, TYPE_SZ, total, CHUNK_ANY, key, varLengthData(payload)), 1);
    this.put(payload, total - 1);
  }

  /** v2 blobs: chunks fill each page's remaining entries, then an index entry. */
  writeBlob(ns: number, key: Uint8Array, payload: Uint8Array, what: string): void {
    if (this.entry >= NVS_ENTRIES_PER_PAGE) this.nextPage(what);
    let offset = 0;
    let remaining = payload.length;
    let chunkCount = 0;
    for (;;) {
      // Room after this chunk's header entry; may be 0, giving an empty chunk as the generator does.
      const tailroom = (NVS_ENTRIES_PER_PAGE - this.entry - 1) * NVS_ENTRY_SIZE;
      const chunkSize = Math.min(tailroom, remaining);
      remaining -= chunkSize;
      const chunk = payload.subarray(offset, offset + chunkSize);
      const dataEntries = entriesFor(chunkSize);
      this.put(
        makeItem(ns, TYPE_BLOB_DATA, dataEntries + 1, chunkCount, key, varLengthData(chunk)),
        1,
      );
      this.put(chunk, dataEntries);
      chunkCount += 1;
      offset += chunkSize;
      if (remaining > 0 || tailroom - chunkSize < NVS_ENTRY_SIZE) this.nextPage(what);
      if (remaining === 0) break;
    }
    const index = new Uint8Array(8).fill(0xff);
    view(index).setUint32(0, payload.length, true);
    index[4] = chunkCount;
    index[5] = 0; // chunk start: the generator always uses version 0 (0..127)
    this.put(makeItem(ns, TYPE_BLOB_IDX, 1, CHUNK_ANY, key, index), 1);
  }
}

function checkPartitionSize(size: number): void {
  if (!Number.isSafeInteger(size) || size % NVS_PAGE_SIZE !== 0 || size < NVS_MIN_PARTITION_SIZE) {
    throw invalid(
      `NVS partition size ${size} must be a multiple of ${NVS_PAGE_SIZE} and at least 0x${NVS_MIN_PARTITION_SIZE.toString(16)}`,
    );
  }
}

/**
 * The partition `nvs_partition_gen.py generate --version 2` writes for these entries, in order.
 * A namespace entry is written where its namespace first appears; later entries reuse its index.
 * Throws `NVS_INVALID` for a bad entry, a duplicate key, more than 254 namespaces or a bad size,
 * and `NVS_FULL` naming the first entry that does not fit.
 */
export function writeNvsPartition(entries: readonly NvsEntry[], size: number): Uint8Array {
  checkPartitionSize(size);
  const writer = new PartitionWriter(size);
  const namespaces = new Map<string, number>();
  const seen = new Set<string>();
  for (const entry of entries) {
    validateNvsEntry(entry);
    const what = describe(entry);
    const id = `${entry.namespace}\0${entry.key}`;
    if (seen.has(id)) throw invalid(`${what}: duplicate key in namespace "${entry.namespace}"`);
    seen.add(id);
    let ns = namespaces.get(entry.namespace);
    if (ns === undefined) {
      ns = namespaces.size + 1;
      if (ns > NVS_MAX_NAMESPACES) {
        throw invalid(`${what}: more than ${NVS_MAX_NAMESPACES} namespaces`);
      }
      namespaces.set(entry.namespace, ns);
      const data = new Uint8Array(8).fill(0xff);
      data[0] = ns;
      writer.writePrimitive(0, INT_TYPES.u8.code, utf8.encode(entry.namespace), data, what);
    }
    const key = utf8.encode(entry.key);
    const { type, value } = entry;
    if (isIntType(type)) {
      const spec = INT_TYPES[type];
      const data = new Uint8Array(8).fill(0xff);
      let raw = intValue(type, value, what);
      if (raw < 0n) raw += 1n << BigInt(spec.bytes * 8);
      for (let i = 0; i < spec.bytes; i++) {
        data[i] = Number((raw >> BigInt(i * 8)) & 0xffn);
      }
      writer.writePrimitive(ns, spec.code, key, data, what);
    } else if (type === 'string') {
      writer.writeString(ns, key, stringPayload(value, what), what);
    } else {
      writer.writeBlob(ns, key, blobPayload(value, what), what);
    }
  }
  return writer.bytes;
}

// ---------------------------------------------------------------------------------------------
// Reading

interface RawItem {
  page: number;
  entry: number;
  ns: number;
  type: number;
  chunkIndex: number;
  key: string;
  /** The 8-byte data field. */
  data: Uint8Array;
  /** Strings, v1 blobs and blob chunks: the bytes of the following entries, `size` long. */
  payload: Uint8Array | undefined;
}

interface Scan {
  pages: NvsPageInfo[];
  errors: string[];
  items: RawItem[];
}

const PAGE_STATES = new Map<number, NvsPageInfo['state']>([
  [STATE_ACTIVE, 'active'],
  [STATE_FULL, 'full'],
  [STATE_FREEING, 'freeing'],
  [STATE_CORRUPT, 'corrupt'],
]);

function entryState(page: Uint8Array, index: number): number {
  const bit = index * 2;
  return ((page[BITMAP_OFFSET + (bit >> 3)] ?? 0xff) >> (bit & 7)) & 0b11;
}

const ERASED_PAGE = Buffer.alloc(NVS_PAGE_SIZE, 0xff);

/**
 * Whether a page is all 0xFF. Most pages of a partition are erased, so this runs once per page
 * on every read: one native compare, not a callback per byte (which made reading a 32-page
 * partition cost half a millisecond).
 */
function isErased(page: Uint8Array): boolean {
  return Buffer.from(page.buffer, page.byteOffset, page.byteLength).equals(ERASED_PAGE);
}

function isVarLength(type: number): boolean {
  return type === TYPE_SZ || type === TYPE_BLOB_V1 || type === TYPE_BLOB_DATA;
}

function isKnownType(type: number): boolean {
  return INT_BY_CODE.has(type) || isVarLength(type) || type === TYPE_BLOB_IDX;
}

function keyOf(item: Uint8Array): string {
  const field = item.subarray(8, 24);
  const end = field.indexOf(0);
  return Buffer.from(end === -1 ? field : field.subarray(0, end)).toString('utf8');
}

/** Page headers and every entry whose header and payload CRCs hold, in physical order per page. */
function scanPage(
  index: number,
  page: Uint8Array,
  errors: string[],
  items: RawItem[],
): NvsPageInfo {
  const dv = view(page);
  const rawState = dv.getUint32(0, true);
  const where = `page ${index}`;
  if (rawState === STATE_ERASED_PAGE) {
    const erased = isErased(page);
    if (!erased) errors.push(`${where}: state is erased but the page holds data`);
    return {
      index,
      state: erased ? 'empty' : 'corrupt',
      sequence: undefined,
      version: undefined,
      headerCrcValid: erased,
      entriesUsed: 0,
    };
  }
  const sequence = dv.getUint32(4, true);
  const version = page[8] ?? VERSION1;
  const stored = dv.getUint32(HEADER_CRC_OFFSET, true);
  const computed = nvsCrc(page.subarray(HEADER_CRC_START, HEADER_CRC_OFFSET));
  const headerCrcValid = stored === computed;
  let entriesUsed = 0;
  for (let i = 0; i < NVS_ENTRIES_PER_PAGE; i++) {
    if (entryState(page, i) === ENTRY_WRITTEN) entriesUsed += 1;
  }
  let state = PAGE_STATES.get(rawState) ?? 'corrupt';
  if (!PAGE_STATES.has(rawState)) errors.push(`${where}: unknown page state ${hex32(rawState)}`);
  if (!headerCrcValid) {
    errors.push(`${where}: header CRC ${hex32(stored)} does not match ${hex32(computed)}`);
    state = 'corrupt';
  }
  const info: NvsPageInfo = { index, state, sequence, version, headerCrcValid, entriesUsed };
  if (state === 'corrupt') return info;
  if (version !== VERSION2 && version !== VERSION1) {
    errors.push(`${where}: format version 0x${version.toString(16)} is newer than v2 (0xfe)`);
    return info;
  }
  let i = 0;
  while (i < NVS_ENTRIES_PER_PAGE) {
    const state = entryState(page, i);
    if (state !== ENTRY_WRITTEN) {
      if (state !== ENTRY_EMPTY && state !== 0) errors.push(`${where} entry ${i}: illegal state`);
      i += 1;
      continue;
    }
    const at = FIRST_ENTRY_OFFSET + i * NVS_ENTRY_SIZE;
    const item = page.subarray(at, at + NVS_ENTRY_SIZE);
    const itemView = view(item);
    const here = `${where} entry ${i}`;
    const storedCrc = itemView.getUint32(4, true);
    const computedCrc = itemCrc(item);
    if (storedCrc !== computedCrc) {
      // The span is not trustworthy either: skip one entry, as the library's load does.
      errors.push(`${here}: CRC ${hex32(storedCrc)} does not match ${hex32(computedCrc)}`);
      i += 1;
      continue;
    }
    const type = item[1] ?? 0;
    const span = item[2] ?? 0;
    const key = keyOf(item);
    if (!isKnownType(type)) {
      errors.push(`${here} (${key}): unknown type 0x${type.toString(16)}`);
      i += 1;
      continue;
    }
    let payload: Uint8Array | undefined;
    if (isVarLength(type)) {
      const size = itemView.getUint16(24, true);
      const expected = entriesFor(size) + 1;
      if (span !== expected || i + span > NVS_ENTRIES_PER_PAGE) {
        errors.push(`${here} (${key}): bad span ${span} for ${size} bytes`);
        i += 1;
        continue;
      }
      let allWritten = true;
      for (let j = i + 1; j < i + span; j++) {
        if (entryState(page, j) !== ENTRY_WRITTEN) allWritten = false;
      }
      if (!allWritten) {
        errors.push(`${here} (${key}): data entries of the span are not all written`);
        i += 1;
        continue;
      }
      payload = page.slice(at + NVS_ENTRY_SIZE, at + NVS_ENTRY_SIZE + size);
      const dataStored = itemView.getUint32(28, true);
      const dataComputed = nvsCrc(payload);
      if (dataStored !== dataComputed) {
        errors.push(
          `${here} (${key}): data CRC ${hex32(dataStored)} does not match ${hex32(dataComputed)}`,
        );
        i += span;
        continue;
      }
    } else if (span !== 1) {
      errors.push(`${here} (${key}): bad span ${span} for a one-entry item`);
      i += 1;
      continue;
    }
    items.push({
      page: index,
      entry: i,
      ns: item[0] ?? 0,
      type,
      chunkIndex: item[3] ?? CHUNK_ANY,
      key,
      data: item.slice(24, 32),
      payload,
    });
    i += isVarLength(type) ? span : 1;
  }
  return info;
}

function scan(bytes: Uint8Array): Scan {
  const errors: string[] = [];
  const pages: NvsPageInfo[] = [];
  const perPage: { info: NvsPageInfo; items: RawItem[] }[] = [];
  if (bytes.length % NVS_PAGE_SIZE !== 0) {
    errors.push(
      `partition length ${bytes.length} is not a multiple of ${NVS_PAGE_SIZE}; the partial page is ignored`,
    );
  }
  const count = Math.floor(bytes.length / NVS_PAGE_SIZE);
  for (let p = 0; p < count; p++) {
    const items: RawItem[] = [];
    const info = scanPage(
      p,
      bytes.subarray(p * NVS_PAGE_SIZE, (p + 1) * NVS_PAGE_SIZE),
      errors,
      items,
    );
    pages.push(info);
    perPage.push({ info, items });
  }
  // The library orders pages by sequence number, not by position.
  perPage.sort(
    (a, b) => (a.info.sequence ?? 0) - (b.info.sequence ?? 0) || a.info.index - b.info.index,
  );
  return { pages, errors, items: perPage.flatMap((p) => p.items) };
}

function readInt(type: IntType, data: Uint8Array): number | bigint {
  const spec = INT_TYPES[type];
  let raw = 0n;
  for (let i = spec.bytes - 1; i >= 0; i--) raw = (raw << 8n) | BigInt(data[i] ?? 0);
  const bits = BigInt(spec.bytes * 8);
  if (spec.signed && raw >= 1n << (bits - 1n)) raw -= 1n << bits;
  return spec.bytes === 8 ? raw : Number(raw);
}

/** Resolves namespaces and assembles blobs; entries come out in storage order. */
function resolve(items: readonly RawItem[], errors: string[]): NvsEntry[] {
  const namespaces = new Map<number, string>();
  const chunks = new Map<string, Uint8Array>();
  for (const item of items) {
    if (item.ns === 0) {
      if (item.type !== INT_TYPES.u8.code) {
        errors.push(
          `page ${item.page} entry ${item.entry}: namespace entry "${item.key}" is not a u8`,
        );
        continue;
      }
      const index = item.data[0] ?? 0;
      const known = namespaces.get(index);
      if (known !== undefined && known !== item.key) {
        errors.push(`namespace index ${index} names both "${known}" and "${item.key}"`);
        continue;
      }
      namespaces.set(index, item.key);
    } else if (item.type === TYPE_BLOB_DATA && item.payload !== undefined) {
      const id = `${item.ns}\0${item.key}\0${item.chunkIndex}`;
      if (!chunks.has(id)) chunks.set(id, item.payload);
    }
  }
  const entries: NvsEntry[] = [];
  for (const item of items) {
    if (item.ns === 0 || item.type === TYPE_BLOB_DATA) continue;
    const where = `page ${item.page} entry ${item.entry} (${item.key})`;
    const namespace = namespaces.get(item.ns);
    if (namespace === undefined) {
      errors.push(`${where}: no namespace has index ${item.ns}`);
      continue;
    }
    const base = { namespace, key: item.key };
    const intType = INT_BY_CODE.get(item.type);
    if (intType !== undefined) {
      entries.push({ ...base, type: intType, value: readInt(intType, item.data) });
    } else if (item.type === TYPE_SZ && item.payload !== undefined) {
      const payload = item.payload;
      const text = payload.at(-1) === 0 ? payload.subarray(0, -1) : payload;
      entries.push({ ...base, type: 'string', value: Buffer.from(text).toString('utf8') });
    } else if (item.type === TYPE_BLOB_V1 && item.payload !== undefined) {
      entries.push({ ...base, type: 'blob', value: item.payload });
    } else if (item.type === TYPE_BLOB_IDX) {
      const dv = view(item.data);
      const size = dv.getUint32(0, true);
      const count = item.data[4] ?? 0;
      const start = item.data[5] ?? 0;
      const parts: Uint8Array[] = [];
      let missing: number | undefined;
      for (let c = start; c < start + count; c++) {
        const part = chunks.get(`${item.ns}\0${item.key}\0${c}`);
        if (part === undefined) {
          missing = c;
          break;
        }
        parts.push(part);
      }
      if (missing !== undefined) {
        errors.push(`${where}: blob chunk ${missing} is missing`);
        continue;
      }
      const value = Buffer.concat(parts);
      if (value.length !== size) {
        errors.push(`${where}: blob chunks hold ${value.length} bytes, index says ${size}`);
        continue;
      }
      entries.push({ ...base, type: 'blob', value: new Uint8Array(value) });
    }
  }
  return entries;
}

/**
 * Every written entry whose CRCs hold, in storage order (pages by sequence number), with
 * namespaces resolved, strings without their NUL and multi-page blobs assembled. Corrupt
 * entries and pages are skipped; `inspectNvsPartition` says why. Throws `NVS_CORRUPT` when the
 * length is not a whole number of pages.
 */
export function readNvsPartition(bytes: Uint8Array): NvsEntry[] {
  if (bytes.length === 0 || bytes.length % NVS_PAGE_SIZE !== 0) {
    throw new FirmwareError(
      'NVS_CORRUPT',
      `NVS partition length ${bytes.length} is not a positive multiple of ${NVS_PAGE_SIZE}`,
    );
  }
  const { items } = scan(bytes);
  return resolve(items, []);
}

/** Page states and everything the reader skips (CRC mismatches, bad spans, missing chunks). */
export function inspectNvsPartition(bytes: Uint8Array): { pages: NvsPageInfo[]; errors: string[] } {
  const { pages, errors, items } = scan(bytes);
  resolve(items, errors);
  return { pages, errors };
}
