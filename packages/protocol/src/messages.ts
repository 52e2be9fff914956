/**
 * Transport messages (docs/protocol.md §4-§6): the JSON text frames around MCP and audio.
 *
 * Parsers are strict where the firmware crashes or silently misbehaves (a server hello
 * without a string `transport`, a `tts` without `state`), and return objects that hold
 * only the known fields, in the firmware's key order, so encoding is `JSON.stringify`.
 * Encoders validate too: an invalid message never reaches the wire.
 */
import { ProtocolError } from './errors.js';

export type JsonObject = Record<string, unknown>;

/** `Protocol-Version` of the board; also the binary audio framing version. */
export type ProtocolVersion = 1 | 2 | 3;
export type HelloTransport = 'websocket' | 'udp';
export type ListenState = 'start' | 'stop' | 'detect';
export type ListenMode = 'auto' | 'manual' | 'realtime';
export type TtsState = 'start' | 'stop' | 'sentence_start';

export const TRANSPORT_MESSAGE_TYPES = [
  'hello',
  'mcp',
  'listen',
  'tts',
  'stt',
  'llm',
  'abort',
  'system',
  'alert',
  'goodbye',
  'custom',
] as const;
export type TransportMessageType = (typeof TRANSPORT_MESSAGE_TYPES)[number];

/** What the firmware sends (docs/protocol.md §4-§6). */
export const DEVICE_MESSAGE_TYPES = ['hello', 'listen', 'abort', 'mcp', 'goodbye'] as const;
export type DeviceMessageType = (typeof DEVICE_MESSAGE_TYPES)[number];

/** What the firmware acts on; anything else it logs as unknown. */
export const SERVER_MESSAGE_TYPES = [
  'hello',
  'mcp',
  'tts',
  'stt',
  'llm',
  'system',
  'alert',
  'goodbye',
  'custom',
] as const;
export type ServerMessageType = (typeof SERVER_MESSAGE_TYPES)[number];

export const HELLO_TRANSPORTS: readonly HelloTransport[] = ['websocket', 'udp'];
export const PROTOCOL_VERSIONS: readonly ProtocolVersion[] = [1, 2, 3];
export const LISTEN_STATES: readonly ListenState[] = ['start', 'stop', 'detect'];
export const LISTEN_MODES: readonly ListenMode[] = ['auto', 'manual', 'realtime'];
export const TTS_STATES: readonly TtsState[] = ['start', 'stop', 'sentence_start'];

// ---------------------------------------------------------------------------
// Types

/** Device capabilities. Unknown features are kept, after the known ones. */
export interface DeviceFeatures {
  readonly aec?: boolean;
  readonly mcp?: boolean;
  readonly glyph_push?: boolean;
  readonly [feature: string]: unknown;
}

export interface DeviceAudioParams {
  readonly format: string;
  readonly sample_rate: number;
  readonly channels: number;
  readonly frame_duration: number;
}

/** The device's hello. It has no `session_id`; old firmware sends no `features`. */
export interface DeviceHello {
  readonly type: 'hello';
  readonly version: ProtocolVersion;
  readonly features?: DeviceFeatures | undefined;
  readonly transport: HelloTransport;
  readonly audio_params: DeviceAudioParams;
}

export interface ServerAudioParams {
  readonly format?: string | undefined;
  readonly sample_rate?: number | undefined;
  readonly channels?: number | undefined;
  readonly frame_duration?: number | undefined;
}

/** Where the device sends UDP audio; `key` and `nonce` are 16 bytes as 32 hex chars. */
export interface UdpChannel {
  readonly server: string;
  readonly port: number;
  readonly key: string;
  readonly nonce: string;
}

export interface WebsocketServerHello {
  readonly type: 'hello';
  readonly transport: 'websocket';
  readonly session_id?: string | undefined;
  readonly audio_params?: ServerAudioParams | undefined;
}

export interface UdpServerHello {
  readonly type: 'hello';
  readonly transport: 'udp';
  readonly session_id: string;
  readonly audio_params?: ServerAudioParams | undefined;
  readonly udp: UdpChannel;
}

export type ServerHello = WebsocketServerHello | UdpServerHello;

/** `session_id` is optional here because the server may omit it; device-sent copies carry it. */
export interface McpMessage {
  readonly session_id?: string;
  readonly type: 'mcp';
  readonly payload: JsonObject;
}

export interface ListenMessage {
  readonly session_id: string;
  readonly type: 'listen';
  readonly state: ListenState;
  readonly mode?: ListenMode | undefined;
  /** The wake word, with state `detect`. */
  readonly text?: string;
}

export interface AbortMessage {
  readonly session_id: string;
  readonly type: 'abort';
  /** e.g. `wake_word_detected`; absent for a button abort. */
  readonly reason?: string;
}

export interface GoodbyeMessage {
  readonly session_id?: string;
  readonly type: 'goodbye';
}

export interface TtsMessage {
  readonly session_id?: string;
  readonly type: 'tts';
  readonly state: TtsState;
  readonly text?: string;
}

export interface SttMessage {
  readonly session_id?: string;
  readonly type: 'stt';
  readonly text: string;
}

export interface LlmMessage {
  readonly session_id?: string;
  readonly type: 'llm';
  readonly emotion: string;
  readonly text?: string;
}

export interface SystemMessage {
  readonly session_id?: string;
  readonly type: 'system';
  /** Only `reboot` does anything on the firmware. */
  readonly command: string;
}

export interface AlertMessage {
  readonly session_id?: string;
  readonly type: 'alert';
  readonly status: string;
  readonly message: string;
  readonly emotion: string;
}

/** Shown as text on builds with CONFIG_RECEIVE_CUSTOM_MESSAGE; the device never sends one. */
export interface CustomMessage {
  readonly session_id?: string;
  readonly type: 'custom';
  readonly payload: JsonObject;
}

/** A server message of a type the device does not handle (it only logs it). */
export interface UnknownServerMessage {
  readonly type: 'unknown';
  /** The `type` as received. */
  readonly rawType: string;
  /** The whole message as received. */
  readonly raw: JsonObject;
}

export type WithSessionId<T> = T & { readonly session_id: string };

/** Device → server. Everything but the hello carries `session_id` (possibly ""). */
export type DeviceMessage =
  | DeviceHello
  | ListenMessage
  | AbortMessage
  | WithSessionId<McpMessage>
  | WithSessionId<GoodbyeMessage>;

/** Server → device. */
export type ServerMessage =
  | ServerHello
  | McpMessage
  | TtsMessage
  | SttMessage
  | LlmMessage
  | SystemMessage
  | AlertMessage
  | GoodbyeMessage
  | CustomMessage
  | UnknownServerMessage;

// ---------------------------------------------------------------------------
// Validators shared by every message. `Where` names the message (for the text) and the
// dotted path of the object being read (for `field`).

interface Where {
  readonly context: string;
  readonly prefix: string;
}

const at = (context: string): Where => ({ context, prefix: '' });
const inside = (where: Where, key: string): Where => ({
  context: where.context,
  prefix: `${where.prefix}${key}.`,
});

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (value === undefined || value === null) return String(value);
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return 'an object';
  if (typeof value === 'string') {
    return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}...` : value);
  }
  return String(value);
}

function fail(where: Where, key: string, expected: string, got: string): never {
  const field = `${where.prefix}${key}`;
  const message = `${where.context}: ${field} must be ${expected}, got ${got}`;
  throw new ProtocolError('INVALID_MESSAGE', message, { field });
}

type Check<T> = (obj: JsonObject, key: string, where: Where) => T;

/** Absent (undefined) is fine; anything else, including null, must pass `check`. */
function optional<T>(obj: JsonObject, key: string, where: Where, check: Check<T>): T | undefined {
  return obj[key] === undefined ? undefined : check(obj, key, where);
}

function expectString(obj: JsonObject, key: string, where: Where): string {
  const value = obj[key];
  if (typeof value !== 'string') fail(where, key, 'a string', describe(value));
  return value;
}

function expectNonEmptyString(obj: JsonObject, key: string, where: Where): string {
  const value = obj[key];
  if (typeof value !== 'string' || value === '') {
    fail(where, key, 'a non-empty string', describe(value));
  }
  return value;
}

function expectBoolean(obj: JsonObject, key: string, where: Where): boolean {
  const value = obj[key];
  if (typeof value !== 'boolean') fail(where, key, 'a boolean', describe(value));
  return value;
}

function expectInt(obj: JsonObject, key: string, where: Where, min: number, max: number): number {
  const value = obj[key];
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    const expected =
      min === 1 && max === Number.MAX_SAFE_INTEGER
        ? 'a positive integer'
        : `an integer from ${min} to ${max}`;
    fail(where, key, expected, describe(value));
  }
  return value;
}

function expectPositiveInt(obj: JsonObject, key: string, where: Where): number {
  return expectInt(obj, key, where, 1, Number.MAX_SAFE_INTEGER);
}

function expectOneOf<T extends string | number>(
  obj: JsonObject,
  key: string,
  where: Where,
  values: readonly T[],
  expected = `one of ${values.map((v) => JSON.stringify(v)).join(', ')}`,
): T {
  const value = obj[key];
  const found = values.find((v) => v === value);
  if (found === undefined) fail(where, key, expected, describe(value));
  return found;
}

function expectObject(obj: JsonObject, key: string, where: Where): JsonObject {
  const value = obj[key];
  if (!isObject(value)) fail(where, key, 'a JSON object', describe(value));
  return value;
}

/** Key material: the value itself stays out of the error text. */
function expectHex32(obj: JsonObject, key: string, where: Where): string {
  const value = obj[key];
  if (typeof value !== 'string' || !/^[0-9a-fA-F]{32}$/.test(value)) {
    const got =
      typeof value === 'string' ? `a string of ${value.length} characters` : describe(value);
    fail(where, key, '32 hex characters (16 bytes)', got);
  }
  return value;
}

/** Copies `fields` without the undefined ones, keeping their order. */
function compact<T extends object>(fields: T): T {
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(fields)) {
    if (value !== undefined) out[key] = value;
  }
  return out as T;
}

function toObject(input: unknown): JsonObject {
  let value = input;
  if (typeof input === 'string') {
    try {
      value = JSON.parse(input);
    } catch (cause) {
      throw new ProtocolError('INVALID_JSON', 'transport message is not valid JSON', { cause });
    }
  }
  if (!isObject(value)) {
    throw new ProtocolError(
      'INVALID_MESSAGE',
      `transport message must be a JSON object, got ${describe(value)}`,
    );
  }
  return value;
}

/**
 * `JSON.stringify` of a checked message. A received `payload` or feature can hold what JSON
 * cannot write back (nested thousands deep): that is `INVALID_MESSAGE`, not a RangeError.
 */
function stringifyMessage(message: object): string {
  try {
    return JSON.stringify(message);
  } catch (cause) {
    const type = (message as JsonObject).type;
    const name = typeof type === 'string' ? type : 'message';
    throw new ProtocolError('INVALID_MESSAGE', `${name}: cannot be written as JSON`, { cause });
  }
}

function messageType(obj: JsonObject): string {
  return expectString(obj, 'type', at('message'));
}

// ---------------------------------------------------------------------------
// Hello

const KNOWN_FEATURES = ['aec', 'mcp', 'glyph_push'] as const;

function readFeatures(obj: JsonObject, key: string, where: Where): DeviceFeatures {
  const features = expectObject(obj, key, where);
  const inner = inside(where, key);
  // Firmware order: aec (server-AEC builds), mcp, then glyph_push appended later.
  const out: Record<string, unknown> = {};
  for (const name of KNOWN_FEATURES) {
    const value = optional(features, name, inner, expectBoolean);
    if (value !== undefined) out[name] = value;
  }
  for (const [name, value] of Object.entries(features)) {
    if (!(KNOWN_FEATURES as readonly string[]).includes(name) && value !== undefined) {
      // defineProperty: a "__proto__" key from the wire stays data, not a prototype.
      Object.defineProperty(out, name, {
        value,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
  }
  return out;
}

function readDeviceAudioParams(obj: JsonObject, key: string, where: Where): DeviceAudioParams {
  const params = expectObject(obj, key, where);
  const inner = inside(where, key);
  return {
    format: expectString(params, 'format', inner),
    sample_rate: expectPositiveInt(params, 'sample_rate', inner),
    channels: expectPositiveInt(params, 'channels', inner),
    frame_duration: expectPositiveInt(params, 'frame_duration', inner),
  };
}

function readServerAudioParams(obj: JsonObject, key: string, where: Where): ServerAudioParams {
  const params = expectObject(obj, key, where);
  const inner = inside(where, key);
  return compact({
    format: optional(params, 'format', inner, expectString),
    sample_rate: optional(params, 'sample_rate', inner, expectPositiveInt),
    channels: optional(params, 'channels', inner, expectPositiveInt),
    frame_duration: optional(params, 'frame_duration', inner, expectPositiveInt),
  });
}

function readUdpChannel(obj: JsonObject, key: string, where: Where): UdpChannel {
  const udp = expectObject(obj, key, where);
  const inner = inside(where, key);
  return {
    server: expectNonEmptyString(udp, 'server', inner),
    port: expectInt(udp, 'port', inner, 1, 65535),
    key: expectHex32(udp, 'key', inner),
    nonce: expectHex32(udp, 'nonce', inner),
  };
}

const TRANSPORT_EXPECTED = 'a string ("websocket" or "udp")';

function normalizeDeviceHello(obj: JsonObject): DeviceHello {
  const where = at('hello');
  expectOneOf(obj, 'type', where, ['hello']);
  const version = expectOneOf(obj, 'version', where, PROTOCOL_VERSIONS);
  const features = optional(obj, 'features', where, readFeatures);
  const transport = expectOneOf(obj, 'transport', where, HELLO_TRANSPORTS, TRANSPORT_EXPECTED);
  const audio_params = readDeviceAudioParams(obj, 'audio_params', where);
  // The MQTT build writes transport before features (docs/protocol.md §5), the WebSocket one after.
  return transport === 'udp'
    ? compact({ type: 'hello', version, transport, features, audio_params })
    : compact({ type: 'hello', version, features, transport, audio_params });
}

function normalizeServerHello(obj: JsonObject): ServerHello {
  const where = at('hello');
  expectOneOf(obj, 'type', where, ['hello']);
  // A non-string transport is a null dereference on the board; check it first.
  const transport = expectOneOf(obj, 'transport', where, HELLO_TRANSPORTS, TRANSPORT_EXPECTED);
  if (transport === 'udp') {
    return compact({
      type: 'hello',
      transport,
      session_id: expectString(obj, 'session_id', where),
      audio_params: optional(obj, 'audio_params', where, readServerAudioParams),
      udp: readUdpChannel(obj, 'udp', where),
    });
  }
  return compact({
    type: 'hello',
    transport,
    session_id: optional(obj, 'session_id', where, expectString),
    audio_params: optional(obj, 'audio_params', where, readServerAudioParams),
  });
}

/** Parses and validates the device's hello (text or an already parsed value). */
export function parseDeviceHello(input: unknown): DeviceHello {
  return normalizeDeviceHello(toObject(input));
}

/** Parses and validates a server hello; rejects one without a string `transport`. */
export function parseServerHello(input: unknown): ServerHello {
  return normalizeServerHello(toObject(input));
}

export interface DeviceHelloOptions {
  /** Default `websocket`. */
  readonly transport?: HelloTransport;
  /** Default 1 for WebSocket, 3 for UDP (the MQTT build always sends 3). */
  readonly version?: ProtocolVersion;
  /** Replaces the default `{mcp: true, glyph_push: false}` as a whole. */
  readonly features?: DeviceFeatures;
  /** Merged over `{format: 'opus', sample_rate: 16000, channels: 1, frame_duration: 60}`. */
  readonly audioParams?: Partial<DeviceAudioParams>;
}

export const DEFAULT_DEVICE_AUDIO_PARAMS: DeviceAudioParams = {
  format: 'opus',
  sample_rate: 16000,
  channels: 1,
  frame_duration: 60,
};

/** The hello a board sends, in the firmware's key order; throws on invalid options. */
export function buildDeviceHello(options: DeviceHelloOptions = {}): DeviceHello {
  const transport = options.transport ?? 'websocket';
  return normalizeDeviceHello({
    type: 'hello',
    version: options.version ?? (transport === 'udp' ? 3 : 1),
    features: options.features ?? { mcp: true, glyph_push: false },
    transport,
    audio_params: { ...DEFAULT_DEVICE_AUDIO_PARAMS, ...compact(options.audioParams ?? {}) },
  });
}

export interface WebsocketServerHelloOptions {
  readonly transport: 'websocket';
  readonly sessionId?: string;
  readonly audioParams?: ServerAudioParams;
}

export interface UdpServerHelloOptions {
  readonly transport: 'udp';
  readonly sessionId: string;
  readonly audioParams?: ServerAudioParams;
  readonly udp: UdpChannel;
}

/** `transport` is required: a hello without it crashes the board. */
export type ServerHelloOptions = WebsocketServerHelloOptions | UdpServerHelloOptions;

/**
 * The backend's hello. The types require `transport`; the runtime check catches JS
 * callers and casts, so no board is ever sent a hello it would crash on.
 */
export function buildServerHello(options: ServerHelloOptions): ServerHello {
  const o: JsonObject = isObject(options) ? options : {};
  return normalizeServerHello({
    type: 'hello',
    transport: o.transport,
    session_id: o.sessionId,
    audio_params: o.audioParams,
    udp: o.transport === 'udp' ? o.udp : undefined,
  });
}

// ---------------------------------------------------------------------------
// Other messages

/** Reads the fields after `type`; `session_id` is handled by the caller. */
type BodyReader = (obj: JsonObject, where: Where) => JsonObject;

const BODY_READERS = {
  mcp: (obj, where) => ({ payload: expectObject(obj, 'payload', where) }),
  listen: (obj, where) => ({
    state: expectOneOf(obj, 'state', where, LISTEN_STATES),
    mode: optional(obj, 'mode', where, (o, k, w) => expectOneOf(o, k, w, LISTEN_MODES)),
    text: optional(obj, 'text', where, expectString),
  }),
  abort: (obj, where) => ({ reason: optional(obj, 'reason', where, expectString) }),
  goodbye: () => ({}),
  tts: (obj, where) => ({
    state: expectOneOf(obj, 'state', where, TTS_STATES),
    text: optional(obj, 'text', where, expectString),
  }),
  stt: (obj, where) => ({ text: expectString(obj, 'text', where) }),
  llm: (obj, where) => ({
    emotion: expectString(obj, 'emotion', where),
    text: optional(obj, 'text', where, expectString),
  }),
  system: (obj, where) => ({ command: expectString(obj, 'command', where) }),
  alert: (obj, where) => ({
    status: expectString(obj, 'status', where),
    message: expectString(obj, 'message', where),
    emotion: expectString(obj, 'emotion', where),
  }),
  custom: (obj, where) => ({ payload: expectObject(obj, 'payload', where) }),
} satisfies Record<Exclude<TransportMessageType, 'hello'>, BodyReader>;

function includes<T extends string>(list: readonly T[], value: string): value is T {
  return (list as readonly string[]).includes(value);
}

function normalizeDeviceMessage(obj: JsonObject): DeviceMessage {
  const type = messageType(obj);
  if (!includes(DEVICE_MESSAGE_TYPES, type)) {
    fail(
      at('message'),
      'type',
      `a device message type (${DEVICE_MESSAGE_TYPES.join(', ')})`,
      describe(type),
    );
  }
  if (type === 'hello') return normalizeDeviceHello(obj);
  const where = at(type);
  // The firmware concatenates `{"session_id":"...","type":...` so session_id always leads.
  const session_id = expectString(obj, 'session_id', where);
  return compact({ session_id, type, ...BODY_READERS[type](obj, where) }) as DeviceMessage;
}

function normalizeServerMessage(obj: JsonObject): ServerMessage {
  const type = messageType(obj);
  if (!includes(SERVER_MESSAGE_TYPES, type)) return { type: 'unknown', rawType: type, raw: obj };
  if (type === 'hello') return normalizeServerHello(obj);
  const where = at(type);
  const session_id = optional(obj, 'session_id', where, expectString);
  return compact({ session_id, type, ...BODY_READERS[type](obj, where) }) as ServerMessage;
}

/**
 * Parses a device → server text frame. Types the firmware never sends are rejected.
 * An MCP error reply from the firmware may be invalid JSON (docs/protocol.md §2); that frame
 * throws INVALID_JSON here and needs the tolerant reader in `jsonrpc.ts`.
 */
export function parseDeviceMessage(input: unknown): DeviceMessage {
  return normalizeDeviceMessage(toObject(input));
}

/**
 * Parses a server → device text frame. A type the firmware does not handle becomes
 * {@link UnknownServerMessage} (the board logs and ignores it); a missing `type` throws.
 */
export function parseServerMessage(input: unknown): ServerMessage {
  return normalizeServerMessage(toObject(input));
}

/** Compact JSON in the firmware's key order; throws INVALID_MESSAGE on an invalid message. */
export function encodeDeviceMessage(message: DeviceMessage): string {
  return stringifyMessage(normalizeDeviceMessage(toObject(message)));
}

/** Compact JSON; an {@link UnknownServerMessage} is sent as its `raw` object. */
export function encodeServerMessage(message: ServerMessage): string {
  const obj = toObject(message);
  // An unknown message goes out as received, unless its raw type is one the board
  // handles: then it is validated like any other (no crashing hello slips through).
  const source = obj.type === 'unknown' && isObject(obj.raw) ? obj.raw : obj;
  const normalized = normalizeServerMessage(source);
  return stringifyMessage(normalized.type === 'unknown' ? normalized.raw : normalized);
}
