/**
 * What a board's answer becomes for an MCP client, as data: the API's result passed through
 * as MCP content, and every way a call can fail sorted into a tool error the model reads
 * (`isError: true`) or a protocol error (JSON-RPC) for requests the bridge itself refuses.
 */
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { ToolResult } from '@xiaozhi-mcp/protocol';
import { BridgeError } from './errors.js';

type Content = CallToolResult['content'][number];

/**
 * One content item as MCP knows it. The API already gives standard content (the firmware's
 * nested image unwrapped into `{type:"image", data, mimeType}`, docs/protocol.md §3.3); an
 * item of no MCP type (the API marks unreadable ones `{type:"unknown", value}`) is passed on
 * as its JSON text rather than dropped.
 */
export function toMcpContent(item: unknown): Content {
  const record = (typeof item === 'object' && item !== null ? item : {}) as Record<string, unknown>;
  if (record.type === 'text' && typeof record.text === 'string')
    return { type: 'text', text: record.text };
  if (
    (record.type === 'image' || record.type === 'audio') &&
    typeof record.data === 'string' &&
    typeof record.mimeType === 'string'
  )
    return { type: record.type, data: record.data, mimeType: record.mimeType };
  return { type: 'text', text: JSON.stringify(item) ?? String(item) };
}

export function toCallToolResult(result: ToolResult): CallToolResult {
  return { content: result.content.map(toMcpContent), isError: result.isError };
}

/** A tool error: what the model is shown instead of a result. */
export function toolError(text: string): CallToolResult {
  return { content: [{ type: 'text', text }], isError: true };
}

/** How a failed call is answered. */
export type CallFailure =
  | { readonly kind: 'result'; readonly result: CallToolResult }
  | { readonly kind: 'invalid-params' | 'internal'; readonly message: string };

/**
 * Sorts a failed `POST /devices/:id/call`:
 * - the board answered with an error (API 502, `source: "device"`): an `isError` result whose
 *   text is the board's message verbatim, codeless and unescaped ones included
 *   (docs/protocol.md §2);
 * - the board is gone, not ready, forgotten or silent (409, 404, 504, other 502s), the server
 *   cannot be reached, or the bridge's own bound ran out: an `isError` result that says so, so
 *   that the model learns the call did not happen;
 * - the API refused the request itself (400): invalid params; anything else (401 after a token
 *   change, 500): an internal error.
 */
export function callFailure(
  error: unknown,
  call: { deviceId: string; tool: string; timedOut: boolean; timeoutMs: number },
): CallFailure {
  const where = `${call.tool} on ${call.deviceId}`;
  if (call.timedOut)
    return {
      kind: 'result',
      result: toolError(`${where}: no answer within ${call.timeoutMs} ms (bridge timeout)`),
    };
  if (!(error instanceof BridgeError))
    return { kind: 'internal', message: error instanceof Error ? error.message : String(error) };
  if (error.fromDevice) return { kind: 'result', result: toolError(error.message) };
  if (error.code === 'SERVER_UNREACHABLE')
    return { kind: 'result', result: toolError(`${where}: ${error.message}`) };
  const status = error.status ?? 0;
  if (status === 404 || status === 409 || status === 502 || status === 504 || status === 499)
    return {
      kind: 'result',
      result: toolError(`${where}: ${error.message}`),
    };
  if (status === 400) return { kind: 'invalid-params', message: error.message };
  return { kind: 'internal', message: error.message };
}
