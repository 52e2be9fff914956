/**
 * What a {@link DeviceSession} needs of a device's connection, whatever carries it: text frames
 * each way, binary frames in, a ping where the transport has one, and the end. A board on
 * WebSocket and a board on MQTT get the same session, MCP client, registry entry and API
 * (docs/protocol.md §5: MCP uses the same envelope on both).
 */
import type { WebSocket } from 'ws';

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
  /** Sends one text frame; `done` gets the error when it could not be sent. */
  send(text: string, done?: (error?: Error) => void): void;
  /**
   * Round trip of the transport's own ping, in ms. Undefined where the transport has none the
   * server can send (MQTT: only the client pings).
   */
  readonly ping?: (timeoutMs: number) => Promise<number>;
  /** Drops the connection at once. */
  terminate(): void;
}

/** A `ws` WebSocket as a {@link DeviceLink}. */
export function webSocketLink(socket: WebSocket): DeviceLink {
  return {
    transport: 'websocket',
    listen(handlers) {
      socket.on('message', (data, isBinary) => {
        if (isBinary) handlers.binary(data as Buffer);
        else handlers.text(data.toString());
      });
      socket.on('close', (code) =>
        handlers.closed(code === 1006 ? 'connection dropped' : `closed with code ${code}`),
      );
      socket.on('error', (error) => handlers.closed(`socket error: ${error.message}`));
    },
    send(text, done) {
      socket.send(text, (error) => done?.(error ?? undefined));
    },
    ping(timeoutMs) {
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
    },
    terminate() {
      socket.terminate();
    },
  };
}

/** A link as given, or a WebSocket wrapped as one. */
export function toDeviceLink(connection: WebSocket | DeviceLink): DeviceLink {
  return 'transport' in connection && 'listen' in connection
    ? connection
    : webSocketLink(connection as WebSocket);
}
