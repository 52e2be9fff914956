/**
 * The device's OTA check, as the firmware's `Ota` class does it (docs/protocol.md §7): POST the
 * system info with the real headers, read the reply with cJSON rules, store the `websocket`
 * and `mqtt` members in NVS, and take the firmware offer and activation. Hazards in the reply
 * do to this client what they do to a board: a {@link BoardPanic}.
 */

import { createHmac } from 'node:crypto';
import {
  type CJsonNode,
  compareVersionSegments,
  cString,
  getItem,
  type OtaRequestBody,
  type OtaRequestHeaders,
  parseCJson,
  printCJson,
  readFirmwareVersion,
  toCInt,
} from '@xiaozhi-mcp/protocol';
import { type BoardHttpReply, boardHttp, readText } from './board-http.js';
import type { BoardConsole } from './console.js';
import { BoardPanic, DeviceError } from './errors.js';
import type { NvsStorage } from './nvs-storage.js';

export interface OtaActivation {
  readonly message: string | undefined;
  readonly code: string | undefined;
  readonly challenge: string | undefined;
  readonly timeoutMs: number | undefined;
}

/** What one successful check learnt. */
export interface OtaCheck {
  readonly hasWebsocket: boolean;
  readonly hasMqtt: boolean;
  /** Epoch milliseconds plus the timezone offset, as the firmware sets its clock. */
  readonly serverTime: number | undefined;
  readonly firmware: { readonly version: string; readonly url: string } | undefined;
  /** True when the offer is newer than the running version, or forced. */
  readonly hasNewVersion: boolean;
  readonly activation: OtaActivation | undefined;
}

export type ActivationOutcome = 'done' | 'retry' | 'failed';

/**
 * The largest OTA reply (check or activation) the board takes. The firmware reads the whole
 * reply into memory (`http->ReadAll()`) and then builds its cJSON tree, on a heap of a few
 * hundred KB: our model's bound (docs/protocol.md §7 gives none) is 64 KiB, far above any real
 * reply (under 2 KB). A larger reply fails the check as a failed HTTP read does.
 */
export const MAX_OTA_REPLY_BYTES = 64 * 1024;

/**
 * The largest app image a download is allowed to declare. The firmware streams the image into
 * its OTA partition (`esp_ota_write`, which refuses writes past the partition's end), so a
 * hostile Content-Length never reaches its RAM; the virtual board keeps the image in memory,
 * so it is bounded here: 16 MiB, the largest flash any preset has, above any app partition.
 */
export const MAX_OTA_IMAGE_BYTES = 16 * 1024 * 1024;

/** What a board with an eFuse serial number signs activation challenges with (docs/protocol.md §7). */
export interface ActivationIdentity {
  /** The serial number in eFuse USER_DATA (up to 32 bytes): sent as `Serial-Number`. */
  readonly serialNumber: string;
  /** The HMAC key in eFuse KEY0, hex; undefined when none is burnt (the HMAC then fails). */
  readonly key: string | undefined;
  /** False on chips without the HMAC peripheral (ESP32, ESP32-C2): `hmac` is sent empty. */
  readonly hasHmac: boolean;
}

/** HMAC-SHA256 of the challenge's bytes with the key, as `esp_hmac_calculate` and `%02x` give it. */
export function activationHmac(keyHex: string, challenge: string): string {
  return createHmac('sha256', Buffer.from(keyHex, 'hex')).update(challenge, 'utf8').digest('hex');
}

/**
 * `Ota::GetActivationPayload` for a board with a serial number: the four members in the order
 * the firmware adds them, printed as `cJSON_PrintUnformatted` prints them. Boards without a
 * serial number send `{}`.
 */
export function activationPayload(serialNumber: string, challenge: string, hmac: string): string {
  return printCJson({ algorithm: 'hmac-sha256', serial_number: serialNumber, challenge, hmac });
}

export interface OtaClientOptions {
  /** The running version, compared with the offer. */
  readonly currentVersion: string;
  readonly headers: () => OtaRequestHeaders;
  readonly body: () => OtaRequestBody;
  readonly storage: NvsStorage;
  readonly console: BoardConsole;
  /** Bound on each HTTP exchange. */
  readonly timeoutMs?: number;
  /** The board's eFuse serial number and key; without one, activation sends `{}`. */
  readonly activation?: ActivationIdentity;
}

/**
 * `Ota::IsNewVersionAvailable`. Both versions are read as a board reads them (the protocol
 * core's lax parse: `std::stoi` also takes leading spaces and a sign, and a trailing dot adds
 * no segment), since this client must behave like a board, not refuse what the OTA validator
 * refuses as unsafe. A segment `stoi` throws on aborts the board: a {@link BoardPanic}.
 */
export function isNewVersionAvailable(current: string, candidate: string): boolean {
  return compareVersionSegments(parseVersion(candidate), parseVersion(current)) > 0;
}

function parseVersion(version: string): number[] {
  const read = readFirmwareVersion(version, { lax: true });
  if (read.ok) return read.segments;
  throw new BoardPanic(
    'abort',
    `terminate called after throwing an instance of 'std::${read.exception}' what(): stoi ("${read.segment}")`,
  );
}

const str = (node: CJsonNode | undefined): string | undefined =>
  node?.kind === 'string' ? cString(node.value) : undefined;

export class OtaClient {
  readonly #options: OtaClientOptions;

  constructor(options: OtaClientOptions) {
    this.#options = options;
  }

  /** `Ota::CheckVersion` against `url`. Resolves undefined when the check failed (the board retries). */
  async check(url: string): Promise<OtaCheck | undefined> {
    const { console } = this.#options;
    console.log('I', 'Ota', `Current version: ${this.#options.currentVersion}`);
    if (url.length < 10) {
      console.log('E', 'Ota', 'Check version URL is not properly set');
      return undefined;
    }
    let text: string | undefined;
    try {
      const reply = await boardHttp(url, {
        method: 'POST',
        headers: this.#options.headers(),
        body: JSON.stringify(this.#options.body()),
        timeoutMs: this.#options.timeoutMs ?? 10_000,
      });
      if (reply.status !== 200) {
        reply.close();
        console.log('E', 'Ota', `Failed to check version, status code: ${reply.status}`);
        return undefined;
      }
      text = await readText(reply, MAX_OTA_REPLY_BYTES);
    } catch (error) {
      console.log('E', 'Ota', `Failed to open HTTP connection: ${(error as Error).message}`);
      return undefined;
    }
    if (text === undefined) {
      console.log('E', 'Ota', `Failed to read response: over ${MAX_OTA_REPLY_BYTES} bytes`);
      return undefined;
    }
    const root = parseCJson(text);
    if (root === undefined) {
      console.log('E', 'Ota', 'Failed to parse JSON response');
      return undefined;
    }
    return this.#apply(root);
  }

  #apply(root: CJsonNode): OtaCheck {
    const { console } = this.#options;
    const activationNode = getItem(root, 'activation');
    let activation: OtaActivation | undefined;
    if (activationNode?.kind === 'object') {
      const timeout = getItem(activationNode, 'timeout_ms');
      activation = {
        message: str(getItem(activationNode, 'message')),
        code: str(getItem(activationNode, 'code')),
        challenge: str(getItem(activationNode, 'challenge')),
        timeoutMs: timeout?.kind === 'number' ? toCInt(timeout.value) : undefined,
      };
      if (activation.code === undefined && activation.challenge === undefined)
        activation = undefined;
    }

    const hasMqtt = this.#store(root, 'mqtt');
    if (!hasMqtt) console.log('I', 'Ota', 'No mqtt section found !');
    const hasWebsocket = this.#store(root, 'websocket');
    if (!hasWebsocket) console.log('I', 'Ota', 'No websocket section found!');

    let serverTime: number | undefined;
    const time = getItem(root, 'server_time');
    if (time?.kind === 'object') {
      const timestamp = getItem(time, 'timestamp');
      const offset = getItem(time, 'timezone_offset');
      if (timestamp?.kind === 'number') {
        serverTime =
          timestamp.value + (offset?.kind === 'number' ? toCInt(offset.value) * 60_000 : 0);
      }
    } else {
      console.log('W', 'Ota', 'No server_time section found!');
    }

    let firmware: OtaCheck['firmware'];
    let hasNewVersion = false;
    const offer = getItem(root, 'firmware');
    if (offer?.kind === 'object') {
      const version = str(getItem(offer, 'version'));
      const url = str(getItem(offer, 'url'));
      if (version !== undefined && url !== undefined) {
        firmware = { version, url };
        hasNewVersion = isNewVersionAvailable(this.#options.currentVersion, version);
        console.log(
          'I',
          'Ota',
          hasNewVersion ? `New version available: ${version}` : 'Current is the latest version',
        );
        const force = getItem(offer, 'force');
        if (force?.kind === 'number' && toCInt(force.value) === 1) hasNewVersion = true;
      }
    } else {
      console.log('W', 'Ota', 'No firmware section found!');
    }
    return { hasWebsocket, hasMqtt, serverTime, firmware, hasNewVersion, activation };
  }

  /** Stores every string and number member of a section under its own key; NVS errors abort. */
  #store(root: CJsonNode, section: 'websocket' | 'mqtt'): boolean {
    const node = getItem(root, section);
    if (node?.kind !== 'object') return false;
    const settings = this.#options.storage.open(section);
    for (const [rawKey, value] of node.entries) {
      const key = cString(rawKey);
      try {
        if (value.kind === 'string' && settings.getString(key) !== cString(value.value)) {
          settings.setString(key, cString(value.value));
        } else if (value.kind === 'number' && settings.getInt(key) !== toCInt(value.value)) {
          settings.setInt(key, toCInt(value.value));
        }
      } catch (error) {
        // Settings::SetString wraps nvs_set_str in ESP_ERROR_CHECK.
        if (error instanceof DeviceError)
          throw new BoardPanic('abort', `ESP_ERROR_CHECK failed: ${error.message}`);
        throw error;
      }
    }
    return true;
  }

  /** `Ota::Activate`: POST `<url>/activate`; 202 means try again in a few seconds. */
  async activate(url: string, activation: OtaActivation | undefined): Promise<ActivationOutcome> {
    const { console } = this.#options;
    if (activation?.challenge === undefined) {
      console.log('W', 'Ota', 'No activation challenge found');
      return 'failed';
    }
    const target = url.endsWith('/') ? `${url}activate` : `${url}/activate`;
    try {
      const reply = await boardHttp(target, {
        method: 'POST',
        headers: this.#options.headers(),
        body: this.#payload(activation.challenge),
        timeoutMs: activation.timeoutMs ?? this.#options.timeoutMs ?? 10_000,
      });
      if (reply.status === 202 || reply.status === 200) reply.close();
      if (reply.status === 202) return 'retry';
      if (reply.status !== 200) {
        const body =
          (await readText(reply, MAX_OTA_REPLY_BYTES)) ?? `(over ${MAX_OTA_REPLY_BYTES} bytes)`;
        console.log('E', 'Ota', `Failed to activate, code: ${reply.status}, body: ${body}`);
        return 'failed';
      }
    } catch (error) {
      console.log('E', 'Ota', `Failed to open HTTP connection: ${(error as Error).message}`);
      return 'failed';
    }
    console.log('I', 'Ota', 'Activation successful');
    return 'done';
  }

  /** `Ota::GetActivationPayload`: `{}` without a serial number, or when the HMAC fails. */
  #payload(challenge: string): string {
    const identity = this.#options.activation;
    if (identity === undefined) return '{}';
    let hmac = '';
    if (identity.hasHmac) {
      if (identity.key === undefined) {
        // No key with the HMAC_UP purpose in KEY0: esp_hmac_calculate fails.
        this.#options.console.log('E', 'Ota', 'HMAC calculation failed: ESP_FAIL');
        return '{}';
      }
      hmac = activationHmac(identity.key, challenge);
    }
    return activationPayload(identity.serialNumber, challenge, hmac);
  }

  /** Downloads an app image: a plain GET that needs 200 and a Content-Length (no chunked replies). */
  async download(
    url: string,
    onProgress?: (received: number, total: number) => void,
    maxBytes: number = MAX_OTA_IMAGE_BYTES,
  ): Promise<Uint8Array> {
    let reply: BoardHttpReply;
    try {
      reply = await boardHttp(url, { method: 'GET', timeoutMs: this.#options.timeoutMs ?? 60_000 });
    } catch (error) {
      throw new DeviceError(
        'OTA_DOWNLOAD_FAILED',
        `Failed to open HTTP connection: ${(error as Error).message}`,
        { cause: error },
      );
    }
    if (reply.status !== 200) {
      reply.close();
      throw new DeviceError(
        'OTA_DOWNLOAD_FAILED',
        `Failed to download firmware, status code: ${reply.status}`,
      );
    }
    const total = Number(reply.header('content-length') ?? 0);
    if (!Number.isInteger(total) || total <= 0) {
      reply.close();
      throw new DeviceError('OTA_DOWNLOAD_FAILED', 'Failed to get content length');
    }
    if (total > maxBytes) {
      reply.close();
      throw new DeviceError(
        'OTA_DOWNLOAD_FAILED',
        `Image of ${total} bytes is larger than the ${maxBytes} bytes an app partition can hold`,
      );
    }
    const image = new Uint8Array(total);
    let received = 0;
    try {
      for await (const chunk of reply.body as AsyncIterable<Buffer>) {
        if (received + chunk.length > total)
          throw new DeviceError('OTA_DOWNLOAD_FAILED', 'Body longer than its Content-Length');
        image.set(chunk, received);
        received += chunk.length;
        onProgress?.(received, total);
      }
    } catch (error) {
      reply.close();
      if (error instanceof DeviceError) throw error;
      throw new DeviceError('OTA_DOWNLOAD_FAILED', `Download failed: ${(error as Error).message}`, {
        cause: error,
      });
    }
    if (received !== total)
      throw new DeviceError(
        'OTA_DOWNLOAD_FAILED',
        `Download ended at ${received} of ${total} bytes`,
      );
    return image;
  }
}
