/**
 * The MCP envelope, `{"session_id":"S","type":"mcp","payload":{...}}` (docs/protocol.md §1).
 * The device builds it by concatenation and reads it with cJSON; a backend must read
 * what the device writes even when the payload inside is invalid JSON.
 */
import { type CJsonNode, cString, getItem, parseCJson } from './cjson.js';
import { type JsonRpcMessage, readJsonRpc } from './jsonrpc.js';

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
      readonly payloadText: string;
      readonly message: JsonRpcMessage;
    }
  | { readonly kind: 'message'; readonly type: string; readonly value: Record<string, unknown> }
  | { readonly kind: 'invalid'; readonly reason: string };

const DEVICE_MCP = /^\{"session_id":"((?:[^"\\]|\\.)*)","type":"mcp","payload":([\s\S]*)\}$/;

/**
 * Reads a text frame a device sent. An MCP envelope in the device's own shape is cut
 * apart without parsing the whole frame, so an unescaped error message inside the
 * payload (invalid JSON) still yields the payload and, through {@link readJsonRpc},
 * its id and text. Any other frame must be a JSON object with a string `type`.
 */
export function readDeviceFrame(text: string): DeviceFrame {
  const exact = DEVICE_MCP.exec(text);
  if (exact) {
    const [, rawSession = '', payloadText = ''] = exact;
    let sessionId = rawSession;
    try {
      sessionId = JSON.parse(`"${rawSession}"`) as string;
    } catch {
      // keep the raw text: the device does not escape what it echoes
    }
    return { kind: 'mcp', sessionId, payloadText, message: readJsonRpc(payloadText) };
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { kind: 'invalid', reason: 'frame is not valid JSON' };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { kind: 'invalid', reason: 'frame is not a JSON object' };
  }
  const record = value as Record<string, unknown>;
  if (typeof record.type !== 'string')
    return { kind: 'invalid', reason: 'frame has no string type' };
  if (record.type === 'mcp') {
    const payloadText = JSON.stringify(record.payload ?? null);
    return {
      kind: 'mcp',
      sessionId: typeof record.session_id === 'string' ? record.session_id : '',
      payloadText,
      message: readJsonRpc(payloadText),
    };
  }
  return { kind: 'message', type: record.type, value: record };
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
