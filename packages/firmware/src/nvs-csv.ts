/**
 * The CSV that ESP-IDF's `nvs_partition_gen.py` reads: a header row naming the columns `key`,
 * `type`, `encoding`, `value` (any order), then one row per namespace or value:
 *
 *     key,type,encoding,value
 *     wifi,namespace,,
 *     ssid,data,string,"my net, 5 GHz"
 *     cert,file,binary,certs/ca.der
 *
 * - `namespace` rows switch the namespace of the rows after them (index reused if repeated).
 * - `data` rows: encodings u8 i8 u16 i16 u32 i32 u64 i64 (decimal), string, binary (the text's
 *   UTF-8 bytes as a blob), hex2bin and base64 (blobs).
 * - `file` rows: the value is a path whose content is read with `options.readFile`.
 * - Lines starting with `#` are comments; blank lines are skipped; values may be quoted
 *   (`""` for a quote), and quoted values may hold commas and newlines.
 */
import { Buffer } from 'node:buffer';
import { FirmwareError } from './errors.js';
import type { NvsEntry, NvsType } from './nvs.js';
import { NVS_MAX_KEY_LENGTH, NVS_MAX_NAMESPACES, validateNvsEntry } from './nvs.js';

export interface NvsCsvOptions {
  /** Reads a `file` row's path; without it such rows are an error. */
  readFile?: (path: string) => Uint8Array;
}

interface Field {
  text: string;
  line: number;
  column: number;
}

interface Row {
  line: number;
  fields: Field[];
}

function csvError(line: number, column: number, message: string): FirmwareError {
  return new FirmwareError('NVS_INVALID', `CSV line ${line}, column ${column}: ${message}`);
}

/** RFC 4180 records with line and column (1-based) of each field; comment lines dropped. */
function tokenize(text: string): Row[] {
  const rows: Row[] = [];
  let i = text.charCodeAt(0) === 0xfeff ? 1 : 0;
  let line = 1;
  let lineStart = i;
  const atEnd = (): boolean => i >= text.length;
  const newlineAt = (at: number): number => {
    const c = text[at];
    if (c === '\n') return 1;
    if (c === '\r') return text[at + 1] === '\n' ? 2 : 1;
    return 0;
  };
  while (!atEnd()) {
    if (text[i] === '#') {
      // A comment runs to the end of its line, as the generator filters raw lines.
      while (!atEnd() && newlineAt(i) === 0) i += 1;
      const nl = newlineAt(i);
      i += nl;
      line += 1;
      lineStart = i;
      continue;
    }
    const row: Row = { line, fields: [] };
    for (;;) {
      const field: Field = { text: '', line, column: i - lineStart + 1 };
      if (text[i] === '"') {
        const openLine = line;
        const openColumn = field.column;
        i += 1;
        let value = '';
        for (;;) {
          if (atEnd()) throw csvError(openLine, openColumn, 'unterminated quoted value');
          const c = text[i];
          if (c === '"') {
            if (text[i + 1] === '"') {
              value += '"';
              i += 2;
              continue;
            }
            i += 1;
            break;
          }
          const nl = newlineAt(i);
          if (nl > 0) {
            value += text.slice(i, i + nl);
            i += nl;
            line += 1;
            lineStart = i;
            continue;
          }
          value += c;
          i += 1;
        }
        if (!atEnd() && text[i] !== ',' && newlineAt(i) === 0) {
          throw csvError(line, i - lineStart + 1, 'unexpected character after a closing quote');
        }
        field.text = value;
      } else {
        const start = i;
        while (!atEnd() && text[i] !== ',' && newlineAt(i) === 0) i += 1;
        field.text = text.slice(start, i);
      }
      row.fields.push(field);
      if (!atEnd() && text[i] === ',') {
        i += 1;
        continue;
      }
      break;
    }
    i += newlineAt(i);
    line += 1;
    lineStart = i;
    const only = row.fields[0];
    const blank = row.fields.length === 1 && only !== undefined && only.text.trim() === '';
    if (!blank) rows.push(row);
  }
  return rows;
}

const COLUMNS = ['key', 'type', 'encoding', 'value'] as const;
type Column = (typeof COLUMNS)[number];

const INT_ENCODINGS = ['u8', 'i8', 'u16', 'i16', 'u32', 'i32', 'u64', 'i64'] as const;
const ENCODINGS = [...INT_ENCODINGS, 'string', 'binary', 'hex2bin', 'base64'] as const;
type Encoding = (typeof ENCODINGS)[number];

const INT_BITS: Record<(typeof INT_ENCODINGS)[number], { bits: bigint; signed: boolean }> = {
  u8: { bits: 8n, signed: false },
  i8: { bits: 8n, signed: true },
  u16: { bits: 16n, signed: false },
  i16: { bits: 16n, signed: true },
  u32: { bits: 32n, signed: false },
  i32: { bits: 32n, signed: true },
  u64: { bits: 64n, signed: false },
  i64: { bits: 64n, signed: true },
};

function isEncoding(value: string): value is Encoding {
  return (ENCODINGS as readonly string[]).includes(value);
}

function isIntEncoding(value: Encoding): value is (typeof INT_ENCODINGS)[number] {
  return (INT_ENCODINGS as readonly string[]).includes(value);
}

function parseInteger(
  encoding: (typeof INT_ENCODINGS)[number],
  text: string,
  field: Field,
): number | bigint {
  const trimmed = text.trim();
  // Decimal only, as Python's int() reads it.
  if (!/^[+-]?\d+$/.test(trimmed)) {
    throw csvError(
      field.line,
      field.column,
      `${encoding} value "${text}" is not a decimal integer`,
    );
  }
  const value = BigInt(trimmed);
  const { bits, signed } = INT_BITS[encoding];
  const min = signed ? -(1n << (bits - 1n)) : 0n;
  const max = signed ? (1n << (bits - 1n)) - 1n : (1n << bits) - 1n;
  if (value < min || value > max) {
    throw csvError(
      field.line,
      field.column,
      `${value} is out of range for ${encoding} (${min}..${max})`,
    );
  }
  return bits === 64n ? value : Number(value);
}

function checkName(name: string, what: string, field: Field): void {
  if (name.length === 0) throw csvError(field.line, field.column, `empty ${what}`);
  const size = Buffer.byteLength(name, 'utf8');
  if (size > NVS_MAX_KEY_LENGTH) {
    throw csvError(
      field.line,
      field.column,
      `${what} "${name}" is ${size} bytes, at most ${NVS_MAX_KEY_LENGTH} allowed`,
    );
  }
}

function decodeHex(text: string, field: Field): Uint8Array {
  const hex = text.trim();
  if (hex.length % 2 !== 0) {
    throw csvError(field.line, field.column, 'hex2bin value has an odd number of digits');
  }
  if (!/^[0-9a-fA-F]*$/.test(hex)) {
    throw csvError(
      field.line,
      field.column,
      'hex2bin value holds a character that is not a hex digit',
    );
  }
  return new Uint8Array(Buffer.from(hex, 'hex'));
}

function decodeBase64(text: string, field: Field): Uint8Array {
  const compact = text.replace(/\s+/g, '');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(compact) || compact.length % 4 !== 0) {
    throw csvError(field.line, field.column, 'base64 value is not valid base64');
  }
  return new Uint8Array(Buffer.from(compact, 'base64'));
}

function entryValue(
  encoding: Encoding,
  raw: string | Uint8Array,
  field: Field,
): { type: NvsType; value: NvsEntry['value'] } {
  const text = typeof raw === 'string' ? raw : Buffer.from(raw).toString('utf8');
  if (isIntEncoding(encoding))
    return { type: encoding, value: parseInteger(encoding, text, field) };
  switch (encoding) {
    case 'string':
      return { type: 'string', value: text };
    case 'binary':
      return {
        type: 'blob',
        value: typeof raw === 'string' ? new Uint8Array(Buffer.from(raw, 'utf8')) : raw,
      };
    case 'hex2bin':
      return { type: 'blob', value: decodeHex(text, field) };
    case 'base64':
      return { type: 'blob', value: decodeBase64(text, field) };
  }
  throw csvError(field.line, field.column, `unknown encoding "${encoding}"`);
}

/**
 * The entries of a generator CSV, in file order, each with its namespace. Throws `NVS_INVALID`
 * naming the line and column of the first bad row: a missing header, an unknown type or
 * encoding, a key or namespace over 15 bytes, a value that does not parse or is out of range,
 * a data row before any namespace, a duplicate key, or an unquoted comma in a value.
 */
export function parseNvsCsv(text: string, options: NvsCsvOptions = {}): NvsEntry[] {
  const rows = tokenize(text);
  const header = rows[0];
  if (header === undefined) throw csvError(1, 1, 'no header row (key,type,encoding,value)');
  const columns = new Map<Column, number>();
  header.fields.forEach((field, index) => {
    const name = field.text.trim().toLowerCase();
    if ((COLUMNS as readonly string[]).includes(name) && !columns.has(name as Column)) {
      columns.set(name as Column, index);
    }
  });
  for (const column of COLUMNS) {
    if (!columns.has(column)) {
      throw csvError(
        header.line,
        1,
        `header has no "${column}" column (expected key,type,encoding,value)`,
      );
    }
  }
  const width = header.fields.length;
  const entries: NvsEntry[] = [];
  const namespaces = new Set<string>();
  const keys = new Map<string, number>();
  let namespace: string | undefined;
  for (const row of rows.slice(1)) {
    const extra = row.fields[width];
    if (extra !== undefined) {
      throw csvError(
        extra.line,
        extra.column,
        `row has ${row.fields.length} fields, the header ${width}; quote values that contain commas`,
      );
    }
    const last = row.fields.at(-1);
    const cell = (column: Column): Field => {
      const found = row.fields[columns.get(column) ?? -1];
      // A short row: point past its last field.
      return (
        found ?? {
          text: '',
          line: last?.line ?? row.line,
          column: (last?.column ?? 0) + (last?.text.length ?? 0) + 1,
        }
      );
    };
    const keyField = cell('key');
    const typeField = cell('type');
    const encodingField = cell('encoding');
    const valueField = cell('value');
    const type = typeField.text.trim().toLowerCase();
    if (type === 'namespace') {
      checkName(keyField.text, 'namespace', keyField);
      if (!namespaces.has(keyField.text)) {
        if (namespaces.size >= NVS_MAX_NAMESPACES) {
          throw csvError(
            keyField.line,
            keyField.column,
            `more than ${NVS_MAX_NAMESPACES} namespaces`,
          );
        }
        namespaces.add(keyField.text);
      }
      namespace = keyField.text;
      continue;
    }
    if (type !== 'data' && type !== 'file') {
      throw csvError(
        typeField.line,
        typeField.column,
        `type "${typeField.text}" is not namespace, data or file`,
      );
    }
    if (namespace === undefined) {
      throw csvError(row.line, 1, 'a data row before any namespace row');
    }
    checkName(keyField.text, 'key', keyField);
    const id = `${namespace}\0${keyField.text}`;
    const firstLine = keys.get(id);
    if (firstLine !== undefined) {
      throw csvError(
        keyField.line,
        keyField.column,
        `duplicate key "${keyField.text}" in namespace "${namespace}" (first on line ${firstLine})`,
      );
    }
    keys.set(id, keyField.line);
    const encoding = encodingField.text.trim().toLowerCase();
    if (!isEncoding(encoding)) {
      throw csvError(
        encodingField.line,
        encodingField.column,
        `encoding "${encodingField.text}" is not one of ${ENCODINGS.join(', ')}`,
      );
    }
    let raw: string | Uint8Array = valueField.text;
    if (type === 'file') {
      if (options.readFile === undefined) {
        throw csvError(valueField.line, valueField.column, 'file rows need the readFile option');
      }
      try {
        raw = options.readFile(valueField.text);
      } catch (cause) {
        throw new FirmwareError(
          'NVS_INVALID',
          `CSV line ${valueField.line}, column ${valueField.column}: cannot read "${valueField.text}"`,
          { cause },
        );
      }
    }
    const entry: NvsEntry = {
      namespace,
      key: keyField.text,
      ...entryValue(encoding, raw, valueField),
    };
    try {
      validateNvsEntry(entry);
    } catch (cause) {
      const reason = cause instanceof Error ? cause.message : String(cause);
      throw new FirmwareError(
        'NVS_INVALID',
        `CSV line ${valueField.line}, column ${valueField.column}: ${reason}`,
        { cause },
      );
    }
    entries.push(entry);
  }
  return entries;
}

function quote(field: string): string {
  return /[",\r\n]/.test(field) || field.startsWith('#')
    ? `"${field.replaceAll('"', '""')}"`
    : field;
}

function csvValue(entry: NvsEntry): { encoding: Encoding; text: string } {
  const { type, value } = entry;
  if (type === 'string') return { encoding: 'string', text: String(value) };
  if (type === 'blob') {
    const bytes = value instanceof Uint8Array ? value : new Uint8Array();
    return { encoding: 'hex2bin', text: Buffer.from(bytes).toString('hex') };
  }
  return { encoding: type, text: String(value) };
}

/**
 * A CSV the generator (and `parseNvsCsv`) reads back to these entries: a namespace row
 * wherever the namespace changes, blobs as hex2bin. Throws `NVS_INVALID` for an entry the
 * writer would reject.
 */
export function formatNvsCsv(entries: readonly NvsEntry[]): string {
  const lines = ['key,type,encoding,value'];
  let namespace: string | undefined;
  for (const entry of entries) {
    validateNvsEntry(entry);
    if (entry.namespace !== namespace) {
      namespace = entry.namespace;
      lines.push(`${quote(namespace)},namespace,,`);
    }
    const { encoding, text } = csvValue(entry);
    lines.push(`${quote(entry.key)},data,${encoding},${quote(text)}`);
  }
  return `${lines.join('\n')}\n`;
}
