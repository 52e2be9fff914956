/**
 * What a {@link DeviceSession} needs of a device's connection, whatever carries it: text frames
 * each way, binary frames in, a ping where the transport has one, and the end. A board on
 * WebSocket and a board on MQTT get the same session, MCP client, registry entry and API
 * (docs/protocol.md §5: MCP uses the same envelope on both).
 */
import type { RawData, WebSocket } from 'ws';

/** How a board reaches us. */
export type DeviceTransport = 'websocket' | 'mqtt';

export interface DeviceLinkHandlers {
  /** One text frame (a JSON envelope) from the device. */
  text(text: string): void;
  /** One binary frame (audio over WebSocket). */
  binary(bytes: Uint8Array): void;
  /** The connection ended; called once. */
  closed(reason: string): void;
}

export interface DeviceLink {
  readonly transport: DeviceTransport;
  /** Starts delivering to `handlers`; called once, by the session. */
  listen(handlers: DeviceLinkHandlers): void;
  /**
   * Sends one text frame; `done` gets the error when it could not be sent (nothing, or null,
   * when it was).
   */
  send(text: string, done?: (error?: Error | null) => void): void;
  /**
   * Round trip of the transport's own ping, in ms. Undefined where the transport has none the
   * server can send (MQTT: only the client pings).
   */
  readonly ping?: (timeoutMs: number) => Promise<number>;
  /** Drops the connection at once. */
  terminate(): void;
}

/** The link a socket delivers to: one shared set of socket listeners serves every link. */
const LINK = Symbol('xiaozhi-mcp device link');
type LinkedSocket = WebSocket & { [LINK]?: WebSocketLink };

function onSocketMessage(this: LinkedSocket, data: RawData, isBinary: boolean): void {
  const handlers = this[LINK]?.handlers;
  if (handlers === undefined) return;
  if (isBinary) handlers.binary(data as Buffer);
  else handlers.text(data.toString());
}

function onSocketClose(this: LinkedSocket, code: number): void {
  this[LINK]?.handlers?.closed(code === 1006 ? 'connection dropped' : `closed with code ${code}`);
}

function onSocketError(this: LinkedSocket, error: Error): void {
  this[LINK]?.handlers?.closed(`socket error: ${error.message}`);
}

/**
 * A `ws` WebSocket as a {@link DeviceLink}. A class with the socket's listeners shared by every
 * link, not closures per connection: thousands of boards each keep one.
 */
class WebSocketLink implements DeviceLink {
  readonly transport = 'websocket' as const;
  handlers: DeviceLinkHandlers | undefined;

  constructor(readonly socket: WebSocket) {}

  listen(handlers: DeviceLinkHandlers): void {
    this.handlers = handlers;
    const socket = this.socket as LinkedSocket;
    socket[LINK] = this;
    socket.on('message', onSocketMessage);
    socket.on('close', onSocketClose);
    socket.on('error', onSocketError);
  }

  send(text: string, done?: (error?: Error | null) => void): void {
    // ws reports a send on a closing socket in a later tick; say so now.
    if (this.socket.readyState !== this.socket.OPEN) {
      done?.(new Error(`the WebSocket is not open (readyState ${this.socket.readyState})`));
      return;
    }
    // `done` as is: ws calls it with nothing or null when sent (no closure per send).
    this.socket.send(text, done);
  }

  ping(timeoutMs: number): Promise<number> {
    const socket = this.socket;
    return new Promise((resolve, reject) => {
      const started = performance.now();
      const timer = setTimeout(() => {
        socket.off('pong', onPong);
        reject(new Error(`no pong within ${timeoutMs} ms`));
      }, timeoutMs);
      const onPong = () => {
        clearTimeout(timer);
        resolve(performance.now() - started);
      };
      socket.once('pong', onPong);
      socket.ping();
    });
  }

  terminate(): void {
    this.socket.terminate();
  }
}

/** A `ws` WebSocket as a {@link DeviceLink}. */
export function webSocketLink(socket: WebSocket): DeviceLink {
  return new WebSocketLink(socket);
}

/** A link as given, or a WebSocket wrapped as one. */
export function toDeviceLink(connection: WebSocket | DeviceLink): DeviceLink {
  return 'transport' in connection && 'listen' in connection
    ? connection
    : webSocketLink(connection as WebSocket);
}
