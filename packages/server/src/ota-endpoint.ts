/**
 * `POST {prefix}/ota/`: validates the board's request, records it, and answers with where to
 * connect, the server time (offset in minutes) and, when the store has a newer image, a
 * firmware offer. Where to connect is the transport offered to the device: our WebSocket URL
 * and a per-device token, with `"mqtt": {"endpoint": ""}` so that a board given MQTT before
 * comes back to WebSocket; or our broker's `mqtt{endpoint, client_id, username, password,
 * keepalive, publish_topic}` with a per-device password (issued once, kept with the record)
 * and no `websocket`. Every reply passes the hazard validator.
 *
 * Bounded: the body is at most `maxOtaBodyBytes` (413), and every field kept is short, as the
 * firmware's are (400 naming the field otherwise). A known device's token goes only to the
 * Client-Id it is pinned to (403 otherwise, logged).
 *
 * Opt-in activation (docs/protocol.md §7), when `activationKeys` is configured: a board whose
 * `Serial-Number` is listed gets `activation{message, code, challenge, timeout_ms}` and no
 * token until it POSTs `{prefix}/ota/activate` with the HMAC-SHA256 of the challenge under its
 * key. Without activation keys `/activate` answers 200, as this server never asks for it.
 */
import { createHmac, randomBytes, randomInt } from 'node:crypto';
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
import { clip } from './device-bounds.js';
import type { DeviceTransport } from './device-link.js';
import type { FirmwareStore } from './firmware-store.js';
import { pinnedMessage } from './gateway.js';
import { readBody, sendJson } from './http.js';
import { mqttClientId, publishTopic } from './mqtt-link.js';
import type { DeviceRegistry } from './registry.js';
import { sameSecret } from './secret.js';
import { SharedValues } from './tool-lists.js';

/**
 * Longest value kept per field, in UTF-8 bytes. The firmware's are short: `esp_app_desc_t`
 * holds 32-byte version, project name and IDF version strings, a MAC is 17 characters, a uuid
 * 36, an SSID at most 32 bytes. The limits leave room for other builds, not for payloads.
 */
export const OTA_FIELD_LIMITS: Readonly<Record<string, number>> = {
  'User-Agent': 256,
  'Serial-Number': 64,
  'Accept-Language': 64,
  'body.language': 32,
  'body.minimum_free_heap_size': 32,
  'body.mac_address': 32,
  'body.uuid': 64,
  'body.chip_model_name': 64,
  'body.application.name': 64,
  'body.application.version': 64,
  'body.application.compile_time': 64,
  'body.application.idf_version': 64,
  'body.application.elf_sha256': 128,
  'body.ota.label': 32,
  'body.board.type': 64,
  'body.board.name': 64,
  'body.board.ssid': 64,
  'body.board.ip': 64,
  'body.board.mac': 32,
  'body.partition_table[].label': 32,
};
/** Any other string in the body. */
export const OTA_STRING_MAX_BYTES = 256;
/** Entries of any array (`partition_table` has a handful). */
export const OTA_ARRAY_MAX = 32;
/** Members of any object. */
export const OTA_OBJECT_MAX_KEYS = 64;
/** Nesting of the body (`board.cereg` of a cellular board is 3 levels). */
export const OTA_MAX_DEPTH = 6;
/** Largest `/activate` body (its four fields are short). */
const ACTIVATE_BODY_MAX_BYTES = 4096;
/**
 * How long an activation challenge stays valid (the firmware tries 10 times, up to 10 s apart,
 * then checks again), and most pending at once.
 */
const CHALLENGE_TTL_MS = 5 * 60 * 1000;
/** `activation.timeout_ms`: the board's bound on each `/activate` POST. */
const ACTIVATION_TIMEOUT_MS = 30_000;
const MAX_PENDING_CHALLENGES = 1024;

interface Challenge {
  readonly deviceId: string;
  readonly clientId: string;
  readonly serial: string;
  readonly expiresAt: number;
}

class FieldError extends Error {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}

/** The limits of `OTA_FIELD_LIMITS` as a tree of members (`[]`: any entry of an array). */
interface LimitNode {
  limit: number | undefined;
  readonly members: Map<string, LimitNode>;
}

const BODY_LIMITS: LimitNode = (() => {
  const root: LimitNode = { limit: undefined, members: new Map() };
  for (const [pattern, limit] of Object.entries(OTA_FIELD_LIMITS)) {
    if (!pattern.startsWith('body.')) continue;
    let node = root;
    for (const step of pattern.slice('body.'.length).replaceAll('[]', '.[]').split('.')) {
      let next = node.members.get(step);
      if (next === undefined) {
        next = { limit: undefined, members: new Map() };
        node.members.set(step, next);
      }
      node = next;
    }
    node.limit = limit;
  }
  return root;
})();

/** The field's name for a message: `body.a.b[2].c`, built only when one is refused. */
function fieldName(path: readonly (string | number)[]): string {
  let field = 'body';
  for (const step of path) field += typeof step === 'number' ? `[${step}]` : `.${step}`;
  return field;
}

/**
 * Checks every field of the request body against its limit; throws `FieldError` naming it.
 * Bounded by depth before anything is walked deeper (so the recursion is at most
 * {@link OTA_MAX_DEPTH} deep); names are built only for a field that is refused.
 */
export function checkOtaBody(body: unknown): void {
  checkOtaValue(body, BODY_LIMITS, [], 1);
}

function checkOtaValue(
  value: unknown,
  limits: LimitNode | undefined,
  path: (string | number)[],
  depth: number,
): void {
  if (typeof value === 'string') {
    const limit = limits?.limit ?? OTA_STRING_MAX_BYTES;
    // A string of n UTF-16 units is at most 3n UTF-8 bytes: only a long one is counted.
    if (value.length * 3 <= limit) return;
    const bytes = Buffer.byteLength(value, 'utf8');
    if (bytes > limit) {
      const field = fieldName(path);
      throw new FieldError(field, `${field} is ${bytes} bytes, at most ${limit}`);
    }
    return;
  }
  if (typeof value !== 'object' || value === null) return;
  if (depth > OTA_MAX_DEPTH) {
    const field = fieldName(path);
    throw new FieldError(field, `${field} nests deeper than ${OTA_MAX_DEPTH} levels`);
  }
  if (Array.isArray(value)) {
    if (value.length > OTA_ARRAY_MAX) {
      const field = fieldName(path);
      throw new FieldError(field, `${field} has ${value.length} entries, at most ${OTA_ARRAY_MAX}`);
    }
    const entry = limits?.members.get('[]');
    // Last entry first, as the checks have always been made (the first breach found is named).
    for (let i = value.length - 1; i >= 0; i--) {
      path.push(i);
      checkOtaValue(value[i], entry, path, depth + 1);
      path.pop();
    }
    return;
  }
  const keys = Object.keys(value);
  if (keys.length > OTA_OBJECT_MAX_KEYS) {
    const field = fieldName(path);
    throw new FieldError(
      field,
      `${field} has ${keys.length} members, at most ${OTA_OBJECT_MAX_KEYS}`,
    );
  }
  for (const key of keys) {
    if (key.length * 3 > 64 && Buffer.byteLength(key, 'utf8') > 64) {
      const field = fieldName(path);
      throw new FieldError(field, `${field} has a member name over 64 bytes`);
    }
  }
  for (let i = keys.length - 1; i >= 0; i--) {
    const key = keys[i] as string;
    path.push(key);
    checkOtaValue(
      (value as Record<string, unknown>)[key],
      limits?.members.get(key),
      path,
      depth + 1,
    );
    path.pop();
  }
}

function checkHeaders(req: IncomingMessage): void {
  for (const name of ['User-Agent', 'Serial-Number', 'Accept-Language']) {
    const value = req.headers[name.toLowerCase()];
    const limit = OTA_FIELD_LIMITS[name] ?? OTA_STRING_MAX_BYTES;
    if (typeof value === 'string' && Buffer.byteLength(value, 'utf8') > limit)
      throw new FieldError(name, `${name} header is over ${limit} bytes`);
  }
}

/** The HMAC-SHA256 of the challenge under the board's key, lowercase hex, as the firmware sends it. */
export function activationHmac(keyHex: string, challenge: string): string {
  return createHmac('sha256', Buffer.from(keyHex, 'hex')).update(challenge, 'utf8').digest('hex');
}

export class OtaEndpoint {
  /** Pending activation challenges, oldest first. */
  readonly #challenges = new Map<string, Challenge>();
  /**
   * The object members of OTA bodies, shared between the checks that are kept: boards of one
   * build send the same `application`, `partition_table`, `ota`, `chip_info`..., so each device's
   * last check holds a reference to one frozen copy instead of its own.
   */
  readonly #sharedBodyMembers = new SharedValues();

  /**
   * `urls.mqtt`: the broker's `host:port` as boards reach it, when it runs. `transportFor`: the
   * transport offered to a device (the configured one unless the device has its own).
   */
  constructor(
    readonly config: ServerConfig,
    readonly registry: DeviceRegistry,
    readonly firmware: FirmwareStore,
    readonly urls: {
      websocket: string;
      mqtt?: string | undefined;
      firmware: (name: string) => string;
    },
    readonly logger: Logger,
    readonly transportFor: (deviceId: string) => DeviceTransport = () => config.transport,
  ) {}

  /** The token issued to a device by its OTA check (kept, and evicted, with its record). */
  tokenFor(deviceId: string): string | undefined {
    return this.registry.credentials.tokenFor(deviceId);
  }

  async handle(req: IncomingMessage, res: ServerResponse, activate: boolean): Promise<void> {
    if (req.method !== 'POST') {
      sendJson(res, 405, { error: 'the OTA check is a POST with the system-info JSON body' });
      return;
    }
    if (activate) return this.#activate(req, res);
    const body = await readBody(req, this.config.maxOtaBodyBytes);
    let request: ReturnType<typeof parseOtaRequest>;
    try {
      request = parseOtaRequest({ headers: req.headers, body });
      checkHeaders(req);
      checkOtaBody(request.body);
    } catch (error) {
      if (!(error instanceof ProtocolError) && !(error instanceof FieldError)) throw error;
      const field = error instanceof FieldError ? error.field : error.field;
      this.logger.warn(
        { field, remote: req.socket.remoteAddress },
        `bad OTA request: ${clip(error.message, 300)}`,
      );
      sendJson(res, 400, { error: error.message, field: field ?? null });
      return;
    }
    const { deviceId, clientId } = request;
    if (!this.registry.acceptsClient(deviceId, clientId)) {
      this.logger.warn(
        {
          deviceId,
          clientId,
          pinnedClientId: this.registry.get(deviceId)?.clientId,
          remote: req.socket.remoteAddress,
        },
        'OTA check refused: a known Device-Id with another Client-Id (a second client, or a re-flashed board)',
      );
      sendJson(res, 403, { error: pinnedMessage(deviceId), field: 'Client-Id' });
      return;
    }
    const chip =
      typeof request.body.chip_model_name === 'string' ? request.body.chip_model_name : undefined;
    const candidate = { chip, board: request.board, version: request.version, deviceId, clientId };
    const offer = this.firmware.offerFor(candidate);
    const withheld = this.firmware.withheldFrom(candidate);
    if (withheld !== undefined)
      this.logger.warn(
        {
          deviceId,
          clientId,
          board: request.board,
          version: request.version,
          withheld: withheld.name,
          remote: req.socket.remoteAddress,
        },
        `firmware ${withheld.version} (${withheld.name}) not offered: it is for other devices`,
      );
    const serial = request.serialNumber;
    const key =
      serial === undefined || this.config.activationKeys === undefined
        ? undefined
        : Object.hasOwn(this.config.activationKeys, serial)
          ? this.config.activationKeys[serial]
          : undefined;
    const activating = key !== undefined && this.registry.get(deviceId)?.activatedSerial !== serial;
    const challenge = activating ? randomBytes(32).toString('hex') : undefined;
    const token = activating
      ? undefined
      : (this.registry.credentials.tokenFor(deviceId) ?? randomBytes(16).toString('hex'));
    const mqttEndpoint = this.transportFor(deviceId) === 'mqtt' ? this.urls.mqtt : undefined;
    // Issued once per device, and kept while the device is offered WebSocket.
    const mqttPassword =
      activating || mqttEndpoint === undefined
        ? undefined
        : (this.registry.credentials.mqttPasswordFor(deviceId) ?? randomBytes(16).toString('hex'));
    let reply: OtaReply;
    try {
      reply = buildOtaReply(
        {
          // Until the board has answered its challenge it gets no token (and re-checks after).
          ...(challenge === undefined
            ? {}
            : {
                activation: {
                  message: `Activating ${serial} with its key`,
                  code: String(randomInt(0, 1_000_000)).padStart(6, '0'),
                  challenge,
                  timeoutMs: ACTIVATION_TIMEOUT_MS,
                },
              }),
          ...(token === undefined
            ? {}
            : mqttEndpoint !== undefined && mqttPassword !== undefined
              ? {
                  // Only mqtt: with both, a board uses MQTT anyway (docs/protocol.md §7).
                  mqtt: {
                    endpoint: mqttEndpoint,
                    clientId: mqttClientId(deviceId, clientId),
                    username: deviceId,
                    password: mqttPassword,
                    keepalive: this.config.mqttKeepaliveS,
                    publishTopic: publishTopic(deviceId),
                  },
                }
              : {
                  websocket: {
                    url: this.urls.websocket,
                    token,
                    version: this.config.websocketVersion,
                  },
                  // A stored, non-empty MQTT endpoint wins over the websocket url at boot and
                  // stored keys are never erased: blank it, for a board given MQTT before (by
                  // us, or by another backend).
                  mqtt: { endpoint: '' },
                }),
          serverTime: { now: Date.now(), timezoneOffsetMinutes: this.config.timezoneOffsetMinutes },
          ...(offer === undefined
            ? {}
            : { firmware: { version: offer.version, url: this.urls.firmware(offer.name) } }),
        },
        { currentVersion: request.version },
      );
      if (reply.websocket !== undefined && Object.keys(this.config.websocketExtra).length > 0) {
        reply = {
          ...reply,
          websocket: { ...reply.websocket, ...this.config.websocketExtra } as OtaReplyWebSocket,
        };
      }
      assertSafeOtaReply(reply, { currentVersion: request.version });
    } catch (error) {
      // Never send a board what would crash it: answer 500 and let it retry.
      this.logger.error({ deviceId, err: error }, 'refused to send an unsafe OTA reply');
      sendJson(res, 500, {
        error: `the OTA reply for this device would be unsafe: ${(error as Error).message}`,
      });
      return;
    }
    // Kept with the device's record: what boards of one build send alike is held once.
    const members = request.body as Record<string, unknown>;
    for (const key of Object.keys(members)) {
      const value = members[key];
      if (typeof value === 'object' && value !== null)
        members[key] = this.#sharedBodyMembers.share(value);
    }
    const recorded = this.registry.recordOtaCheck({
      at: new Date().toISOString(),
      deviceId,
      clientId,
      board: request.board,
      version: request.version,
      elfSha256: request.elfSha256,
      remoteAddress: req.socket.remoteAddress,
      offered: offer?.version,
      body: request.body,
    });
    if (!recorded) {
      sendJson(res, 403, { error: pinnedMessage(deviceId), field: 'Client-Id' });
      return;
    }
    // A board that must (re-)activate loses any token it had: the gateway refuses it meanwhile.
    this.registry.credentials.setToken(deviceId, token);
    if (activating) this.registry.credentials.setMqttPassword(deviceId, undefined);
    else if (mqttPassword !== undefined)
      this.registry.credentials.setMqttPassword(deviceId, mqttPassword);
    if (challenge !== undefined && serial !== undefined)
      this.#addChallenge(challenge, { deviceId, clientId, serial });
    this.logger.info(
      {
        deviceId,
        board: request.board,
        version: request.version,
        offered: offer?.version,
        transport:
          token === undefined ? undefined : mqttEndpoint === undefined ? 'websocket' : 'mqtt',
        ...(challenge === undefined ? {} : { activation: serial }),
      },
      'OTA check',
    );
    // Boards close after the check; closing here frees the socket before the WebSocket opens.
    sendJson(res, 200, reply, { Connection: 'close' });
  }

  #addChallenge(challenge: string, of: Omit<Challenge, 'expiresAt'>): void {
    const now = Date.now();
    // One pending challenge per device: a new check replaces the last one.
    for (const [key, pending] of this.#challenges) {
      if (pending.expiresAt <= now || pending.deviceId === of.deviceId)
        this.#challenges.delete(key);
    }
    this.#challenges.set(challenge, { ...of, expiresAt: now + CHALLENGE_TTL_MS });
    for (const key of this.#challenges.keys()) {
      if (this.#challenges.size <= MAX_PENDING_CHALLENGES) break;
      this.#challenges.delete(key);
    }
  }

  /**
   * `POST {prefix}/ota/activate`, the firmware's payload
   * `{"algorithm":"hmac-sha256","serial_number":SN,"challenge":C,"hmac":HEX}` with the OTA
   * check's `Device-Id`/`Client-Id`. 200: activated (the next OTA check gets a token); 403: a
   * wrong HMAC (the firmware retries, then re-checks); 404: no such challenge (or expired); 400:
   * a malformed request.
   */
  async #activate(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const text = await readBody(req, ACTIVATE_BODY_MAX_BYTES);
    if (this.config.activationKeys === undefined) {
      // This server never sent a challenge: nothing to check.
      sendJson(res, 200, {});
      return;
    }
    let payload: unknown;
    try {
      payload = JSON.parse(text);
    } catch {
      sendJson(res, 400, { error: 'the activation body is not JSON', field: 'body' });
      return;
    }
    const { algorithm, serial_number, challenge, hmac } = (
      typeof payload === 'object' && payload !== null ? payload : {}
    ) as Record<string, unknown>;
    for (const [field, value] of [
      ['serial_number', serial_number],
      ['challenge', challenge],
      ['hmac', hmac],
    ] as const) {
      // An empty `hmac` is what a chip without the HMAC peripheral sends: a wrong one, below.
      if (typeof value !== 'string' || (value === '' && field !== 'hmac') || value.length > 256) {
        sendJson(res, 400, {
          error: `body.${field} must be a short string`,
          field: `body.${field}`,
        });
        return;
      }
    }
    if (algorithm !== 'hmac-sha256') {
      sendJson(res, 400, {
        error: 'body.algorithm must be "hmac-sha256"',
        field: 'body.algorithm',
      });
      return;
    }
    const deviceId = String(req.headers['device-id'] ?? '').toLowerCase();
    const clientId = String(req.headers['client-id'] ?? '');
    const pending = this.#challenges.get(challenge as string);
    if (pending === undefined || pending.expiresAt <= Date.now()) {
      this.#challenges.delete(challenge as string);
      sendJson(res, 404, {
        error: 'no such activation challenge (or it expired): run the OTA check again',
        field: 'body.challenge',
      });
      return;
    }
    const key = Object.hasOwn(this.config.activationKeys, pending.serial)
      ? this.config.activationKeys[pending.serial]
      : undefined;
    // The challenge is the device's: its Device-Id, Client-Id and serial, and the HMAC of its key.
    const valid =
      key !== undefined &&
      pending.deviceId === deviceId &&
      sameSecret(clientId, pending.clientId) &&
      pending.serial === serial_number &&
      sameSecret((hmac as string).toLowerCase(), activationHmac(key, challenge as string));
    if (valid && this.registry.get(deviceId) === undefined) {
      sendJson(res, 404, {
        error: `device ${deviceId} was forgotten meanwhile: run the OTA check again`,
        field: 'Device-Id',
      });
      return;
    }
    if (!valid) {
      this.logger.warn(
        { deviceId, serial: clip(String(serial_number), 64), remote: req.socket.remoteAddress },
        'activation refused: wrong HMAC, or another device than the challenge was for',
      );
      sendJson(res, 403, {
        error: `activation refused for ${deviceId}: the HMAC does not match the challenge under the key of ${pending.serial}`,
      });
      return;
    }
    this.#challenges.delete(challenge as string);
    this.registry.markActivated(deviceId, pending.serial);
    this.logger.info({ deviceId, serial: pending.serial }, 'device activated');
    sendJson(res, 200, {});
  }
}
