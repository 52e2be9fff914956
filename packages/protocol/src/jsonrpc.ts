/**
 * JSON-RPC 2.0: classification, encoding, and a tolerant reader for what devices send.
 * The firmware's error replies have no `code` and an unescaped message, so a reply can
 * be invalid JSON (docs/protocol.md §2); the reader still recovers its id and text.
 */
import { jsonForMessage, ProtocolError, WireError } from './errors.js';

export type JsonRpcId = number | string;

export interface JsonRpcRequest {
  readonly jsonrpc: '2.0';
  readonly id: JsonRpcId;
  readonly method: string;
  readonly params?: unknown;
}
export interface JsonRpcNotification {
  readonly jsonrpc: '2.0';
  readonly method: string;
  readonly params?: unknown;
}

export type JsonRpcMessage =
  | {
      readonly kind: 'request';
      readonly id: JsonRpcId;
      readonly method: string;
      readonly params: unknown;
    }
  | { readonly kind: 'notification'; readonly method: string; readonly params: unknown }
  | {
      readonly kind: 'result';
      readonly id: JsonRpcId;
      readonly result: unknown;
      /** The `result` text as it was on the wire, when it could be cut out exactly. */
      readonly resultText: string | undefined;
    }
  | { readonly kind: 'error'; readonly id: JsonRpcId | null; readonly error: WireError }
  | { readonly kind: 'invalid'; readonly reason: string };

function isId(value: unknown): value is JsonRpcId {
  return (typeof value === 'number' && Number.isFinite(value)) || typeof value === 'string';
}

function wireErrorFrom(error: unknown): WireError {
  const record = (typeof error === 'object' && error !== null ? error : {}) as Record<
    string,
    unknown
  >;
  // A structured error without a message is shown as its JSON, bounded: it came off the wire.
  const message =
    typeof record.message === 'string' ? record.message : (jsonForMessage(error) ?? '');
  const code =
    typeof record.code === 'number' && Number.isInteger(record.code) ? record.code : undefined;
  return new WireError(message, {
    ...(code === undefined ? {} : { code }),
    data: record.data,
    original: error,
  });
}

/**
 * Classifies a parsed JSON-RPC message. Lenient where devices are: an error without a
 * `code` is still an error (code {@link CODELESS_ERROR_CODE}, `codeless` set).
 */
export function classifyJsonRpc(value: unknown): JsonRpcMessage {
  return classify(value, undefined);
}

/** Where a payload's exact wire text is cut from when someone first asks for it. */
export interface PayloadSource {
  readonly payloadText: string;
}

/**
 * A result read from a frame: its `resultText` is cut on first read, not per reply, since
 * most readers (a `tools/call` reply's) never ask for it.
 */
class FrameResult {
  readonly kind = 'result' as const;
  #source: PayloadSource | undefined;
  #resultText: string | undefined;

  constructor(
    readonly id: JsonRpcId,
    readonly result: unknown,
    source: PayloadSource,
  ) {
    this.#source = source;
  }

  /** The `result` text as it was on the wire, when it could be cut out exactly. */
  get resultText(): string | undefined {
    const source = this.#source;
    if (source !== undefined) {
      this.#resultText = firmwareResultText(source.payloadText);
      this.#source = undefined;
    }
    return this.#resultText;
  }

  toJSON(): unknown {
    return { kind: this.kind, id: this.id, result: this.result, resultText: this.resultText };
  }
}

/**
 * {@link classifyJsonRpc}; a result's `resultText` is cut from `text` when given, or from the
 * source's payload text on first read.
 */
function classify(value: unknown, text: string | PayloadSource | undefined): JsonRpcMessage {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { kind: 'invalid', reason: 'not a JSON object' };
  }
  const m = value as Record<string, unknown>;
  if (m.jsonrpc !== '2.0') return { kind: 'invalid', reason: 'jsonrpc is not "2.0"' };
  if (typeof m.method === 'string') {
    if (!('id' in m)) return { kind: 'notification', method: m.method, params: m.params };
    if (!isId(m.id)) return { kind: 'invalid', reason: 'request id is not a number or string' };
    return { kind: 'request', id: m.id, method: m.method, params: m.params };
  }
  if ('error' in m) {
    const id = isId(m.id) ? m.id : null;
    return { kind: 'error', id, error: wireErrorFrom(m.error) };
  }
  if ('result' in m) {
    if (!isId(m.id)) return { kind: 'invalid', reason: 'result id is not a number or string' };
    if (typeof text === 'object') return new FrameResult(m.id, m.result, text);
    return {
      kind: 'result',
      id: m.id,
      result: m.result,
      resultText: text === undefined ? undefined : firmwareResultText(text),
    };
  }
  return { kind: 'invalid', reason: 'neither a request, a notification, a result nor an error' };
}

// The firmware writes replies by concatenation: these shapes are exact. Each pattern is only
// the fixed head of a shape; its open-ended tail is cut with endsWith/lastIndexOf, so every
// read is linear in the text (docs/protocol.md §2). A `[\s\S]*` group followed by more
// pattern backtracks, and one crafted 128 KB frame cost a second of event loop.
const FIRMWARE_RESULT_HEAD = /^\{"jsonrpc":"2\.0","id":(-?\d+),"result":/;
const FIRMWARE_ERROR_HEAD = /^\{"jsonrpc":"2\.0","id":(-?\d+),"error":\{"message":"/;
// A later firmware may add a code before the message; accept it the same way.
const CODED_ERROR_HEAD =
  /^\{"jsonrpc":"2\.0","id":(-?\d+|"[^"]*"|null),"error":\{"code":(-?\d+),"message":"/;
// A tools/list page whose nextCursor names a tool with a quote in it.
const CURSOR_MARKER = '],"nextCursor":"';

/**
 * Matches `head` at the start and `tail` at the end of `text` without overlap, as
 * `^head([\s\S]*)tail$` would: the groups of `head` and the text between.
 */
function cutShape(
  text: string,
  head: RegExp,
  tail: string,
): { groups: RegExpExecArray; between: string } | undefined {
  const groups = head.exec(text);
  if (groups === null) return undefined;
  const from = groups[0].length;
  const to = text.length - tail.length;
  if (to < from || !text.endsWith(tail)) return undefined;
  return { groups, between: text.slice(from, to) };
}

/** The exact `result` text of a reply in the firmware's shape. */
function firmwareResult(text: string): { id: string; resultText: string } | undefined {
  const shape = cutShape(text, FIRMWARE_RESULT_HEAD, '}');
  return shape && { id: shape.groups[1] ?? '0', resultText: shape.between };
}

const RESULT_HEAD = '{"jsonrpc":"2.0","id":';
const RESULT_MEMBER = ',"result":';

/**
 * {@link firmwareResult}'s `resultText` alone, read without a regular expression: every reply
 * is read through here, and a match array per reply is garbage the server makes per call.
 */
function firmwareResultText(text: string): string | undefined {
  if (!text.startsWith(RESULT_HEAD)) return undefined;
  let i = RESULT_HEAD.length;
  if (text.charCodeAt(i) === 0x2d /* - */) i++;
  const digits = i;
  while (text.charCodeAt(i) >= 0x30 && text.charCodeAt(i) <= 0x39) i++;
  if (i === digits || !text.startsWith(RESULT_MEMBER, i)) return undefined;
  const from = i + RESULT_MEMBER.length;
  const to = text.length - 1;
  if (to < from || text.charCodeAt(to) !== 0x7d /* } */) return undefined;
  return text.slice(from, to);
}

/**
 * `^([\s\S]*\]),"nextCursor":"([\s\S]*)"\}$` without backtracking: the greedy first
 * group ends at the last marker that still leaves room for the closing `"}`.
 */
function cutUnescapedCursor(text: string): { page: string; cursor: string } | undefined {
  if (!text.endsWith('"}')) return undefined;
  const last = text.length - 2 - CURSOR_MARKER.length;
  if (last < 0) return undefined;
  const at = text.lastIndexOf(CURSOR_MARKER, last);
  if (at === -1) return undefined;
  return { page: text.slice(0, at + 1), cursor: text.slice(at + CURSOR_MARKER.length, -2) };
}

function recoverInvalid(text: string): JsonRpcMessage | undefined {
  const plain = cutShape(text, FIRMWARE_ERROR_HEAD, '"}}');
  if (plain) {
    const id = plain.groups[1] ?? '0';
    return {
      kind: 'error',
      id: Number(id),
      error: new WireError(plain.between, { recovered: true }),
    };
  }
  const coded = cutShape(text, CODED_ERROR_HEAD, '"}}');
  if (coded) {
    const [, rawId = 'null', code = '0'] = coded.groups;
    const id = rawId === 'null' ? null : rawId.startsWith('"') ? rawId.slice(1, -1) : Number(rawId);
    return {
      kind: 'error',
      id,
      error: new WireError(coded.between, { code: Number(code), recovered: true }),
    };
  }
  const result = firmwareResult(text);
  const cursor = result && cutUnescapedCursor(result.resultText);
  if (result && cursor) {
    try {
      const page = JSON.parse(`${cursor.page}}`) as Record<string, unknown>;
      return {
        kind: 'result',
        id: Number(result.id),
        result: { ...page, nextCursor: cursor.cursor },
        resultText: result.resultText,
      };
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/**
 * Reads a payload text a device sent. Valid JSON is classified; invalid JSON in the
 * firmware's reply shapes (an unescaped error message, an unescaped `nextCursor`) is
 * recovered with its id and text. For a firmware-shaped result, `resultText` is the
 * exact `result` text, which the page-budget check needs.
 */
export function readJsonRpc(text: string): JsonRpcMessage {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return (
      recoverInvalid(text) ?? {
        kind: 'invalid',
        reason: 'not valid JSON and not a known firmware reply shape',
      }
    );
  }
  return readJsonRpcValue(value, text);
}

/**
 * {@link readJsonRpc} for a payload already parsed: `value` is `JSON.parse(text)`, where
 * `text` is the payload's exact wire text (for `resultText`). Nothing is parsed again.
 */
export function readJsonRpcValue(value: unknown, text: string): JsonRpcMessage {
  return classify(value, text);
}

/**
 * {@link readJsonRpcValue} for a payload whose wire text is still inside its frame: a result's
 * `resultText` is cut from `source.payloadText` on first read.
 */
export function readJsonRpcFrom(value: unknown, source: PayloadSource): JsonRpcMessage {
  return classify(value, source);
}

/**
 * `JSON.stringify` for the encoders below: a value it cannot write (nested thousands deep, a
 * BigInt, a cycle) throws `INVALID_MESSAGE` naming the member instead of a bare RangeError.
 */
function stringifyMember(message: Record<string, unknown>, member: string): string {
  try {
    return JSON.stringify(message);
  } catch (cause) {
    throw new ProtocolError('INVALID_MESSAGE', `JSON-RPC ${member} cannot be written as JSON`, {
      field: member,
      cause,
    });
  }
}

/** A request as a backend sends it; throws `INVALID_MESSAGE` for params JSON cannot hold. */
export function encodeRequest(id: JsonRpcId, method: string, params?: unknown): string {
  return stringifyMember(
    params === undefined ? { jsonrpc: '2.0', id, method } : { jsonrpc: '2.0', id, method, params },
    'params',
  );
}

export function encodeNotification(method: string, params?: unknown): string {
  return stringifyMember(
    params === undefined ? { jsonrpc: '2.0', method } : { jsonrpc: '2.0', method, params },
    'params',
  );
}

/** `McpServer::ReplyResult`: the result text is inserted as is. */
export function encodeDeviceResult(id: number, resultText: string): string {
  return `{"jsonrpc":"2.0","id":${id},"result":${resultText}}`;
}

/** `McpServer::ReplyError`: no code, and the message inserted WITHOUT escaping. */
export function encodeDeviceError(id: number, message: string): string {
  return `{"jsonrpc":"2.0","id":${id},"error":{"message":"${message}"}}`;
}

/** A spec-compliant error reply (escaped message, with a code). */
export function encodeErrorReply(
  id: JsonRpcId | null,
  code: number,
  message: string,
  data?: unknown,
): string {
  const error = data === undefined ? { code, message } : { code, message, data };
  return stringifyMember({ jsonrpc: '2.0', id, error }, 'error.data');
}

/** A spec-compliant result reply. */
export function encodeResultReply(id: JsonRpcId, result: unknown): string {
  return stringifyMember({ jsonrpc: '2.0', id, result }, 'result');
}
