/**
 * Boards on MQTT get the same {@link DeviceSession}, registry entry, MCP client and API as
 * boards on WebSocket. There is no hello before MCP (docs/protocol.md §5: MCP works whenever
 * MQTT is up), so a session starts as soon as the broker has a board's connection, with
 * `sessionId` `""`. A hello from the board (transport `udp`) opens an audio session: it is
 * answered at once (the board gives up after 10 s) with the UDP endpoint's server hello, and its
 * session id is then the one MCP envelopes carry, until a goodbye from either side ends it.
 */
import {
  type DeviceFrame,
  type DeviceHello,
  parseDeviceHello,
  type UdpServerHello,
} from '@xiaozhi-mcp/protocol';
import type { Logger } from 'pino';
import type { ServerConfig } from './config.js';
import { clip } from './device-bounds.js';
import { DeviceSession, type DeviceSessionInfo } from './device-session.js';
import type { MqttDevice } from './mqtt-broker.js';
import type { DeviceRegistry } from './registry.js';

/**
 * What a session over MQTT records as its hello: none is sent before MCP, so this stands for
 * one (the MQTT build's hello, docs/protocol.md §5), and `helloText` is `""`.
 */
export const MQTT_SESSION_HELLO: DeviceHello = {
  type: 'hello',
  version: 3,
  transport: 'udp',
  features: { mcp: true },
  audio_params: { format: 'opus', sample_rate: 16000, channels: 1, frame_duration: 60 },
};

/** The UDP audio side, as the MQTT path uses it (`udp-audio.ts`: `answerUdpHello`, `close`). */
export interface AudioSessions {
  /** Opens an audio session for a board's hello and returns the server hello to send back. */
  open(deviceId: string, hello: DeviceHello): UdpServerHello;
  /** Ends an audio session. */
  close(sessionId: string): void;
}

/** The open audio session's id, if any: MCP envelopes carry it. */
class AudioState {
  /** The session's info, whose `sessionId` is read at every send: a plain field, kept in step. */
  readonly #info: { sessionId: string };
  #sessionId: string | undefined;

  constructor(info: { sessionId: string }) {
    this.#info = info;
  }

  get sessionId(): string | undefined {
    return this.#sessionId;
  }

  /** Opens (an id) or ends (undefined) the audio session; MCP envelopes then carry the id or "". */
  set sessionId(sessionId: string | undefined) {
    this.#sessionId = sessionId;
    this.#info.sessionId = sessionId ?? '';
  }
}

interface Channel {
  readonly session: DeviceSession;
  readonly audio: AudioState;
}

export class MqttGateway {
  readonly #config: ServerConfig;
  readonly #registry: DeviceRegistry;
  readonly #logger: Logger;
  readonly #audio: AudioSessions | undefined;
  /** The current MQTT session of each board. */
  readonly #channels = new Map<string, Channel>();

  constructor(
    config: ServerConfig,
    registry: DeviceRegistry,
    logger: Logger,
    audio: AudioSessions | undefined,
  ) {
    this.#config = config;
    this.#registry = registry;
    this.#logger = logger;
    this.#audio = audio;
  }

  /** A board's MQTT connection: its session, attached to the registry (which starts MCP). */
  accept(device: MqttDevice): void {
    const { deviceId, clientId } = device;
    const info: DeviceSessionInfo & { sessionId: string } = {
      deviceId,
      clientId,
      // The open audio session's id, or "" (docs/protocol.md §5): `audio` keeps it in step.
      sessionId: '',
      protocolVersion: 3,
      hello: MQTT_SESSION_HELLO,
      helloText: '',
      remoteAddress: device.remoteAddress,
      transport: 'mqtt',
    };
    const audio = new AudioState(info);
    const session = new DeviceSession(device.link, info, {
      callTimeoutMs: this.#config.callTimeoutMs,
      onError: (error, where) => this.#logger.error({ deviceId, err: error }, `session: ${where}`),
    });
    const channel: Channel = { session, audio };
    session.on('message', (frame) => this.#onMessage(deviceId, channel, frame));
    session.on('closed', (reason) => {
      this.#logger.info({ deviceId, transport: 'mqtt', reason }, 'device disconnected');
      if (audio.sessionId !== undefined) this.#audio?.close(audio.sessionId);
      audio.sessionId = undefined;
      if (this.#channels.get(deviceId) === channel) this.#channels.delete(deviceId);
    });
    this.#channels.set(deviceId, channel);
    this.#logger.info({ deviceId, transport: 'mqtt' }, 'device connected');
    try {
      this.#registry.attach(session);
    } catch (error) {
      // Another client took this Device-Id since the CONNECT: the session was closed.
      this.#logger.warn(
        { deviceId, clientId, err: (error as Error).message },
        'MQTT session refused',
      );
    }
  }

  /** The open audio session of a board on MQTT, if any. */
  audioSessionOf(deviceId: string): string | undefined {
    return this.#channels.get(deviceId.toLowerCase())?.audio.sessionId;
  }

  /**
   * Ends a board's audio session from our side: `{"session_id":S,"type":"goodbye"}` (the board
   * honours it only with its session id). False when the board has none open.
   */
  endAudioSession(deviceId: string): boolean {
    const channel = this.#channels.get(deviceId.toLowerCase());
    const sessionId = channel?.audio.sessionId;
    if (channel === undefined || sessionId === undefined) return false;
    channel.session.sendRaw(JSON.stringify({ session_id: sessionId, type: 'goodbye' }));
    this.#closeAudio(deviceId, channel);
    return true;
  }

  #onMessage(deviceId: string, channel: Channel, frame: DeviceFrame): void {
    if (frame.kind !== 'message') return;
    if (frame.type === 'hello') this.#onHello(deviceId, channel, frame.value);
    else if (frame.type === 'goodbye') {
      const sessionId = frame.value.session_id;
      if (channel.audio.sessionId === undefined) return;
      if (sessionId !== undefined && sessionId !== channel.audio.sessionId) {
        this.#logger.warn(
          { deviceId, sessionId: clip(String(sessionId), 80), open: channel.audio.sessionId },
          'goodbye for another audio session than the open one; ignored',
        );
        return;
      }
      this.#closeAudio(deviceId, channel);
    }
  }

  #onHello(deviceId: string, channel: Channel, value: Record<string, unknown>): void {
    let hello: DeviceHello;
    try {
      hello = parseDeviceHello(value);
    } catch (error) {
      this.#logger.warn(
        { deviceId, reason: clip((error as Error).message, 300) },
        'bad hello over MQTT; not answered',
      );
      return;
    }
    if (hello.transport !== 'udp') {
      this.#logger.warn(
        { deviceId, transport: hello.transport },
        'hello over MQTT asks for another transport than udp; not answered',
      );
      return;
    }
    if (this.#audio === undefined) {
      this.#logger.warn({ deviceId }, 'hello over MQTT, but no UDP audio endpoint; not answered');
      return;
    }
    // A new hello replaces the open session (the board opens one at a time).
    if (channel.audio.sessionId !== undefined) this.#closeAudio(deviceId, channel);
    const answer = this.#audio.open(deviceId, hello);
    channel.audio.sessionId = answer.session_id;
    channel.session.sendRaw(JSON.stringify(answer));
    this.#logger.info({ deviceId, sessionId: answer.session_id }, 'audio session opened');
  }

  #closeAudio(deviceId: string, channel: Channel): void {
    const sessionId = channel.audio.sessionId;
    if (sessionId === undefined) return;
    channel.audio.sessionId = undefined;
    this.#audio?.close(sessionId);
    this.#logger.info({ deviceId, sessionId }, 'audio session closed');
  }
}
