/**
 * Server configuration, validated at start-up. A configuration whose OTA replies would crash
 * or brick a board (docs/protocol.md §7) is refused here, before any board sees it.
 */
import { BlockList, isIP } from 'node:net';
import { type OtaReply, validateOtaReply } from '@xiaozhi-mcp/protocol';
import type { DeviceTransport } from './device-link.js';
import { ServerError } from './errors.js';
import { hostKey, originKey } from './http.js';
import { mqttClientId, publishTopic } from './mqtt-link.js';

export type AuthMode = 'token' | 'off';
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

export interface ServerConfig {
  /** Bind address; loopback unless told otherwise. */
  readonly host: string;
  /** 0 lets the OS choose. */
  readonly port: number;
  /** The base URL boards use to reach us, when it is not `http://host:port` (e.g. binding 0.0.0.0). */
  readonly publicUrl: string | undefined;
  /** Prefix of the OTA, WebSocket and firmware paths: `{prefix}/ota/`, `{prefix}/v1/`. */
  readonly prefix: string;
  /** Prefix of the JSON API. */
  readonly apiPrefix: string;
  /**
   * Device upgrades only (the API has `apiTokens`). `token`: the upgrade needs the token the
   * OTA reply issued, or one of `tokens`. `off`: no check, and an open API may bind a
   * non-loopback address.
   */
  readonly auth: AuthMode;
  /** Device tokens accepted at the WebSocket upgrade; they do not open the API. */
  readonly tokens: readonly string[];
  /** `websocket.version` in the OTA reply: the binary protocol version boards use. */
  readonly websocketVersion: 1 | 2 | 3;
  /** `server_time.timezone_offset`, in minutes east of UTC (the firmware's unit). */
  readonly timezoneOffsetMinutes: number;
  readonly firmwareDir: string | undefined;
  /** Offered in `initialize` as the vision capability (`self.camera.take_photo` posts there). */
  readonly vision: { readonly url: string; readonly token?: string } | undefined;
  /** Default bound on each MCP request; each call can override it. */
  readonly callTimeoutMs: number;
  /** Bound on the wait for a device's hello after the upgrade. */
  readonly helloTimeoutMs: number;
  /**
   * Largest WebSocket frame, and largest MQTT packet, accepted from any client (the firmware
   * sends at most 64 KiB).
   */
  readonly maxFrameBytes: number;
  /** Ping each device this often; a device that misses two pings in a row is dropped. 0: never. */
  readonly pingIntervalMs: number;
  /** Extra `websocket` members stored on boards (NVS keys): checked for hazards. */
  readonly websocketExtra: Readonly<Record<string, string | number>>;
  readonly logLevel: LogLevel;

  // --- the API's front door (docs/architecture.md: everything that listens faces hostile input)
  /**
   * Bearer tokens the API requires, apart from device tokens (`tokens`). With none, the API
   * is open, which only a loopback bind allows unless `auth` is `off` explicitly.
   */
  readonly apiTokens: readonly string[];
  /**
   * `Origin`/`Host` values the API accepts besides the server's own (a DNS name or reverse
   * proxy in front of it). Requests from any other origin are refused (DNS rebinding, cross-site POST).
   */
  readonly allowedOrigins: readonly string[];
  /**
   * Node's `headersTimeout`: a client gets this long to send its request headers. An MQTT client
   * gets as long to send its CONNECT.
   */
  readonly headersTimeoutMs: number;
  /** Node's `requestTimeout`: a client gets this long to send its whole request. */
  readonly requestTimeoutMs: number;
  /**
   * Most open TCP connections (HTTP and WebSocket together), and as many again on the MQTT
   * broker; 0: no cap.
   */
  readonly maxConnections: number;

  // --- MQTT + UDP (docs/protocol.md §5)
  /**
   * The transport the OTA reply offers a board: `websocket` (with `"mqtt": {"endpoint": ""}`,
   * so a board given MQTT before comes back) or `mqtt` (the embedded broker). A device's own
   * choice (`XiaozhiServer.setTransport`) overrides it.
   */
  readonly transport: DeviceTransport;
  /**
   * Run the embedded MQTT broker and the UDP audio endpoint. Default: on when `transport` is
   * `mqtt` or `mqttPort` is given, so a WebSocket-only server binds no other port.
   */
  readonly mqttBroker: boolean;
  /** The broker's TCP port, on `host`; 0 lets the OS choose. Not 8883: boards speak TLS there. */
  readonly mqttPort: number;
  /** The UDP audio endpoint's port, on `host`; 0 lets the OS choose (the server hello names it). */
  readonly udpPort: number;
  /** `mqtt.keepalive` in the OTA reply, in seconds (the firmware's default is 240). */
  readonly mqttKeepaliveS: number;

  // --- bounded memory
  /** Largest OTA check body accepted (a board's system info is a few KB). */
  readonly maxOtaBodyBytes: number;
  /** Most device records kept; the longest-offline devices are evicted first. */
  readonly maxDevices: number;
  /** An offline device is forgotten after this long without an OTA check or connection; 0: never. */
  readonly offlineDeviceTtlMs: number;
  /**
   * Opt-in activation (docs/protocol.md §7): the HMAC-SHA256 key (hex) of each board serial
   * number. A board that sends a `Serial-Number` listed here must answer the OTA reply's
   * challenge before it gets a token.
   */
  readonly activationKeys: Readonly<Record<string, string>> | undefined;
}

export const DEFAULT_CONFIG: ServerConfig = {
  host: '127.0.0.1',
  port: 8000,
  publicUrl: undefined,
  prefix: '/xiaozhi',
  apiPrefix: '/api',
  auth: 'token',
  tokens: [],
  websocketVersion: 1,
  timezoneOffsetMinutes: -new Date().getTimezoneOffset(),
  firmwareDir: undefined,
  vision: undefined,
  callTimeoutMs: 30_000,
  helloTimeoutMs: 10_000,
  maxFrameBytes: 128 * 1024,
  // Relaxed: aggressive ping timeouts have disconnected real boards.
  pingIntervalMs: 60_000,
  websocketExtra: {},
  logLevel: 'info',
  apiTokens: [],
  allowedOrigins: [],
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  maxConnections: 0,
  transport: 'websocket',
  mqttBroker: false,
  mqttPort: 1883,
  udpPort: 0,
  mqttKeepaliveS: 240,
  maxOtaBodyBytes: 32 * 1024,
  maxDevices: 10_000,
  offlineDeviceTtlMs: 24 * 60 * 60 * 1000,
  activationKeys: undefined,
};

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

/** True for a bind address only this machine can reach: 127.0.0.0/8, ::1 (IPv4-mapped too), localhost. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  if (bare.toLowerCase() === 'localhost') return true;
  const family = isIP(bare);
  return family !== 0 && LOOPBACK.check(bare, family === 4 ? 'ipv4' : 'ipv6');
}

function invalid(field: string, message: string): never {
  throw new ServerError('CONFIG_INVALID', `config ${field}: ${message}`);
}

/** Fills defaults and validates; throws `CONFIG_INVALID` or `CONFIG_HAZARD` naming the field. */
export function resolveConfig(partial: Partial<ServerConfig> = {}): ServerConfig {
  const config: { -readonly [K in keyof ServerConfig]: ServerConfig[K] } = {
    ...DEFAULT_CONFIG,
    ...Object.fromEntries(Object.entries(partial).filter(([, v]) => v !== undefined)),
  };
  if (partial.mqttBroker === undefined)
    config.mqttBroker = config.transport === 'mqtt' || partial.mqttPort !== undefined;
  if (typeof config.host !== 'string' || config.host === '')
    invalid('host', 'must be a host name or address');
  if (!Number.isInteger(config.port) || config.port < 0 || config.port > 65535)
    invalid('port', `must be 0..65535, got ${String(config.port)}`);
  if (!/^\/[\w\-/]*$/.test(config.prefix) || config.prefix.endsWith('/'))
    invalid('prefix', `must look like /xiaozhi, got ${JSON.stringify(config.prefix)}`);
  if (!/^\/[\w\-/]*$/.test(config.apiPrefix) || config.apiPrefix.endsWith('/'))
    invalid('apiPrefix', `must look like /api, got ${JSON.stringify(config.apiPrefix)}`);
  if (config.auth !== 'token' && config.auth !== 'off')
    invalid('auth', `must be token or off, got ${JSON.stringify(config.auth)}`);
  if (![1, 2, 3].includes(config.websocketVersion)) {
    // A string here would be stored as a string and read back as the default by the firmware.
    throw new ServerError(
      'CONFIG_HAZARD',
      `config websocketVersion: must be the number 1, 2 or 3, got ${JSON.stringify(config.websocketVersion)}`,
    );
  }
  if (
    !Number.isInteger(config.timezoneOffsetMinutes) ||
    Math.abs(config.timezoneOffsetMinutes) > 14 * 60
  ) {
    invalid(
      'timezoneOffsetMinutes',
      `must be whole minutes within ±840, got ${String(config.timezoneOffsetMinutes)}`,
    );
  }
  for (const [field, value] of [
    ['callTimeoutMs', config.callTimeoutMs],
    ['helloTimeoutMs', config.helloTimeoutMs],
    ['maxFrameBytes', config.maxFrameBytes],
    ['headersTimeoutMs', config.headersTimeoutMs],
    ['requestTimeoutMs', config.requestTimeoutMs],
    ['maxOtaBodyBytes', config.maxOtaBodyBytes],
    ['maxDevices', config.maxDevices],
  ] as const) {
    if (!Number.isInteger(value) || value <= 0)
      invalid(field, `must be a positive integer, got ${String(value)}`);
  }
  // Node refuses a header bound longer than the whole request's.
  if (config.headersTimeoutMs > config.requestTimeoutMs)
    invalid(
      'headersTimeoutMs',
      `must not exceed requestTimeoutMs (${config.requestTimeoutMs}), got ${config.headersTimeoutMs}`,
    );
  if (config.transport !== 'websocket' && config.transport !== 'mqtt')
    invalid('transport', `must be websocket or mqtt, got ${JSON.stringify(config.transport)}`);
  if (typeof config.mqttBroker !== 'boolean') invalid('mqttBroker', 'must be true or false');
  if (config.transport === 'mqtt' && !config.mqttBroker)
    invalid('mqttBroker', 'must be on to offer boards mqtt (transport)');
  for (const [field, value] of [
    ['mqttPort', config.mqttPort],
    ['udpPort', config.udpPort],
  ] as const) {
    if (!Number.isInteger(value) || value < 0 || value > 65535)
      invalid(field, `must be 0..65535, got ${String(value)}`);
  }
  if (config.mqttBroker && config.mqttPort !== 0 && config.mqttPort === config.port)
    invalid('mqttPort', `must differ from port (${config.port}): the broker has its own listener`);
  // xiaozhi-esp32 mqtt_protocol.cc StartMqttClient: 8883 is where the board speaks TLS.
  if (config.mqttBroker && config.mqttPort === 8883)
    invalid('mqttPort', '8883 is where boards speak TLS; the embedded broker is plain MQTT (1883)');
  // MQTT's Keep Alive is a 16-bit number of seconds; 0 would turn it off.
  if (
    !Number.isInteger(config.mqttKeepaliveS) ||
    config.mqttKeepaliveS < 1 ||
    config.mqttKeepaliveS > 65535
  )
    invalid('mqttKeepaliveS', `must be 1..65535 seconds, got ${String(config.mqttKeepaliveS)}`);
  if (!Number.isInteger(config.pingIntervalMs) || config.pingIntervalMs < 0)
    invalid('pingIntervalMs', 'must be 0 or a positive integer');
  if (config.publicUrl !== undefined && !/^https?:\/\/[^/\s]+$/.test(config.publicUrl)) {
    invalid(
      'publicUrl',
      `must be http(s)://host[:port] without a path, got ${JSON.stringify(config.publicUrl)}`,
    );
  }
  if (config.vision !== undefined && !/^https?:\/\/\S+$/.test(config.vision.url))
    invalid('vision.url', 'must be an http(s) URL');
  for (const [field, value] of [
    ['maxConnections', config.maxConnections],
    ['offlineDeviceTtlMs', config.offlineDeviceTtlMs],
  ] as const) {
    if (!Number.isInteger(value) || value < 0)
      invalid(field, `must be 0 or a positive integer, got ${String(value)}`);
  }
  for (const [field, tokens] of [
    ['tokens', config.tokens],
    ['apiTokens', config.apiTokens],
  ] as const) {
    for (const token of tokens) {
      if (typeof token !== 'string' || token === '' || /\s/.test(token))
        invalid(field, 'each token must be a non-empty string without spaces');
    }
  }
  for (const origin of config.allowedOrigins) {
    if (
      typeof origin !== 'string' ||
      (origin !== '*' && originKey(origin) === undefined && hostKey(origin) === undefined)
    )
      invalid(
        'allowedOrigins',
        `each must be an origin (http://host:port), a host[:port] or *, got ${JSON.stringify(origin)}`,
      );
  }
  // An open API drives every board's tools: only this machine may reach it, unless asked for.
  if (config.apiTokens.length === 0 && config.auth !== 'off' && !isLoopbackHost(config.host)) {
    throw new ServerError(
      'CONFIG_HAZARD',
      `config apiTokens: none given while binding to ${config.host}, not loopback, would open the API (it runs tools on every board) to the network: give an API token (apiTokens, --api-token), or auth off (--auth off) to run an open API on purpose`,
    );
  }
  for (const [serial, key] of Object.entries(config.activationKeys ?? {})) {
    if (serial === '' || !/^(?:[0-9a-f]{2}){16,64}$/i.test(key))
      invalid(
        'activationKeys',
        `the key of ${JSON.stringify(serial)} must be 16 to 64 bytes of hex`,
      );
  }
  return config;
}

const ANY_MAC = 'aa:bb:cc:dd:ee:ff';

/**
 * Refuses a configuration whose OTA replies would be a hazard, by validating the replies it
 * produces with the longest token and credentials it can issue or accept: the WebSocket one,
 * and the MQTT one when `mqttEndpoint` (`host:port` as boards reach the broker) is given.
 */
export function assertConfigSafe(
  config: ServerConfig,
  websocketUrl: string,
  mqttEndpoint?: string,
): void {
  const longestToken = [...config.tokens, 'x'.repeat(32)].reduce((a, b) =>
    b.length > a.length ? b : a,
  );
  const serverTime = { timestamp: Date.now(), timezone_offset: config.timezoneOffsetMinutes };
  const replies: OtaReply[] = [
    {
      websocket: {
        url: websocketUrl,
        token: longestToken,
        version: config.websocketVersion,
        ...config.websocketExtra,
      },
      mqtt: { endpoint: '' },
      server_time: serverTime,
    },
  ];
  if (mqttEndpoint !== undefined) {
    replies.push({
      mqtt: {
        endpoint: mqttEndpoint,
        // The longest a Client-Id can be (gateway.ts CLIENT_ID: 64 characters).
        client_id: mqttClientId(ANY_MAC, 'x'.repeat(64)),
        username: ANY_MAC,
        password: longestToken,
        keepalive: config.mqttKeepaliveS,
        publish_topic: publishTopic(ANY_MAC),
      },
      server_time: serverTime,
    });
  }
  for (const reply of replies) {
    const hazard = validateOtaReply(reply).find((finding) => finding.severity === 'hazard');
    if (hazard !== undefined) {
      throw new ServerError(
        'CONFIG_HAZARD',
        `config would send boards an OTA reply that crashes them: ${hazard.field}: ${hazard.message}`,
      );
    }
  }
}
