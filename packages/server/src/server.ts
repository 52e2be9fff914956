/**
 * The backend boards connect to: one HTTP server for the OTA endpoint, firmware downloads,
 * the JSON API and the WebSocket upgrade, on one port (loopback unless told otherwise).
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { type Logger, pino } from 'pino';
import { handleApi } from './api.js';
import { assertConfigSafe, resolveConfig, type ServerConfig } from './config.js';
import { ServerError } from './errors.js';
import { FirmwareStore } from './firmware-store.js';
import { Gateway, tokenOf } from './gateway.js';
import { HttpError, OriginPolicy, replyError, sendJson } from './http.js';
import { OtaEndpoint } from './ota-endpoint.js';
import { DeviceRegistry } from './registry.js';
import { oneOfSecrets } from './secret.js';

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
    const urls = server.#baseUrls((server.#http.address() as AddressInfo).port);
    assertConfigSafe(config, urls.websocket);
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
        firmware: (name) =>
          `${urls.http}${config.prefix}/firmware/${name.split('/').map(encodeURIComponent).join('/')}`,
      },
      logger,
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
        auth: config.auth,
        firmware: firmware.list().map((f) => `${f.name} ${f.version}`),
      },
      'xiaozhi-mcp server listening',
    );
    return server;
  }

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

  /** The token the OTA endpoint issued to a device (tests and tools connect with it). */
  tokenFor(deviceId: string): string | undefined {
    return this.#ota?.tokenFor(deviceId);
  }

  async stop(): Promise<void> {
    this.#gateway?.close();
    this.registry.close();
    this.#http.closeAllConnections();
    await new Promise<void>((resolve) => this.#http.close(() => resolve()));
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
      return handleApi(this.registry, (req.url ?? '/').slice(apiPrefix.length) || '/', req, res);
    }
    sendJson(res, 404, { error: `nothing at ${path}` });
  }
}
