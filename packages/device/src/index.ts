// @xiaozhi-mcp/device: the xiaozhi device side in TypeScript and the virtual board.
// Named exports only; see README.md for the API and every error code.

export type {
  BoardApi,
  BoardHardware,
  BoardPreset,
  ChipModel,
  DisplayInfo,
  InPackageMemory,
} from './board-api.js';
export {
  BoardConsole,
  type BoardConsoleEvents,
  CONSOLE_HISTORY_BYTES,
  type ConsoleLine,
  type LogLevel,
  MAX_CONSOLE_LINE_BYTES,
  truncateConsoleLine,
} from './console.js';
export {
  BoardPanic,
  DEVICE_ERROR_CODES,
  DeviceError,
  type DeviceErrorCode,
  type PanicKind,
} from './errors.js';
export {
  FLASH_SECTOR_SIZE,
  FlashStorage,
  type FlashStorageOptions,
} from './flash-storage.js';
export {
  type McpProfile,
  McpServer,
  type McpServerOptions,
  ToolArguments,
  type ToolHandler,
} from './mcp-server.js';
export {
  MQTT_DEFAULT_KEEPALIVE_S,
  MQTT_TLS_PORT,
  MqttChannel,
  type MqttChannelEvents,
  type MqttChannelOptions,
  type MqttClientLike,
  type MqttConnect,
  type MqttConnectOptions,
  type MqttEndpoint,
  type MqttSettings,
  parseMqttEndpoint,
  readMqttSettings,
} from './mqtt-channel.js';
export {
  NVS_KEY_MAX_BYTES,
  NVS_STRING_MAX_BYTES,
  NvsStorage,
  type NvsValue,
  Settings,
} from './nvs-storage.js';
export {
  type ActivationIdentity,
  type ActivationOutcome,
  activationHmac,
  activationPayload,
  isNewVersionAvailable,
  MAX_OTA_REPLY_BYTES,
  type OtaActivation,
  type OtaCheck,
  OtaClient,
  type OtaClientOptions,
} from './ota-client.js';
export { BOARD_PRESETS, boardPreset } from './presets.js';
export {
  type AutoResetBoard,
  AutoResetCircuit,
  type AutoResetEvent,
  type AutoResetOptions,
  autoResetPins,
  BUTTON_DEBOUNCE_MS,
  type SerialLineState,
  type StrapPins,
} from './serial/auto-reset.js';
export type { BindingOpenOptions, BindingPortInfo } from './serial/binding-types.js';
export { type ChipRevision, DEFAULT_CHIP_REVISIONS } from './serial/efuse.js';
export {
  CHIP_DETECT_MAGIC_REG,
  ROM_CHIPS,
  type RomChipProfile,
  RomEmulator,
  type RomEmulatorOptions,
  type RomStage,
  spiFlashId,
} from './serial/rom-emulator.js';
export {
  CONSOLE_BAUD_RATE,
  DEFAULT_REENUMERATE_MS,
  VirtualSerialDevice,
  type VirtualSerialDeviceOptions,
} from './serial/usb-device.js';
export {
  type HostPlatform,
  VirtualBindingPort,
  VirtualSerialBinding,
  type VirtualSerialBindingEvents,
  type VirtualSerialBindingOptions,
} from './serial/virtual-binding.js';
export {
  VirtualBus,
  type VirtualBusBoard,
  type VirtualBusPort,
  virtualPort,
} from './serial/virtual-bus.js';
export {
  DEFAULT_FLASH_SIZE_MB,
  DEFAULT_PRESET,
  defaultVirtualDir,
  FLASH_SIZES_MB,
  type FlashSizeMb,
  listVirtualBoards,
  parseFlashSize,
  parsePreset,
  type ResolvedVirtual,
  summarizeVirtualFlash,
  VIRTUAL_PREFIX,
  type VirtualBoardEntry,
  type VirtualBoardSpec,
  VirtualBoardStore,
  type VirtualBoardStoreOptions,
  type VirtualFlashSummary,
  type VirtualPortListing,
  virtualMac,
  virtualName,
} from './serial/virtual-store.js';
export type { WireStats } from './serial/wire.js';
export { registerLampTools, registerOttoTools, registerWifiTools } from './tools/board-tools.js';
export {
  defaultDeviceStatus,
  registerCommonTools,
  registerUserOnlyTools,
  UPGRADE_FIRMWARE_URL_DEFAULT,
} from './tools/common-tools.js';
export {
  decodeHexLax,
  sealUdpAudioPacket,
  UDP_NONCE_BYTES,
  type UdpAudioFrame,
  UdpAudioSender,
  type UdpAudioTarget,
  udpAudioHeader,
} from './udp-audio-sender.js';
export { chooseTransport } from './virtual-board/application.js';
export {
  UPLINK_FRAME_BYTES,
  UPLINK_TIMESTAMP,
  uplinkFrame,
} from './virtual-board/uplink.js';
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
export {
  MAX_BACKEND_FRAME_BYTES,
  MAX_DEVICE_FRAME_BYTES,
  upgradeHeaders,
  WebsocketChannel,
  type WebsocketChannelEvents,
  type WebsocketChannelOptions,
} from './websocket-channel.js';
