// @xiaozhi-mcp/bridge: boards as a standard MCP server. Named exports only; see README.md.

export {
  ApiClient,
  type ApiClientOptions,
  apiBase,
  CALL_MARGIN_MS,
  CALL_TIMEOUT_DEFAULT_MS,
  REQUEST_TIMEOUT_MS,
} from './api-client.js';
export {
  BRIDGE_NAME,
  BRIDGE_VERSION,
  type BridgeOptions,
  DEFAULT_CALL_TIMEOUT_MS,
  DEFAULT_PAGE_SIZE,
  DEFAULT_POLL_MS,
  MAX_CALL_TIMEOUT_MS,
  XiaozhiBridge,
} from './bridge.js';
export type { BoardTools, ServedTool } from './catalog.js';
export { BRIDGE_ERROR_CODES, BridgeError, type BridgeErrorCode } from './errors.js';
export {
  type HttpOptions,
  MAX_HTTP_BODY_BYTES,
  MAX_HTTP_SESSIONS,
  MCP_PATH,
  serveHttp,
} from './http.js';
export { LOOPBACK_HOSTNAMES } from './http-guard.js';
export {
  DEVICE_SEPARATOR,
  escapeToolName,
  HASH_MARK,
  parseToolName,
  TOOL_NAME_MAX_LENGTH,
  TOOL_NAME_PATTERN,
  toolNameFor,
  unescapeToolName,
} from './names.js';
export { MAX_STDIO_MESSAGE_BYTES, serveStdio } from './stdio.js';
