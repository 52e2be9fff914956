/**
 * The ESP-IDF partition table: what `gen_esp32part.py` writes as `partition-table.bin`
 * and what the bootloader reads at flash offset 0x8000.
 *
 * Layout: 32-byte entries, each (little-endian) magic bytes AA 50, type (u8), subtype (u8),
 * offset (u32), size (u32), label (16 bytes, NUL-padded, not necessarily NUL-terminated) and
 * flags (u32: bit 0 encrypted, bit 1 readonly). After the entries an optional MD5 entry:
 * bytes EB EB, 14 bytes 0xFF, then the MD5 of every entry before it. The rest of the
 * 0xC00-byte area is 0xFF, which also serves as the end marker.
 */
import { Buffer } from 'node:buffer';
import { createHash } from 'node:crypto';
import { FirmwareError } from './errors.js';

export const PARTITION_TABLE_OFFSET = 0x8000;
export const PARTITION_TABLE_MAX_SIZE = 0xc00;
export const PARTITION_ENTRY_SIZE = 32;
/** The table owns a whole flash sector, so the first partition starts at offset + 0x1000. */
export const PARTITION_TABLE_SECTOR_SIZE = 0x1000;

export const PARTITION_FLAG_ENCRYPTED = 1 << 0;
export const PARTITION_FLAG_READONLY = 1 << 1;

const MAGIC_0 = 0xaa;
const MAGIC_1 = 0x50;
const MD5_MAGIC = 0xeb;
const LABEL_SIZE = 16;
const APP_ALIGNMENT = 0x10000;
const DATA_ALIGNMENT = 0x1000;
const OTADATA_SIZE = 0x2000;

export const PARTITION_TYPE_APP = 0x00;
export const PARTITION_TYPE_DATA = 0x01;
/** IDF 5.3+ can describe the bootloader and the table itself as partitions. */
const PARTITION_TYPE_BOOTLOADER = 0x02;
const PARTITION_TYPE_TABLE = 0x03;

export interface Partition {
  label: string;
  type: number;
  subtype: number;
  offset: number;
  size: number;
  flags: number;
  /** `app`, `data`, `bootloader`, `partition_table`, or `0x..` for other types. */
  typeName: 'app' | 'data' | string;
  /** `factory`, `ota_0`..`ota_15`, `test`, `ota`, `phy`, `nvs`, `spiffs`, ... or `0x..`. */
  subtypeName: string;
}

export interface PartitionTable {
  partitions: Partition[];
  /** Undefined when the table has no MD5 entry (`gen_esp32part.py --disable-md5sum`). */
  md5: { stored: string; computed: string; valid: boolean } | undefined;
}

/** What {@link writePartitionTable} takes; a {@link Partition} read back fits too. */
export interface PartitionInput {
  label: string;
  type: number | 'app' | 'data' | string;
  subtype: number | string;
  offset: number;
  size: number;
  /** Default 0; see PARTITION_FLAG_*. */
  flags?: number;
}

const TYPE_NAMES: Readonly<Record<string, number>> = {
  app: PARTITION_TYPE_APP,
  data: PARTITION_TYPE_DATA,
  bootloader: PARTITION_TYPE_BOOTLOADER,
  partition_table: PARTITION_TYPE_TABLE,
};

// Kept in step with esp_partition_subtype_t and gen_esp32part.py's SUBTYPES.
const APP_SUBTYPES: Record<string, number> = { factory: 0x00, test: 0x20 };
for (let slot = 0; slot < 16; slot++) APP_SUBTYPES[`ota_${slot}`] = 0x10 + slot;

const SUBTYPE_NAMES: Readonly<Record<number, Readonly<Record<string, number>>>> = {
  [PARTITION_TYPE_APP]: APP_SUBTYPES,
  [PARTITION_TYPE_DATA]: {
    ota: 0x00,
    phy: 0x01,
    nvs: 0x02,
    coredump: 0x03,
    nvs_keys: 0x04,
    efuse: 0x05,
    undefined: 0x06,
    esphttpd: 0x80,
    fat: 0x81,
    spiffs: 0x82,
    littlefs: 0x83,
  },
  [PARTITION_TYPE_BOOTLOADER]: { primary: 0x00, ota: 0x01, recovery: 0x02 },
  [PARTITION_TYPE_TABLE]: { primary: 0x00, ota: 0x01 },
};

const FLAG_NAMES: Readonly<Record<string, number>> = {
  encrypted: PARTITION_FLAG_ENCRYPTED,
  readonly: PARTITION_FLAG_READONLY,
};

function invalid(message: string): FirmwareError {
  return new FirmwareError('PARTITION_INVALID', message);
}

function hexByte(value: number): string {
  return `0x${value.toString(16).padStart(2, '0')}`;
}

function hex32(value: number): string {
  return `0x${value.toString(16)}`;
}

function typeNameOf(type: number): string {
  return Object.keys(TYPE_NAMES).find((name) => TYPE_NAMES[name] === type) ?? hexByte(type);
}

function subtypeNameOf(type: number, subtype: number): string {
  const names = SUBTYPE_NAMES[type] ?? {};
  return Object.keys(names).find((name) => names[name] === subtype) ?? hexByte(subtype);
}

/** Partition type from a name (`app`, `data`, ...) or a number (also as text: `0x40`). */
function resolveType(type: number | string, where: string): number {
  let value: number | undefined;
  if (typeof type === 'number') value = type;
  else value = TYPE_NAMES[type] ?? parseNumber(type);
  if (value === undefined || !Number.isInteger(value) || value < 0 || value > 0xfe) {
    throw invalid(`${where}: type "${type}" is not app, data or a number from 0 to 0xfe`);
  }
  return value;
}

function resolveSubtype(type: number, subtype: number | string, where: string): number {
  let value: number | undefined;
  if (typeof subtype === 'number') value = subtype;
  else value = SUBTYPE_NAMES[type]?.[subtype] ?? parseNumber(subtype);
  if (value === undefined || !Number.isInteger(value) || value < 0 || value > 0xfe) {
    throw invalid(
      `${where}: subtype "${subtype}" is not a known name for type ${typeNameOf(type)} nor a number from 0 to 0xfe`,
    );
  }
  return value;
}

/** Decimal or 0x-hex, as gen_esp32part accepts (without its K/M suffixes). */
function parseNumber(text: string): number | undefined {
  const trimmed = text.trim();
  if (/^0x[0-9a-f]+$/i.test(trimmed)) return Number.parseInt(trimmed.slice(2), 16);
  if (/^(0|[1-9][0-9]*)$/.test(trimmed)) return Number.parseInt(trimmed, 10);
  return undefined;
}

function alignmentOf(type: number): number {
  return type === PARTITION_TYPE_APP ? APP_ALIGNMENT : DATA_ALIGNMENT;
}

function tableStart(bytes: Uint8Array): number {
  if (bytes[0] === MAGIC_0 && bytes[1] === MAGIC_1) return 0;
  // Not the table's own bytes: a flash dump or merged image, with the table at 0x8000.
  if (bytes[PARTITION_TABLE_OFFSET] === MAGIC_0 && bytes[PARTITION_TABLE_OFFSET + 1] === MAGIC_1) {
    return PARTITION_TABLE_OFFSET;
  }
  const found = Buffer.from(bytes.buffer, bytes.byteOffset, Math.min(bytes.length, 2)).toString(
    'hex',
  );
  throw invalid(
    `no partition table: first entry magic is ${found || 'missing'} (expected aa50) at 0x0 and at 0x8000`,
  );
}

function decodeLabel(entry: Uint8Array): string {
  const field = entry.subarray(12, 12 + LABEL_SIZE);
  const end = field.indexOf(0);
  return new TextDecoder().decode(end === -1 ? field : field.subarray(0, end));
}

/**
 * Reads a partition table from its own bytes (`partition-table.bin`, with or without the
 * 0xFF padding) or from a whole flash image / merged binary (table at 0x8000).
 * A wrong MD5 is reported as `md5.valid: false`, not thrown; a bad entry magic or a
 * truncated entry throws `PARTITION_INVALID`.
 */
export function readPartitionTable(bytes: Uint8Array): PartitionTable {
  const start = tableStart(bytes);
  const table = bytes.subarray(start, start + PARTITION_TABLE_MAX_SIZE);
  const dv = new DataView(table.buffer, table.byteOffset, table.byteLength);
  const partitions: Partition[] = [];
  let md5: PartitionTable['md5'];
  for (let position = 0; position < table.length; position += PARTITION_ENTRY_SIZE) {
    const entry = table.subarray(position, position + PARTITION_ENTRY_SIZE);
    // The bootloader's end test: magic 0xFFFF with type and subtype 0xFF.
    if (entry.subarray(0, 4).every((byte) => byte === 0xff)) break;
    if (entry.length < PARTITION_ENTRY_SIZE) {
      throw invalid(
        `partition table truncated: entry at 0x${position.toString(16)} has ${entry.length} of 32 bytes`,
      );
    }
    if (entry[0] === MD5_MAGIC && entry[1] === MD5_MAGIC) {
      const stored = Buffer.from(entry.subarray(16, 32)).toString('hex');
      const computed = createHash('md5').update(table.subarray(0, position)).digest('hex');
      md5 = { stored, computed, valid: stored === computed };
      continue;
    }
    if (entry[0] !== MAGIC_0 || entry[1] !== MAGIC_1) {
      throw invalid(
        `bad partition entry magic ${Buffer.from(entry.subarray(0, 2)).toString('hex')} at table offset 0x${position.toString(16)} (expected aa50)`,
      );
    }
    const type = dv.getUint8(position + 2);
    const subtype = dv.getUint8(position + 3);
    partitions.push({
      label: decodeLabel(entry),
      type,
      subtype,
      offset: dv.getUint32(position + 4, true),
      size: dv.getUint32(position + 8, true),
      flags: dv.getUint32(position + 28, true),
      typeName: typeNameOf(type),
      subtypeName: subtypeNameOf(type, subtype),
    });
  }
  return { partitions, md5 };
}

interface ResolvedPartition {
  label: string;
  labelBytes: Uint8Array;
  type: number;
  subtype: number;
  offset: number;
  size: number;
  flags: number;
}

function checkU32(value: number, what: string): number {
  if (!Number.isInteger(value) || value < 0 || value > 0xffff_ffff) {
    throw invalid(`${what} must be an integer from 0 to 0xffffffff, got ${value}`);
  }
  return value;
}

function resolvePartition(input: PartitionInput, index: number): ResolvedPartition {
  const where = `partition ${index} ("${input.label}")`;
  if (input.label.length === 0) throw invalid(`partition ${index}: the label is empty`);
  if (input.label.includes('\0')) throw invalid(`${where}: the label contains NUL`);
  const labelBytes = new TextEncoder().encode(input.label);
  if (labelBytes.length > LABEL_SIZE) {
    throw invalid(`${where}: the label is ${labelBytes.length} bytes, at most 16 fit`);
  }
  const type = resolveType(input.type, where);
  const subtype = resolveSubtype(type, input.subtype, where);
  const size = checkU32(input.size, `${where}: size`);
  if (size === 0) throw invalid(`${where}: size is 0`);
  const offset = checkU32(input.offset, `${where}: offset`);
  if (offset + size > 0x1_0000_0000) throw invalid(`${where}: ends past 4 GB`);
  const alignment = alignmentOf(type);
  if (offset % alignment !== 0) {
    throw invalid(
      `${where}: ${typeNameOf(type)} offset ${hex32(offset)} is not aligned to ${hex32(alignment)}`,
    );
  }
  return {
    label: input.label,
    labelBytes,
    type,
    subtype,
    offset,
    size,
    flags: checkU32(input.flags ?? 0, `${where}: flags`),
  };
}

/** gen_esp32part's `verify()`: unique labels, one 8 KB otadata, nothing overlaps. */
function verifyPartitions(partitions: readonly ResolvedPartition[], tableOffset: number): void {
  const seen = new Set<string>();
  for (const p of partitions) {
    if (seen.has(p.label)) throw invalid(`duplicate partition label "${p.label}"`);
    seen.add(p.label);
  }
  const otadata = partitions.filter((p) => p.type === PARTITION_TYPE_DATA && p.subtype === 0);
  if (otadata.length > 1) {
    throw invalid(`${otadata.length} otadata partitions (data/ota); at most one is allowed`);
  }
  const first = otadata[0];
  if (first !== undefined && first.size !== OTADATA_SIZE) {
    throw invalid(
      `otadata partition "${first.label}" must be 0x2000 bytes, is ${hex32(first.size)}`,
    );
  }
  // Bootloader and partition-table entries describe the areas below the first partition.
  const regular = partitions
    .filter((p) => p.type !== PARTITION_TYPE_BOOTLOADER && p.type !== PARTITION_TYPE_TABLE)
    .sort((a, b) => a.offset - b.offset);
  const floor = tableOffset + PARTITION_TABLE_SECTOR_SIZE;
  let previous: ResolvedPartition | undefined;
  for (const p of regular) {
    if (p.offset < floor) {
      throw invalid(
        `partition "${p.label}" at ${hex32(p.offset)} overlaps the bootloader or the partition table (partitions start at ${hex32(floor)})`,
      );
    }
    if (previous !== undefined && p.offset < previous.offset + previous.size) {
      throw invalid(
        `partition "${p.label}" at ${hex32(p.offset)} overlaps "${previous.label}" (${hex32(previous.offset)}-${hex32(previous.offset + previous.size - 1)})`,
      );
    }
    previous = p;
  }
}

export interface WritePartitionTableOptions {
  /** Append the MD5 entry, as ESP-IDF does unless told otherwise. Default true. */
  md5?: boolean;
  /** Where the table will be flashed; partitions must start after its sector. Default 0x8000. */
  tableOffset?: number;
}

/**
 * Encodes a partition table as gen_esp32part.py does: the entries in the given order, the
 * MD5 entry (unless `md5: false`), 0xFF up to 0xC00 bytes. Throws `PARTITION_INVALID` for
 * overlaps, a misaligned offset (app 0x10000, others 0x1000), duplicate labels, labels
 * over 16 bytes, or too many entries.
 */
export function writePartitionTable(
  partitions: readonly PartitionInput[],
  options: WritePartitionTableOptions = {},
): Uint8Array {
  const withMd5 = options.md5 ?? true;
  const resolved = partitions.map(resolvePartition);
  verifyPartitions(resolved, options.tableOffset ?? PARTITION_TABLE_OFFSET);
  const used = (resolved.length + (withMd5 ? 1 : 0)) * PARTITION_ENTRY_SIZE;
  // gen_esp32part rejects a table that leaves no room for the 0xFF end marker.
  if (used >= PARTITION_TABLE_MAX_SIZE) {
    throw invalid(
      `${resolved.length} partitions need ${used} bytes; the table holds less than ${PARTITION_TABLE_MAX_SIZE}`,
    );
  }
  const out = new Uint8Array(PARTITION_TABLE_MAX_SIZE).fill(0xff);
  const dv = new DataView(out.buffer);
  resolved.forEach((p, index) => {
    const at = index * PARTITION_ENTRY_SIZE;
    out[at] = MAGIC_0;
    out[at + 1] = MAGIC_1;
    out[at + 2] = p.type;
    out[at + 3] = p.subtype;
    dv.setUint32(at + 4, p.offset, true);
    dv.setUint32(at + 8, p.size, true);
    out.fill(0, at + 12, at + 12 + LABEL_SIZE);
    out.set(p.labelBytes, at + 12);
    dv.setUint32(at + 28, p.flags, true);
  });
  if (withMd5) {
    const at = resolved.length * PARTITION_ENTRY_SIZE;
    out[at] = MD5_MAGIC;
    out[at + 1] = MD5_MAGIC;
    // Bytes at+2..at+15 stay 0xFF.
    out.set(createHash('md5').update(out.subarray(0, at)).digest(), at + 16);
  }
  return out;
}

export interface PartitionQuery {
  label?: string;
  type?: number | 'app' | 'data';
  /** A number, or a name for the partition's type (`ota_0`, `nvs`, `spiffs`...). */
  subtype?: number | string;
}

/** The first partition matching every given field of `query`. */
export function findPartition(table: PartitionTable, query: PartitionQuery): Partition | undefined {
  const type = query.type === undefined ? undefined : (TYPE_NAMES[query.type] ?? query.type);
  return table.partitions.find((p) => {
    if (query.label !== undefined && p.label !== query.label) return false;
    if (type !== undefined && p.type !== type) return false;
    if (query.subtype !== undefined) {
      const wanted =
        typeof query.subtype === 'number'
          ? query.subtype
          : (SUBTYPE_NAMES[p.type]?.[query.subtype] ?? parseNumber(query.subtype));
      if (p.subtype !== wanted) return false;
    }
    return true;
  });
}

/** gen_esp32part's numbers: decimal or 0x-hex, optionally with a K or M (1024-based) suffix. */
function parseSize(text: string, what: string): number {
  const match = /^(.*?)([kKmM]?)$/.exec(text);
  const base = parseNumber(match?.[1] ?? '');
  if (base === undefined) throw invalid(`${what} "${text}" is not a number`);
  const suffix = (match?.[2] ?? '').toLowerCase();
  return base * (suffix === 'k' ? 1024 : suffix === 'm' ? 1024 * 1024 : 1);
}

export interface ParsePartitionCsvOptions {
  /** Where the table will be flashed; an empty first offset starts one sector after it. */
  tableOffset?: number;
}

/**
 * Parses an ESP-IDF `partitions.csv` (Name, Type, SubType, Offset, Size, Flags).
 * Sizes and offsets take `16K`, `4M`, `0x4000` or decimal; an empty offset follows the
 * previous partition, aligned to 0x10000 for apps and 0x1000 for everything else.
 * Flags is a `:`-separated list of `encrypted` and `readonly`. Type and subtype keep the
 * names written in the file (numbers when written as numbers); `flags` is set only when
 * the column is not empty. Throws `PARTITION_INVALID` with the line number.
 */
export function parsePartitionCsv(
  text: string,
  options: ParsePartitionCsvOptions = {},
): PartitionInput[] {
  const tableOffset = options.tableOffset ?? PARTITION_TABLE_OFFSET;
  const result: PartitionInput[] = [];
  let lastEnd = tableOffset + PARTITION_TABLE_SECTOR_SIZE;
  const lines = text.split(/\r?\n/);
  lines.forEach((raw, index) => {
    const line = raw.trim();
    if (line.length === 0 || line.startsWith('#')) return;
    const at = `line ${index + 1}`;
    const [
      name = '',
      typeText = '',
      subtypeText = '',
      offsetText = '',
      sizeText = '',
      flagText = '',
    ] = line.split(',').map((field) => field.trim());
    if (name.length === 0) throw invalid(`${at}: the name is empty`);
    if (typeText.length === 0) throw invalid(`${at}: the type is empty`);
    const typeValue = TYPE_NAMES[typeText] ?? parseNumber(typeText);
    if (typeValue === undefined) throw invalid(`${at}: unknown partition type "${typeText}"`);
    const type: number | string = TYPE_NAMES[typeText] === undefined ? typeValue : typeText;
    let subtype: number | string;
    if (subtypeText.length === 0) {
      if (typeValue === PARTITION_TYPE_APP)
        throw invalid(`${at}: an app partition needs a subtype`);
      // gen_esp32part gives every type without a subtype data's `undefined` (0x06).
      subtype = typeValue === PARTITION_TYPE_DATA ? 'undefined' : 0x06;
    } else {
      const known = SUBTYPE_NAMES[typeValue]?.[subtypeText];
      const numeric = parseNumber(subtypeText);
      if (known === undefined && numeric === undefined) {
        throw invalid(`${at}: unknown subtype "${subtypeText}" for type ${typeText}`);
      }
      subtype = known === undefined ? (numeric ?? 0) : subtypeText;
    }
    if (sizeText.length === 0) throw invalid(`${at}: the size is empty`);
    const size = parseSize(sizeText, `${at}: size`);
    let flags = 0;
    for (const flag of flagText.split(':').map((f) => f.trim())) {
      if (flag.length === 0) continue;
      const bit = FLAG_NAMES[flag];
      if (bit === undefined) throw invalid(`${at}: unknown flag "${flag}"`);
      flags |= bit;
    }
    let offset: number;
    const special = typeValue === PARTITION_TYPE_BOOTLOADER || typeValue === PARTITION_TYPE_TABLE;
    if (offsetText.length > 0) {
      offset = parseSize(offsetText, `${at}: offset`);
      if (!special && offset < lastEnd) {
        throw invalid(
          result.length === 0
            ? `${at}: offset ${hex32(offset)} overlaps the partition table (partitions start at ${hex32(lastEnd)})`
            : `${at}: offset ${hex32(offset)} overlaps the previous partition, which ends at ${hex32(lastEnd)}`,
        );
      }
    } else {
      if (special) throw invalid(`${at}: a ${typeText} partition needs an offset`);
      const alignment = alignmentOf(typeValue);
      offset = Math.ceil(lastEnd / alignment) * alignment;
    }
    if (!special) lastEnd = offset + size;
    const partition: PartitionInput = { label: name, type, subtype, offset, size };
    if (flagText.length > 0) partition.flags = flags;
    result.push(partition);
  });
  // Alignment, labels, otadata and the rest: the same checks as writing the table.
  verifyPartitions(result.map(resolvePartition), tableOffset);
  return result;
}

/** xiaozhi-esp32 `partitions/v2/16m.csv`: two 4 MB OTA slots and an 8 MB assets partition. */
export const XIAOZHI_PARTITIONS_16M: readonly PartitionInput[] = Object.freeze([
  { label: 'nvs', type: 'data', subtype: 'nvs', offset: 0x9000, size: 0x4000 },
  { label: 'otadata', type: 'data', subtype: 'ota', offset: 0xd000, size: 0x2000 },
  { label: 'phy_init', type: 'data', subtype: 'phy', offset: 0xf000, size: 0x1000 },
  { label: 'ota_0', type: 'app', subtype: 'ota_0', offset: 0x20000, size: 0x3f0000 },
  { label: 'ota_1', type: 'app', subtype: 'ota_1', offset: 0x410000, size: 0x3f0000 },
  { label: 'assets', type: 'data', subtype: 'spiffs', offset: 0x800000, size: 0x800000 },
]);

/** xiaozhi-esp32 `partitions/v2/8m.csv`: two 3 MB OTA slots and a 2 MB assets partition. */
export const XIAOZHI_PARTITIONS_8M: readonly PartitionInput[] = Object.freeze([
  { label: 'nvs', type: 'data', subtype: 'nvs', offset: 0x9000, size: 0x4000 },
  { label: 'otadata', type: 'data', subtype: 'ota', offset: 0xd000, size: 0x2000 },
  { label: 'phy_init', type: 'data', subtype: 'phy', offset: 0xf000, size: 0x1000 },
  { label: 'ota_0', type: 'app', subtype: 'ota_0', offset: 0x20000, size: 0x2f0000 },
  { label: 'ota_1', type: 'app', subtype: 'ota_1', offset: 0x310000, size: 0x2f0000 },
  { label: 'assets', type: 'data', subtype: 'spiffs', offset: 0x600000, size: 0x200000 },
]);

/** xiaozhi-esp32 `partitions/v2/4m.csv`: a factory app and no OTA slots. */
export const XIAOZHI_PARTITIONS_4M: readonly PartitionInput[] = Object.freeze([
  { label: 'nvs', type: 'data', subtype: 'nvs', offset: 0x9000, size: 0x4000 },
  { label: 'otadata', type: 'data', subtype: 'ota', offset: 0xd000, size: 0x2000 },
  { label: 'phy_init', type: 'data', subtype: 'phy', offset: 0xf000, size: 0x1000 },
  { label: 'factory', type: 'app', subtype: 'factory', offset: 0x10000, size: 0x2f0000 },
  { label: 'assets', type: 'data', subtype: 'spiffs', offset: 0x300000, size: 0x100000 },
]);
