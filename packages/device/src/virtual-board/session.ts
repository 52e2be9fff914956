/**
 * The board's conversation with its backend: the WebSocket session a BOOT click opens
 * (docs/protocol.md §4), or the MQTT connection kept from boot with its UDP audio sessions
 * (docs/protocol.md §5); what the device does with each frame the backend sends
 * (`Application::OnIncomingJson`, docs/protocol.md §6), and the reply path with its fault
 * knobs. What to do is decided as data ({@link frameAction}, {@link clickAction}); the
 * {@link Session} carries it out.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import {
  type AudioFrameVersion,
  type BackendFrame,
  buildDeviceHello,
  type CJsonNode,
  cString,
  type DeviceHello,
  encodeDeviceEnvelope,
  encodeDeviceMessage,
  getItem,
} from '@xiaozhi-mcp/protocol';
import type { BoardConsole, LogLevel } from '../console.js';
import { BoardPanic } from '../errors.js';
import type { McpServer } from '../mcp-server.js';
import { MqttChannel, readMqttSettings } from '../mqtt-channel.js';
import type { NvsStorage } from '../nvs-storage.js';
import type { UdpAudioSender } from '../udp-audio-sender.js';
import { WebsocketChannel } from '../websocket-channel.js';
import { RegressionPlant } from './regressions.js';
import type {
  BoardTiming,
  DeviceState,
  FaultKnobs,
  UplinkSessionStats,
  UplinkStats,
} from './types.js';
import { startUplink } from './uplink.js';

/** What the device does with one frame from the backend. */
export type FrameAction =
  /** Hand the payload to the MCP server. */
  | { readonly kind: 'mcp'; readonly payload: CJsonNode }
  /** On the main loop: start speaking (`tts start`). */
  | { readonly kind: 'speak' }
  /** On the main loop: back to listening if speaking (`tts stop`). */
  | { readonly kind: 'listen' }
  /** On the main loop: `Application::Reboot` (`system` `reboot`). */
  | { readonly kind: 'reboot' }
  | { readonly kind: 'log'; readonly level: LogLevel; readonly text: string }
  | { readonly kind: 'none' };

/** A string member of the frame as the firmware reads it; undefined when absent or not a string. */
function textOf(frame: BackendFrame, key: string): string | undefined {
  const node = getItem(frame.root, key);
  return node?.kind === 'string' ? cString(node.value) : undefined;
}

/** What the device does with a frame that is not `mcp`. */
type OtherAction = Exclude<FrameAction, { readonly kind: 'mcp' }>;

/** `Application::OnIncomingJson`: the action for a frame, by its type. */
export function frameAction(frame: BackendFrame): FrameAction {
  if (frame.type !== 'mcp') return otherAction(frame);
  return frame.payload === undefined ? { kind: 'none' } : { kind: 'mcp', payload: frame.payload };
}

/** {@link frameAction} for a frame whose type is not `mcp`. */
function otherAction(frame: BackendFrame): OtherAction {
  switch (frame.type) {
    case 'tts': {
      const state = textOf(frame, 'state');
      if (state === 'start') return { kind: 'speak' };
      if (state === 'stop') return { kind: 'listen' };
      if (state === 'sentence_start')
        return { kind: 'log', level: 'I', text: `<< ${textOf(frame, 'text') ?? ''}` };
      return { kind: 'none' };
    }
    case 'stt':
      return { kind: 'log', level: 'I', text: `>> ${textOf(frame, 'text') ?? ''}` };
    case 'llm':
      return { kind: 'none' };
    case 'system': {
      const command = textOf(frame, 'command');
      return command === 'reboot'
        ? { kind: 'reboot' }
        : { kind: 'log', level: 'W', text: `Unknown system command: ${command ?? ''}` };
    }
    case 'alert': {
      const status = textOf(frame, 'status');
      const message = textOf(frame, 'message');
      const emotion = textOf(frame, 'emotion');
      if (status === undefined || message === undefined || emotion === undefined)
        return {
          kind: 'log',
          level: 'W',
          text: 'Alert command requires status, message and emotion',
        };
      return { kind: 'log', level: 'W', text: `Alert ${status}: ${message} [${emotion}]` };
    }
    default:
      return { kind: 'log', level: 'W', text: `Unknown message type: ${frame.type ?? ''}` };
  }
}

/** What a BOOT click does in each state (`Application::ToggleChatState`). */
export type ClickAction = 'cancel-activation' | 'open' | 'close' | 'abort' | 'none';

export function clickAction(state: DeviceState): ClickAction {
  switch (state) {
    case 'activating':
      return 'cancel-activation';
    case 'idle':
      return 'open';
    case 'listening':
      return 'close';
    case 'speaking':
      return 'abort';
    default:
      return 'none';
  }
}

/** A copy of a JSON object without the fields at these dotted paths (`features.mcp`). */
export function withoutFields<T extends object>(value: T, paths: readonly string[]): T {
  if (paths.length === 0) return value;
  const copy = structuredClone(value) as Record<string, unknown>;
  for (const path of paths) {
    const keys = path.split('.');
    const last = keys.pop() ?? '';
    let node: unknown = copy;
    for (const key of keys)
      node =
        typeof node === 'object' && node !== null
          ? (node as Record<string, unknown>)[key]
          : undefined;
    if (typeof node === 'object' && node !== null) delete (node as Record<string, unknown>)[last];
  }
  return copy as T;
}

/**
 * The fault knobs that rewrite a reply (`initializeWithout`, `cursorLoop`): an `initialize`
 * result loses fields, a `tools/list` page's `nextCursor` names its own first tool. Other
 * replies, and text that is not JSON (the firmware's unescaped errors), go out unchanged.
 */
export function rewriteReply(
  payload: string,
  faults: Pick<FaultKnobs, 'initializeWithout' | 'cursorLoop'>,
): string {
  if (faults.initializeWithout.length === 0 && !faults.cursorLoop) return payload;
  let reply: unknown;
  try {
    reply = JSON.parse(payload);
  } catch {
    return payload;
  }
  const result = (reply as { result?: unknown } | null)?.result;
  if (typeof result !== 'object' || result === null || Array.isArray(result)) return payload;
  const fields = result as Record<string, unknown>;
  if (faults.initializeWithout.length > 0 && 'serverInfo' in fields && 'protocolVersion' in fields)
    return JSON.stringify({
      ...(reply as object),
      result: withoutFields(fields, faults.initializeWithout),
    });
  const first = Array.isArray(fields.tools)
    ? (fields.tools[0] as { name?: unknown } | undefined)
    : undefined;
  if (faults.cursorLoop && typeof first?.name === 'string')
    return JSON.stringify({ ...(reply as object), result: { ...fields, nextCursor: first.name } });
  return payload;
}

/** A hello whose parts are frozen too: one copy serves every board of a fleet. */
export function frozenHello(hello: DeviceHello): DeviceHello {
  for (const part of Object.values(hello))
    if (typeof part === 'object' && part !== null) Object.freeze(part);
  return Object.freeze(hello);
}

// The firmware's hellos are constants of its build: made once, not at every session.
const WEBSOCKET_HELLOS = new Map<AudioFrameVersion, DeviceHello>();
/** The MQTT build's hello: transport before features, features without glyph_push. */
let mqttHello: DeviceHello | undefined;

/** The WebSocket build's hello for a protocol version. */
function websocketHello(version: AudioFrameVersion): DeviceHello {
  let hello = WEBSOCKET_HELLOS.get(version);
  if (hello === undefined) {
    hello = frozenHello(buildDeviceHello({ transport: 'websocket', version }));
    WEBSOCKET_HELLOS.set(version, hello);
  }
  return hello;
}

function udpHello(): DeviceHello {
  mqttHello ??= frozenHello(buildDeviceHello({ transport: 'udp', features: { mcp: true } }));
  return mqttHello;
}

/**
 * The hello a session sends: the recorded one when it is for this transport (and, on
 * WebSocket, this protocol version, which the server's OTA reply chose), else the build's.
 */
function sessionHello(recorded: DeviceHello | undefined, built: DeviceHello): DeviceHello {
  if (recorded === undefined || recorded.transport !== built.transport) return built;
  return built.transport !== 'websocket' || recorded.version === built.version ? recorded : built;
}

/** The audio framing the stored `websocket/version` selects: 2 and 3 as stored, else 1. */
export function audioVersion(stored: number): AudioFrameVersion {
  return stored === 2 || stored === 3 ? stored : 1;
}

/** What the session needs from the board. */
export interface SessionHost {
  readonly console: BoardConsole;
  readonly storage: NvsStorage;
  readonly timing: BoardTiming;
  readonly faults: FaultKnobs;
  readonly mac: string;
  /** The preset's recorded hello (a replica's), sent when it fits the session. */
  readonly hello: DeviceHello | undefined;
  /** Send a close frame when closing (the firmware does not). */
  readonly closeFrame: boolean;
  uuid(): string;
  /** An OTA check succeeded this boot: the protocol is initialised. */
  otaChecked(): boolean;
  state(): DeviceState;
  setState(state: DeviceState): void;
  mcp(): McpServer;
  panic(panic: BoardPanic): void;
  /** The server hello was accepted. */
  opened(sessionId: string): void;
  reboot(): void;
  /** The MQTT connection came up or dropped. */
  mqtt(connected: boolean): void;
  /** An MQTT + UDP audio session ended. */
  uplinkEnded(stats: UplinkSessionStats): void;
}

/** Where replies go: the open WebSocket channel, or MQTT. */
interface TextLink {
  readonly sessionId: string;
  sendText(text: string): boolean;
}

/** The MQTT audio session being streamed. */
interface AudioSession {
  readonly sessionId: string;
  readonly sender: UdpAudioSender;
  readonly cancel: () => void;
}

export class Session {
  readonly #host: SessionHost;
  /** The firmware regressions the board is built with (`faults.regressions`). */
  readonly #regressions: RegressionPlant;
  #channel: WebsocketChannel | undefined;
  /** Set once the board runs MQTT (this boot); then every exchange goes through it. */
  #mqtt: MqttChannel | undefined;
  #audio: AudioSession | undefined;
  #uplink: UplinkStats = { sessions: 0, packets: 0, bytes: 0, last: undefined };
  #sendChain: Promise<void> = Promise.resolve();

  constructor(host: SessionHost) {
    this.#host = host;
    this.#regressions = new RegressionPlant({
      regressions: () => host.faults.regressions,
      tools: () => host.mcp().tools,
    });
  }

  /** The open channel's session id (over MQTT: the open audio session's). */
  get sessionId(): string | undefined {
    if (this.#mqtt !== undefined) return this.#audio?.sessionId;
    return this.#channel?.isOpen ? this.#channel.sessionId : undefined;
  }

  /** True while the board's MQTT connection is up. */
  get mqttConnected(): boolean {
    return this.#mqtt?.connected ?? false;
  }

  /** What the board sent over UDP: sessions ended and the one open. */
  get uplink(): UplinkStats {
    const audio = this.#audio;
    if (audio === undefined) return this.#uplink;
    const last = this.#audioStats(audio);
    return {
      sessions: this.#uplink.sessions,
      packets: this.#uplink.packets + last.packets,
      bytes: this.#uplink.bytes + last.bytes,
      last,
    };
  }

  /**
   * `MqttProtocol::Start`, after the OTA check when NVS holds an MQTT endpoint: connects with
   * the stored settings and stays connected, reconnecting after a drop while idle.
   */
  async startMqtt(): Promise<void> {
    const host = this.#host;
    this.#mqtt?.stop();
    const channel = new MqttChannel({
      settings: () => readMqttSettings(host.storage),
      console: host.console,
      reconnectMs: host.timing.mqttReconnectMs,
      connectTimeoutMs: host.timing.mqttConnectTimeoutMs,
      helloTimeoutMs: host.timing.helloTimeoutMs,
      mayReconnect: () => host.state() === 'idle',
    });
    this.#mqtt = channel;
    channel.on('json', (frame) => this.#onFrame(frame));
    channel.on('panic', (panic) => host.panic(panic));
    channel.on('connected', () => host.mqtt(true));
    channel.on('disconnected', () => {
      host.mqtt(false);
      this.#audioClosed(channel);
    });
    channel.on('goodbye', () =>
      host.mcp().loop.schedule(() => this.#mqtt === channel && channel.closeAudioChannel()),
    );
    channel.on('audio-closed', () => this.#audioClosed(channel));
    await channel.start();
  }

  /** Opens the WebSocket session with the stored settings (`OpenAudioChannel`), or over MQTT. */
  async open(): Promise<void> {
    const host = this.#host;
    if (this.#mqtt !== undefined) return this.#openMqtt(this.#mqtt);
    const settings = host.storage.open('websocket');
    const url = settings.getString('url');
    if (!host.otaChecked() || url === '') {
      host.console.log('E', 'Application', 'Protocol not initialized');
      return;
    }
    host.setState('connecting');
    const version = audioVersion(settings.getInt('version'));
    const channel = new WebsocketChannel({
      url,
      token: settings.getString('token'),
      version,
      deviceId: host.mac,
      clientId: host.uuid(),
      hello: withoutFields(
        this.#regressions.hello(sessionHello(host.hello, websocketHello(version))),
        host.faults.helloWithout,
      ),
      console: host.console,
      helloTimeoutMs: host.timing.helloTimeoutMs,
      idleTimeoutMs: host.timing.channelIdleMs,
      closeFrame: host.closeFrame,
    });
    this.#channel = channel;
    channel.on('json', (frame) => this.#onFrame(frame));
    channel.on('panic', (panic) => host.panic(panic));
    channel.on('closed', () => {
      if (this.#channel !== channel) return;
      this.#channel = undefined;
      host.mcp().loop.schedule(() => {
        const state = host.state();
        if (state === 'listening' || state === 'speaking' || state === 'connecting')
          host.setState('idle');
      });
    });
    try {
      await channel.open();
    } catch (error) {
      if (this.#channel === channel) this.#channel = undefined;
      if (error instanceof BoardPanic) return;
      host.console.log('E', 'Application', `Alert: ${(error as Error).message}`);
      if (host.state() === 'connecting') host.setState('idle');
      return;
    }
    if (this.#channel !== channel) return;
    if (host.faults.crashOnHello) {
      host.panic(
        new BoardPanic(
          'load-prohibited',
          'WebsocketProtocol::ParseServerHello read a hello without a string transport (fault knob)',
        ),
      );
      return;
    }
    host.opened(channel.sessionId);
    host.setState('listening');
    channel.sendText(
      encodeDeviceMessage({
        type: 'listen',
        session_id: channel.sessionId,
        state: 'start',
        mode: 'auto',
      }),
    );
  }

  /** Closes the channel the firmware's way; the board goes idle once it is closed. */
  close(reason: string): void {
    if (this.#mqtt !== undefined) {
      // `CloseAudioChannel`: goodbye on MQTT; the MQTT connection stays.
      if (this.#mqtt.audioOpen) this.#mqtt.closeAudioChannel();
      return;
    }
    this.#channel?.close(reason);
  }

  /** Drops the connection as a network failure would (the `disconnectOnCall` fault). */
  disconnect(reason: string): void {
    if (this.#mqtt !== undefined) this.#mqtt.dropConnection();
    else this.close(reason);
  }

  /** Closes the channel and forgets it at once (power off, reset, reboot, panic). */
  drop(reason: string): void {
    this.#channel?.close(reason);
    this.#channel = undefined;
    const mqtt = this.#mqtt;
    this.#mqtt = undefined;
    mqtt?.stop();
    this.#endAudio();
  }

  /** Sends `abort` on the open channel (a click while speaking). */
  abortSpeaking(): void {
    const link = this.#link();
    link?.sendText(encodeDeviceMessage({ type: 'abort', session_id: link.sessionId }));
  }

  /** The reply path: the regressions, the fault knobs, then the envelope on the open channel. */
  send(reply: string): void {
    const { faults } = this.#host;
    let payload = reply;
    let delayMs = 0;
    // The regressions first: they stand for what the firmware itself sends.
    if (!this.#regressions.idle) {
      const regressed = this.#regressions.reply(reply);
      if (regressed === undefined) return;
      ({ payload, delayMs } = regressed);
    }
    if (faults.dropReply?.(payload) === true) return;
    const channel = this.#link();
    if (channel === undefined) return;
    const text = rewriteReply(payload, faults);
    const latency = faults.replyLatencyMs + delayMs;
    // Over MQTT the session id is the last audio session's, or "" (docs/protocol.md §5).
    if (latency <= 0) {
      channel.sendText(encodeDeviceEnvelope(channel.sessionId, text));
      return;
    }
    this.#sendChain = this.#sendChain
      .then(() => sleep(latency))
      .then(
        () => {
          channel.sendText(encodeDeviceEnvelope(channel.sessionId, text));
        },
        () => {},
      );
  }

  #link(): TextLink | undefined {
    return this.#mqtt ?? this.#channel;
  }

  /**
   * An audio session over MQTT + UDP: the hello with transport `udp`, the server's hello, then
   * listening with the uplink streaming; once its frames are out the board stops listening
   * and says goodbye.
   */
  async #openMqtt(channel: MqttChannel): Promise<void> {
    const host = this.#host;
    host.setState('connecting');
    const hello = withoutFields(
      this.#regressions.hello(sessionHello(host.hello, udpHello())),
      host.faults.helloWithout,
    );
    try {
      await channel.openAudioChannel(hello);
    } catch (error) {
      if (this.#mqtt !== channel) return;
      if (error instanceof BoardPanic) {
        host.panic(error);
        return;
      }
      host.console.log('E', 'Application', `Alert: ${(error as Error).message}`);
      if (host.state() === 'connecting') host.setState('idle');
      return;
    }
    const sender = channel.udp;
    if (this.#mqtt !== channel || sender === undefined) return;
    if (host.faults.crashOnHello) {
      host.panic(
        new BoardPanic(
          'load-prohibited',
          'MqttProtocol::ParseServerHello read a hello without a string transport (fault knob)',
        ),
      );
      return;
    }
    const sessionId = channel.sessionId;
    const cancel = startUplink({
      frames: host.timing.uplinkFrames,
      frameMs: host.timing.uplinkFrameMs,
      open: () => this.#mqtt === channel && channel.udp === sender,
      listening: () => host.state() === 'listening',
      send: (frame, timestamp) => channel.sendAudio(frame, timestamp),
      done: () =>
        host.mcp().loop.schedule(() => {
          if (this.#mqtt !== channel || channel.udp !== sender) return;
          channel.sendText(
            encodeDeviceMessage({ type: 'listen', session_id: sessionId, state: 'stop' }),
          );
          channel.closeAudioChannel();
        }),
    });
    this.#audio = { sessionId, sender, cancel };
    this.#uplink = { ...this.#uplink, sessions: this.#uplink.sessions + 1 };
    host.opened(sessionId);
    host.setState('listening');
    channel.sendText(
      encodeDeviceMessage({ type: 'listen', session_id: sessionId, state: 'start', mode: 'auto' }),
    );
  }

  /** The MQTT audio channel closed (goodbye either way, or MQTT dropped): back to idle. */
  #audioClosed(channel: MqttChannel): void {
    if (this.#mqtt !== channel) return;
    this.#endAudio();
    const host = this.#host;
    host.mcp().loop.schedule(() => {
      const state = host.state();
      if (state === 'listening' || state === 'speaking') host.setState('idle');
    });
  }

  #audioStats(audio: AudioSession): UplinkSessionStats {
    return { sessionId: audio.sessionId, packets: audio.sender.packets, bytes: audio.sender.bytes };
  }

  /** Ends the streamed audio session, if any: its counts join the totals. */
  #endAudio(): void {
    const audio = this.#audio;
    if (audio === undefined) return;
    this.#audio = undefined;
    audio.cancel();
    const last = this.#audioStats(audio);
    this.#uplink = {
      sessions: this.#uplink.sessions,
      packets: this.#uplink.packets + last.packets,
      bytes: this.#uplink.bytes + last.bytes,
      last,
    };
    this.#host.uplinkEnded(last);
  }

  #onFrame(frame: BackendFrame): void {
    // MCP frames are nearly all the traffic: handled without building their action first.
    if (frame.type === 'mcp') {
      if (frame.payload !== undefined) this.#mcp(frame.payload);
      return;
    }
    this.#apply(otherAction(frame));
  }

  #mcp(payload: CJsonNode): void {
    const server = this.#host.mcp();
    if (this.#regressions.idle) {
      server.handlePayload(payload);
      return;
    }
    const request = this.#regressions.request(payload);
    if ('reply' in request) server.loop.schedule(() => this.send(request.reply));
    else server.handlePayload(request.payload);
  }

  #apply(action: OtherAction): void {
    const host = this.#host;
    const loop = host.mcp().loop;
    switch (action.kind) {
      case 'speak':
        loop.schedule(() => host.setState('speaking'));
        return;
      case 'listen':
        loop.schedule(() => host.state() === 'speaking' && host.setState('listening'));
        return;
      case 'reboot':
        loop.schedule(() => host.reboot());
        return;
      case 'log':
        host.console.log(action.level, 'Application', action.text);
        return;
      case 'none':
        return;
    }
  }
}
