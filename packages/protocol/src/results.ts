/**
 * Tool results. Device side: what a tool returns becomes one content item, the way
 * `McpTool::Call` builds it. Client side: the firmware's nested image item is unwrapped
 * into standard MCP image content (docs/protocol.md §3.3).
 */
import { type JsonValue, printCJson, printCJsonString, toCInt } from './cjson.js';

/** An image a tool returns; bytes are base64-encoded on the wire. */
export class ImageContent {
  constructor(
    readonly mimeType: string,
    readonly data: Uint8Array,
  ) {}
}

/**
 * What a tool may return, mirroring the firmware's `ReturnValue` variant:
 * bool, int, string, a JSON value (sent as its compact text) or an image.
 */
export type ToolReturn = boolean | number | string | ImageContent | { readonly json: JsonValue };

const BASE64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

export function encodeBase64(bytes: Uint8Array): string {
  let out = '';
  for (let i = 0; i < bytes.length; i += 3) {
    const a = bytes[i] ?? 0;
    const b = bytes[i + 1] ?? 0;
    const c = bytes[i + 2] ?? 0;
    const n = (a << 16) | (b << 8) | c;
    out += BASE64[(n >> 18) & 63];
    out += BASE64[(n >> 12) & 63];
    out += i + 1 < bytes.length ? BASE64[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.length ? BASE64[n & 63] : '=';
  }
  return out;
}

function resultText(value: Exclude<ToolReturn, ImageContent>): string {
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (typeof value === 'number') return String(toCInt(value)); // the callback returns a C int
  if (typeof value === 'string') return value;
  return typeof value.json === 'string' ? value.json : printCJson(value.json);
}

/** The `result` text of a successful `tools/call`, byte for byte as the firmware writes it. */
export function encodeToolResult(value: ToolReturn): string {
  if (value instanceof ImageContent) {
    const inner = `{"type":"image","mimeType":${printCJsonString(value.mimeType)},"data":"${encodeBase64(value.data)}"}`;
    return `{"content":[{"type":"image","image":${printCJsonString(inner)}}],"isError":false}`;
  }
  return `{"content":[{"type":"text","text":${printCJsonString(resultText(value))}}],"isError":false}`;
}

export type ToolContent =
  | { readonly type: 'text'; readonly text: string }
  | { readonly type: 'image'; readonly mimeType: string; readonly data: string }
  | { readonly type: string; readonly [key: string]: unknown };

export interface ToolResult {
  readonly content: readonly ToolContent[];
  readonly isError: boolean;
}

function unwrapContent(item: unknown): ToolContent {
  if (typeof item !== 'object' || item === null) return { type: 'unknown', value: item };
  const record = item as Record<string, unknown>;
  // Firmware shape: {"type":"image","image":"<JSON text of {type,mimeType,data}>"}.
  if (record.type === 'image' && typeof record.image === 'string' && record.data === undefined) {
    try {
      const inner = JSON.parse(record.image) as Record<string, unknown>;
      if (typeof inner.mimeType === 'string' && typeof inner.data === 'string') {
        return { type: 'image', mimeType: inner.mimeType, data: inner.data };
      }
    } catch {
      // fall through: keep the item as received
    }
  }
  return { ...record, type: typeof record.type === 'string' ? record.type : 'unknown' };
}

/**
 * Reads a `tools/call` result into standard MCP content, unwrapping the firmware's
 * nested image items. A missing `isError` reads as false.
 */
export function readToolResult(result: unknown): ToolResult {
  const record = (typeof result === 'object' && result !== null ? result : {}) as Record<
    string,
    unknown
  >;
  const content = Array.isArray(record.content) ? record.content.map(unwrapContent) : [];
  return { content, isError: record.isError === true };
}

/** The text of a result's text items, joined by newlines: what most callers want. */
export function toolResultText(result: ToolResult): string {
  return result.content
    .filter(
      (item): item is { type: 'text'; text: string } =>
        item.type === 'text' && typeof item.text === 'string',
    )
    .map((item) => item.text)
    .join('\n');
}
