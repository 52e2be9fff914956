/**
 * The `strict` profile of the MCP request loop: the firmware's tools, paging rule and
 * argument validation (the same core functions), answered the way a spec-compliant
 * MCP server does (MCP 2025-06-18, JSON-RPC 2.0). Where it departs from the firmware
 * (docs/protocol.md §2 and §3): standard JSON parsing (case-sensitive keys, last duplicate wins),
 * error codes, escaped text, string and fractional ids, `ping`, version negotiation,
 * standard image content, and tool failures reported in the result with `isError: true`.
 */
import { type ArgumentValues, CallErrorMessage, validateToolCall } from './arguments.js';
import { type CJsonNode, fromJsonValueShallow } from './cjson.js';
import { JsonRpcErrorCode, textForMessage } from './errors.js';
import { encodeErrorReply, encodeResultReply, type JsonRpcId } from './jsonrpc.js';
import type { BoardIdentity, DispatchContext, VisionCapability } from './mcp-context.js';
import { buildToolsPage } from './paging.js';
import { encodeBase64, ImageContent, type ToolReturn } from './results.js';
import type { PropertyValue, Tool, ToolRegistry } from './tools.js';

export type StrictAction<H> =
  /** Notifications and responses get no reply. */
  | { readonly kind: 'drop' }
  /** The JSON text of a full JSON-RPC response. */
  | { readonly kind: 'reply'; readonly payload: string }
  /** A valid `tools/call`: run the tool, then answer with the encoders below. */
  | {
      readonly kind: 'call';
      readonly id: JsonRpcId;
      readonly tool: Tool;
      readonly handler: H;
      readonly values: ArgumentValues;
    };

/** The JSON-RPC error codes the strict profile sends, and when. */
export const StrictErrorCode = {
  /** The text is not JSON. */
  ParseError: JsonRpcErrorCode.ParseError,
  /** Not an object (batches included), `jsonrpc` not "2.0", a bad id, or no string `method`. */
  InvalidRequest: JsonRpcErrorCode.InvalidRequest,
  /** A method other than `initialize`, `ping`, `tools/list`, `tools/call`. */
  MethodNotFound: JsonRpcErrorCode.MethodNotFound,
  /** `params` not an object, a bad cursor, or any `tools/call` validation failure. */
  InvalidParams: JsonRpcErrorCode.InvalidParams,
  /** A tool too large to fit on an empty `tools/list` page. */
  InternalError: JsonRpcErrorCode.InternalError,
} as const;

/** The MCP versions `initialize` accepts from a client; anything else gets the latest. */
export const STRICT_PROTOCOL_VERSIONS = ['2024-11-05', '2025-03-26', '2025-06-18'] as const;
export const STRICT_LATEST_PROTOCOL_VERSION = '2025-06-18';

const DROP = { kind: 'drop' } as const;

type JsonObject = Record<string, unknown>;

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

// Own keys only: `JSON.parse` output still inherits from Object.prototype.
function hasOwn(object: JsonObject, key: string): boolean {
  return Object.hasOwn(object, key);
}

// JSON.parse turns an out-of-range number such as 1e400 into Infinity, which is no id.
function isId(value: unknown): value is JsonRpcId {
  return typeof value === 'string' || (typeof value === 'number' && Number.isFinite(value));
}

function reply<H>(payload: string): StrictAction<H> {
  return { kind: 'reply', payload };
}

function fail<H>(id: JsonRpcId | null, code: number, message: string): StrictAction<H> {
  return reply(encodeErrorReply(id, code, message));
}

// For results whose text is already valid JSON (tool JSON from the core), spliced in as is.
function resultTextReply<H>(id: JsonRpcId, resultText: string): StrictAction<H> {
  return reply(`{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":${resultText}}`);
}

/**
 * Decides what the device does with one MCP payload text under the strict profile.
 * Checks, first failure wins: JSON, object, `jsonrpc`, response (dropped), `method`,
 * notification (dropped), id, `params`, then the method.
 */
export function dispatchStrictRequest<H>(
  text: string,
  context: DispatchContext<H>,
): StrictAction<H> {
  let message: unknown;
  try {
    message = JSON.parse(text);
  } catch {
    return fail(null, StrictErrorCode.ParseError, 'Parse error');
  }
  if (!isObject(message)) return fail(null, StrictErrorCode.InvalidRequest, 'Invalid Request');
  const idOrNull = isId(message.id) ? message.id : null;
  if (message.jsonrpc !== '2.0') {
    return fail(idOrNull, StrictErrorCode.InvalidRequest, 'Invalid Request');
  }
  if (!hasOwn(message, 'method')) {
    // A response to a request the device never sent: answering it could only confuse the peer.
    if (hasOwn(message, 'result') || hasOwn(message, 'error')) return DROP;
    return fail(idOrNull, StrictErrorCode.InvalidRequest, 'Invalid Request');
  }
  const method = message.method;
  if (typeof method !== 'string') {
    return fail(idOrNull, StrictErrorCode.InvalidRequest, 'Invalid Request');
  }
  if (!hasOwn(message, 'id')) return DROP;
  const id = idOrNull;
  if (id === null) return fail(null, StrictErrorCode.InvalidRequest, 'Invalid Request');
  if (hasOwn(message, 'params') && !isObject(message.params)) {
    return fail(id, StrictErrorCode.InvalidParams, 'Invalid params');
  }
  const params = isObject(message.params) ? message.params : undefined;

  switch (method) {
    case 'ping':
      return reply(encodeResultReply(id, {}));
    case 'initialize':
      return initialize(id, params, context);
    case 'tools/list':
      return listTools(id, params, context);
    case 'tools/call':
      return callTool(id, params, context.tools);
    default:
      return fail(id, StrictErrorCode.MethodNotFound, `Method not found: ${method}`);
  }
}

/** `initialize`'s result object: the client's version when supported, else the latest. */
export function strictInitializeResult(
  board: BoardIdentity,
  requestedVersion: unknown,
): { protocolVersion: string; capabilities: { tools: JsonObject }; serverInfo: BoardIdentity } {
  const supported: readonly unknown[] = STRICT_PROTOCOL_VERSIONS;
  const protocolVersion = supported.includes(requestedVersion)
    ? (requestedVersion as string)
    : STRICT_LATEST_PROTOCOL_VERSION;
  return {
    protocolVersion,
    capabilities: { tools: {} },
    serverInfo: { name: board.name, version: board.version },
  };
}

// The firmware's rule with standard keys: an object with a string url, optional string token.
function readVision(params: JsonObject | undefined): VisionCapability | undefined {
  const capabilities = params?.capabilities;
  const vision = isObject(capabilities) ? capabilities.vision : undefined;
  if (!isObject(vision) || typeof vision.url !== 'string') return undefined;
  return { url: vision.url, token: typeof vision.token === 'string' ? vision.token : undefined };
}

function initialize<H>(
  id: JsonRpcId,
  params: JsonObject | undefined,
  context: DispatchContext<H>,
): StrictAction<H> {
  const vision = readVision(params);
  if (vision !== undefined) context.onVision?.(vision);
  return reply(
    encodeResultReply(id, strictInitializeResult(context.board, params?.protocolVersion)),
  );
}

function listTools<H>(
  id: JsonRpcId,
  params: JsonObject | undefined,
  context: DispatchContext<H>,
): StrictAction<H> {
  const cursor = params?.cursor;
  // null is read as "no cursor", as some clients send it for the first page.
  if (cursor !== undefined && cursor !== null && typeof cursor !== 'string') {
    return fail(id, StrictErrorCode.InvalidParams, 'Invalid params: cursor must be a string');
  }
  const tools = context.tools.tools;
  // The core reads an unknown cursor as a page-size error; MCP wants -32602.
  if (typeof cursor === 'string' && cursor !== '' && !tools.some((tool) => tool.name === cursor)) {
    return fail(id, StrictErrorCode.InvalidParams, `Invalid cursor: ${cursor}`);
  }
  const page = buildToolsPage(tools, {
    cursor,
    withUserTools: params?.withUserTools,
    // The same fault knob as the firmware profile: a board that pages wrong pages wrong here too.
    budgetBytes: context.pageBudgetBytes,
  });
  if (!page.ok) {
    // With the cursor known, an empty tool name means every remaining tool is user-only
    // and hidden: that is an empty last page, not an error.
    if (page.toolName === '') return resultTextReply(id, '{"tools":[]}');
    return fail(id, StrictErrorCode.InternalError, page.message);
  }
  // Each tool's JSON is already valid JSON (the core escapes with JSON.stringify); keeping it
  // byte for byte keeps key order and matches what the page budget counted. Only the cursor,
  // which the firmware leaves unescaped, needs encoding.
  const body = page.tools.map((tool) => tool.json).join(',');
  const cursorText =
    page.nextCursor === undefined ? '' : `,"nextCursor":${JSON.stringify(page.nextCursor)}`;
  return resultTextReply(id, `{"tools":[${body}]${cursorText}}`);
}

// The core looks keys up the cJSON way (case-insensitive, first match). Passing it only the
// exact-case keys makes its lookups behave like standard JSON. Limitation: two properties of
// one tool whose names differ only in ASCII case still share a lookup. The core reads kinds and
// scalars only, so values are converted one level deep: a deep value costs nothing.
function callParamsNode(params: JsonObject, tool: Tool | undefined): CJsonNode {
  const entries: (readonly [string, CJsonNode])[] = [];
  if (hasOwn(params, 'name')) entries.push(['name', fromJsonValueShallow(params.name)]);
  if (hasOwn(params, 'arguments')) {
    const args = params.arguments;
    if (isObject(args) && tool !== undefined) {
      const kept = tool.properties
        .filter((property) => hasOwn(args, property.name))
        .map((property) => [property.name, fromJsonValueShallow(args[property.name])] as const);
      entries.push(['arguments', { kind: 'object', entries: kept }]);
    } else {
      entries.push(['arguments', fromJsonValueShallow(args)]);
    }
  }
  return { kind: 'object', entries };
}

// The core reads strings as C strings (cut at NUL); a Node device receives them whole.
function wholeStrings(tool: Tool, values: ArgumentValues, args: unknown): ArgumentValues {
  if (!isObject(args)) return values;
  let whole: Map<string, PropertyValue> | undefined;
  for (const property of tool.properties) {
    const raw = hasOwn(args, property.name) ? args[property.name] : undefined;
    if (
      property.type === 'string' &&
      typeof raw === 'string' &&
      values.get(property.name) !== raw
    ) {
      whole ??= new Map(values);
      whole.set(property.name, raw);
    }
  }
  return whole ?? values;
}

const CHECKED_BEFORE_LOOKUP: readonly string[] = [
  CallErrorMessage.missingParams,
  CallErrorMessage.missingName,
  CallErrorMessage.invalidArguments,
];

function callTool<H>(
  id: JsonRpcId,
  params: JsonObject | undefined,
  registry: ToolRegistry<H>,
): StrictAction<H> {
  const name = params?.name;
  const entry = typeof name === 'string' ? registry.find(name) : undefined;
  const call = validateToolCall(
    registry,
    params === undefined ? undefined : callParamsNode(params, entry?.tool),
  );
  if (!call.ok && CHECKED_BEFORE_LOOKUP.includes(call.message)) {
    return fail(id, StrictErrorCode.InvalidParams, call.message);
  }
  // The core cuts the name at NUL, so `a\0b` could find tool `a`: look up the whole name.
  if (typeof name === 'string' && entry === undefined) {
    return fail(id, StrictErrorCode.InvalidParams, CallErrorMessage.unknownTool(name));
  }
  if (!call.ok) return fail(id, StrictErrorCode.InvalidParams, call.message);
  return {
    kind: 'call',
    id,
    tool: call.tool,
    handler: call.handler,
    values: wholeStrings(call.tool, call.values, params?.arguments),
  };
}

function numberText(value: number): string {
  // String(1e21) is "1e+21"; an integer is written out in decimal digits.
  return Number.isInteger(value) ? BigInt(value).toString() : String(value);
}

function contentItem(value: ToolReturn): JsonObject {
  if (value instanceof ImageContent) {
    return { type: 'image', data: encodeBase64(value.data), mimeType: value.mimeType };
  }
  if (typeof value === 'boolean') return { type: 'text', text: value ? 'true' : 'false' };
  if (typeof value === 'number') return { type: 'text', text: numberText(value) };
  if (typeof value === 'string') return { type: 'text', text: value };
  if (isObject(value) && hasOwn(value, 'json')) {
    const json = value.json;
    // JSON.stringify(undefined) is undefined: an absent value reads as null.
    const text = typeof json === 'string' ? json : (JSON.stringify(json) ?? 'null');
    return { type: 'text', text };
  }
  // Handlers written in plain JS can return anything; the caller turns this into a tool error.
  throw new TypeError(`Tool returned an unsupported value: ${textForMessage(value)}`);
}

/** A successful `tools/call` reply with standard MCP content. */
export function encodeStrictToolResult(id: JsonRpcId, value: ToolReturn): string {
  return encodeResultReply(id, { content: [contentItem(value)], isError: false });
}

/** A tool that threw: MCP reports execution failures in the result, not as a JSON-RPC error. */
export function encodeStrictToolError(id: JsonRpcId, message: string): string {
  return encodeResultReply(id, { content: [{ type: 'text', text: message }], isError: true });
}
