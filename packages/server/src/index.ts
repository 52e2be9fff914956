// @xiaozhi-mcp/server: the backend xiaozhi boards connect to.
// Named exports only; see README.md for the API routes and every error code.

export { type ApiControls, deviceSummary } from './api.js';
export {
  type AuthMode,
  assertConfigSafe,
  DEFAULT_CONFIG,
  type LogLevel,
  resolveConfig,
  type ServerConfig,
} from './config.js';
export type { DeviceCredentials } from './device-credentials.js';
export {
  type DeviceLink,
  type DeviceLinkHandlers,
  type DeviceTransport,
  toDeviceLink,
  webSocketLink,
} from './device-link.js';
export {
  DeviceSession,
  type DeviceSessionEvents,
  type DeviceSessionInfo,
  type DeviceSessionOptions,
  type InitializeResult,
  type RequestOptions,
  type SessionStats,
} from './device-session.js';
export { SERVER_ERROR_CODES, ServerError, type ServerErrorCode } from './errors.js';
export { type FirmwareImage, FirmwareStore } from './firmware-store.js';
export { tokenOf } from './gateway.js';
export {
  MqttBroker,
  type MqttBrokerOptions,
  type MqttDevice,
  type MqttDeviceAuthority,
} from './mqtt-broker.js';
export { type AudioSessions, MQTT_SESSION_HELLO, MqttGateway } from './mqtt-gateway.js';
export {
  deliveryTopic,
  isBoardClientId,
  MQTT_CLIENT_GROUP,
  MQTT_OPERATOR,
  MqttLink,
  macUnderscored,
  mqttClientId,
  parseMqttClientId,
  publishTopic,
} from './mqtt-link.js';
export { MqttPacketBound, MqttWire } from './mqtt-wire.js';
export {
  type DeviceRecord,
  DeviceRegistry,
  type HelloRefusal,
  type OtaCheckRecord,
  type RegistryEvents,
  type RegistryLogger,
  type RegistryOptions,
  type SessionStage,
} from './registry.js';
export { type ServerUrls, type StartOptions, XiaozhiServer } from './server.js';
export type { DeviceTool } from './tool-lists.js';
export {
  type AudioSessionStats,
  answerUdpHello,
  DEFAULT_MAX_AUDIO_SESSIONS,
  DEFAULT_MAX_CLOSED_AUDIO_SESSIONS,
  DEFAULT_MAX_DATAGRAM_BYTES,
  type UdpAudioChannel,
  type UdpAudioCounters,
  UdpAudioEndpoint,
  type UdpAudioEndpointOptions,
  type UdpAudioLogger,
  type UdpAudioPacket,
  type UdpAudioPacketListener,
  type UdpAudioRejection,
  type UdpHelloOptions,
} from './udp-audio.js';
