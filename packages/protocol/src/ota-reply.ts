/**
 * The OTA reply (docs/protocol.md §7): the sections that tell a device where its backend is,
 * built from options and never sent unless {@link assertSafeOtaReply} passes it.
 */

import { ProtocolError } from './errors.js';
import { type OtaReplyContext, validateOtaReply } from './ota-hazards.js';

/** `websocket`: stored in NVS namespace `websocket`; makes the device use WebSocket. */
export interface OtaReplyWebSocket {
  /** `ws://` or `wss://` (public CA bundle only). */
  url: string;
  /** Sent as `Authorization: Bearer <token>`; `""` clears a stored token. */
  token?: string;
  /** Binary protocol version; a **number**. */
  version?: 1 | 2 | 3;
}

/**
 * `mqtt`: stored in NVS namespace `mqtt`. At boot a stored, non-empty `endpoint` wins over a
 * stored websocket url, so `{"endpoint": ""}` next to `websocket` moves a board back to WebSocket.
 */
export interface OtaReplyMqtt {
  /**
   * `host[:port]` (the port is `std::stoi` of what follows the first `:`, so no IPv6 address);
   * without a port, 8883; TLS only on 8883. `""` blanks a stored endpoint.
   */
  endpoint: string;
  client_id?: string;
  username?: string;
  password?: string;
  /** Seconds; the device defaults to 240. */
  keepalive?: number;
  publish_topic?: string;
}

/** `server_time`: sets the device clock. */
export interface OtaReplyServerTime {
  /** Epoch milliseconds. */
  timestamp: number;
  /** Minutes east of UTC (480 for UTC+8), added to `timestamp` by the device. */
  timezone_offset?: number;
}

/** `firmware`: the device upgrades when `version` is newer or `force` is the number 1. */
export interface OtaReplyFirmware {
  version: string;
  /** Plain GET, 200 with `Content-Length`, the app image (`xiaozhi.bin`). */
  url: string;
  force?: number;
}

/** `activation`: shows and speaks a code; with `challenge`, the device POSTs `<ota_url>/activate`. */
export interface OtaReplyActivation {
  message: string;
  code: string;
  challenge?: string;
  timeout_ms?: number;
}

/** The OTA reply (HTTP 200, JSON object); every section is optional. */
export interface OtaReply {
  activation?: OtaReplyActivation;
  mqtt?: OtaReplyMqtt;
  websocket?: OtaReplyWebSocket;
  server_time?: OtaReplyServerTime;
  firmware?: OtaReplyFirmware;
}

/**
 * Throws `OTA_HAZARD` for the first hazard, else `OTA_INVALID` for the first error (such as the
 * reply not being an object); warnings pass. The error's `field` names the member.
 */
export function assertSafeOtaReply(
  reply: unknown,
  context: OtaReplyContext = {},
): asserts reply is OtaReply {
  const findings = validateOtaReply(reply, context);
  const hazard = findings.find((f) => f.severity === 'hazard');
  if (hazard) throw new ProtocolError('OTA_HAZARD', hazard.message, { field: hazard.field });
  const error = findings.find((f) => f.severity === 'error');
  if (error) throw new ProtocolError('OTA_INVALID', error.message, { field: error.field });
}

/** Options of {@link buildOtaReply}, in camelCase; each present option becomes a section. */
export interface OtaReplyOptions {
  websocket?: { url: string; token?: string; version?: 1 | 2 | 3 };
  mqtt?: {
    endpoint: string;
    clientId?: string;
    username?: string;
    password?: string;
    keepalive?: number;
    publishTopic?: string;
  };
  /** `now` defaults to the current time; the offset is omitted unless given. */
  serverTime?: { now?: Date | number; timezoneOffsetMinutes?: number };
  /** `force: true` sends the number 1, the only value the firmware honours. */
  firmware?: { version: string; url: string; force?: boolean };
  activation?: { message: string; code: string; challenge?: string; timeoutMs?: number };
}

/**
 * Builds an OTA reply and checks it with {@link assertSafeOtaReply}: throws `OTA_HAZARD` if it
 * could harm the board, `OTA_INVALID` if the device would ignore or misread part of it.
 */
export function buildOtaReply(options: OtaReplyOptions, context: OtaReplyContext = {}): OtaReply {
  const reply: OtaReply = {};
  const { activation, mqtt, websocket, serverTime, firmware } = options;
  if (activation) {
    reply.activation = {
      message: activation.message,
      code: activation.code,
      ...(activation.challenge !== undefined ? { challenge: activation.challenge } : {}),
      ...(activation.timeoutMs !== undefined ? { timeout_ms: activation.timeoutMs } : {}),
    };
  }
  if (mqtt) {
    reply.mqtt = {
      endpoint: mqtt.endpoint,
      ...(mqtt.clientId !== undefined ? { client_id: mqtt.clientId } : {}),
      ...(mqtt.username !== undefined ? { username: mqtt.username } : {}),
      ...(mqtt.password !== undefined ? { password: mqtt.password } : {}),
      ...(mqtt.keepalive !== undefined ? { keepalive: mqtt.keepalive } : {}),
      ...(mqtt.publishTopic !== undefined ? { publish_topic: mqtt.publishTopic } : {}),
    };
  }
  if (websocket) {
    reply.websocket = {
      url: websocket.url,
      ...(websocket.token !== undefined ? { token: websocket.token } : {}),
      ...(websocket.version !== undefined ? { version: websocket.version } : {}),
    };
  }
  if (serverTime) {
    const now = serverTime.now ?? Date.now();
    const timestamp = now instanceof Date ? now.getTime() : now;
    if (!Number.isFinite(timestamp)) {
      throw new ProtocolError(
        'OTA_INVALID',
        'server_time.timestamp: serverTime.now is not a valid time',
        { field: 'server_time.timestamp' },
      );
    }
    const offset = serverTime.timezoneOffsetMinutes;
    reply.server_time = { timestamp, ...(offset !== undefined ? { timezone_offset: offset } : {}) };
  }
  if (firmware) {
    reply.firmware = {
      version: firmware.version,
      url: firmware.url,
      ...(firmware.force ? { force: 1 } : {}),
    };
  }
  assertSafeOtaReply(reply, context);
  return reply;
}
