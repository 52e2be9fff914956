// @xiaozhi-mcp/device: the xiaozhi device side in TypeScript and the virtual board. Named exports
// only, grouped by who uses them; README.md lists them and every error code. The test backend
// and fault injection are `@xiaozhi-mcp/device/testing`.

// Errors of the SDK and of the boards (everyone):

export { BoardPanic, DEVICE_ERROR_CODES, DeviceError, type DeviceErrorCode } from './errors.js';

// The device SDK, for devices written in TypeScript: the MCP server and its tools, the WebSocket
// and MQTT channels, the OTA check, NVS settings and the console (apps/cli's simulator, server's
// and bridge's tests, Node devices):

export type { BoardApi, BoardHardware, BoardPreset } from './board-api.js';
export { BoardConsole, type ConsoleLine, type LogLevel } from './console.js';
export {
  type McpProfile,
  McpServer,
  type McpServerOptions,
  ToolArguments,
  type ToolHandler,
} from './mcp-server.js';
export {
  MqttChannel,
  type MqttChannelOptions,
  type MqttClientLike,
  type MqttConnect,
  type MqttConnectOptions,
  type MqttSettings,
  readMqttSettings,
} from './mqtt-channel.js';
export { NvsStorage, Settings } from './nvs-storage.js';
export {
  type ActivationIdentity,
  type OtaCheck,
  OtaClient,
  type OtaClientOptions,
} from './ota-client.js';
export { BOARD_PRESETS, boardPreset } from './presets.js';
export { registerLampTools, registerOttoTools, registerWifiTools } from './tools/board-tools.js';
export { registerCommonTools, registerUserOnlyTools } from './tools/common-tools.js';
export { WebsocketChannel, type WebsocketChannelOptions } from './websocket-channel.js';

// The virtual board, a whole board in place of a real one in tests, benchmarks and HIL runs
// (hil, apps/cli, server's and bridge's tests and benchmarks):

export { FlashStorage, type FlashStorageOptions } from './flash-storage.js';
export {
  type BoardTiming,
  type BoardTransport,
  type DeviceState,
  FIRMWARE_TIMING,
  type ResetReason,
  type RunningApp,
  type UplinkSessionStats,
  type UplinkStats,
  VirtualBoard,
  type VirtualBoardEvents,
  type VirtualBoardOptions,
} from './virtual-board.js';

// A virtual board's serial side: its USB serial device on a serialport binding, and the boards
// offered to the serial layer as a port provider (hil, apps/cli, device's benchmark):

export { VirtualSerialDevice, type VirtualSerialDeviceOptions } from './serial/usb-device.js';
export {
  VirtualSerialBinding,
  type VirtualSerialBindingOptions,
} from './serial/virtual-binding.js';
export {
  VirtualBus,
  type VirtualBusBoard,
  type VirtualBusPort,
  virtualPort,
} from './serial/virtual-bus.js';
export {
  defaultVirtualDir,
  type ResolvedVirtual,
  summarizeVirtualFlash,
  type VirtualBoardEntry,
  VirtualBoardStore,
  type VirtualBoardStoreOptions,
  type VirtualFlashSummary,
  type VirtualPortListing,
  virtualMac,
} from './serial/virtual-store.js';

// Replicas: a board recorded on a rig or written from a tools file, run by a virtual board
// (hil's `virtual.replica`, apps/cli's `replica` and `sim --replica`):

export {
  formatReplica,
  parseReplica,
  type ReplicaBoard,
  type ReplicaCall,
  ReplicaError,
  type ReplicaErrorCode,
  type ReplicaFile,
  type ReplicaProperty,
  type ReplicaTool,
} from './replica/replica-file.js';
export { replicaFromTools } from './replica/replica-from-tools.js';
export { replicaFromTranscript } from './replica/replica-from-transcript.js';
export { replicaBoardOptions } from './replica/replica-preset.js';
