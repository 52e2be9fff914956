/**
 * `POST {prefix}/ota/`: validates the board's request, records it, and answers with our
 * WebSocket URL and a per-device token, the server time (offset in minutes) and, when the
 * store has a newer image, a firmware offer. Every reply passes the hazard validator.
 * `POST {prefix}/ota/activate` answers 200: this server never asks for activation.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  assertSafeOtaReply,
  buildOtaReply,
  type OtaReply,
  type OtaReplyWebSocket,
  ProtocolError,
  parseOtaRequest,
} from '@xiaozhi-mcp/protocol';
import type { Logger } from 'pino';
import type { ServerConfig } from './config.js';
import type { FirmwareStore } from './firmware-store.js';
import { readBody, sendJson } from './http.js';
import type { DeviceRegistry } from './registry.js';

export class OtaEndpoint {
  /** Token issued to each device; the gateway accepts it on the upgrade. */
  readonly #tokens = new Map<string, string>();

  constructor(
    readonly config: ServerConfig,
    readonly registry: DeviceRegistry,
    readonly firmware: FirmwareStore,
    readonly urls: { websocket: string; firmware: (name: string) => string },
    readonly logger: Logger,
  ) {}

  /** The token issued to a device by its last OTA check. */
  tokenFor(deviceId: string): string | undefined {
    return this.#tokens.get(deviceId.toLowerCase());
  }

  async handle(req: IncomingMessage, res: ServerResponse, activate: boolean): Promise<void> {
    if (req.method !== 'POST') {
      sendJson(res, 405, { error: 'the OTA check is a POST with the system-info JSON body' });
      return;
    }
    const body = await readBody(req, 256 * 1024);
    if (activate) {
      sendJson(res, 200, {});
      return;
    }
    let request: ReturnType<typeof parseOtaRequest>;
    try {
      request = parseOtaRequest({ headers: req.headers, body });
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      this.logger.warn(
        { field: error.field, remote: req.socket.remoteAddress },
        `bad OTA request: ${error.message}`,
      );
      sendJson(res, 400, { error: error.message, field: error.field ?? null });
      return;
    }
    const chip =
      typeof request.body.chip_model_name === 'string' ? request.body.chip_model_name : undefined;
    const offer = this.firmware.offerFor({ chip, board: request.board, version: request.version });
    let token = this.#tokens.get(request.deviceId);
    if (token === undefined) {
      token = randomBytes(16).toString('hex');
      this.#tokens.set(request.deviceId, token);
    }
    let reply: OtaReply;
    try {
      reply = buildOtaReply(
        {
          websocket: { url: this.urls.websocket, token, version: this.config.websocketVersion },
          serverTime: { now: Date.now(), timezoneOffsetMinutes: this.config.timezoneOffsetMinutes },
          ...(offer === undefined
            ? {}
            : { firmware: { version: offer.version, url: this.urls.firmware(offer.name) } }),
        },
        { currentVersion: request.version },
      );
      if (Object.keys(this.config.websocketExtra).length > 0) {
        reply = {
          ...reply,
          websocket: { ...reply.websocket, ...this.config.websocketExtra } as OtaReplyWebSocket,
        };
      }
      assertSafeOtaReply(reply, { currentVersion: request.version });
    } catch (error) {
      // Never send a board what would crash it: answer 500 and let it retry.
      this.logger.error(
        { deviceId: request.deviceId, err: error },
        'refused to send an unsafe OTA reply',
      );
      sendJson(res, 500, {
        error: `the OTA reply for this device would be unsafe: ${(error as Error).message}`,
      });
      return;
    }
    this.registry.recordOtaCheck({
      at: new Date().toISOString(),
      deviceId: request.deviceId,
      clientId: request.clientId,
      board: request.board,
      version: request.version,
      elfSha256: request.elfSha256,
      remoteAddress: req.socket.remoteAddress,
      offered: offer?.version,
      body: request.body,
    });
    this.logger.info(
      {
        deviceId: request.deviceId,
        board: request.board,
        version: request.version,
        offered: offer?.version,
      },
      'OTA check',
    );
    // Boards close after the check; closing here frees the socket before the WebSocket opens.
    sendJson(res, 200, reply, { Connection: 'close' });
  }
}
