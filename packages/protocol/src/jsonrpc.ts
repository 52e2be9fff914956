/**
 * JSON-RPC 2.0: classification, encoding, and a tolerant reader for what devices send.
 * The firmware's error replies have no `code` and an unescaped message, so a reply can
 * be invalid JSON (docs/protocol.md §2); the reader still recovers its id and text.
 */
import { WireError } from './errors.js';

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
  const message = typeof record.message === 'string' ? record.message : JSON.stringify(error);
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
    return { kind: 'result', id: m.id, result: m.result, resultText: undefined };
  }
  return { kind: 'invalid', reason: 'neither a request, a notification, a result nor an error' };
}

// The firmware writes replies by concatenation: these shapes are exact.
const FIRMWARE_RESULT = /^\{"jsonrpc":"2\.0","id":(-?\d+),"result":([\s\S]*)\}$/;
const FIRMWARE_ERROR = /^\{"jsonrpc":"2\.0","id":(-?\d+),"error":\{"message":"([\s\S]*)"\}\}$/;
// A later firmware may add a code before the message; accept it the same way.
const CODED_ERROR =
  /^\{"jsonrpc":"2\.0","id":(-?\d+|"[^"]*"|null),"error":\{"code":(-?\d+),"message":"([\s\S]*)"\}\}$/;
// A tools/list page whose nextCursor names a tool with a quote in it.
const UNESCAPED_CURSOR = /^([\s\S]*\]),"nextCursor":"([\s\S]*)"\}$/;

function recoverInvalid(text: string): JsonRpcMessage | undefined {
  const plain = FIRMWARE_ERROR.exec(text);
  if (plain) {
    const [, id = '0', message = ''] = plain;
    return { kind: 'error', id: Number(id), error: new WireError(message, { recovered: true }) };
  }
  const coded = CODED_ERROR.exec(text);
  if (coded) {
    const [, rawId = 'null', code = '0', message = ''] = coded;
    const id = rawId === 'null' ? null : rawId.startsWith('"') ? rawId.slice(1, -1) : Number(rawId);
    return {
      kind: 'error',
      id,
      error: new WireError(message, { code: Number(code), recovered: true }),
    };
  }
  const result = FIRMWARE_RESULT.exec(text);
  const cursor = result ? UNESCAPED_CURSOR.exec(result[2] ?? '') : null;
  if (result && cursor) {
    try {
      const page = JSON.parse(`${cursor[1]}}`) as Record<string, unknown>;
      return {
        kind: 'result',
        id: Number(result[1]),
        result: { ...page, nextCursor: cursor[2] },
        resultText: result[2],
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
  const message = classifyJsonRpc(value);
  if (message.kind === 'result') {
    const exact = FIRMWARE_RESULT.exec(text);
    return { ...message, resultText: exact?.[2] };
  }
  return message;
}

/** A request as a backend sends it. */
export function encodeRequest(id: JsonRpcId, method: string, params?: unknown): string {
  return JSON.stringify(
    params === undefined ? { jsonrpc: '2.0', id, method } : { jsonrpc: '2.0', id, method, params },
  );
}

export function encodeNotification(method: string, params?: unknown): string {
  return JSON.stringify(
    params === undefined ? { jsonrpc: '2.0', method } : { jsonrpc: '2.0', method, params },
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
  return JSON.stringify({ jsonrpc: '2.0', id, error });
}

/** A spec-compliant result reply. */
export function encodeResultReply(id: JsonRpcId, result: unknown): string {
  return JSON.stringify({ jsonrpc: '2.0', id, result });
}
