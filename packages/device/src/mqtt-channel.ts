/**
 * The device's MQTT + UDP protocol (docs/protocol.md §5), as xiaozhi-esp32's mqtt_protocol.cc
 * and esp_mqtt.cc run it: one MQTT 3.1.1 connection made at boot with the settings in NVS
 * namespace `mqtt`, kept up, never subscribing, publishing QoS 0 on `publish_topic`; every
 * message delivered to it (on any topic) read as a JSON frame; a reconnect scheduled once after
 * a drop. An audio channel starts with a hello published on MQTT and the server's hello naming
 * a UDP endpoint, key and nonce; audio then goes out as AES-128-CTR packets
 * ({@link UdpAudioSender}), and `goodbye` ends it.
 */
import { EventEmitter } from 'node:events';
import { createRequire } from 'node:module';
import {
  type BackendFrame,
  type CJsonNode,
  cString,
  type DeviceHello,
  getItem,
  parseCJson,
  readBackendFrame,
  toCInt,
} from '@xiaozhi-mcp/protocol';
import type * as Mqtt from 'mqtt';
import type { BoardConsole } from './console.js';
import { BoardPanic, DeviceError } from './errors.js';
import type { NvsStorage } from './nvs-storage.js';
import { decodeHexLax, UDP_NONCE_BYTES, UdpAudioSender } from './udp-audio-sender.js';

/** `settings.GetInt("keepalive", 240)` in `StartMqttClient`. */
export const MQTT_DEFAULT_KEEPALIVE_S = 240;
/** The port `StartMqttClient` assumes when the endpoint names none; esp_mqtt.cc uses TLS on it. */
export const MQTT_TLS_PORT = 8883;

/** NVS namespace `mqtt`, as `StartMqttClient` reads it at every (re)connect. */
export interface MqttSettings {
  readonly endpoint: string;
  readonly clientId: string;
  readonly username: string;
  readonly password: string;
  /** Seconds. */
  readonly keepalive: number;
  readonly publishTopic: string;
}

export function readMqttSettings(storage: NvsStorage): MqttSettings {
  const settings = storage.open('mqtt');
  return {
    endpoint: settings.getString('endpoint'),
    clientId: settings.getString('client_id'),
    username: settings.getString('username'),
    password: settings.getString('password'),
    keepalive: settings.getInt('keepalive', MQTT_DEFAULT_KEEPALIVE_S),
    publishTopic: settings.getString('publish_topic'),
  };
}

/** Where an endpoint leads, or the exception `std::stoi` throws on its port (the board aborts). */
export type MqttEndpoint =
  | { readonly kind: 'tcp' | 'tls'; readonly host: string; readonly port: number }
  | { readonly kind: 'stoi-throws'; readonly exception: 'invalid_argument' | 'out_of_range' };

/**
 * `StartMqttClient`'s split of `host[:port]` at the first colon, the port read by `std::stoi`
 * (leading white space, a sign, digits, anything after them ignored), 8883 without one;
 * esp_mqtt.cc connects with TLS exactly when the port is 8883.
 */
export function parseMqttEndpoint(endpoint: string): MqttEndpoint {
  const colon = endpoint.indexOf(':');
  let port = MQTT_TLS_PORT;
  if (colon >= 0) {
    const match = /^[ \t\n\v\f\r]*([+-]?\d+)/.exec(endpoint.slice(colon + 1));
    if (match?.[1] === undefined) return { kind: 'stoi-throws', exception: 'invalid_argument' };
    port = Number(match[1]);
    if (port > 2 ** 31 - 1 || port < -(2 ** 31))
      return { kind: 'stoi-throws', exception: 'out_of_range' };
  }
  const host = colon >= 0 ? endpoint.slice(0, colon) : endpoint;
  return { kind: port === MQTT_TLS_PORT ? 'tls' : 'tcp', host, port };
}

/** The part of an mqtt.js client the channel uses (tests hand in a fake). */
export interface MqttClientLike {
  on(event: 'connect', listener: () => void): unknown;
  on(event: 'message', listener: (topic: string, payload: Buffer) => void): unknown;
  on(event: 'close', listener: () => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  publish(topic: string, message: string, options: { qos: 0 }): unknown;
  /** `force`: drop the connection without a DISCONNECT packet. */
  end(force?: boolean): unknown;
  removeAllListeners(): unknown;
}

/** What the channel asks of an MQTT client library: mqtt.js's `connect` options, the ones used. */
export interface MqttConnectOptions {
  readonly protocolVersion: 4;
  readonly clean: true;
  readonly clientId: string;
  readonly username?: string;
  readonly password?: string;
  readonly keepalive: number;
  /** 0: the firmware schedules its own reconnect. */
  readonly reconnectPeriod: 0;
  readonly connectTimeout: number;
  readonly resubscribe: false;
}

export type MqttConnect = (url: string, options: MqttConnectOptions) => MqttClientLike;

const requireCjs = createRequire(import.meta.url);

// mqtt.js (its CommonJS build) loads with a board's first MQTT connect: importing the SDK, as
// every hil run and CLI command does, does not pay the ~60 ms it takes to load.
const defaultConnect: MqttConnect = (url, options) =>
  (requireCjs('mqtt') as typeof Mqtt).connect(url, { ...options });

export interface MqttChannelOptions {
  /** Read at every connect, as `StartMqttClient` reads NVS. */
  readonly settings: () => MqttSettings;
  readonly console: BoardConsole;
  /** `MQTT_RECONNECT_INTERVAL_MS` (60 s). */
  readonly reconnectMs: number;
  /** How long a connect may take before it counts as failed. */
  readonly connectTimeoutMs: number;
  /** The wait for the server hello (firmware: 10 s). */
  readonly helloTimeoutMs: number;
  /** The reconnect timer connects only while this holds (firmware: the device is idle). */
  readonly mayReconnect: () => boolean;
  /** The MQTT client library; mqtt.js by default. */
  readonly connect?: MqttConnect;
}

export interface MqttChannelEvents {
  /** A frame other than `hello` and `goodbye` (`on_incoming_json_`), at any time. */
  json: [BackendFrame];
  connected: [];
  /** An established connection dropped (a reconnect is scheduled). */
  disconnected: [];
  /** A server `goodbye` the board honours: the session should close the audio channel. */
  goodbye: [];
  /** The audio channel closed (`on_audio_channel_closed_`). */
  'audio-closed': [sessionId: string];
  /** The firmware would have crashed here. */
  panic: [BoardPanic];
}

/** The server hello's `udp` member, read as `ParseServerHello` reads it. */
interface UdpParams {
  readonly server: string;
  readonly port: number;
  readonly key: Uint8Array;
  readonly nonce: Uint8Array;
}

export class MqttChannel extends EventEmitter<MqttChannelEvents> {
  #client: MqttClientLike | undefined;
  #connected = false;
  #stopped = false;
  #publishTopic = '';
  #reconnectTimer: NodeJS.Timeout | undefined;
  #sessionId = '';
  #udpParams: UdpParams | undefined;
  #helloWaiter: (() => void) | undefined;
  #udp: UdpAudioSender | undefined;
  /** Bumped by every connect attempt, so events of an abandoned client are ignored. */
  #attempt = 0;
  readonly #options: MqttChannelOptions;

  constructor(options: MqttChannelOptions) {
    super();
    this.#options = options;
  }

  get connected(): boolean {
    return this.#connected;
  }

  /** `session_id_`: the last audio session's id, `""` before the first (and while opening one). */
  get sessionId(): string {
    return this.#sessionId;
  }

  /** True while UDP audio can be sent (after the server hello, until goodbye). */
  get audioOpen(): boolean {
    return this.#udp !== undefined;
  }

  /** The open audio channel's sender (its counters), if any. */
  get udp(): UdpAudioSender | undefined {
    return this.#udp;
  }

  /**
   * `StartMqttClient`: connects with the stored settings. Resolves true once connected, false
   * when there is no endpoint or the connect failed (a retry is then scheduled). Rejects with a
   * {@link BoardPanic} when `std::stoi` throws on the endpoint's port.
   */
  start(): Promise<boolean> {
    const { console } = this.#options;
    this.#stopped = false;
    clearTimeout(this.#reconnectTimer);
    if (this.#client !== undefined) {
      console.log('W', 'MQTT', 'Mqtt client already started');
      this.#abandonClient();
    }
    const settings = this.#options.settings();
    this.#publishTopic = settings.publishTopic;
    if (settings.endpoint === '') {
      console.log('W', 'MQTT', 'MQTT endpoint is not specified');
      return Promise.resolve(false);
    }
    console.log('I', 'MQTT', `Connecting to endpoint ${settings.endpoint}`);
    const endpoint = parseMqttEndpoint(settings.endpoint);
    if (endpoint.kind === 'stoi-throws') {
      return Promise.reject(
        new BoardPanic(
          'abort',
          `terminate called after throwing an instance of 'std::${endpoint.exception}' what(): stoi`,
        ),
      );
    }
    if (
      endpoint.kind === 'tls' ||
      endpoint.host === '' ||
      endpoint.port < 1 ||
      endpoint.port > 65535
    ) {
      // The virtual board has no TLS stack (and no certificate bundle): a TLS endpoint fails
      // here as an unreachable one fails on a board.
      this.#connectFailed();
      return Promise.resolve(false);
    }
    const attempt = ++this.#attempt;
    const client = (this.#options.connect ?? defaultConnect)(
      `mqtt://${endpoint.host.includes(':') ? `[${endpoint.host}]` : endpoint.host}:${endpoint.port}`,
      {
        protocolVersion: 4,
        clean: true,
        clientId: settings.clientId,
        // esp-mqtt sends no user name or password flag for an empty string.
        ...(settings.username === '' ? {} : { username: settings.username }),
        ...(settings.password === '' ? {} : { password: settings.password }),
        keepalive: settings.keepalive,
        reconnectPeriod: 0,
        connectTimeout: this.#options.connectTimeoutMs,
        resubscribe: false,
      },
    );
    this.#client = client;
    return new Promise<boolean>((resolve) => {
      let settled = false;
      const settle = (connected: boolean) => {
        if (settled) return;
        settled = true;
        clearTimeout(guard);
        resolve(connected);
      };
      // mqtt.js ends a connect that takes longer than connectTimeout; this guard also covers a
      // client that never reports back.
      const guard = setTimeout(() => {
        if (attempt !== this.#attempt || this.#connected) return;
        this.#abandonClient();
        this.#connectFailed();
        settle(false);
      }, this.#options.connectTimeoutMs + 1000);
      client.on('error', () => {
        // A refused CONNACK or a socket error; `close` follows and decides.
      });
      client.on('connect', () => {
        if (attempt !== this.#attempt || this.#stopped) return;
        this.#connected = true;
        clearTimeout(this.#reconnectTimer);
        console.log('I', 'MQTT', 'Connected to endpoint');
        settle(true);
        this.emit('connected');
      });
      client.on('message', (_topic, payload) => {
        if (attempt !== this.#attempt || this.#stopped) return;
        this.#onMessage(payload.toString('utf8'));
      });
      client.on('close', () => {
        if (attempt !== this.#attempt || this.#stopped) return;
        this.#client = undefined;
        client.removeAllListeners();
        client.on('error', () => {});
        if (!this.#connected) {
          this.#connectFailed();
          settle(false);
          return;
        }
        this.#connected = false;
        // The UDP socket outlives the connection on a board, but nothing can end the session
        // any more: the model closes it, without a goodbye nobody would receive.
        this.#closeUdp();
        this.#scheduleReconnect();
        this.emit('disconnected');
      });
    });
  }

  /** `SendText`: publishes QoS 0 on `publish_topic`. False when that is empty or MQTT is down. */
  sendText(text: string): boolean {
    if (this.#publishTopic === '') return false;
    const client = this.#client;
    if (client === undefined || !this.#connected) {
      this.#options.console.log('E', 'MQTT', `Failed to publish message: ${text}`);
      return false;
    }
    client.publish(this.#publishTopic, text, { qos: 0 });
    return true;
  }

  /**
   * `OpenAudioChannel`: connects if needed, publishes the hello, waits for the server's, and
   * opens the UDP socket. Rejects with a {@link DeviceError} when any step fails.
   */
  async openAudioChannel(hello: DeviceHello): Promise<void> {
    const { console } = this.#options;
    if (!this.#connected) {
      console.log('I', 'MQTT', 'MQTT is not connected, try to connect now');
      if (!(await this.start()))
        throw new DeviceError('MQTT_NOT_CONNECTED', 'the MQTT broker could not be reached');
    }
    this.#closeUdp();
    this.#sessionId = '';
    this.#udpParams = undefined;
    const helloSeen = new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => {
        this.#helloWaiter = undefined;
        resolve(false);
      }, this.#options.helloTimeoutMs);
      this.#helloWaiter = () => {
        clearTimeout(timer);
        this.#helloWaiter = undefined;
        resolve(true);
      };
    });
    if (!this.sendText(JSON.stringify(hello))) {
      this.#helloWaiter?.();
      throw new DeviceError('MQTT_PUBLISH_FAILED', 'the hello could not be published');
    }
    const params = (await helloSeen) ? this.#udpParams : undefined;
    if (this.#stopped || !this.#connected)
      throw new DeviceError('MQTT_NOT_CONNECTED', 'MQTT went down during the hello');
    if (params === undefined) {
      console.log('E', 'MQTT', 'Failed to receive server hello');
      throw new DeviceError(
        'MQTT_HELLO_TIMEOUT',
        `no server hello within ${this.#options.helloTimeoutMs} ms`,
      );
    }
    let sender: UdpAudioSender;
    try {
      sender = await UdpAudioSender.open(params);
    } catch (error) {
      throw new DeviceError('UDP_CONNECT_FAILED', (error as Error).message, { cause: error });
    }
    if (this.#stopped || !this.#connected) {
      sender.close();
      throw new DeviceError('MQTT_NOT_CONNECTED', 'MQTT went down during the hello');
    }
    this.#udp = sender;
  }

  /** `SendAudio`: one Opus packet over UDP; false without an open audio channel. */
  sendAudio(payload: Uint8Array, timestamp: number): boolean {
    return this.#udp?.send(payload, timestamp) ?? false;
  }

  /**
   * `CloseAudioChannel`: drops the UDP socket and publishes `goodbye` with the session id, built
   * by concatenation as the firmware builds it (whether or not a channel was open).
   */
  closeAudioChannel(): void {
    this.#closeUdp();
    this.sendText(`{"session_id":"${this.#sessionId}","type":"goodbye"}`);
    this.emit('audio-closed', this.#sessionId);
  }

  /** Drops the connection as a network failure would: the reconnect is scheduled. */
  dropConnection(): void {
    this.#client?.end(true);
  }

  /** Power off or reset: everything stops, nothing is sent, nothing is scheduled. */
  stop(): void {
    this.#stopped = true;
    this.#attempt++;
    clearTimeout(this.#reconnectTimer);
    this.#helloWaiter?.();
    this.#closeUdp();
    this.#abandonClient();
  }

  #abandonClient(): void {
    const client = this.#client;
    this.#client = undefined;
    this.#connected = false;
    if (client === undefined) return;
    client.removeAllListeners();
    client.on('error', () => {});
    client.end(true);
  }

  #closeUdp(): void {
    this.#udp?.close();
    this.#udp = undefined;
  }

  #connectFailed(): void {
    // esp_mqtt.cc's Connect failing; the code is ESP_FAIL, the model has no finer one.
    this.#options.console.log('E', 'MQTT', 'Failed to connect to endpoint, code=-1');
    this.#scheduleReconnect();
  }

  #scheduleReconnect(): void {
    const { reconnectMs } = this.#options;
    this.#options.console.log(
      'W',
      'MQTT',
      `MQTT disconnected, schedule reconnect in ${reconnectMs / 1000} seconds`,
    );
    clearTimeout(this.#reconnectTimer);
    this.#reconnectTimer = setTimeout(() => {
      if (this.#stopped || this.#connected || !this.#options.mayReconnect()) return;
      this.#options.console.log('I', 'MQTT', 'Reconnecting to MQTT server');
      this.start().catch((error: unknown) => {
        if (error instanceof BoardPanic) this.emit('panic', error);
      });
    }, reconnectMs);
  }

  /** esp_mqtt.cc's `OnMessage` handler in `StartMqttClient`. */
  #onMessage(text: string): void {
    const { console } = this.#options;
    if (parseCJson(text) === undefined) {
      console.log('E', 'MQTT', `Failed to parse json message ${text}`);
      return;
    }
    const frame = readBackendFrame(text);
    if (frame?.type === undefined) {
      console.log('E', 'MQTT', 'Message type is invalid');
      return;
    }
    try {
      if (frame.type === 'hello') this.#onServerHello(frame.root);
      else if (frame.type === 'goodbye') this.#onGoodbye(frame.root);
      else this.emit('json', frame);
    } catch (error) {
      if (!(error instanceof BoardPanic)) throw error;
      this.stop();
      this.emit('panic', error);
    }
  }

  #onGoodbye(root: CJsonNode): void {
    const session = getItem(root, 'session_id');
    if (session !== undefined && session.kind !== 'string') {
      // `session_id_ == session_id->valuestring` compares with a null pointer: strlen(NULL).
      throw new BoardPanic(
        'load-prohibited',
        'MqttProtocol goodbye with a session_id that is not a string',
      );
    }
    const id = session === undefined ? undefined : cString(session.value);
    this.#options.console.log('I', 'MQTT', `Received goodbye message, session_id: ${id ?? 'null'}`);
    // A goodbye without session_id is honoured too (`session_id == nullptr ||`).
    if (id === undefined || id === this.#sessionId) this.emit('goodbye');
  }

  /** `ParseServerHello`; a hello outside an open also updates the session id and the UDP target. */
  #onServerHello(root: CJsonNode): void {
    const { console } = this.#options;
    const transport = getItem(root, 'transport');
    if (transport?.kind !== 'string') {
      // The firmware logs transport->valuestring (or strcmp's it): a null dereference.
      throw new BoardPanic(
        'load-prohibited',
        'MqttProtocol::ParseServerHello read a hello without a string transport',
      );
    }
    if (cString(transport.value) !== 'udp') {
      console.log('E', 'MQTT', `Unsupported transport: ${cString(transport.value)}`);
      return;
    }
    const session = getItem(root, 'session_id');
    if (session?.kind === 'string') {
      this.#sessionId = cString(session.value);
      console.log('I', 'MQTT', `Session ID: ${this.#sessionId}`);
    }
    const udp = getItem(root, 'udp');
    if (udp?.kind !== 'object') {
      console.log('E', 'MQTT', 'UDP is not specified');
      return;
    }
    const member = (key: string): CJsonNode => {
      const node = getItem(udp, key);
      // cJSON_GetObjectItem(udp, key)->valuestring on a missing member.
      if (node === undefined)
        throw new BoardPanic(
          'load-prohibited',
          `MqttProtocol::ParseServerHello read udp.${key}, which is missing`,
        );
      return node;
    };
    const text = (key: string): string => {
      const node = member(key);
      if (node.kind !== 'string')
        // std::string built from a null valuestring.
        throw new BoardPanic(
          'abort',
          `terminate called after throwing an instance of 'std::logic_error' what(): basic_string: construction from null is not valid (udp.${key})`,
        );
      return cString(node.value);
    };
    const server = text('server');
    const portNode = member('port');
    const port = portNode.kind === 'number' ? toCInt(portNode.value) : 0;
    const key = decodeHexLax(text('key'));
    const nonce = decodeHexLax(text('nonce'));
    if (key.length < UDP_NONCE_BYTES || nonce.length !== UDP_NONCE_BYTES) {
      // The firmware reads past a short key or nonce (undefined behaviour); the model refuses.
      console.log('E', 'MQTT', 'UDP key or nonce is not 16 bytes');
      return;
    }
    this.#udpParams = { server, port, key: key.subarray(0, UDP_NONCE_BYTES), nonce };
    this.#helloWaiter?.();
  }
}
