// The MQTT echo baseline's server side: a bare aedes broker on a TCP listener, with the same
// topic layout as the embedded broker (docs/protocol.md §5) and nothing else: no logins, no
// packet bound, no sessions or registry. Each client is subscribed by the broker to
// `devices/p2p/<mac_>` (boards never subscribe), and what it publishes on `device-server/<mac_>`
// is read here. Its first publish (the hello) is echoed back to its delivery topic; after that
// the server is the one sending: `roundTrip(i)` publishes a frame shaped like a real `tools/call`
// envelope to client i's delivery topic and resolves when the client publishes it back.
import { once } from 'node:events';
import { type AddressInfo, createServer, type Server } from 'node:net';
import { encodeEnvelope, encodeRequest } from '@xiaozhi-mcp/protocol';
import { Aedes, type Client, type PublishPacket } from 'aedes';

/** Echo clients connect with this client id, then their MAC with underscores (`aa_bb_…`). */
export const ECHO_CLIENT_PREFIX = 'echo@@@';

interface Connection {
  client: Client;
  /** Where the broker delivers to the client (the server sends here). */
  deliveryTopic: string;
  /** Where the client publishes (the server reads here). */
  publishTopic: string;
  sessionId: string;
  nextId: number;
  subscribed: boolean;
  /** The hello, when it came before the broker's subscription for the client was in place. */
  earlyHello: Buffer | undefined;
  helloEchoed: boolean;
  /** Round trips in flight by request id: called with nothing on the echo, or with an error. */
  pending: Map<number, (error?: Error) => void>;
}

export class MqttEchoBroker {
  /** Connections whose hello has been echoed, in that order. */
  conns: Connection[] = [];
  hellos = 0;
  #aedes!: Aedes;
  #server!: Server;
  #byClient = new WeakMap<Client, Connection>();
  #onHello: (hellos: number) => void = () => {};

  static async start(onHello: (hellos: number) => void = () => {}): Promise<MqttEchoBroker> {
    const echo = new MqttEchoBroker();
    echo.#onHello = onHello;
    echo.#aedes = new Aedes({
      published: (packet, client, callback) => {
        if (client !== null) echo.#published(packet, client);
        callback(null);
      },
    });
    (echo.#aedes as unknown as NodeJS.EventEmitter).on('error', () => {});
    // 'client' comes before the CONNACK, so a publish right after it finds its connection;
    // 'clientReady' after it, where the embedded broker subscribes a board too.
    echo.#aedes.on('client', (client) => echo.#register(client));
    echo.#aedes.on('clientReady', (client) => echo.#ready(client));
    echo.#aedes.on('clientDisconnect', (client) => echo.#gone(client));
    await echo.#aedes.listen();
    echo.#server = createServer((socket) => {
      socket.on('error', () => {});
      // The embedded broker's socket setting (as `ws` sets it on both sides of the WebSocket echo).
      socket.setNoDelay(true);
      echo.#aedes.handle(socket);
    });
    // The embedded broker's backlog, so both storms meet the same accept queue.
    echo.#server.listen({ host: '127.0.0.1', port: 0, backlog: 4096 });
    await once(echo.#server, 'listening');
    return echo;
  }

  get url() {
    return `mqtt://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  /** Clients connected to the broker. */
  get connections() {
    return this.#aedes.connectedClients;
  }

  #register(client: Client) {
    const mac = client.id.startsWith(ECHO_CLIENT_PREFIX)
      ? client.id.slice(ECHO_CLIENT_PREFIX.length)
      : client.id;
    const conn: Connection = {
      client,
      deliveryTopic: `devices/p2p/${mac}`,
      publishTopic: `device-server/${mac}`,
      sessionId: crypto.randomUUID(),
      nextId: 1,
      subscribed: false,
      earlyHello: undefined,
      helloEchoed: false,
      pending: new Map(),
    };
    this.#byClient.set(client, conn);
  }

  #ready(client: Client) {
    const conn = this.#byClient.get(client);
    if (conn === undefined) return;
    // As the embedded broker does for a board: it subscribes the client to its delivery topic.
    client.subscribe({ topic: conn.deliveryTopic, qos: 0 }, (error) => {
      if (error !== undefined) {
        client.close();
        return;
      }
      conn.subscribed = true;
      if (conn.earlyHello !== undefined) this.#echoHello(conn, conn.earlyHello);
      conn.earlyHello = undefined;
    });
  }

  #published(packet: PublishPacket, client: Client) {
    const conn = this.#byClient.get(client);
    if (conn === undefined || packet.topic !== conn.publishTopic) return;
    const payload = Buffer.isBuffer(packet.payload)
      ? packet.payload
      : Buffer.from(packet.payload as string);
    if (!conn.helloEchoed) {
      if (conn.subscribed) this.#echoHello(conn, payload);
      else conn.earlyHello ??= payload;
      return;
    }
    // Read the id back, as the session reads its reply: one JSON.parse of the echoed frame.
    const id = JSON.parse(payload.toString()).payload.id;
    const resolve = conn.pending.get(id);
    if (resolve !== undefined) {
      conn.pending.delete(id);
      resolve();
    }
  }

  #echoHello(conn: Connection, payload: Buffer) {
    conn.helloEchoed = true;
    this.#deliver(conn, payload);
    this.hellos++;
    this.conns.push(conn);
    this.#onHello(this.hellos);
  }

  #deliver(conn: Connection, payload: Buffer, done?: (error?: Error) => void) {
    this.#aedes.publish(
      { cmd: 'publish', topic: conn.deliveryTopic, payload, qos: 0, retain: false, dup: false },
      (error) => done?.(error ?? undefined),
    );
  }

  #gone(client: Client) {
    const conn = this.#byClient.get(client);
    if (conn === undefined) return;
    for (const resolve of conn.pending.values()) resolve(new Error('echo connection closed'));
    conn.pending.clear();
  }

  /** One round trip of a tools/call-sized frame over connection `i % conns`. */
  roundTrip(i: number, tool: string, args: Record<string, unknown>): Promise<void> {
    const conn = this.conns[i % this.conns.length] as Connection;
    const id = conn.nextId++;
    return new Promise((resolve, reject) => {
      conn.pending.set(id, (error) => (error ? reject(error) : resolve()));
      const text = encodeEnvelope(
        conn.sessionId,
        encodeRequest(id, 'tools/call', { name: tool, arguments: args }),
      );
      this.#deliver(conn, Buffer.from(text, 'utf8'), (error) => {
        if (error === undefined) return;
        conn.pending.delete(id);
        reject(error);
      });
    });
  }

  async stop() {
    // The server side closes first (aedes ends every client connection), as in the other phases.
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    await new Promise<void>((resolve) => this.#aedes.close(() => resolve()));
    await closed;
    this.conns = [];
  }
}
