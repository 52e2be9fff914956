// @xiaozhi-mcp/bridge: boards as a standard MCP server. Named exports only, grouped by who uses
// them; README.md lists them ("Package API") and every error code.

// The bridge and its two transports, for a Node process that serves boards to MCP clients (cli,
// hil, embedders):

export { type BridgeOptions, XiaozhiBridge } from './bridge.js';
export type { ServedTool } from './catalog.js';
export { type HttpOptions, serveHttp } from './http.js';
export { serveStdio } from './stdio.js';

// The toolkit's one client of the server's HTTP API (cli's devices, tools, call and forget):

export { ApiClient, type ApiClientOptions } from './api-client.js';

// What both raise, with every code, so that a caller can word it itself (cli):

export { BRIDGE_ERROR_CODES, BridgeError, type BridgeErrorCode } from './errors.js';
