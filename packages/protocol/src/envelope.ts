/**
 * The MCP envelope, `{"session_id":"S","type":"mcp","payload":{...}}` (docs/protocol.md §1).
 * The device builds it by concatenation and reads it with cJSON; a backend must read
 * what the device writes even when the payload inside is invalid JSON.
 */
import { type CJsonNode, cString, getItem, parseCJson } from './cjson.js';
import { type JsonRpcMessage, readJsonRpc, readJsonRpcFrom } from './jsonrpc.js';

/** An MCP envelope as a backend writes it: the session id escaped, the payload as given. */
export function encodeEnvelope(sessionId: string, payloadText: string): string {
  return `{"session_id":${JSON.stringify(sessionId)},"type":"mcp","payload":${payloadText}}`;
}

/** An MCP envelope exactly as the device writes it: plain concatenation, nothing escaped. */
export function encodeDeviceEnvelope(sessionId: string, payloadText: string): string {
  return `{"session_id":"${sessionId}","type":"mcp","payload":${payloadText}}`;
}

export type DeviceFrame =
  | {
      readonly kind: 'mcp';
      readonly sessionId: string;
      /** The `payload` member's exact wire text (what the page budget counts); `null` when absent. */
      readonly payloadText: string;
      readonly message: JsonRpcMessage;
    }
  | { readonly kind: 'message'; readonly type: string; readonly value: Record<string, unknown> }
  | { readonly kind: 'invalid'; readonly reason: string };

// The device's envelope, `{"session_id":"S","type":"mcp","payload":P}`, cut apart by hand: a
// pattern with `[\s\S]*` groups backtracks, and V8 throws RangeError past a few MB.
const DEVICE_HEAD = '{"session_id":"';
const DEVICE_MIDDLE = '","type":"mcp","payload":';

function isLineTerminator(code: number): boolean {
  return code === 0x0a || code === 0x0d || code === 0x2028 || code === 0x2029;
}

/**
 * An MCP envelope in the device's exact shape, read without parsing: the session id is
 * everything up to the first unescaped quote (as the firmware echoes it, unescaped), the
 * payload everything between the `"payload":` and the closing brace.
 */
function cutDeviceEnvelope(text: string): { rawSession: string; payloadText: string } | undefined {
  if (!text.startsWith(DEVICE_HEAD)) return undefined;
  let i = DEVICE_HEAD.length;
  for (;;) {
    if (i >= text.length) return undefined;
    const code = text.charCodeAt(i);
    if (code === 0x22 /* " */) break;
    if (code === 0x5c /* \ */) {
      // An escape takes any next character but a line terminator, as `\\.` in a pattern.
      if (i + 1 >= text.length || isLineTerminator(text.charCodeAt(i + 1))) return undefined;
      i += 2;
    } else {
      i++;
    }
  }
  if (!text.startsWith(DEVICE_MIDDLE, i)) return undefined;
  const payloadStart = i + DEVICE_MIDDLE.length;
  if (text.length - 1 < payloadStart || !text.endsWith('}')) return undefined;
  return {
    rawSession: text.slice(DEVICE_HEAD.length, i),
    payloadText: text.slice(payloadStart, -1),
  };
}

function skipSpace(text: string, at: number): number {
  let i = at;
  for (;;) {
    const code = text.charCodeAt(i);
    if (code !== 0x20 && code !== 0x09 && code !== 0x0a && code !== 0x0d) return i;
    i++;
  }
}

/** The index after the JSON string starting at `at` (a quote), or -1. */
function stringEnd(text: string, at: number): number {
  for (let i = at + 1; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === 0x22) return i + 1;
    if (code === 0x5c) i++;
  }
  return -1;
}

/** The index after the JSON value starting at `at`, or -1: depth counted, strings skipped. */
function valueEnd(text: string, at: number): number {
  const first = text.charCodeAt(at);
  if (first === 0x22) return stringEnd(text, at);
  if (first !== 0x7b /* { */ && first !== 0x5b /* [ */) {
    // A number or literal runs to the next delimiter.
    let i = at;
    while (i < text.length && !',}] \t\n\r'.includes(text.charAt(i))) i++;
    return i === at ? -1 : i;
  }
  let depth = 0;
  for (let i = at; i < text.length; ) {
    const code = text.charCodeAt(i);
    if (code === 0x22) {
      i = stringEnd(text, i);
      if (i === -1) return -1;
      continue;
    }
    if (code === 0x7b || code === 0x5b) depth++;
    else if (code === 0x7d || code === 0x5d) {
      depth--;
      if (depth === 0) return i + 1;
    }
    i++;
  }
  return -1;
}

// An escaped key is at most six characters per character, plus the quotes.
const ESCAPED_PAYLOAD_MAX = 'payload'.length * 6 + 2;

/** Whether the key text from `start` to `end` (quotes included) is `payload`; sliced only when escaped. */
function isPayloadKey(text: string, start: number, end: number): boolean {
  const length = end - start;
  if (length === 9 && text.startsWith('"payload"', start)) return true;
  if (length > ESCAPED_PAYLOAD_MAX) return false;
  for (let i = start; i < end; i++)
    if (text.charCodeAt(i) === 0x5c /* \\ */)
      return JSON.parse(text.slice(start, end)) === 'payload';
  return false;
}

/**
 * The exact text of the `payload` member of a JSON object text, which `JSON.parse` has
 * accepted; the last one, as `JSON.parse` keeps the last duplicate. One pass, no recursion.
 */
function payloadMemberText(text: string): string | undefined {
  let i = skipSpace(text, 0);
  if (text.charCodeAt(i) !== 0x7b) return undefined;
  i = skipSpace(text, i + 1);
  if (text.charCodeAt(i) === 0x7d) return undefined;
  let found: string | undefined;
  for (;;) {
    const keyEnd = text.charCodeAt(i) === 0x22 ? stringEnd(text, i) : -1;
    if (keyEnd === -1) return undefined;
    const isPayload = isPayloadKey(text, i, keyEnd);
    i = skipSpace(text, keyEnd);
    if (text.charCodeAt(i) !== 0x3a /* : */) return undefined;
    const start = skipSpace(text, i + 1);
    const end = valueEnd(text, start);
    if (end === -1) return undefined;
    if (isPayload) found = text.slice(start, end);
    i = skipSpace(text, end);
    if (text.charCodeAt(i) !== 0x2c /* , */) return found;
    i = skipSpace(text, i + 1);
  }
}

/**
 * cJSON's `CJSON_NESTING_LIMIT`: no firmware frame is deeper, since the board could not read
 * its own output back. A deeper frame is refused before `JSON.parse`, which spends about a
 * microsecond per level: a hostile 128 KiB frame of brackets would hold the event loop.
 */
export const MAX_FRAME_DEPTH = 1000;

/** True when `text` opens more than `limit` objects or arrays at once (strings skipped); one pass. */
export function nestedDeeperThan(text: string, limit: number): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === 0x22) {
      const end = stringEnd(text, i);
      if (end === -1) return false;
      i = end - 1;
    } else if (code === 0x7b || code === 0x5b) {
      if (++depth > limit) return true;
    } else if (code === 0x7d || code === 0x5d) depth--;
  }
  return false;
}

/**
 * Reads a text frame a device sent; never throws. A frame that is valid JSON is read as
 * JSON: an MCP envelope's `payloadText` is the `payload` member's exact wire text, cut out
 * of the frame, never re-serialised. A frame that is not valid JSON is still read when it
 * is an MCP envelope in the device's own shape, so an unescaped error message inside the
 * payload still yields the payload and, through {@link readJsonRpc}, its id and text. Any
 * other frame must be a JSON object with a string `type`.
 */
export function readDeviceFrame(text: string): DeviceFrame {
  // Deeper than the limit takes more characters than the limit: a short frame is never scanned.
  if (text.length > MAX_FRAME_DEPTH && nestedDeeperThan(text, MAX_FRAME_DEPTH))
    return { kind: 'invalid', reason: `frame is nested deeper than ${MAX_FRAME_DEPTH} levels` };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return readDeviceEnvelope(text) ?? { kind: 'invalid', reason: 'frame is not valid JSON' };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { kind: 'invalid', reason: 'frame is not a JSON object' };
  }
  const record = value as Record<string, unknown>;
  if (typeof record.type !== 'string')
    return { kind: 'invalid', reason: 'frame has no string type' };
  if (record.type === 'mcp') {
    return new McpFrame(
      typeof record.session_id === 'string' ? record.session_id : '',
      record.payload === undefined ? undefined : text,
      record.payload ?? null,
    );
  }
  return { kind: 'message', type: record.type, value: record };
}

/**
 * An MCP frame that was valid JSON: its `payloadText` (a scan of the whole frame) is cut on
 * first read, not per frame, since a `tools/call` reply's reader never asks for it.
 */
class McpFrame {
  readonly kind = 'mcp' as const;
  readonly message: JsonRpcMessage;
  /** The frame's text until `payloadText` is cut from it; undefined when it has no payload. */
  #text: string | undefined;
  #payloadText: string | undefined;

  constructor(
    readonly sessionId: string,
    text: string | undefined,
    payload: unknown,
  ) {
    this.#text = text;
    this.message = readJsonRpcFrom(payload, this);
  }

  /** The `payload` member's exact wire text (what the page budget counts); `null` when absent. */
  get payloadText(): string {
    if (this.#payloadText === undefined) {
      const text = this.#text;
      this.#payloadText = (text === undefined ? undefined : payloadMemberText(text)) ?? 'null';
      this.#text = undefined;
    }
    return this.#payloadText;
  }

  toJSON(): unknown {
    return {
      kind: this.kind,
      sessionId: this.sessionId,
      payloadText: this.payloadText,
      message: this.message,
    };
  }
}

function readDeviceEnvelope(text: string): DeviceFrame | undefined {
  const cut = cutDeviceEnvelope(text);
  if (cut === undefined) return undefined;
  let sessionId = cut.rawSession;
  try {
    sessionId = JSON.parse(`"${cut.rawSession}"`) as string;
  } catch {
    // keep the raw text: the device does not escape what it echoes
  }
  return {
    kind: 'mcp',
    sessionId,
    payloadText: cut.payloadText,
    message: readJsonRpc(cut.payloadText),
  };
}

export interface BackendFrame {
  /** The `type` member as the device sees it (a C string), or undefined. */
  readonly type: string | undefined;
  readonly root: CJsonNode;
  /** For `mcp`: the payload, only when it is a JSON object (else the device drops it). */
  readonly payload: CJsonNode | undefined;
}

/** Reads a text frame from the backend the way the device does (cJSON rules). */
export function readBackendFrame(text: string): BackendFrame | undefined {
  const root = parseCJson(text);
  if (root?.kind !== 'object') return undefined;
  const type = getItem(root, 'type');
  const typeName = type?.kind === 'string' ? cString(type.value) : undefined;
  const payload = typeName === 'mcp' ? getItem(root, 'payload') : undefined;
  return { type: typeName, root, payload: payload?.kind === 'object' ? payload : undefined };
}
