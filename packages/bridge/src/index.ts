// @xiaozhi-mcp/bridge: boards as a standard MCP server. Named exports only; see README.md.

export { type ApiDevice, apiBase } from './api-client.js';
export type { ApiTool, BoardTools, ServedTool } from './catalog.js';
export { BRIDGE_ERROR_CODES, BridgeError, type BridgeErrorCode } from './errors.js';
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
