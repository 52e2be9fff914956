// @xiaozhi-mcp/protocol: the xiaozhi device protocol as the firmware speaks it, for whoever builds
// a device or a backend. Named exports only, grouped by who uses them; README.md lists them.

// Errors every reader, parser and builder here throws or returns (everyone):

export {
  CODELESS_ERROR_CODE,
  JsonRpcErrorCode,
  PROTOCOL_ERROR_CODES,
  ProtocolError,
  type ProtocolErrorCode,
  type ProtocolErrorOptions,
  WireError,
} from './errors.js';

// Transport messages and hellos, both directions (device SDK, server gateway):

export {
  type AbortMessage,
  type AlertMessage,
  buildDeviceHello,
  buildServerHello,
  type CustomMessage,
  DEFAULT_DEVICE_AUDIO_PARAMS,
  DEVICE_MESSAGE_TYPES,
  type DeviceAudioParams,
  type DeviceFeatures,
  type DeviceHello,
  type DeviceHelloOptions,
  type DeviceMessage,
  type DeviceMessageType,
  encodeDeviceMessage,
  encodeServerMessage,
  type GoodbyeMessage,
  HELLO_TRANSPORTS,
  type HelloTransport,
  LISTEN_MODES,
  LISTEN_STATES,
  type ListenMessage,
  type ListenMode,
  type ListenState,
  type LlmMessage,
  type McpMessage,
  PROTOCOL_VERSIONS,
  type ProtocolVersion,
  parseDeviceHello,
  parseDeviceMessage,
  parseServerHello,
  parseServerMessage,
  SERVER_MESSAGE_TYPES,
  type ServerAudioParams,
  type ServerHello,
  type ServerHelloOptions,
  type ServerMessage,
  type ServerMessageType,
  type SttMessage,
  type SystemMessage,
  TRANSPORT_MESSAGE_TYPES,
  type TransportMessageType,
  TTS_STATES,
  type TtsMessage,
  type TtsState,
  type UdpChannel,
  type UdpServerHello,
  type UdpServerHelloOptions,
  type UnknownServerMessage,
  type WebsocketServerHello,
  type WebsocketServerHelloOptions,
} from './messages.js';

// The MCP envelope and the JSON-RPC it carries (device SDK, server sessions, cli, hil):

export {
  type BackendFrame,
  type DeviceFrame,
  encodeDeviceEnvelope,
  encodeEnvelope,
  readBackendFrame,
  readDeviceFrame,
} from './envelope.js';
export {
  classifyJsonRpc,
  encodeDeviceError,
  encodeDeviceResult,
  encodeErrorReply,
  encodeNotification,
  encodeRequest,
  encodeResultReply,
  type JsonRpcId,
  type JsonRpcMessage,
  type JsonRpcNotification,
  type JsonRpcRequest,
  readJsonRpc,
} from './jsonrpc.js';

// Binary audio: WebSocket frames and the UDP packet header (device SDK, server):

export {
  AUDIO_FRAME_HEADER_SIZES,
  AUDIO_FRAME_TYPE_OPUS,
  type AudioFrame,
  type AudioFrameInput,
  type AudioFrameVersion,
  decodeAudioFrame,
  decodeUdpAudioHeader,
  encodeAudioFrame,
  encodeUdpAudioHeader,
  UDP_AUDIO_HEADER_SIZE,
  UDP_AUDIO_PACKET_TYPE,
  type UdpAudioHeader,
  type UdpAudioHeaderInput,
} from './audio-frames.js';

// JSON as the firmware's cJSON reads and prints it (device SDK):

export {
  type CJsonNode,
  cString,
  fromJsonValue,
  getItem,
  type JsonValue,
  parseCJson,
  printCJson,
  printCJsonNode,
  toCInt,
  toJsonValue,
} from './cjson.js';

// The firmware's tools, argument checks and results (device SDK, server, bridge, cli, hil):

export {
  type ArgumentsOutcome,
  type ArgumentValues,
  CallErrorMessage,
  validateArgumentValues,
} from './arguments.js';
export {
  encodeToolResult,
  ImageContent,
  readToolResult,
  type ToolContent,
  type ToolResult,
  type ToolReturn,
  toolResultText,
} from './results.js';
export {
  type BooleanProperty,
  byteLength,
  defineTool,
  type IntegerProperty,
  Prop,
  type Property,
  type PropertyType,
  type PropertyValue,
  type StringProperty,
  type Tool,
  type ToolDefinition,
  ToolRegistry,
} from './tools.js';

// tools/list pages: the device builds them, the server walks them (device SDK, server, cli, hil):

export {
  buildToolsPage,
  fitsPageBudget,
  PAGE_BUDGET_BYTES,
  PAGE_SLACK_BYTES,
  type PageReport,
  pageBudgetBytes,
  type ReceivedToolsPage,
  type ToolsListParams,
  type ToolsPage,
  type ToolsPageRequest,
  type ToolsWalk,
  type WalkOptions,
  walkToolsPages,
} from './paging.js';

// The MCP request loop a device runs, firmware or strict profile (device SDK, virtual board):

export type { BoardIdentity, VisionCapability } from './mcp-context.js';
export {
  MainLoop,
  type McpProfile,
  McpRequestLoop,
  type McpRequestLoopOptions,
  type ToolRunner,
} from './mcp-server.js';
export { encodeStrictToolError, encodeStrictToolResult, StrictErrorCode } from './strict.js';

// OTA: the board's request, the reply and its hazards, versions (server, device SDK, cli, hil):

export {
  OTA_NVS_KEY_MAX,
  OTA_NVS_STRING_MAX_BYTES,
  type OtaFinding,
  type OtaFindingSeverity,
  type OtaReplyContext,
  validateOtaReply,
} from './ota-hazards.js';
export {
  assertSafeOtaReply,
  buildOtaReply,
  type OtaReply,
  type OtaReplyActivation,
  type OtaReplyFirmware,
  type OtaReplyMqtt,
  type OtaReplyOptions,
  type OtaReplyServerTime,
  type OtaReplyWebSocket,
} from './ota-reply.js';
export {
  buildOtaRequestHeaders,
  type OtaApplicationInfo,
  type OtaBoardInfo,
  type OtaChipInfo,
  type OtaDeviceInfo,
  type OtaDisplayInfo,
  type OtaPartitionInfo,
  type OtaRequest,
  type OtaRequestBody,
  type OtaRequestHeaders,
  parseOtaRequest,
} from './ota-request.js';
export {
  compareFirmwareVersions,
  compareVersionSegments,
  type FirmwareVersionOptions,
  type FirmwareVersionRead,
  isNewFirmwareVersion,
  parseFirmwareVersion,
  readFirmwareVersion,
  type StoiException,
} from './ota-version.js';

// The server's HTTP API: its routes' wire types, readers that never throw (server, bridge, cli):

export {
  API_CALL_TIMEOUT_MAX_MS,
  API_DEVICES_PAGE_DEFAULT,
  API_DEVICES_PAGE_MAX,
  API_ERROR_CODES,
  API_OTA_CHECKS_DEFAULT,
  type ApiAudioSession,
  type ApiCallRequest,
  type ApiCallResponse,
  type ApiDevice,
  type ApiDeviceError,
  type ApiDeviceResponse,
  type ApiDevicesQuery,
  type ApiDevicesResponse,
  type ApiErrorBody,
  type ApiErrorCode,
  type ApiErrorReading,
  type ApiForgetResponse,
  type ApiOtaCheck,
  type ApiOtaChecksResponse,
  type ApiServerError,
  type ApiTool,
  type ApiToolsResponse,
  type ApiTransport,
  type ApiTransportRequest,
  type ApiTransportResponse,
  readApiDevice,
  readApiError,
  readApiTool,
} from './api.js';

// Tool sets in the golden corpus's format (device SDK tests, cli):

export {
  type FixtureReturn,
  fixtureToolReturn,
  parseToolSet,
  type ToolSetEntry,
} from './tool-set.js';

// The nearest-rank percentile behind every latency figure (server, bridge, hil):

export { percentile } from './stats.js';
