/**
 * The embedded MQTT broker (aedes 1.x on a TCP listener), for boards given MQTT by our OTA
 * reply (docs/protocol.md §5) and for operators watching them with any MQTT client.
 *
 * - A board logs in with username = its Device-Id, the password our OTA reply issued, and the
 *   client id `GID_xiaozhi@@@<mac_underscored>@@@<Client-Id>`. A Device-Id known with another
 *   Client-Id is refused (CONNACK "not authorized") and logged, as the gateway does.
 * - The firmware never subscribes: the broker subscribes each board to its delivery topic
 *   (`devices/p2p/<mac_underscored>`) itself, so what is published there (by the server, or by
 *   an operator) reaches it; a board's own SUBSCRIBE is refused (SUBACK 0x80).
 * - A board may publish only QoS 0 on its publish topic; anything else closes its connection
 *   (MQTT 3.1.1 has no negative PUBACK, §3.3.5).
 * - An operator (username `operator`, password one of the API tokens) may subscribe to and
 *   publish on anything, but not take a board's client id.
 * - A second connection with a board's client id and valid credentials replaces the first (MQTT
 *   3.1.1 §3.1.4: the board reconnecting after a drop its old TCP connection has not noticed
 *   yet); one without them is refused and the board's connection is untouched.
 * - Nothing is kept for later: sessions are clean, wills are dropped, and the retain flag is
 *   cleared (a retained request would be replayed to the board at every connect).
 * - Hostile input is bounded: packet size (`maxPacketBytes`, before the body is buffered), the
 *   time to send CONNECT, the keep-alive a client may ask for, connections, and inbound QoS 2.
 */
import { once } from 'node:events';
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import {
  Aedes,
  type AedesOptions,
  type AuthenticateError,
  type Client,
  type PublishPacket,
  type Subscription,
} from 'aedes';
import type { Logger } from 'pino';
import { ServerError } from './errors.js';
import { pinnedMessage } from './gateway.js';
import {
  deliveryTopic,
  isBoardClientId,
  MQTT_OPERATOR,
  MqttLink,
  parseMqttClientId,
  publishTopic,
} from './mqtt-link.js';
import { boundMqttPackets } from './mqtt-wire.js';
import { oneOfSecrets } from './secret.js';

/** A board's connection, once its CONNACK is sent and its delivery topic subscribed. */
export interface MqttDevice {
  readonly deviceId: string;
  readonly clientId: string;
  readonly remoteAddress: string | undefined;
  readonly link: MqttLink;
}

/** What the broker asks of the server about boards. */
export interface MqttDeviceAuthority {
  /** Whether `password` is the board's (the one our OTA reply issued, or a static device token). */
  passwordValid(deviceId: string, password: string | undefined): boolean;
  /** Whether the Device-Id may be used with this Client-Id (the registry's pin). */
  acceptsClient(deviceId: string, clientId: string): boolean;
  /** The Client-Id the Device-Id is pinned to, for the log. */
  pinnedClientId(deviceId: string): string | undefined;
}

export interface MqttBrokerOptions {
  readonly host: string;
  /** 0 lets the OS choose. */
  readonly port: number;
  /** Most open connections; 0: no cap. */
  readonly maxConnections: number;
  /** Largest packet (its Remaining Length) accepted from any client. */
  readonly maxPacketBytes: number;
  /** How long a client gets to send CONNECT. */
  readonly connectTimeoutMs: number;
  /** Largest keep-alive a client may ask for, in seconds; 0 (no keep-alive) is refused too. */
  readonly keepaliveLimitS: number;
  readonly devices: MqttDeviceAuthority;
  /** Operator passwords (the API tokens); none: no operator can log in. */
  readonly operatorPasswords: readonly string[];
  /** A board is connected; its link reports the end of the connection. */
  readonly onDevice: (device: MqttDevice) => void;
  readonly logger: Logger;
}

/** Who a connection is, once authenticated. */
type Role =
  | { readonly kind: 'operator' }
  | {
      readonly kind: 'device';
      readonly deviceId: string;
      readonly clientId: string;
      readonly publishTopic: string;
      link: MqttLink | undefined;
      /** Frames published before the link existed (its delivery subscription was pending). */
      early: string[];
    };

/** CONNACK return codes of MQTT 3.1.1 §3.2.2.3. */
const IDENTIFIER_REJECTED = 2;
const BAD_USERNAME_OR_PASSWORD = 4;
const NOT_AUTHORIZED = 5;
/** Frames kept from a board before its link exists. */
const MAX_EARLY_FRAMES = 16;
/** Inbound QoS 2 publishes (only operators may send them) awaiting PUBREL, per client. */
const MAX_INFLIGHT_INBOUND = 16;
/**
 * Client ids MQTT 3.1 clients may send (aedes's default is 3.1's 23): ours are
 * `GID_xiaozhi@@@` + 17 + `@@@` + a Client-Id of up to 64.
 */
const MAX_CLIENT_ID_LENGTH = 128;

function refusal(returnCode: number, message: string): AuthenticateError {
  return Object.assign(new Error(message), { returnCode }) as AuthenticateError;
}

function payloadText(payload: PublishPacket['payload']): string {
  if (typeof payload === 'string') return payload;
  // mqtt-packet hands a Buffer: read it where it lies, no copy.
  return Buffer.isBuffer(payload)
    ? payload.toString('utf8')
    : Buffer.from(payload).toString('utf8');
}

type PublishDone = (error?: Error) => void;

/**
 * aedes, where a board's own PUBLISH (read by `authorizePublish` already) is routed on only when
 * someone may hear it: boards cannot subscribe, so while no operator is connected nobody is
 * subscribed to a board's publish topic, and its topic match, packet copy and hooks are skipped.
 * aedes hands every client PUBLISH to `publish(packet, client, done)`.
 */
class BoardBroker extends Aedes {
  readonly #unheard: (client: Client) => boolean;

  constructor(options: AedesOptions, unheard: (client: Client) => boolean) {
    super(options);
    this.#unheard = unheard;
  }

  override publish(
    packet: PublishPacket,
    clientOrDone: Client | null | PublishDone,
    done?: PublishDone,
  ): void {
    if (done !== undefined && clientOrDone !== null && typeof clientOrDone === 'object') {
      if (this.#unheard(clientOrDone)) {
        done();
        return;
      }
    }
    (super.publish as (packet: PublishPacket, ...rest: unknown[]) => void)(
      packet,
      clientOrDone,
      done,
    );
  }
}

export class MqttBroker {
  readonly #options: MqttBrokerOptions;
  readonly #aedes: Aedes;
  readonly #server: Server;
  readonly #roles = new WeakMap<Client, Role>();
  /** Why a client's connection ended, when aedes said (its `clientError`). */
  readonly #endings = new WeakMap<Client, string>();
  /** The subscriptions the broker makes for boards (they pass `authorizeSubscribe`). */
  readonly #ownSubscriptions = new WeakSet<object>();
  readonly #sockets = new Set<Socket>();
  /** Connected operators: while there are none, nobody else can be subscribed to a board's topic. */
  readonly #operators = new Set<Client>();
  readonly #logger: Logger;

  private constructor(options: MqttBrokerOptions) {
    this.#options = options;
    this.#logger = options.logger;
    this.#aedes = new BoardBroker(
      {
        connectTimeout: options.connectTimeoutMs,
        keepaliveLimit: options.keepaliveLimitS,
        maxClientsIdLength: MAX_CLIENT_ID_LENGTH,
        maxInflightInbound: MAX_INFLIGHT_INBOUND,
        preConnect: (_client, packet, callback) => {
          // Clean sessions only, and no wills: nothing is kept for a client that has gone.
          packet.clean = true;
          delete packet.will;
          callback(null, true);
        },
        authenticate: (client, username, password, callback) => {
          try {
            callback(...this.#authenticate(client, username, password));
          } catch (error) {
            this.#logger.error({ err: error }, 'MQTT authentication failed');
            callback(refusal(NOT_AUTHORIZED, 'not authorized'), false);
          }
        },
        authorizePublish: (client, packet, callback) => {
          callback(this.#authorizePublish(client, packet));
        },
        authorizeSubscribe: (client, subscription, callback) => {
          callback(null, this.#authorizeSubscribe(client, subscription));
        },
      },
      (client) => this.#operators.size === 0 && this.#roles.get(client)?.kind === 'device',
    );
    // aedes reports persistence failures here; unheard, they would end the process.
    (this.#aedes as unknown as NodeJS.EventEmitter).on('error', (error: unknown) =>
      this.#logger.error({ err: error }, 'MQTT broker error'),
    );
    // 'client' and 'clientDisconnect' pair up: aedes emits them as it registers and unregisters one.
    this.#aedes.on('client', (client) => {
      if (this.#roles.get(client)?.kind === 'operator') this.#operators.add(client);
    });
    this.#aedes.on('clientReady', (client) =>
      this.#guard('a board connection', () => this.#ready(client)),
    );
    this.#aedes.on('clientError', (client, error) => {
      this.#endings.set(client, error.message);
    });
    this.#aedes.on('keepaliveTimeout', (client) => {
      this.#endings.set(client, 'keep alive timeout');
    });
    this.#aedes.on('connectionError', (client, error) => {
      this.#logger.debug(
        { remote: this.#remote(client), err: error.message },
        'MQTT connection dropped before it was accepted',
      );
    });
    this.#aedes.on('clientDisconnect', (client) =>
      this.#guard('a board disconnection', () => this.#disconnected(client)),
    );
    this.#server = createServer((socket) => this.#accept(socket));
    // 0: no cap (Node's own reading of 0).
    this.#server.maxConnections = options.maxConnections;
  }

  /** Starts the broker and listens on `host:port`. */
  static async start(options: MqttBrokerOptions): Promise<MqttBroker> {
    const broker = new MqttBroker(options);
    await broker.#aedes.listen();
    broker.#server.listen({ host: options.host, port: options.port, backlog: 4096 });
    try {
      await Promise.race([
        once(broker.#server, 'listening'),
        once(broker.#server, 'error').then(([error]) => Promise.reject(error)),
      ]);
    } catch (error) {
      await new Promise<void>((resolve) => broker.#aedes.close(() => resolve()));
      throw new ServerError(
        'LISTEN_FAILED',
        `cannot listen for MQTT on ${options.host}:${options.port}: ${(error as Error).message}`,
        { cause: error },
      );
    }
    return broker;
  }

  /** Where the broker listens. */
  get address(): { readonly host: string; readonly port: number } {
    const address = this.#server.address() as AddressInfo;
    return { host: this.#options.host, port: address.port };
  }

  /** Authenticated clients (boards and operators). */
  get clients(): number {
    return this.#aedes.connectedClients;
  }

  /**
   * Publishes one frame to a board's delivery topic (QoS 0): the board gets it, and so does any
   * operator subscribed there.
   */
  deliver(deviceId: string, text: string, done?: (error?: Error) => void): void {
    this.#publish(deliveryTopic(deviceId), text, done);
  }

  #publish(topic: string, text: string, done?: (error?: Error) => void): void {
    this.#aedes.publish(
      {
        cmd: 'publish',
        topic,
        payload: Buffer.from(text, 'utf8'),
        qos: 0,
        retain: false,
        dup: false,
      },
      (error) => done?.(error ?? undefined),
    );
  }

  /**
   * A frame for a board, from its link. While no operator is connected the board is the only
   * subscriber of its delivery topic, so the PUBLISH is written to its connection directly
   * (aedes `client.publish`): the same packet as the topic's delivery, without matching the
   * topic against every board's subscription.
   */
  #publishTo(client: Client, topic: string, text: string, done: (error?: Error) => void): void {
    if (this.#operators.size > 0) {
      this.#publish(topic, text, done);
      return;
    }
    client.publish(
      {
        cmd: 'publish',
        topic,
        // The text goes to the socket as is: it encodes it as UTF-8 in its write, no Buffer first.
        payload: text,
        qos: 0,
        retain: false,
        dup: false,
      },
      done,
    );
  }

  /** Closes every connection and the listener. */
  async stop(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    await new Promise<void>((resolve) => this.#aedes.close(() => resolve()));
    for (const socket of this.#sockets) socket.destroy();
    await closed;
  }

  #accept(socket: Socket): void {
    socket.on('error', () => {});
    // Replies and requests are small and wanted now: no Nagle delay behind a board's delayed ACK.
    socket.setNoDelay(true);
    try {
      if (this.#aedes.closed) {
        socket.destroy();
        return;
      }
      this.#sockets.add(socket);
      socket.once('close', () => this.#sockets.delete(socket));
      this.#aedes.handle(socket);
      boundMqttPackets(socket, this.#options.maxPacketBytes, (reason) =>
        this.#logger.warn(
          { remote: socket.remoteAddress, reason },
          'MQTT connection dropped: a packet over the bound',
        ),
      );
    } catch (error) {
      this.#logger.error({ err: error }, 'accepting an MQTT connection failed');
      socket.destroy();
    }
  }

  #remote(client: Client): string | undefined {
    return (client.conn as Partial<Socket>).remoteAddress;
  }

  #authenticate(
    client: Client,
    username: string | undefined,
    passwordBytes: Buffer | undefined,
  ): [AuthenticateError | null, boolean] {
    const password = passwordBytes === undefined ? undefined : passwordBytes.toString('utf8');
    const remote = this.#remote(client);
    if (username === MQTT_OPERATOR) {
      if (isBoardClientId(client.id)) {
        this.#logger.warn({ remote }, "MQTT operator refused: it used a board's client id");
        return [refusal(IDENTIFIER_REJECTED, "an operator cannot use a board's client id"), false];
      }
      const { operatorPasswords } = this.#options;
      if (operatorPasswords.length === 0 || !oneOfSecrets(password, operatorPasswords)) {
        this.#logger.warn({ remote }, 'MQTT operator refused: not one of the API tokens');
        return [refusal(BAD_USERNAME_OR_PASSWORD, 'bad user name or password'), false];
      }
      this.#roles.set(client, { kind: 'operator' });
      this.#logger.info({ remote, clientId: client.id }, 'MQTT operator connected');
      return [null, true];
    }
    const identity = parseMqttClientId(client.id);
    if (identity === undefined) {
      this.#logger.warn(
        { remote, username: username?.slice(0, 64) },
        'MQTT connection refused: the client id is not GID_xiaozhi@@@<mac_underscored>@@@<Client-Id>',
      );
      return [refusal(IDENTIFIER_REJECTED, 'identifier rejected'), false];
    }
    const { deviceId, clientId } = identity;
    if (
      username?.toLowerCase() !== deviceId ||
      !this.#options.devices.passwordValid(deviceId, password)
    ) {
      this.#logger.warn(
        { deviceId, remote },
        'MQTT connection refused: bad username or password (the username is the Device-Id, the password the one from the OTA reply)',
      );
      return [refusal(BAD_USERNAME_OR_PASSWORD, 'bad user name or password'), false];
    }
    // Whatever the password (a static one is shared by every board), a known Device-Id is its
    // own board's only: the uuid it keeps in NVS.
    if (!this.#options.devices.acceptsClient(deviceId, clientId)) {
      this.#logger.warn(
        {
          deviceId,
          clientId,
          pinnedClientId: this.#options.devices.pinnedClientId(deviceId),
          remote,
        },
        `MQTT connection refused: ${pinnedMessage(deviceId)}`,
      );
      return [refusal(NOT_AUTHORIZED, 'not authorized'), false];
    }
    this.#roles.set(client, {
      kind: 'device',
      deviceId,
      clientId,
      publishTopic: publishTopic(deviceId),
      link: undefined,
      early: [],
    });
    return [null, true];
  }

  #authorizePublish(client: Client | null, packet: PublishPacket): Error | null {
    // Nothing is kept for later subscribers (see the module comment).
    packet.retain = false;
    if (client === null) return null;
    const role = this.#roles.get(client);
    if (role?.kind === 'operator') {
      return packet.topic.startsWith('$SYS') ? new Error('$SYS topics are the broker’s') : null;
    }
    if (role?.kind === 'device' && packet.topic === role.publishTopic && packet.qos === 0) {
      // The board's frame is read here, where its role is at hand, before aedes routes the
      // PUBLISH on (to operators) and reads the next packet.
      this.#received(role, packet.payload);
      return null;
    }
    const why =
      role?.kind !== 'device'
        ? 'no role'
        : packet.topic !== role.publishTopic
          ? `a publish on ${JSON.stringify(packet.topic.slice(0, 200))}, not its publish topic ${role.publishTopic}`
          : `a QoS ${packet.qos} publish (boards publish QoS 0)`;
    this.#logger.warn(
      {
        deviceId: role?.kind === 'device' ? role.deviceId : undefined,
        remote: this.#remote(client),
      },
      `MQTT client refused ${why}; closing it`,
    );
    return new Error(`refused ${why}`);
  }

  #authorizeSubscribe(client: Client, subscription: Subscription): Subscription | null {
    if (this.#ownSubscriptions.has(subscription)) return subscription;
    const role = this.#roles.get(client);
    if (role?.kind === 'operator') return subscription;
    this.#logger.warn(
      {
        deviceId: role?.kind === 'device' ? role.deviceId : undefined,
        topic: String(subscription.topic).slice(0, 200),
      },
      'MQTT subscription refused: boards do not subscribe (their messages are delivered to them)',
    );
    return null;
  }

  #received(role: Role & { readonly kind: 'device' }, payload: PublishPacket['payload']): void {
    try {
      const text = payloadText(payload);
      if (role.link !== undefined) role.link.receive(text);
      else if (role.early.length < MAX_EARLY_FRAMES) role.early.push(text);
    } catch (error) {
      this.#logger.error({ err: error }, 'reading a board publish failed');
    }
  }

  #ready(client: Client): void {
    const role = this.#roles.get(client);
    if (role?.kind !== 'device') return;
    const subscription: Subscription = { topic: deliveryTopic(role.deviceId), qos: 0 };
    this.#ownSubscriptions.add(subscription);
    client.subscribe(subscription, (error) =>
      this.#guard('a board subscription', () => {
        if (error !== undefined || client.closed) {
          if (error !== undefined)
            this.#logger.error(
              { deviceId: role.deviceId, err: error },
              'subscribing a board failed',
            );
          client.close();
          return;
        }
        const topic = deliveryTopic(role.deviceId);
        const link = new MqttLink(
          (text, done) => this.#publishTo(client, topic, text, done),
          () => client.close(),
        );
        role.link = link;
        this.#options.onDevice({
          deviceId: role.deviceId,
          clientId: role.clientId,
          remoteAddress: this.#remote(client),
          link,
        });
        for (const text of role.early.splice(0)) link.receive(text);
      }),
    );
  }

  #disconnected(client: Client): void {
    const role = this.#roles.get(client);
    if (role?.kind === 'operator') {
      this.#operators.delete(client);
      this.#logger.info({ clientId: client.id }, 'MQTT operator disconnected');
      return;
    }
    if (role?.kind !== 'device') return;
    const ending = this.#endings.get(client);
    role.link?.end(ending === undefined ? 'disconnected' : `connection dropped: ${ending}`);
  }

  /** Runs a broker callback; what it throws is logged, never thrown into aedes. */
  #guard(what: string, run: () => void): void {
    try {
      run();
    } catch (error) {
      this.#logger.error({ err: error }, `handling ${what} failed`);
    }
  }
}
