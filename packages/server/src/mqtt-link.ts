/**
 * A board on MQTT as a {@link DeviceLink}: what it publishes on its publish topic are the
 * link's text frames, and what the server sends goes to the topic the broker delivers to it
 * without a subscription of its own (docs/protocol.md §5: the firmware never subscribes). MQTT
 * has no ping the server can send (only the client pings), so the link has none.
 *
 * Also the names both ends agree on: the client id a board connects with, the topic delivered
 * to it, the topic it publishes on.
 */
import type { DeviceLink, DeviceLinkHandlers } from './device-link.js';

/**
 * The group of our client ids. The cloud's client ids are `GROUP@@@aa_bb_cc_dd_ee_ff@@@<uuid>`
 * (docs/protocol.md §5); ours use this group.
 */
export const MQTT_CLIENT_GROUP = 'GID_xiaozhi';
/** The username of an operator (a monitoring client such as `mosquitto_sub`). */
export const MQTT_OPERATOR = 'operator';

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;
const CLIENT_ID = new RegExp(
  `^${MQTT_CLIENT_GROUP}@@@([0-9a-f]{2}(?:_[0-9a-f]{2}){5})@@@(.*)$`,
  's',
);
/** The gateway's rule for a Client-Id: at most 64 printable characters. */
const UUID = /^[\x21-\x7e]{0,64}$/;

/** `aa:bb:cc:dd:ee:ff` → `aa_bb_cc_dd_ee_ff`, as the cloud writes a MAC in topics and client ids. */
export function macUnderscored(deviceId: string): string {
  return deviceId.toLowerCase().replaceAll(':', '_');
}

/** The client id a board connects with: `GID_xiaozhi@@@aa_bb_cc_dd_ee_ff@@@<Client-Id>`. */
export function mqttClientId(deviceId: string, clientId: string): string {
  return `${MQTT_CLIENT_GROUP}@@@${macUnderscored(deviceId)}@@@${clientId}`;
}

/** Reads a board's client id back into its Device-Id and Client-Id; undefined when it is not one. */
export function parseMqttClientId(
  id: string,
): { readonly deviceId: string; readonly clientId: string } | undefined {
  const match = CLIENT_ID.exec(id);
  const mac = match?.[1];
  const clientId = match?.[2];
  if (mac === undefined || clientId === undefined || !UUID.test(clientId)) return undefined;
  const deviceId = mac.replaceAll('_', ':');
  return MAC.test(deviceId) ? { deviceId, clientId } : undefined;
}

/** Whether a client id claims to be a board's (operators may not take such an id). */
export function isBoardClientId(id: string): boolean {
  return id.startsWith(`${MQTT_CLIENT_GROUP}@@@`);
}

/** Where the server delivers to a board, as the cloud does: `devices/p2p/aa_bb_cc_dd_ee_ff`. */
export function deliveryTopic(deviceId: string): string {
  return `devices/p2p/${macUnderscored(deviceId)}`;
}

/**
 * The board's `publish_topic`. The cloud gives every board `device-server`; ours names the
 * board too, so an observer on `#` tells boards apart (the server knows the sender anyway).
 */
export function publishTopic(deviceId: string): string {
  return `device-server/${macUnderscored(deviceId)}`;
}

/** A send whose outcome nobody asked for. */
const IGNORE_SEND_RESULT = (): void => {};

export class MqttLink implements DeviceLink {
  readonly transport = 'mqtt' as const;
  readonly #send: (text: string, done: (error?: Error) => void) => void;
  readonly #close: () => void;
  #handlers: DeviceLinkHandlers | undefined;
  #ended = false;

  /**
   * `send`: publishes one frame to the board's delivery topic; `close`: drops its connection
   * (which then reports {@link end}).
   */
  constructor(send: (text: string, done: (error?: Error) => void) => void, close: () => void) {
    this.#send = send;
    this.#close = close;
  }

  get ended(): boolean {
    return this.#ended;
  }

  listen(handlers: DeviceLinkHandlers): void {
    this.#handlers = handlers;
  }

  send(text: string, done?: (error?: Error) => void): void {
    if (this.#ended) {
      done?.(new Error('the MQTT connection has ended'));
      return;
    }
    this.#send(text, done ?? IGNORE_SEND_RESULT);
  }

  terminate(): void {
    this.#close();
  }

  /** One publish from the board on its publish topic (frames before `listen` are dropped). */
  receive(text: string): void {
    if (!this.#ended) this.#handlers?.text(text);
  }

  /** The connection ended; reported once. */
  end(reason: string): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#handlers?.closed(reason);
  }
}
