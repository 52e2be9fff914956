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

interface ArrayFrame {
  readonly kind: 'array';
  readonly items: CJsonNode[];
}
interface ObjectFrame {
  readonly kind: 'object';
  readonly entries: [string, CJsonNode][];
  /** The key of the member being read. */
  key: string;
}

function isDigit(code: number): boolean {
  return code >= 0x30 && code <= 0x39;
}

// The characters cJSON copies into a number's buffer before strtod: [0-9+-eE.].
function inNumberRun(code: number): boolean {
  return (
    isDigit(code) ||
    code === 0x2b ||
    code === 0x2d ||
    code === 0x65 ||
    code === 0x45 ||
    code === 0x2e
  );
}

class Reader {
  pos = 0;
  depth = 0;
  constructor(readonly text: string) {}

  // cJSON treats every byte <= 32 as whitespace, not only the four JSON allows.
  skipWhitespace(): void {
    while (this.pos < this.text.length && this.text.charCodeAt(this.pos) <= 32) this.pos++;
  }

  /** A scalar (null, bool, string, number) at `pos`; undefined for anything else. */
  scalar(): CJsonNode | undefined {
    const t = this.text;
    const c = t[this.pos];
    // Strings and numbers first: they are what requests carry. The literals are tried after.
    if (c === '"') {
      const value = this.string();
      return value === undefined ? undefined : { kind: 'string', value };
    }
    if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) return this.number();
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
    return undefined;
  }

  /** An object member's key and colon, leaving `pos` at its value; false where cJSON fails. */
  memberKey(frame: ObjectFrame): boolean {
    this.skipWhitespace();
    if (this.text[this.pos] !== '"') return false;
    const key = this.string();
    if (key === undefined) return false;
    this.skipWhitespace();
    if (this.text[this.pos++] !== ':') return false;
    this.skipWhitespace();
    frame.key = key;
    return true;
  }

  /**
   * `parse_value` with its `parse_array`/`parse_object` recursion unrolled onto a stack of
   * open containers, so no input can overflow the JS stack; the checks and their order are
   * cJSON's, including the {@link NESTING_LIMIT}.
   */
  value(): CJsonNode | undefined {
    const open: (ArrayFrame | ObjectFrame)[] = [];
    for (;;) {
      // Read one value at `pos`: a scalar, an empty container, or the start of a container.
      let node: CJsonNode | undefined;
      const c = this.text[this.pos];
      if (c === '[' || c === '{') {
        if (++this.depth > NESTING_LIMIT) return undefined;
        this.pos++;
        this.skipWhitespace();
        if (this.text[this.pos] === (c === '[' ? ']' : '}')) {
          this.pos++;
          this.depth--;
          node = c === '[' ? { kind: 'array', items: [] } : { kind: 'object', entries: [] };
        } else if (c === '[') {
          open.push({ kind: 'array', items: [] });
          this.skipWhitespace();
          continue;
        } else {
          const frame: ObjectFrame = { kind: 'object', entries: [], key: '' };
          if (!this.memberKey(frame)) return undefined;
          open.push(frame);
          continue;
        }
      } else {
        node = this.scalar();
        if (node === undefined) return undefined;
      }
      // Hand the value to the innermost open container; close every container that ends.
      for (;;) {
        const frame = open[open.length - 1];
        if (frame === undefined) return node;
        if (frame.kind === 'array') frame.items.push(node);
        else frame.entries.push([frame.key, node]);
        this.skipWhitespace();
        const next = this.text[this.pos++];
        if (next === (frame.kind === 'array' ? ']' : '}')) {
          open.pop();
          this.depth--;
          node =
            frame.kind === 'array'
              ? { kind: 'array', items: frame.items }
              : { kind: 'object', entries: frame.entries };
          continue;
        }
        if (next !== ',') return undefined;
        if (frame.kind === 'array') this.skipWhitespace();
        else if (!this.memberKey(frame)) return undefined;
        break;
      }
    }
  }

  // cJSON copies the run of [0-9+-eE.] and hands it to strtod, which takes the longest
  // valid prefix; parsing resumes where strtod stopped.
  number(): CJsonNode | undefined {
    // The usual case, a plain integer ending where the run ends: it is its own strtod prefix.
    const t = this.text;
    const start = this.pos;
    let i = t.charCodeAt(start) === 0x2d /* - */ ? start + 1 : start;
    const digits = i;
    while (i - start < 64 && isDigit(t.charCodeAt(i))) i++;
    if (i > digits && i - start < 64 && !inNumberRun(t.charCodeAt(i))) {
      this.pos = i;
      return { kind: 'number', value: Number(t.slice(start, i)) };
    }
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
  const entries = node.entries;
  for (let i = 0; i < entries.length; i++) {
    const [name, value] = entries[i] as readonly [string, CJsonNode];
    if (name === wanted) return value;
    // A C string is never longer than its text: a shorter name cannot match.
    if (name.length >= wanted.length && foldsEqual(cString(name), wanted)) return value;
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

// The tree walks below keep their own stack (parallel arrays, nothing allocated per step): a
// received value can be nested far deeper than the JS stack allows (JSON.parse reads a million
// levels). A container is on the current path from its visit to its EXIT, which is how a cycle,
// which has no JSON form, is refused instead of looping forever.

/** What a walk step is: a value to visit, text to write, or the end of a container. */
const VISIT = 0;
const TEXT = 1;
const EXIT = 2;

function circular(): never {
  throw new TypeError('cannot convert a circular structure to JSON');
}

/** `target[key] = value`, a `"__proto__"` key included as data (as JSON.parse makes it). */
function setMember(target: Record<string | number, unknown>, key: string | number, value: unknown) {
  if (key === '__proto__') {
    Object.defineProperty(target, key, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  } else {
    target[key] = value;
  }
}

/**
 * Converts a plain JS value (as from `JSON.parse`) into a cJSON tree, at any depth. What
 * JSON cannot hold reads as null; a cycle throws `TypeError`, as in `JSON.stringify`.
 */
export function fromJsonValue(value: unknown): CJsonNode {
  const root: CJsonNode[] = [{ kind: 'null' }];
  const kinds: number[] = [VISIT];
  const values: unknown[] = [value];
  const targets: Record<number, unknown>[] = [root];
  const slots: number[] = [0];
  const path = new Set<object>();
  while (kinds.length > 0) {
    const kind = kinds.pop();
    const v = values.pop();
    const target = targets.pop() as Record<number, unknown>;
    const slot = slots.pop() as number;
    if (kind === EXIT) {
      path.delete(v as object);
      continue;
    }
    if (v === null || v === undefined) target[slot] = { kind: 'null' };
    else if (typeof v === 'boolean') target[slot] = { kind: 'bool', value: v };
    else if (typeof v === 'number') target[slot] = { kind: 'number', value: v };
    else if (typeof v === 'string') target[slot] = { kind: 'string', value: v };
    else if (typeof v !== 'object') target[slot] = { kind: 'null' };
    else {
      if (path.has(v)) circular();
      path.add(v);
      kinds.push(EXIT);
      values.push(v);
      targets.push(root);
      slots.push(0);
      if (Array.isArray(v)) {
        const items: CJsonNode[] = new Array(v.length);
        target[slot] = { kind: 'array', items };
        for (let i = v.length - 1; i >= 0; i--) {
          kinds.push(VISIT);
          values.push(v[i]);
          targets.push(items);
          slots.push(i);
        }
      } else {
        const members = Object.entries(v);
        const entries = members.map(([key]): [string, CJsonNode] => [key, { kind: 'null' }]);
        target[slot] = { kind: 'object', entries };
        for (let i = members.length - 1; i >= 0; i--) {
          kinds.push(VISIT);
          values.push(members[i]?.[1]);
          targets.push(entries[i] as [string, CJsonNode]);
          slots.push(1);
        }
      }
    }
  }
  return root[0] as CJsonNode;
}

/**
 * {@link fromJsonValue} one level deep: an object's members (or an array's items) become
 * nodes whose own containers are empty. Enough to look members up and read scalars, as
 * argument validation does, and cheap however deep the value is.
 */
export function fromJsonValueShallow(value: unknown): CJsonNode {
  const leaf = (v: unknown): CJsonNode => {
    if (Array.isArray(v)) return { kind: 'array', items: [] };
    if (typeof v === 'object' && v !== null) return { kind: 'object', entries: [] };
    return fromJsonValue(v);
  };
  if (Array.isArray(value)) return { kind: 'array', items: Array.from(value, leaf) };
  if (typeof value === 'object' && value !== null) {
    return {
      kind: 'object',
      entries: Object.entries(value).map(([k, v]) => [k, leaf(v)] as const),
    };
  }
  return fromJsonValue(value);
}

/** Converts a cJSON tree to a plain value (last duplicate wins there, as in `JSON.parse`). */
export function toJsonValue(node: CJsonNode): JsonValue {
  const root: Record<string | number, unknown> = {};
  const kinds: number[] = [VISIT];
  const nodes: CJsonNode[] = [node];
  const targets: Record<string | number, unknown>[] = [root];
  const keys: (string | number)[] = [0];
  const path = new Set<object>();
  while (kinds.length > 0) {
    const kind = kinds.pop();
    const n = nodes.pop() as CJsonNode;
    const target = targets.pop() as Record<string | number, unknown>;
    const key = keys.pop() as string | number;
    if (kind === EXIT) {
      path.delete(n);
      continue;
    }
    if (n.kind === 'null') setMember(target, key, null);
    else if (n.kind === 'bool' || n.kind === 'number' || n.kind === 'string') {
      setMember(target, key, n.value);
    } else {
      if (path.has(n)) circular();
      path.add(n);
      kinds.push(EXIT);
      nodes.push(n);
      targets.push(root);
      keys.push(0);
      if (n.kind === 'array') {
        const out: JsonValue[] = new Array(n.items.length);
        setMember(target, key, out);
        for (let i = n.items.length - 1; i >= 0; i--) {
          kinds.push(VISIT);
          nodes.push(n.items[i] as CJsonNode);
          targets.push(out as unknown as Record<number, unknown>);
          keys.push(i);
        }
      } else {
        // Every key takes its place in first-seen order; values land in entry order, so the
        // last duplicate's value wins.
        const out: Record<string, unknown> = {};
        for (const [name] of n.entries) if (!Object.hasOwn(out, name)) setMember(out, name, null);
        setMember(target, key, out);
        for (let i = n.entries.length - 1; i >= 0; i--) {
          const [name, child] = n.entries[i] as readonly [string, CJsonNode];
          kinds.push(VISIT);
          nodes.push(child);
          targets.push(out);
          keys.push(name);
        }
      }
    }
  }
  return root[0] as JsonValue;
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

/** A plain value as `cJSON_PrintUnformatted` writes it, at any depth; a cycle throws `TypeError`. */
export function printCJson(value: unknown): string {
  const out: string[] = [];
  const kinds: number[] = [VISIT];
  const items: unknown[] = [value];
  const path = new Set<object>();
  while (kinds.length > 0) {
    const kind = kinds.pop();
    const v = items.pop();
    if (kind === TEXT) out.push(v as string);
    else if (kind === EXIT) path.delete(v as object);
    else if (v === null || v === undefined) out.push('null');
    else if (typeof v === 'boolean') out.push(v ? 'true' : 'false');
    else if (typeof v === 'number') out.push(printCJsonNumber(v));
    else if (typeof v === 'string') out.push(printCJsonString(v));
    else if (typeof v !== 'object') out.push('null');
    else {
      if (path.has(v)) circular();
      path.add(v);
      kinds.push(EXIT);
      items.push(v);
      if (Array.isArray(v)) {
        out.push('[');
        kinds.push(TEXT);
        items.push(']');
        for (let i = v.length - 1; i >= 0; i--) {
          kinds.push(VISIT);
          items.push(v[i]);
          if (i > 0) {
            kinds.push(TEXT);
            items.push(',');
          }
        }
      } else {
        out.push('{');
        kinds.push(TEXT);
        items.push('}');
        const members = Object.entries(v).filter(([, item]) => item !== undefined);
        for (let i = members.length - 1; i >= 0; i--) {
          const [key, item] = members[i] as [string, unknown];
          kinds.push(VISIT, TEXT);
          items.push(item, `${printCJsonString(key)}:`);
          if (i > 0) {
            kinds.push(TEXT);
            items.push(',');
          }
        }
      }
    }
  }
  return out.join('');
}

/** A cJSON tree as `cJSON_PrintUnformatted` writes it (duplicates and order kept), at any depth. */
export function printCJsonNode(node: CJsonNode): string {
  const out: string[] = [];
  const kinds: number[] = [VISIT];
  const items: (CJsonNode | string)[] = [node];
  const path = new Set<object>();
  while (kinds.length > 0) {
    const kind = kinds.pop();
    const item = items.pop() as CJsonNode | string;
    if (typeof item === 'string') {
      out.push(item);
      continue;
    }
    if (kind === EXIT) {
      path.delete(item);
      continue;
    }
    switch (item.kind) {
      case 'null':
        out.push('null');
        break;
      case 'bool':
        out.push(item.value ? 'true' : 'false');
        break;
      case 'number':
        out.push(printCJsonNumber(item.value));
        break;
      case 'string':
        out.push(printCJsonString(item.value));
        break;
      case 'array':
      case 'object': {
        if (path.has(item)) circular();
        path.add(item);
        kinds.push(EXIT);
        items.push(item);
        const array = item.kind === 'array';
        out.push(array ? '[' : '{');
        kinds.push(TEXT);
        items.push(array ? ']' : '}');
        const count = array ? item.items.length : item.entries.length;
        for (let i = count - 1; i >= 0; i--) {
          if (item.kind === 'array') {
            kinds.push(VISIT);
            items.push(item.items[i] as CJsonNode);
          } else {
            const [key, child] = item.entries[i] as readonly [string, CJsonNode];
            kinds.push(VISIT, TEXT);
            items.push(child, `${printCJsonString(key)}:`);
          }
          if (i > 0) {
            kinds.push(TEXT);
            items.push(',');
          }
        }
        break;
      }
    }
  }
  return out.join('');
}
