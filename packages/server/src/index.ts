// @xiaozhi-mcp/server: the backend xiaozhi boards connect to. Named exports only, grouped by who
// uses them; README.md lists them, the API routes and every error code.

// The server, its configuration, its firmware and its errors (cli, hil, bridge's tests):

export {
  type AuthMode,
  assertConfigSafe,
  type LogLevel,
  resolveConfig,
  type ServerConfig,
} from './config.js';
export { SERVER_ERROR_CODES, ServerError, type ServerErrorCode } from './errors.js';
export { type FirmwareAudience, type FirmwareImage, FirmwareStore } from './firmware-store.js';
export { type ServerUrls, type StartOptions, XiaozhiServer } from './server.js';

// The devices: the registry, a session per connection and what they record (hil, cli):

export type { DeviceLink, DeviceLinkHandlers, DeviceTransport } from './device-link.js';
export {
  DeviceSession,
  type DeviceSessionEvents,
  type DeviceSessionInfo,
  type DeviceSessionOptions,
  type InitializeResult,
  type RequestOptions,
  type SessionStats,
} from './device-session.js';
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
export type { DeviceTool } from './tool-lists.js';

// Boards on MQTT: the embedded broker, and the client ids and topics they use (other backends):

export {
  MqttBroker,
  type MqttBrokerOptions,
  type MqttDevice,
  type MqttDeviceAuthority,
} from './mqtt-broker.js';
export { MQTT_SESSION_HELLO } from './mqtt-gateway.js';
export {
  deliveryTopic,
  MQTT_OPERATOR,
  macUnderscored,
  mqttClientId,
  parseMqttClientId,
  publishTopic,
} from './mqtt-link.js';

// UDP audio of MQTT sessions: the endpoint and its counts (hil, other backends):

export {
  type AudioSessionStats,
  answerUdpHello,
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
