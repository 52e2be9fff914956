/**
 * The firmware reads and writes JSON with cJSON. Its reading differs from `JSON.parse`
 * in ways that decide which requests a board answers (docs/protocol.md §2):
 * - keys are looked up case-insensitively (ASCII only) and the first duplicate wins;
 * - a number's `valueint` is truncated toward zero and saturates at the int32 bounds;
 * - strings are C strings: everything from an embedded NUL on is invisible;
 * - text after the first complete value is ignored.
 * This module keeps the parsed tree so those rules can be applied exactly, and prints
 * values the way `cJSON_PrintUnformatted` does.
 */

export type CJsonNode =
  | { readonly kind: 'null' }
  | { readonly kind: 'bool'; readonly value: boolean }
  | { readonly kind: 'number'; readonly value: number }
  | { readonly kind: 'string'; readonly value: string }
  | { readonly kind: 'array'; readonly items: readonly CJsonNode[] }
  | { readonly kind: 'object'; readonly entries: readonly (readonly [string, CJsonNode])[] };

export type CJsonObject = Extract<CJsonNode, { kind: 'object' }>;

/** A plain JSON value, as `JSON.parse` returns. */
export type JsonValue =
  | null
  | boolean
  | number
  | string
  | JsonValue[]
  | { [key: string]: JsonValue };

const INT32_MAX = 2147483647;
const INT32_MIN = -2147483648;
const NESTING_LIMIT = 1000; // CJSON_NESTING_LIMIT

class Reader {
  pos = 0;
  depth = 0;
  constructor(readonly text: string) {}

  // cJSON treats every byte <= 32 as whitespace, not only the four JSON allows.
  skipWhitespace(): void {
    while (this.pos < this.text.length && this.text.charCodeAt(this.pos) <= 32) this.pos++;
  }

  value(): CJsonNode | undefined {
    const t = this.text;
    const c = t[this.pos];
    if (t.startsWith('null', this.pos)) {
      this.pos += 4;
      return { kind: 'null' };
    }
    if (t.startsWith('false', this.pos)) {
      this.pos += 5;
      return { kind: 'bool', value: false };
    }
    if (t.startsWith('true', this.pos)) {
      this.pos += 4;
      return { kind: 'bool', value: true };
    }
    if (c === '"') {
      const value = this.string();
      return value === undefined ? undefined : { kind: 'string', value };
    }
    if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) return this.number();
    if (c === '[') return this.array();
    if (c === '{') return this.object();
    return undefined;
  }

  // cJSON copies the run of [0-9+-eE.] and hands it to strtod, which takes the longest
  // valid prefix; parsing resumes where strtod stopped.
  number(): CJsonNode | undefined {
    const run = /^[0-9+\-eE.]+/.exec(this.text.slice(this.pos, this.pos + 64))?.[0] ?? '';
    const prefix = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?/.exec(run)?.[0];
    if (prefix === undefined) return undefined;
    this.pos += prefix.length;
    return { kind: 'number', value: Number(prefix) };
  }

  string(): string | undefined {
    const t = this.text;
    let i = this.pos + 1;
    let out = '';
    let chunkStart = i;
    for (;;) {
      if (i >= t.length) return undefined;
      const ch = t.charCodeAt(i);
      if (ch === 0x22 /* " */) break;
      if (ch !== 0x5c /* \ */) {
        i++;
        continue;
      }
      out += t.slice(chunkStart, i);
      const esc = t[i + 1];
      switch (esc) {
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case '"':
        case '\\':
        case '/':
          out += esc;
          break;
        case 'u': {
          const decoded = decodeUnicodeEscape(t, i);
          if (decoded === undefined) return undefined;
          out += decoded.text;
          i += decoded.length - 2;
          break;
        }
        default:
          return undefined;
      }
      i += 2;
      chunkStart = i;
    }
    out += t.slice(chunkStart, i);
    this.pos = i + 1;
    return out;
  }

  array(): CJsonNode | undefined {
    if (++this.depth > NESTING_LIMIT) return undefined;
    this.pos++;
    const items: CJsonNode[] = [];
    this.skipWhitespace();
    if (this.text[this.pos] === ']') {
      this.pos++;
      this.depth--;
      return { kind: 'array', items };
    }
    for (;;) {
      this.skipWhitespace();
      const item = this.value();
      if (item === undefined) return undefined;
      items.push(item);
      this.skipWhitespace();
      const c = this.text[this.pos++];
      if (c === ']') break;
      if (c !== ',') return undefined;
    }
    this.depth--;
    return { kind: 'array', items };
  }

  object(): CJsonNode | undefined {
    if (++this.depth > NESTING_LIMIT) return undefined;
    this.pos++;
    const entries: [string, CJsonNode][] = [];
    this.skipWhitespace();
    if (this.text[this.pos] === '}') {
      this.pos++;
      this.depth--;
      return { kind: 'object', entries };
    }
    for (;;) {
      this.skipWhitespace();
      if (this.text[this.pos] !== '"') return undefined;
      const key = this.string();
      if (key === undefined) return undefined;
      this.skipWhitespace();
      if (this.text[this.pos++] !== ':') return undefined;
      this.skipWhitespace();
      const value = this.value();
      if (value === undefined) return undefined;
      entries.push([key, value]);
      this.skipWhitespace();
      const c = this.text[this.pos++];
      if (c === '}') break;
      if (c !== ',') return undefined;
    }
    this.depth--;
    return { kind: 'object', entries };
  }
}

function decodeUnicodeEscape(t: string, at: number): { text: string; length: number } | undefined {
  const hex = (from: number): number | undefined => {
    const digits = t.slice(from, from + 4);
    return /^[0-9a-fA-F]{4}$/.test(digits) ? Number.parseInt(digits, 16) : undefined;
  };
  const first = hex(at + 2);
  if (first === undefined) return undefined;
  if (first >= 0xdc00 && first <= 0xdfff) return undefined; // lone low surrogate
  if (first < 0xd800 || first > 0xdbff) return { text: String.fromCharCode(first), length: 6 };
  if (t[at + 6] !== '\\' || t[at + 7] !== 'u') return undefined;
  const second = hex(at + 8);
  if (second === undefined || second < 0xdc00 || second > 0xdfff) return undefined;
  return { text: String.fromCharCode(first, second), length: 12 };
}

/**
 * Parses text as `cJSON_Parse` does; `undefined` where cJSON returns NULL.
 * Trailing text after the first value is ignored, as cJSON does by default.
 */
export function parseCJson(text: string): CJsonNode | undefined {
  const reader = new Reader(text);
  if (text.charCodeAt(0) === 0xfeff) reader.pos = 1; // cJSON skips a UTF-8 BOM
  reader.skipWhitespace();
  return reader.value();
}

/** The C-string view of a string: cJSON's `valuestring` ends at the first NUL. */
export function cString(value: string): string {
  const nul = value.indexOf('\0');
  return nul === -1 ? value : value.slice(0, nul);
}

// cJSON's case_insensitive_strcmp folds with tolower() in the C locale: ASCII letters only.
function foldsEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x >= 65 && x <= 90) x += 32;
    if (y >= 65 && y <= 90) y += 32;
    if (x !== y) return false;
  }
  return true;
}

/** `cJSON_GetObjectItem`: case-insensitive (ASCII), first match wins, keys compared as C strings. */
export function getItem(node: CJsonNode | undefined, key: string): CJsonNode | undefined {
  if (node?.kind !== 'object') return undefined;
  const wanted = cString(key);
  for (const [name, value] of node.entries) {
    if (name === wanted || foldsEqual(cString(name), wanted)) return value;
  }
  return undefined;
}

/** `valueint` of a cJSON number: truncated toward zero, saturated to int32. */
export function toCInt(value: number): number {
  if (value >= INT32_MAX) return INT32_MAX;
  if (value <= INT32_MIN) return INT32_MIN;
  if (Number.isNaN(value)) return 0;
  return Math.trunc(value) | 0;
}

/** Converts a plain JS value (as from `JSON.parse`) into a cJSON tree. */
export function fromJsonValue(value: unknown): CJsonNode {
  if (value === null || value === undefined) return { kind: 'null' };
  if (typeof value === 'boolean') return { kind: 'bool', value };
  if (typeof value === 'number') return { kind: 'number', value };
  if (typeof value === 'string') return { kind: 'string', value };
  if (Array.isArray(value)) return { kind: 'array', items: value.map(fromJsonValue) };
  if (typeof value === 'object') {
    return {
      kind: 'object',
      entries: Object.entries(value).map(([k, v]) => [k, fromJsonValue(v)] as const),
    };
  }
  return { kind: 'null' };
}

/** Converts a cJSON tree to a plain value (last duplicate wins there, as in `JSON.parse`). */
export function toJsonValue(node: CJsonNode): JsonValue {
  switch (node.kind) {
    case 'null':
      return null;
    case 'bool':
    case 'number':
    case 'string':
      return node.value;
    case 'array':
      return node.items.map(toJsonValue);
    case 'object': {
      const out: { [key: string]: JsonValue } = {};
      for (const [k, v] of node.entries) out[k] = toJsonValue(v);
      return out;
    }
  }
}

/** C's `%.{precision}g`. */
function formatG(value: number, precision: number): string {
  const exponential = value.toExponential(precision - 1);
  const exponent = Number(exponential.slice(exponential.indexOf('e') + 1));
  if (exponent < -4 || exponent >= precision) {
    const [mantissa = '', exp = ''] = exponential.split('e');
    const trimmed = mantissa.includes('.') ? mantissa.replace(/\.?0+$/, '') : mantissa;
    const sign = exp.startsWith('-') ? '-' : '+';
    return `${trimmed}e${sign}${exp.replace(/^[+-]/, '').padStart(2, '0')}`;
  }
  const fixed = value.toFixed(Math.max(0, precision - 1 - exponent));
  return fixed.includes('.') ? fixed.replace(/\.?0+$/, '') : fixed;
}

/** A number as `cJSON_PrintUnformatted` writes it. */
export function printCJsonNumber(value: number): string {
  if (!Number.isFinite(value)) return 'null';
  if (value === toCInt(value)) return String(toCInt(value));
  const short = formatG(value, 15);
  return Number(short) === value ? short : formatG(value, 17);
}

/**
 * A string as cJSON writes it: quotes, backslash and control characters escaped,
 * everything else raw. Equal to `JSON.stringify` for the C-string part of the value.
 */
export function printCJsonString(value: string): string {
  return JSON.stringify(cString(value));
}

/** A plain value as `cJSON_PrintUnformatted` writes it. */
export function printCJson(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (typeof value === 'number') return printCJsonNumber(value);
  if (typeof value === 'string') return printCJsonString(value);
  if (Array.isArray(value)) return `[${value.map(printCJson).join(',')}]`;
  if (typeof value === 'object') {
    const parts: string[] = [];
    for (const [k, v] of Object.entries(value)) {
      if (v !== undefined) parts.push(`${printCJsonString(k)}:${printCJson(v)}`);
    }
    return `{${parts.join(',')}}`;
  }
  return 'null';
}

/** A cJSON tree as `cJSON_PrintUnformatted` writes it (duplicates and order kept). */
export function printCJsonNode(node: CJsonNode): string {
  switch (node.kind) {
    case 'null':
      return 'null';
    case 'bool':
      return node.value ? 'true' : 'false';
    case 'number':
      return printCJsonNumber(node.value);
    case 'string':
      return printCJsonString(node.value);
    case 'array':
      return `[${node.items.map(printCJsonNode).join(',')}]`;
    case 'object':
      return `{${node.entries.map(([k, v]) => `${printCJsonString(k)}:${printCJsonNode(v)}`).join(',')}}`;
  }
}
