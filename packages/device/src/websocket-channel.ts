/**
 * The device's WebSocket audio channel (websocket_protocol.cc, docs/protocol.md §4): the real
 * upgrade headers, the client hello, a bounded wait for the server hello, `session_id`
 * adoption, a dead channel after 120 s without incoming data (pings do not count), and a
 * close that drops TCP without a close frame, as the firmware does.
 */
import { EventEmitter } from 'node:events';
import {
  type AudioFrameVersion,
  type BackendFrame,
  cString,
  type DeviceHello,
  decodeAudioFrame,
  encodeAudioFrame,
  getItem,
  readBackendFrame,
} from '@xiaozhi-mcp/protocol';
import WebSocket from 'ws';
import type { BoardConsole } from './console.js';
import { BoardPanic, DeviceError } from './errors.js';

/** The firmware's largest text frame; a larger send kills the session. */
export const MAX_DEVICE_FRAME_BYTES = 65_535;

/**
 * The largest frame the board takes from its backend. docs/protocol.md §4 bounds only what the
 * device sends; this receive bound is our model of the board's receive buffer (the same
 * 65,535 bytes), since a board cannot take the megabytes a Node client could. A larger frame
 * ends the session as a failed receive does on a board: an error line, TCP dropped, idle.
 */
export const MAX_BACKEND_FRAME_BYTES = MAX_DEVICE_FRAME_BYTES;

/**
 * A `ws` client that drops TCP where `ws` would send a 1009 close frame for an oversized frame:
 * the firmware's client never sends a close frame (docs/protocol.md §4).
 */
class BoardSocket extends WebSocket {
  override close(code?: number, data?: string | Buffer): void {
    if (code === 1009) this.terminate();
    else super.close(code, data);
  }
}

/** `ws` send options for a text frame given as bytes. */
const TEXT_FRAME = { binary: false } as const;

const isOversized = (error: Error): boolean =>
  (error as Error & { code?: unknown }).code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH';

export interface WebsocketChannelOptions {
  readonly url: string;
  /** NVS `websocket/token`; sent as `Authorization`, with `Bearer ` added unless it has a space. */
  readonly token: string;
  readonly version: AudioFrameVersion;
  readonly deviceId: string;
  readonly clientId: string;
  readonly hello: DeviceHello;
  readonly console: BoardConsole;
  readonly helloTimeoutMs?: number;
  readonly idleTimeoutMs?: number;
  /** Send a close frame when closing; the firmware does not (it drops TCP). */
  readonly closeFrame?: boolean;
}

export interface WebsocketChannelEvents {
  /** A text frame other than the server hello, read with cJSON rules. */
  json: [BackendFrame];
  audio: [{ type: number; timestamp: number; payload: Uint8Array }];
  closed: [reason: string];
  /** The firmware would have crashed here (a server hello without `transport`). */
  panic: [BoardPanic];
}

/** The upgrade request headers the firmware sets. */
export function upgradeHeaders(
  options: Pick<WebsocketChannelOptions, 'url' | 'token' | 'version' | 'deviceId' | 'clientId'>,
): Record<string, string> {
  const headers: Record<string, string> = {};
  if (options.token !== '') {
    headers.Authorization = options.token.includes(' ') ? options.token : `Bearer ${options.token}`;
  }
  headers['Protocol-Version'] = String(options.version);
  headers['Device-Id'] = options.deviceId;
  headers['Client-Id'] = options.clientId;
  // The firmware's client never puts the port in Host.
  headers.Host = new URL(options.url).hostname;
  return headers;
}

export class WebsocketChannel extends EventEmitter<WebsocketChannelEvents> {
  #socket: WebSocket | undefined;
  #sessionId = '';
  #idleTimer: NodeJS.Timeout | undefined;
  #closed = false;
  readonly #options: WebsocketChannelOptions;

  constructor(options: WebsocketChannelOptions) {
    super();
    this.#options = options;
  }

  get sessionId(): string {
    return this.#sessionId;
  }

  get isOpen(): boolean {
    return !this.#closed && this.#socket?.readyState === WebSocket.OPEN;
  }

  /** Connects, sends the hello and waits for the server's. Rejects with a {@link DeviceError}. */
  open(): Promise<void> {
    const { console, url, version } = this.#options;
    console.log('I', 'WS', `Connecting to websocket server: ${url} with version: ${version}`);
    const socket = new BoardSocket(url, {
      headers: upgradeHeaders(this.#options),
      perMessageDeflate: false,
      // Checked on the frame header: an oversized frame is refused before it is buffered.
      maxPayload: MAX_BACKEND_FRAME_BYTES,
      handshakeTimeout: this.#options.helloTimeoutMs ?? 10_000,
    });
    this.#socket = socket;
    return new Promise<void>((resolve, reject) => {
      let helloTimer: NodeJS.Timeout | undefined;
      let settled = false;
      const fail = (error: DeviceError) => {
        if (settled) return;
        settled = true;
        clearTimeout(helloTimer);
        this.#teardown(error.message, false);
        reject(error);
      };
      socket.once('unexpected-response', (_request, response) => {
        console.log('E', 'WS', 'Failed to connect to websocket server');
        fail(
          new DeviceError('WS_CONNECT_FAILED', `upgrade refused with HTTP ${response.statusCode}`),
        );
      });
      socket.on('error', (error) => {
        if (isOversized(error)) {
          console.log('E', 'WS', `Received a frame over ${MAX_BACKEND_FRAME_BYTES} bytes`);
          if (settled) this.#teardown('frame too large', true);
          else
            fail(
              new DeviceError(
                'WS_FRAME_TOO_LARGE',
                `the server sent a frame over ${MAX_BACKEND_FRAME_BYTES} bytes`,
              ),
            );
          return;
        }
        if (!settled) {
          console.log('E', 'WS', 'Failed to connect to websocket server');
          fail(new DeviceError('WS_CONNECT_FAILED', error.message, { cause: error }));
        }
      });
      socket.once('open', () => {
        socket.send(JSON.stringify(this.#options.hello));
        helloTimer = setTimeout(() => {
          console.log('E', 'WS', 'Failed to receive server hello');
          fail(
            new DeviceError(
              'WS_HELLO_TIMEOUT',
              `no server hello within ${this.#options.helloTimeoutMs ?? 10_000} ms`,
            ),
          );
        }, this.#options.helloTimeoutMs ?? 10_000);
      });
      socket.on('message', (data, isBinary) => {
        this.#touch();
        if (isBinary) {
          this.#onAudio(data as Buffer);
          return;
        }
        const text = data.toString();
        const frame = readBackendFrame(text);
        if (frame?.type === undefined) {
          console.log('E', 'WS', `Missing message type, data: ${text}`);
          return;
        }
        if (frame.type !== 'hello') {
          // Boards in the field never answer what arrives before the server hello.
          if (settled) this.emit('json', frame);
          return;
        }
        try {
          if (this.#onServerHello(frame) && !settled) {
            settled = true;
            clearTimeout(helloTimer);
            resolve();
          }
        } catch (error) {
          if (!(error instanceof BoardPanic)) throw error;
          settled = true;
          clearTimeout(helloTimer);
          this.#teardown('panic', false);
          this.emit('panic', error);
          reject(error);
        }
      });
      socket.on('close', () => {
        if (!settled)
          fail(new DeviceError('WS_CLOSED', 'the server closed the connection before its hello'));
        else this.#teardown('closed by the server', true);
      });
    });
  }

  /** `ParseServerHello`. True when the hello was accepted. */
  #onServerHello(frame: BackendFrame): boolean {
    const transport = getItem(frame.root, 'transport');
    if (transport?.kind !== 'string') {
      // The firmware logs transport->valuestring: a null dereference.
      throw new BoardPanic(
        'load-prohibited',
        'WebsocketProtocol::ParseServerHello read a hello without a string transport',
      );
    }
    if (cString(transport.value) !== 'websocket') {
      this.#options.console.log('E', 'WS', `Unsupported transport: ${cString(transport.value)}`);
      return false;
    }
    const session = getItem(frame.root, 'session_id');
    if (session?.kind === 'string') {
      this.#sessionId = cString(session.value);
      this.#options.console.log('I', 'WS', `Session ID: ${this.#sessionId}`);
    }
    return true;
  }

  #onAudio(data: Buffer): void {
    try {
      this.emit(
        'audio',
        decodeAudioFrame(
          this.#options.version,
          new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
        ),
      );
    } catch {
      // A malformed audio frame is skipped, as the firmware skips it.
    }
  }

  // last_incoming_time_ moves on text and binary frames only. One timer per channel, pushed
  // back on each frame (no new timer per frame: a busy fleet would churn them).
  #touch(): void {
    if (this.#closed) return;
    if (this.#idleTimer !== undefined) {
      this.#idleTimer.refresh();
      return;
    }
    const idle = this.#options.idleTimeoutMs ?? 120_000;
    this.#idleTimer = setTimeout(() => {
      this.#options.console.log(
        'E',
        'Protocol',
        `Channel timeout ${Math.round(idle / 1000)} seconds`,
      );
      this.close('channel timeout');
    }, idle);
  }

  /** Sends a text frame; false when the channel is closed. A frame over 64 KiB kills the session. */
  sendText(text: string): boolean {
    if (!this.isOpen || this.#socket === undefined) return false;
    // Sent as the UTF-8 bytes of a text frame: `ws` then masks them into the frame header's
    // buffer and writes one buffer, where a string costs a second buffer and a writev.
    const data = Buffer.from(text);
    if (data.length > MAX_DEVICE_FRAME_BYTES) {
      this.#options.console.log('E', 'WS', `Message too large: ${data.length} bytes`);
      this.close('frame too large');
      return false;
    }
    this.#socket.send(data, TEXT_FRAME);
    return true;
  }

  /** Sends one Opus packet with the framing of the channel's protocol version. */
  sendAudio(payload: Uint8Array, timestamp = 0): boolean {
    if (!this.isOpen || this.#socket === undefined) return false;
    this.#socket.send(encodeAudioFrame(this.#options.version, { payload, timestamp }));
    return true;
  }

  /** Closes the channel the firmware's way: drop TCP, no close frame (unless configured). */
  close(reason = 'closed by the device'): void {
    this.#teardown(reason, true);
  }

  #teardown(reason: string, announce: boolean): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#idleTimer);
    const socket = this.#socket;
    if (socket !== undefined) {
      if (this.#options.closeFrame === true && socket.readyState === WebSocket.OPEN)
        socket.close(1000);
      else socket.terminate();
    }
    if (announce) {
      this.#options.console.log('I', 'WS', 'Websocket disconnected');
      this.emit('closed', reason);
    }
  }
}
