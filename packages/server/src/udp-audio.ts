/**
 * The UDP side of an MQTT audio session (docs/protocol.md §5). A board on MQTT asks for audio
 * with a hello; the answer names this endpoint with a fresh AES-128 key and a 16-byte nonce.
 * The board then sends one datagram per Opus packet: a 16-byte header that is also the
 * AES-128-CTR IV, then the encrypted payload. We decrypt with `node:crypto` and count, per
 * session, packets, payload bytes, missing sequence numbers and late packets.
 *
 * Anyone can send datagrams here, so the handler never throws, keeps no state for a datagram
 * it cannot place, and holds at most `maxSessions` open and `maxClosedSessions` closed sessions.
 */
import { createDecipheriv, randomBytes, randomUUID } from 'node:crypto';
import dgram from 'node:dgram';
import { isIPv6 } from 'node:net';
import {
  type ApiAudioSession,
  buildServerHello,
  type DeviceHello,
  decodeUdpAudioHeader,
  type ServerAudioParams,
  type UdpAudioHeader,
  type UdpChannel,
  type UdpServerHello,
} from '@xiaozhi-mcp/protocol';
import { ServerError } from './errors.js';

/** Header bytes before the encrypted payload (`u8 type, u8 flags, u16 len, u32 ssrc, u32 ts, u32 seq`). */
const HEADER_BYTES = 16;
/** Where the ssrc sits in the header (and in the nonce we hand out). */
const SSRC_OFFSET = 4;
/** The packet type byte of an audio packet (xiaozhi-esp32 mqtt_protocol.cc drops any other). */
const PACKET_TYPE = 0x01;

/**
 * Longest datagram accepted. The board sends one Opus packet per datagram
 * (mqtt_protocol.cc SendAudio); one Opus frame is at most 1275 bytes plus a 1-byte TOC
 * (RFC 6716 §3.2.1, §3.2.2), so a board's packet is at most 16 + 1276 = 1292 bytes, under
 * a 1500-byte Ethernet/Wi-Fi MTU. Anything longer did not come from a board.
 */
export const DEFAULT_MAX_DATAGRAM_BYTES = 1500;
export const DEFAULT_MAX_AUDIO_SESSIONS = 1024;
export const DEFAULT_MAX_CLOSED_AUDIO_SESSIONS = 1024;

/** Where the endpoint reports (a pino logger fits). */
export interface UdpAudioLogger {
  info(object: Record<string, unknown>, message: string): void;
  warn(object: Record<string, unknown>, message: string): void;
  error(object: Record<string, unknown>, message: string): void;
}

export interface UdpAudioEndpointOptions {
  /** Address to bind, e.g. `127.0.0.1`; an IPv6 literal binds a udp6 socket. */
  readonly host: string;
  /** 0: chosen by the OS. */
  readonly port: number;
  /** The host boards are told to send to; default the bound host. */
  readonly publicHost?: string;
  /** Most open sessions; opening one more closes the one idle longest. Default 1024. */
  readonly maxSessions?: number;
  /** Most closed sessions whose stats are kept, oldest dropped first. Default 1024. */
  readonly maxClosedSessions?: number;
  /** Longer datagrams are dropped unread. Default {@link DEFAULT_MAX_DATAGRAM_BYTES}. */
  readonly maxDatagramBytes?: number;
  /** Default: silent. */
  readonly log?: UdpAudioLogger;
  /** Source of keys and ssrcs; default `node:crypto` randomBytes. Tests pass literal bytes. */
  readonly random?: (size: number) => Uint8Array;
}

/** One audio session as counted here: what the API serves for it. */
export type AudioSessionStats = ApiAudioSession;

/** Why a datagram was dropped. */
export type UdpAudioRejection = 'oversized' | 'short' | 'type' | 'length' | 'unknown-ssrc';

/** Endpoint-wide counts, including datagrams no session could be named for. */
export interface UdpAudioCounters {
  readonly datagrams: number;
  readonly accepted: number;
  readonly rejected: Readonly<Record<UdpAudioRejection, number>>;
}

/** One decrypted packet, as given to {@link UdpAudioEndpoint.onPacket} listeners. */
export interface UdpAudioPacket {
  readonly deviceId: string;
  readonly sessionId: string;
  readonly sequence: number;
  readonly timestamp: number;
  readonly flags: number;
  /** Sequence at or below the last one seen. */
  readonly late: boolean;
  /** The decrypted Opus payload. */
  readonly payload: Uint8Array;
  readonly remote: { readonly address: string; readonly port: number };
}

export type UdpAudioPacketListener = (packet: UdpAudioPacket) => void;

/** What `open` hands out: the hello's `udp` member. */
export type UdpAudioChannel = UdpChannel;

// ---------------------------------------------------------------------------
// Decisions (no I/O)

/**
 * What a datagram is, before any session state is touched: dropped with a reason (and the
 * ssrc it names, when it is long enough to name one), or a header to look up.
 */
export type DatagramVerdict =
  | { readonly kind: 'reject'; readonly reason: UdpAudioRejection; readonly ssrc?: number }
  | { readonly kind: 'packet'; readonly header: UdpAudioHeader };

export function inspectDatagram(bytes: Uint8Array, maxBytes: number): DatagramVerdict {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const named = (reason: UdpAudioRejection): DatagramVerdict =>
    bytes.length >= SSRC_OFFSET + 4
      ? { kind: 'reject', reason, ssrc: view.getUint32(SSRC_OFFSET) }
      : { kind: 'reject', reason };
  if (bytes.length > maxBytes) return named('oversized');
  if (bytes.length < HEADER_BYTES) return named('short');
  if (view.getUint8(0) !== PACKET_TYPE) return named('type');
  const header = decodeUdpAudioHeader(bytes);
  // The board writes the payload size here (SendAudio); a disagreement is not a board's packet.
  if (header.payloadLength !== bytes.length - HEADER_BYTES) return named('length');
  return { kind: 'packet', header };
}

export interface SequenceState {
  /** Highest sequence seen; 0 before any, like the board's own `remote_sequence_`. */
  last: number;
  first: number | null;
  gaps: number;
  outOfOrder: number;
}

/**
 * Counts one sequence number. The board numbers its packets 1, 2, 3, ... (`++local_sequence_`
 * from 0), so a first packet numbered 3 means 1 and 2 are missing. A number at or below the
 * last is late or repeated: counted, and `last` stays. Returns whether it was late.
 */
export function trackSequence(state: SequenceState, sequence: number): boolean {
  if (sequence <= state.last) {
    state.outOfOrder += 1;
    return true;
  }
  state.gaps += sequence - state.last - 1;
  state.last = sequence;
  state.first ??= sequence;
  return false;
}

// ---------------------------------------------------------------------------
// The endpoint

interface Session {
  readonly deviceId: string;
  readonly sessionId: string;
  readonly ssrc: number;
  readonly key: Buffer;
  readonly openedAt: string;
  readonly sequence: SequenceState;
  packets: number;
  bytes: number;
  rejected: number;
}

const SILENT: UdpAudioLogger = { info() {}, warn() {}, error() {} };

function checkLimit(name: string, value: number | undefined, fallback: number, min: number) {
  const limit = value ?? fallback;
  if (!Number.isSafeInteger(limit) || limit < min) {
    throw new ServerError('CONFIG_INVALID', `${name} must be an integer of at least ${min}`);
  }
  return limit;
}

function snapshot(session: Session, closedAt?: string): AudioSessionStats {
  const { sequence } = session;
  const stats: AudioSessionStats = {
    deviceId: session.deviceId,
    sessionId: session.sessionId,
    ssrc: session.ssrc,
    packets: session.packets,
    bytes: session.bytes,
    gaps: sequence.gaps,
    outOfOrder: sequence.outOfOrder,
    rejected: session.rejected,
    firstSequence: sequence.first,
    lastSequence: sequence.last === 0 ? null : sequence.last,
    open: closedAt === undefined,
    openedAt: session.openedAt,
    ...(closedAt === undefined ? {} : { closedAt }),
  };
  return Object.freeze(stats);
}

export class UdpAudioEndpoint {
  readonly #socket: dgram.Socket;
  readonly #address: { readonly host: string; readonly port: number };
  readonly #publicHost: string;
  readonly #maxSessions: number;
  readonly #maxClosed: number;
  readonly #maxDatagramBytes: number;
  readonly #log: UdpAudioLogger;
  readonly #random: (size: number) => Buffer;
  /** Open sessions by ssrc, least recently active first (re-inserted on every packet). */
  readonly #bySsrc = new Map<number, Session>();
  readonly #bySessionId = new Map<string, Session>();
  /** Closed sessions' final stats, oldest first. */
  readonly #closed = new Map<string, AudioSessionStats>();
  /** Each device's latest session id (open or kept closed). */
  readonly #latest = new Map<string, string>();
  readonly #listeners = new Set<UdpAudioPacketListener>();
  #datagrams = 0;
  #accepted = 0;
  readonly #rejected: Record<UdpAudioRejection, number> = {
    oversized: 0,
    short: 0,
    type: 0,
    length: 0,
    'unknown-ssrc': 0,
  };
  #stopped: Promise<void> | undefined;

  private constructor(
    socket: dgram.Socket,
    options: UdpAudioEndpointOptions,
    limits: { maxSessions: number; maxClosed: number; maxDatagramBytes: number },
  ) {
    this.#socket = socket;
    const bound = socket.address();
    this.#address = Object.freeze({ host: bound.address, port: bound.port });
    this.#publicHost = options.publicHost ?? bound.address;
    this.#maxSessions = limits.maxSessions;
    this.#maxClosed = limits.maxClosed;
    this.#maxDatagramBytes = limits.maxDatagramBytes;
    this.#log = options.log ?? SILENT;
    const random = options.random ?? randomBytes;
    this.#random = (size) => {
      const bytes = Buffer.from(random(size));
      if (bytes.length !== size)
        throw new RangeError(`random gave ${bytes.length} bytes, not ${size}`);
      return bytes;
    };
    socket.on('message', (message, remote) => this.#receive(message, remote));
    // Without a listener a socket error would be thrown out of the event loop.
    socket.on('error', (error) => this.#log.error({ err: error }, 'UDP audio socket error'));
  }

  /** Binds the socket; a bind failure is a `LISTEN_FAILED` {@link ServerError}. */
  static async start(options: UdpAudioEndpointOptions): Promise<UdpAudioEndpoint> {
    const limits = {
      maxSessions: checkLimit('maxSessions', options.maxSessions, DEFAULT_MAX_AUDIO_SESSIONS, 1),
      maxClosed: checkLimit(
        'maxClosedSessions',
        options.maxClosedSessions,
        DEFAULT_MAX_CLOSED_AUDIO_SESSIONS,
        0,
      ),
      maxDatagramBytes: checkLimit(
        'maxDatagramBytes',
        options.maxDatagramBytes,
        DEFAULT_MAX_DATAGRAM_BYTES,
        HEADER_BYTES,
      ),
    };
    const socket = dgram.createSocket({ type: isIPv6(options.host) ? 'udp6' : 'udp4' });
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once('error', reject);
        socket.bind({ address: options.host, port: options.port, exclusive: true }, () => {
          socket.off('error', reject);
          resolve();
        });
      });
    } catch (error) {
      socket.close();
      throw new ServerError(
        'LISTEN_FAILED',
        `cannot listen for UDP audio on ${options.host}:${options.port}: ${(error as Error).message}`,
        { cause: error },
      );
    }
    const endpoint = new UdpAudioEndpoint(socket, options, limits);
    const { host, port } = endpoint.address;
    if (options.publicHost === undefined && (host === '0.0.0.0' || host === '::')) {
      endpoint.#log.warn(
        { host, port },
        'UDP audio bound to a wildcard address without publicHost: boards are told to send there',
      );
    }
    endpoint.#log.info({ host, port }, 'UDP audio endpoint listening');
    return endpoint;
  }

  /** The bound address (the OS-chosen port when started with 0). */
  get address(): { readonly host: string; readonly port: number } {
    return this.#address;
  }

  /** Open sessions. */
  get sessions(): number {
    return this.#bySsrc.size;
  }

  counters(): UdpAudioCounters {
    return {
      datagrams: this.#datagrams,
      accepted: this.#accepted,
      rejected: { ...this.#rejected },
    };
  }

  /**
   * Opens an audio session with a fresh key and nonce. The nonce is the header the board
   * will send with: type 0x01, flags 0, a random ssrc unique among open and kept sessions,
   * the rest 0 (the board overwrites length, timestamp and sequence). A device has one audio
   * session at a time, so its previous one is closed; so is a session with the same id.
   */
  open(deviceId: string, sessionId: string): UdpAudioChannel {
    if (this.#stopped !== undefined) {
      throw new ServerError('LISTEN_FAILED', 'the UDP audio endpoint is stopped');
    }
    const previous = this.#latest.get(deviceId);
    if (previous !== undefined) this.close(previous);
    this.close(sessionId);
    while (this.#bySsrc.size >= this.#maxSessions) {
      const [idlest] = this.#bySsrc.values();
      if (idlest === undefined) break;
      this.#log.warn(
        { deviceId: idlest.deviceId, sessionId: idlest.sessionId, maxSessions: this.#maxSessions },
        'too many audio sessions: closing the one idle longest',
      );
      this.close(idlest.sessionId);
    }
    const ssrc = this.#freshSsrc();
    const key = this.#random(16);
    const nonce = Buffer.alloc(HEADER_BYTES);
    nonce[0] = PACKET_TYPE;
    nonce.writeUInt32BE(ssrc, SSRC_OFFSET);
    const session: Session = {
      deviceId,
      sessionId,
      ssrc,
      key,
      openedAt: new Date().toISOString(),
      sequence: { last: 0, first: null, gaps: 0, outOfOrder: 0 },
      packets: 0,
      bytes: 0,
      rejected: 0,
    };
    this.#bySsrc.set(ssrc, session);
    this.#bySessionId.set(sessionId, session);
    this.#closed.delete(sessionId);
    this.#latest.delete(deviceId); // re-inserted last: the map stays in opening order
    this.#latest.set(deviceId, sessionId);
    this.#log.info({ deviceId, sessionId, ssrc }, 'audio session opened');
    return {
      server: this.#publicHost,
      port: this.#address.port,
      key: key.toString('hex'),
      nonce: nonce.toString('hex'),
    };
  }

  /** Ends a session; returns its final stats (undefined for an id that is not open). */
  close(sessionId: string): AudioSessionStats | undefined {
    const session = this.#bySessionId.get(sessionId);
    if (session === undefined) return undefined;
    this.#bySessionId.delete(sessionId);
    this.#bySsrc.delete(session.ssrc);
    const stats = snapshot(session, new Date().toISOString());
    this.#keepClosed(stats);
    this.#log.info({ ...stats }, 'audio session closed');
    return stats;
  }

  /** A session's stats, open or kept after closing. */
  stats(sessionId: string): AudioSessionStats | undefined {
    const session = this.#bySessionId.get(sessionId);
    return session === undefined ? this.#closed.get(sessionId) : snapshot(session);
  }

  /** The device's latest session's stats. */
  statsForDevice(deviceId: string): AudioSessionStats | undefined {
    const sessionId = this.#latest.get(deviceId);
    return sessionId === undefined ? undefined : this.stats(sessionId);
  }

  /** Calls `listener` with every accepted packet; returns the unsubscribe function. */
  onPacket(listener: UdpAudioPacketListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Closes the socket and every session (their stats stay readable). Idempotent. */
  stop(): Promise<void> {
    this.#stopped ??= new Promise<void>((resolve) => {
      for (const sessionId of [...this.#bySessionId.keys()]) this.close(sessionId);
      this.#listeners.clear();
      this.#socket.close(() => resolve());
    });
    return this.#stopped;
  }

  #freshSsrc(): number {
    const inUse = new Set<number>();
    for (const stats of this.#closed.values()) inUse.add(stats.ssrc);
    for (;;) {
      const ssrc = this.#random(4).readUInt32BE(0);
      // A kept closed session's ssrc is avoided too: its late packets must not count here.
      if (!this.#bySsrc.has(ssrc) && !inUse.has(ssrc)) return ssrc;
    }
  }

  #keepClosed(stats: AudioSessionStats): void {
    this.#closed.set(stats.sessionId, stats);
    while (this.#closed.size > this.#maxClosed) {
      const [oldest] = this.#closed.keys();
      if (oldest === undefined) break;
      const dropped = this.#closed.get(oldest);
      this.#closed.delete(oldest);
      if (dropped !== undefined && this.#latest.get(dropped.deviceId) === oldest) {
        this.#latest.delete(dropped.deviceId);
      }
    }
  }

  #receive(message: Buffer, remote: dgram.RemoteInfo): void {
    try {
      this.#accept(message, remote);
    } catch (error) {
      // Nothing a peer sends may escape into the event loop; what reaches here is our bug.
      this.#log.error({ err: error, remote: remote.address }, 'UDP audio datagram handler failed');
    }
  }

  #accept(message: Buffer, remote: dgram.RemoteInfo): void {
    this.#datagrams += 1;
    const verdict = inspectDatagram(message, this.#maxDatagramBytes);
    if (verdict.kind === 'reject') {
      this.#rejected[verdict.reason] += 1;
      const session = verdict.ssrc === undefined ? undefined : this.#bySsrc.get(verdict.ssrc);
      if (session !== undefined) session.rejected += 1;
      return;
    }
    const { header } = verdict;
    const session = this.#bySsrc.get(header.ssrc);
    if (session === undefined) {
      this.#rejected['unknown-ssrc'] += 1;
      return;
    }
    // AES-128-CTR with the received header as the initial counter block: node (OpenSSL) and
    // the board's mbedtls_aes_crypt_ctr both step all 16 bytes as one big-endian counter.
    const decipher = createDecipheriv(
      'aes-128-ctr',
      session.key,
      message.subarray(0, HEADER_BYTES),
    );
    const payload = Buffer.concat([
      decipher.update(message.subarray(HEADER_BYTES)),
      decipher.final(),
    ]);
    const late = trackSequence(session.sequence, header.sequence);
    session.packets += 1;
    session.bytes += payload.length;
    this.#accepted += 1;
    // Most recently active last: the idlest session is the first one eviction finds.
    this.#bySsrc.delete(session.ssrc);
    this.#bySsrc.set(session.ssrc, session);
    if (this.#listeners.size === 0) return;
    const packet: UdpAudioPacket = {
      deviceId: session.deviceId,
      sessionId: session.sessionId,
      sequence: header.sequence,
      timestamp: header.timestamp,
      flags: header.flags,
      late,
      payload,
      remote: { address: remote.address, port: remote.port },
    };
    for (const listener of this.#listeners) {
      try {
        listener(packet);
      } catch (error) {
        this.#log.error({ err: error }, 'a UDP audio packet listener threw');
      }
    }
  }
}

/** `{a: 1, b: undefined}` → `{a: 1}`: an undefined option must not blank a default. */
function definedOnly<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}

export interface UdpHelloOptions {
  /** Default a random UUID. */
  readonly sessionId?: string;
  /** Merged over `{format: 'opus', sample_rate: 24000, channels: 1, frame_duration: <the device's>}`. */
  readonly audioParams?: ServerAudioParams;
}

/**
 * Answers a device's MQTT hello: opens an audio session and returns the server hello that
 * tells the board where and how to send (docs/protocol.md §5). The board reads the answer's
 * `audio_params.sample_rate` and `frame_duration` as what the server's Opus will be
 * (mqtt_protocol.cc ParseServerHello), so the device's frame duration is echoed. A hello
 * that does not ask for UDP is refused (`SESSION_FAILED`).
 */
export function answerUdpHello(
  endpoint: UdpAudioEndpoint,
  deviceId: string,
  hello: DeviceHello,
  options: UdpHelloOptions = {},
): UdpServerHello {
  if (hello.transport !== 'udp') {
    throw new ServerError(
      'SESSION_FAILED',
      `a hello over MQTT must ask for transport "udp", got ${JSON.stringify(hello.transport)}`,
    );
  }
  const sessionId = options.sessionId ?? randomUUID();
  const udp = endpoint.open(deviceId, sessionId);
  try {
    const answer = buildServerHello({
      transport: 'udp',
      sessionId,
      audioParams: {
        // The server names its own downlink format (docs/protocol.md §4, server hello): 24 kHz mono Opus, the one we send.
        format: 'opus',
        sample_rate: 24000,
        channels: 1,
        frame_duration: hello.audio_params.frame_duration,
        ...definedOnly(options.audioParams ?? {}),
      },
      udp,
    });
    // buildServerHello returns the UDP shape for transport 'udp' (it validates `udp`).
    return answer as UdpServerHello;
  } catch (error) {
    endpoint.close(sessionId);
    throw error;
  }
}
