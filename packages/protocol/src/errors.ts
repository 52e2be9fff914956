/**
 * Two error families, kept apart as in the MCP SDK:
 * - {@link WireError}: a JSON-RPC error as it travelled on the wire (code, message, data).
 * - {@link ProtocolError}: a local error with a string `code`, raised by this package.
 */

/** Local error codes of `@xiaozhi-mcp/protocol`. Every one is listed in the README table. */
export const PROTOCOL_ERROR_CODES = [
  'INVALID_JSON',
  'INVALID_MESSAGE',
  'INVALID_TOOL',
  'DUPLICATE_TOOL',
  'INVALID_PAGE',
  'PAGE_ERROR',
  'PAGE_LOOP',
  'PAGE_LIMIT',
  'PAGE_BUDGET',
  'OTA_HAZARD',
  'OTA_INVALID',
] as const;
export type ProtocolErrorCode = (typeof PROTOCOL_ERROR_CODES)[number];

export interface ProtocolErrorOptions {
  /** Dotted path of the offending field, e.g. `websocket.version` or `audio_params.sample_rate`. */
  field?: string;
  cause?: unknown;
}

export class ProtocolError extends Error {
  override readonly name = 'ProtocolError';
  readonly code: ProtocolErrorCode;
  readonly field: string | undefined;

  constructor(code: ProtocolErrorCode, message: string, options: ProtocolErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.field = options.field;
  }
}

/**
 * JSON-RPC error codes. The firmware sends none (docs/protocol.md §2); a later firmware may
 * send the standard ones. {@link CODELESS_ERROR_CODE} is what we put in place of a
 * missing code, so callers can always switch on a number.
 */
export const JsonRpcErrorCode = {
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  InternalError: -32603,
  /** Local stand-in for an error reply that carried no `code` (the firmware's shape). */
  Codeless: -32000,
} as const;

export const CODELESS_ERROR_CODE = JsonRpcErrorCode.Codeless;

/** A JSON-RPC error as sent or received. */
export class WireError extends Error {
  override readonly name = 'WireError';
  /** The code on the wire, or {@link CODELESS_ERROR_CODE} when the reply had none. */
  readonly code: number;
  readonly data: unknown;
  /** True when the reply had no numeric `code` (the firmware never sends one). */
  readonly codeless: boolean;
  /** True when the frame was not valid JSON and the message was recovered from its text. */
  readonly recovered: boolean;
  /** The `error` member as received (undefined when recovered from invalid JSON). */
  readonly original: unknown;

  constructor(
    message: string,
    init: { code?: number; data?: unknown; recovered?: boolean; original?: unknown } = {},
  ) {
    super(message);
    this.codeless = init.code === undefined;
    this.code = init.code ?? CODELESS_ERROR_CODE;
    this.data = init.data;
    this.recovered = init.recovered ?? false;
    this.original = init.original;
  }
}

/** Longest text of a received value quoted in an error message. */
export const MESSAGE_VALUE_LIMIT = 1000;

function truncated(text: string): string {
  return text.length > MESSAGE_VALUE_LIMIT ? `${text.slice(0, MESSAGE_VALUE_LIMIT)}...` : text;
}

/**
 * `JSON.stringify(value)` for an error message about a received value: never throws (a value
 * nested thousands deep makes `JSON.stringify` throw `RangeError`, a BigInt or a cycle
 * `TypeError`), and cut to {@link MESSAGE_VALUE_LIMIT} characters. Undefined where
 * `JSON.stringify` gives undefined.
 */
export function jsonForMessage(value: unknown): string | undefined {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch {
    return Array.isArray(value) ? '[unprintable array]' : `[unprintable ${typeof value}]`;
  }
  return text === undefined ? undefined : truncated(text);
}

/** `String(value)` for an error message: never throws, cut like {@link jsonForMessage}. */
export function textForMessage(value: unknown): string {
  try {
    return truncated(String(value));
  } catch {
    return Array.isArray(value) ? '[unprintable array]' : `[unprintable ${typeof value}]`;
  }
}
