/**
 * The backend boards connect to: one HTTP server for the OTA endpoint, firmware downloads,
 * the JSON API and the WebSocket upgrade, on one port (loopback unless told otherwise); and,
 * when MQTT is on (`mqttBroker`), the embedded MQTT broker and the UDP audio endpoint on their
 * own ports of the same host.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { type Logger, pino } from 'pino';
import { type ApiControls, handleApi } from './api.js';
import { assertConfigSafe, resolveConfig, type ServerConfig } from './config.js';
import type { DeviceTransport } from './device-link.js';
import { ServerError } from './errors.js';
import { FirmwareStore } from './firmware-store.js';
import { Gateway, tokenOf } from './gateway.js';
import { HttpError, OriginPolicy, replyError, sendJson } from './http.js';
import { MqttBroker } from './mqtt-broker.js';
import { MqttGateway } from './mqtt-gateway.js';
import { OtaEndpoint } from './ota-endpoint.js';
import { DeviceRegistry } from './registry.js';
import { oneOfSecrets } from './secret.js';
import { type AudioSessionStats, answerUdpHello, UdpAudioEndpoint } from './udp-audio.js';

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;
/**
 * The longest keep-alive a client may ask of the broker: an hour (or the configured one, when
 * longer). A connection without keep-alive (0) is refused: it could sit idle for ever.
 */
const MQTT_KEEPALIVE_LIMIT_S = 3600;

/**
 * How often Node looks for connections past `headersTimeout`/`requestTimeout` (its default,
 * 30 s, would let a slow client hold a connection far longer than the bound).
 */
function checkingInterval(config: ServerConfig): number {
  return Math.max(
    10,
    Math.min(1000, Math.floor(Math.min(config.headersTimeoutMs, config.requestTimeoutMs) / 4)),
  );
}

export interface ServerUrls {
  readonly http: string;
  readonly ota: string;
  readonly websocket: string;
  readonly api: string;
  /** `mqtt://host:port` of the embedded broker, as boards reach it; undefined when MQTT is off. */
  readonly mqtt: string | undefined;
  /** `udp://host:port` of the UDP audio endpoint; undefined when MQTT is off. */
  readonly udp: string | undefined;
}

export interface StartOptions extends Partial<ServerConfig> {
  /** Firmware to offer, in addition to `firmwareDir`. */
  readonly firmware?: FirmwareStore;
  /** A pino logger; default: pino to stderr at `logLevel`. */
  readonly logger?: Logger;
}

export class XiaozhiServer {
  readonly config: ServerConfig;
  readonly registry: DeviceRegistry;
  readonly firmware: FirmwareStore;
  readonly logger: Logger;
  readonly #http: Server;
  #gateway: Gateway | undefined;
  #ota: OtaEndpoint | undefined;
  #urls: ServerUrls | undefined;
  #origins: OriginPolicy | undefined;
  #mqtt: MqttBroker | undefined;
  #mqttGateway: MqttGateway | undefined;
  #udp: UdpAudioEndpoint | undefined;
  /** Devices offered another transport than the configured one, oldest first. */
  readonly #transports = new Map<string, DeviceTransport>();

  private constructor(config: ServerConfig, firmware: FirmwareStore, logger: Logger) {
    this.config = config;
    this.firmware = firmware;
    this.logger = logger;
    this.registry = new DeviceRegistry({
      ...(config.vision === undefined ? {} : { vision: config.vision }),
      maxDevices: config.maxDevices,
      offlineDeviceTtlMs: config.offlineDeviceTtlMs,
      logger,
    });
    this.#http = createServer(
      {
        headersTimeout: config.headersTimeoutMs,
        requestTimeout: config.requestTimeoutMs,
        connectionsCheckingInterval: checkingInterval(config),
      },
      (req, res) => this.#onRequest(req, res),
    );
    // 0: no cap (Node's own reading of 0).
    this.#http.maxConnections = config.maxConnections;
    this.#http.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
      this.#onUpgrade(req, socket, head),
    );
  }

  /** Validates the configuration (refusing hazards), loads firmware, and listens. */
  static async start(options: StartOptions = {}): Promise<XiaozhiServer> {
    const config = resolveConfig(options);
    const logger = options.logger ?? pino({ level: config.logLevel }, pino.destination(2));
    const firmware =
      options.firmware ??
      (config.firmwareDir === undefined
        ? new FirmwareStore()
        : FirmwareStore.fromDirectory(config.firmwareDir));
    if (options.firmware !== undefined && config.firmwareDir !== undefined) {
      for (const image of FirmwareStore.fromDirectory(config.firmwareDir).list())
        firmware.add(image.bytes, {
          name: image.name,
          ...(image.board ? { board: image.board } : {}),
        });
    }
    const server = new XiaozhiServer(config, firmware, logger);
    // Checked with the URL boards would get before a port is known; checked again once listening.
    assertConfigSafe(config, server.#baseUrls(config.port === 0 ? 65535 : config.port).websocket);
    // A deep accept queue: a rig of boards rebooting together is a connect storm.
    server.#http.listen({ port: config.port, host: config.host, backlog: 4096 });
    try {
      await Promise.race([
        once(server.#http, 'listening'),
        once(server.#http, 'error').then(([error]) => Promise.reject(error)),
      ]);
    } catch (error) {
      throw new ServerError(
        'LISTEN_FAILED',
        `cannot listen on ${config.host}:${config.port}: ${(error as Error).message}`,
        { cause: error },
      );
    }
    let urls = server.#baseUrls((server.#http.address() as AddressInfo).port);
    try {
      assertConfigSafe(config, urls.websocket);
      if (config.mqttBroker) urls = await server.#startMqtt(urls);
    } catch (error) {
      await server.stop();
      throw error;
    }
    server.#urls = urls;
    server.#origins = new OriginPolicy({
      host: config.host,
      port: server.port,
      publicUrl: config.publicUrl,
      allowed: config.allowedOrigins,
    });
    server.#ota = new OtaEndpoint(
      config,
      server.registry,
      firmware,
      {
        websocket: urls.websocket,
        mqtt:
          server.#mqtt === undefined ? undefined : server.#mqttEndpoint(server.#mqtt.address.port),
        firmware: (name) =>
          `${urls.http}${config.prefix}/firmware/${name.split('/').map(encodeURIComponent).join('/')}`,
      },
      logger,
      (deviceId) => server.transportFor(deviceId),
    );
    server.#gateway = new Gateway(
      config,
      server.registry,
      (deviceId, token) => server.#isTokenValid(deviceId, token),
      logger,
    );
    logger.info(
      {
        ...urls,
        transport: config.transport,
        auth: config.auth,
        firmware: firmware.list().map((f) => `${f.name} ${f.version}`),
      },
      'xiaozhi-mcp server listening',
    );
    return server;
  }

  /** What the API reaches of the server beyond the registry. */
  readonly #apiControls: ApiControls = {
    transportFor: (deviceId) => this.transportFor(deviceId),
    setTransport: (deviceId, transport) => this.setTransport(deviceId, transport),
    audioStatsFor: (deviceId) => this.audioStatsFor(deviceId),
  };

  get urls(): ServerUrls {
    if (this.#urls === undefined)
      throw new ServerError('LISTEN_FAILED', 'the server is not listening');
    return this.#urls;
  }

  get port(): number {
    return (this.#http.address() as AddressInfo).port;
  }

  /** Open WebSocket connections. */
  get connections(): number {
    return this.#gateway?.connections ?? 0;
  }

  /** Clients connected to the MQTT broker (boards and operators). */
  get mqttClients(): number {
    return this.#mqtt?.clients ?? 0;
  }

  /** The token the OTA endpoint issued to a device (tests and tools connect with it). */
  tokenFor(deviceId: string): string | undefined {
    return this.#ota?.tokenFor(deviceId);
  }

  /** The MQTT password the OTA endpoint issued to a device (tests and tools connect with it). */
  mqttPasswordFor(deviceId: string): string | undefined {
    return this.registry.credentials.mqttPasswordFor(deviceId);
  }

  /** The transport the OTA reply offers a device: its own, else the configured one. */
  transportFor(deviceId: string): DeviceTransport {
    return this.#transports.get(deviceId.toLowerCase()) ?? this.config.transport;
  }

  /**
   * Offers a device another transport from its next OTA check on (a board checks at every
   * boot): `mqtt` needs the broker (`mqttBroker`); `websocket` also blanks the MQTT endpoint the
   * board stored. Kept until changed or the server stops, whether the device is known or not;
   * at most `maxDevices` devices have their own (the oldest choice goes first).
   */
  setTransport(deviceId: string, transport: DeviceTransport): void {
    const id = deviceId.toLowerCase();
    if (!MAC.test(id))
      throw new ServerError(
        'CONFIG_INVALID',
        `a device id is the board MAC, aa:bb:cc:dd:ee:ff, got ${JSON.stringify(deviceId)}`,
      );
    if (transport !== 'websocket' && transport !== 'mqtt')
      throw new ServerError(
        'CONFIG_INVALID',
        `transport must be websocket or mqtt, got ${JSON.stringify(transport)}`,
      );
    if (transport === 'mqtt' && this.#mqtt === undefined)
      throw new ServerError(
        'CONFIG_INVALID',
        'this server runs no MQTT broker: start it with mqttBroker (--transport mqtt, or --mqtt-port)',
      );
    this.#transports.delete(id);
    if (transport !== this.config.transport) this.#transports.set(id, transport);
    for (const oldest of this.#transports.keys()) {
      if (this.#transports.size <= this.config.maxDevices) break;
      this.#transports.delete(oldest);
    }
    this.logger.info({ deviceId: id, transport }, 'transport offered to the device');
  }

  /** The latest audio session of a device on MQTT (open or closed), if any. */
  audioStatsFor(deviceId: string): AudioSessionStats | undefined {
    return this.#udp?.statsForDevice(deviceId.toLowerCase());
  }

  /**
   * Ends a device's audio session from our side: `{"session_id":S,"type":"goodbye"}` to the
   * board over MQTT. False when it has none open.
   */
  endAudioSession(deviceId: string): boolean {
    return this.#mqttGateway?.endAudioSession(deviceId) ?? false;
  }

  async stop(): Promise<void> {
    this.#gateway?.close();
    this.registry.close();
    this.#http.closeAllConnections();
    await Promise.all([
      new Promise<void>((resolve) => this.#http.close(() => resolve())),
      this.#mqtt?.stop(),
      this.#udp?.stop(),
    ]);
  }

  /** Starts the broker and the UDP endpoint; the URLs with theirs. */
  async #startMqtt(urls: ServerUrls): Promise<ServerUrls> {
    const { config, registry, logger } = this;
    const boardHost = this.#boardHost();
    // Checked before binding, with the port boards would be given, then again once bound.
    assertConfigSafe(config, urls.websocket, this.#mqttEndpoint(config.mqttPort || 65535));
    this.#udp = await UdpAudioEndpoint.start({
      host: config.host,
      port: config.udpPort,
      publicHost: boardHost,
      log: logger,
    });
    const udp = this.#udp;
    this.#mqttGateway = new MqttGateway(config, registry, logger, {
      open: (deviceId, hello) => answerUdpHello(udp, deviceId, hello),
      close: (sessionId) => {
        udp.close(sessionId);
      },
    });
    const gateway = this.#mqttGateway;
    this.#mqtt = await MqttBroker.start({
      host: config.host,
      port: config.mqttPort,
      maxConnections: config.maxConnections,
      maxPacketBytes: config.maxFrameBytes,
      connectTimeoutMs: config.headersTimeoutMs,
      keepaliveLimitS: Math.max(MQTT_KEEPALIVE_LIMIT_S, config.mqttKeepaliveS),
      devices: {
        passwordValid: (deviceId, password) =>
          config.auth === 'off' ||
          oneOfSecrets(
            password,
            [...config.tokens, registry.credentials.mqttPasswordFor(deviceId) ?? []].flat(),
          ),
        acceptsClient: (deviceId, clientId) => registry.acceptsClient(deviceId, clientId),
        pinnedClientId: (deviceId) => registry.get(deviceId)?.clientId,
      },
      operatorPasswords: config.apiTokens,
      onDevice: (device) => gateway.accept(device),
      logger,
    });
    const port = this.#mqtt.address.port;
    assertConfigSafe(config, urls.websocket, this.#mqttEndpoint(port));
    const host = boardHost.includes(':') ? `[${boardHost}]` : boardHost;
    return {
      ...urls,
      mqtt: `mqtt://${host}:${port}`,
      udp: `udp://${host}:${udp.address.port}`,
    };
  }

  /** The host boards reach us at: that of `publicUrl`, else the bound one. */
  #boardHost(): string {
    const { publicUrl, host } = this.config;
    return publicUrl === undefined ? host : new URL(publicUrl).hostname.replace(/^\[(.*)\]$/, '$1');
  }

  /**
   * `mqtt.endpoint` for boards: `host:port` (the firmware takes what follows the first `:` as
   * the port, so an IPv6 host cannot be given; the validator refuses it at start).
   */
  #mqttEndpoint(port: number): string {
    return `${this.#boardHost()}:${port}`;
  }

  #baseUrls(port: number): ServerUrls {
    const http =
      this.config.publicUrl ??
      `http://${this.config.host.includes(':') ? `[${this.config.host}]` : this.config.host}:${port}`;
    return {
      http,
      ota: `${http}${this.config.prefix}/ota/`,
      websocket: `${http.replace(/^http/, 'ws')}${this.config.prefix}/v1/`,
      api: `${http}${this.config.apiPrefix}`,
      mqtt: undefined,
      udp: undefined,
    };
  }

  #isTokenValid(deviceId: string, token: string | undefined): boolean {
    return oneOfSecrets(token, [...this.config.tokens, this.#ota?.tokenFor(deviceId) ?? []].flat());
  }

  /** Every request is guarded: whatever its handler throws is answered here, never reaching the process. */
  #onRequest(req: IncomingMessage, res: ServerResponse): void {
    this.#route(req, res).catch((error: unknown) => {
      try {
        if (res.headersSent) {
          res.destroy();
          return;
        }
        if (error instanceof HttpError) {
          replyError(res, error.status, error.code, error.message);
          return;
        }
        this.logger.error({ err: error, method: req.method, url: req.url }, 'request failed');
        replyError(res, 500, 'INTERNAL', 'the server failed to answer this request');
      } catch {
        res.destroy();
      }
    });
  }

  /** Guarded like requests: a failure closes the socket; it never escapes. */
  #onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    // Node stops listening for this socket's errors once it is an upgrade: a client that resets
    // now would otherwise raise an uncaught error.
    socket.on('error', () => socket.destroy());
    try {
      const path = (req.url ?? '').split('?')[0] ?? '';
      const wsPath = `${this.config.prefix}/v1`;
      if (this.#gateway === undefined) {
        socket.destroy();
        return;
      }
      if (path !== wsPath && path !== `${wsPath}/`) {
        this.#gateway.refuse(socket, 404);
        return;
      }
      this.#gateway.handleUpgrade(req, socket, head);
    } catch (error) {
      this.logger.error({ err: error, url: req.url }, 'WebSocket upgrade failed');
      socket.destroy();
    }
  }

  /**
   * The API's front door: a request from another origin or for a foreign Host is refused
   * before anything else (its body is never read), then one without an API token.
   */
  #admitApi(req: IncomingMessage, res: ServerResponse): boolean {
    const refusal = this.#origins?.refusal(req.headers.origin, req.headers.host);
    if (refusal !== undefined) {
      this.logger.warn(
        { origin: req.headers.origin, host: req.headers.host, remote: req.socket.remoteAddress },
        'API request refused: foreign Origin or Host',
      );
      replyError(res, 403, 'FORBIDDEN_ORIGIN', refusal);
      return false;
    }
    const { apiTokens } = this.config;
    if (apiTokens.length > 0 && !oneOfSecrets(tokenOf(req.headers.authorization), apiTokens)) {
      sendJson(
        res,
        401,
        {
          error: {
            code: 'UNAUTHORIZED',
            message: 'the API needs one of the API tokens as a Bearer token',
          },
        },
        { 'WWW-Authenticate': 'Bearer' },
      );
      return false;
    }
    return true;
  }

  async #route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const { prefix, apiPrefix } = this.config;
    try {
      decodeURIComponent(path);
    } catch {
      throw new HttpError(400, `malformed %-escape in the path ${JSON.stringify(path)}`);
    }
    if (path === `${prefix}/ota` || path === `${prefix}/ota/`)
      return this.#ota?.handle(req, res, false);
    if (path === `${prefix}/ota/activate` || path === `${prefix}/ota/activate/`)
      return this.#ota?.handle(req, res, true);
    if (path.startsWith(`${prefix}/firmware/`) && req.method === 'GET') {
      const image = this.firmware.get(
        path.slice(`${prefix}/firmware/`.length).split('/').map(decodeURIComponent).join('/'),
      );
      if (image === undefined) {
        sendJson(res, 404, { error: 'no such firmware' });
        return;
      }
      // The firmware's downloader needs a Content-Length: never chunked.
      res.writeHead(200, {
        'Content-Type': 'application/octet-stream',
        'Content-Length': image.size,
      });
      res.end(image.bytes);
      return;
    }
    if (path === apiPrefix || path.startsWith(`${apiPrefix}/`)) {
      if (!this.#admitApi(req, res)) return;
      return handleApi(
        this.registry,
        (req.url ?? '/').slice(apiPrefix.length) || '/',
        req,
        res,
        this.#apiControls,
      );
    }
    sendJson(res, 404, { error: `nothing at ${path}` });
  }
}
