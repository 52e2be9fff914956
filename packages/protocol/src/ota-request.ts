/**
 * The OTA request (docs/protocol.md §7): the headers and the system-info JSON a device POSTs at
 * every boot, built on the device side and checked on the backend side.
 */

import { ProtocolError } from './errors.js';
import { describe, isObject } from './ota-json.js';

/** `chip_info` of the request body: `esp_chip_info()` as numbers. */
export interface OtaChipInfo {
  model: number;
  cores: number;
  revision: number;
  features: number;
}

/** `application` of the request body: the running image's app description. */
export interface OtaApplicationInfo {
  /** Project name, `xiaozhi` on stock builds (the board name is in `board.name`). */
  name: string;
  version: string;
  /** `<date>T<time>Z` from the app description, e.g. `Aug 20 2026T10:12:03Z`. */
  compile_time: string;
  idf_version: string;
  /** 64 lowercase hex digits. */
  elf_sha256: string;
}

/** One entry of `partition_table`. */
export interface OtaPartitionInfo {
  label: string;
  type: number;
  subtype: number;
  address: number;
  size: number;
}

/** `display` of the request body. */
export interface OtaDisplayInfo {
  monochrome?: boolean;
  width?: number;
  height?: number;
  [key: string]: unknown;
}

/**
 * `board` of the request body. Wi-Fi boards send `ssid`, `rssi`, `channel` and `ip` only when
 * not in Wi-Fi config mode; cellular boards send other members instead.
 */
export interface OtaBoardInfo {
  type: string;
  name?: string;
  ssid?: string;
  rssi?: number;
  channel?: number;
  ip?: string;
  mac?: string;
  [key: string]: unknown;
}

/** The system-info JSON a 2.4.x device POSTs as the OTA request body. */
export interface OtaRequestBody {
  version: 2;
  language: string;
  flash_size: number;
  /** A decimal string on 2.4.x (older firmware sent a number). */
  minimum_free_heap_size: string;
  /** Lowercase `aa:bb:cc:dd:ee:ff`, the same as the `Device-Id` header. */
  mac_address: string;
  /** The same as the `Client-Id` header. */
  uuid: string;
  chip_model_name: string;
  chip_info: OtaChipInfo;
  application: OtaApplicationInfo;
  partition_table: OtaPartitionInfo[];
  ota: { label: string };
  display?: OtaDisplayInfo;
  board: OtaBoardInfo;
}

/**
 * The headers of the OTA request, in the order the firmware sets them. A type alias, not an
 * interface, so it can be passed where a header record is expected.
 */
export type OtaRequestHeaders = {
  /** `2` when the board has a serial number in eFuse (HMAC activation), else `1`. */
  'Activation-Version': '1' | '2';
  /** Lowercase Wi-Fi station MAC, `aa:bb:cc:dd:ee:ff`. */
  'Device-Id': string;
  /** The board UUID kept in NVS `board/uuid`. */
  'Client-Id': string;
  'Serial-Number'?: string;
  /** `<board name>/<firmware version>`. */
  'User-Agent': string;
  'Accept-Language': string;
  'Content-Type': 'application/json';
};

/** What {@link buildOtaRequestHeaders} needs to know about a device. */
export interface OtaDeviceInfo {
  /** Wi-Fi station MAC; any case, sent in lowercase. */
  macAddress: string;
  uuid: string;
  /** Board name (`BOARD_NAME`), e.g. `bread-compact-wifi`. */
  board: string;
  /** Firmware version, e.g. `2.4.2`. */
  version: string;
  /** Language code, e.g. `zh-CN`. */
  language: string;
  /** eFuse serial number; its presence switches `Activation-Version` to 2. */
  serialNumber?: string;
}

const MAC_PATTERN = /^[0-9a-f]{2}(?::[0-9a-f]{2}){5}$/;
const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function invalid(field: string, message: string, cause?: unknown): ProtocolError {
  return new ProtocolError(
    'OTA_INVALID',
    message,
    cause === undefined ? { field } : { field, cause },
  );
}

/** The headers a device sends with its OTA request (device side, e.g. a virtual board). */
export function buildOtaRequestHeaders(info: OtaDeviceInfo): OtaRequestHeaders {
  const mac = info.macAddress.toLowerCase();
  if (!MAC_PATTERN.test(mac)) {
    throw invalid('Device-Id', `Device-Id "${info.macAddress}" is not a MAC address`);
  }
  const hasSerial = info.serialNumber !== undefined && info.serialNumber !== '';
  return {
    'Activation-Version': hasSerial ? '2' : '1',
    'Device-Id': mac,
    'Client-Id': info.uuid,
    ...(hasSerial ? { 'Serial-Number': info.serialNumber } : {}),
    'User-Agent': `${info.board}/${info.version}`,
    'Accept-Language': info.language,
    'Content-Type': 'application/json',
  };
}

/** Request headers as Node gives them (`IncomingHttpHeaders`), or a fetch `Headers`. */
export type OtaHeaderSource =
  | Readonly<Record<string, string | readonly string[] | undefined>>
  | { get(name: string): string | null };

/** The body as received; only `application.version` is guaranteed, narrow the rest yourself. */
export type ReceivedOtaRequestBody = Readonly<Record<string, unknown>> & {
  readonly application: Readonly<Record<string, unknown>> & { readonly version: string };
};

/** A checked OTA request, as a backend sees it. */
export interface OtaRequest {
  /** Lowercase MAC from `Device-Id`. */
  deviceId: string;
  /** UUID from `Client-Id`, as sent. */
  clientId: string;
  /** `1` when the header is absent (older firmware did not send it). */
  activationVersion: '1' | '2';
  serialNumber: string | undefined;
  userAgent: string | undefined;
  /** `Accept-Language`, else the body's `language`. */
  language: string | undefined;
  /** Board name from `User-Agent`, else the body's `board.name`, else `board.type`. */
  board: string | undefined;
  /** The running firmware version, from `application.version`. */
  version: string;
  elfSha256: string | undefined;
  body: ReceivedOtaRequestBody;
}

function headerGetter(headers: OtaHeaderSource): (name: string) => string | undefined {
  if (typeof headers.get === 'function') {
    const source = headers as { get(name: string): string | null };
    return (name) => source.get(name)?.trim() ?? undefined;
  }
  const record = headers as Readonly<Record<string, unknown>>;
  const lowered = new Map<string, unknown>();
  for (const [key, value] of Object.entries(record)) {
    if (!lowered.has(key.toLowerCase())) lowered.set(key.toLowerCase(), value);
  }
  return (name) => {
    const value = lowered.get(name.toLowerCase());
    const first = Array.isArray(value) ? (value as unknown[])[0] : value;
    return typeof first === 'string' ? first.trim() : undefined;
  };
}

function parseBody(body: unknown): Record<string, unknown> {
  let value = body;
  if (value instanceof Uint8Array) value = new TextDecoder().decode(value);
  if (typeof value === 'string') {
    if (value.trim() === '') throw invalid('body', 'OTA request body is empty');
    try {
      value = JSON.parse(value);
    } catch (error) {
      throw invalid('body', 'OTA request body is not valid JSON', error);
    }
  }
  if (!isObject(value)) {
    throw invalid('body', `OTA request body must be a JSON object, got ${describe(value)}`);
  }
  return value;
}

/**
 * Checks an OTA request on the backend side. Strict on what a backend relies on (`Device-Id`,
 * `Client-Id`, `application.version`, a known `Activation-Version`), tolerant of everything real
 * devices vary in (extra members, missing optional sections, config-mode boards without Wi-Fi
 * details). Throws `OTA_INVALID` naming the field.
 */
export function parseOtaRequest(input: { headers: OtaHeaderSource; body: unknown }): OtaRequest {
  // Plain JS callers may hand over anything; no headers reads as every header missing.
  const headers: unknown = (input as { headers?: unknown } | null | undefined)?.headers;
  const header = headerGetter(
    typeof headers === 'object' && headers !== null ? (headers as OtaHeaderSource) : {},
  );

  const deviceId = header('Device-Id');
  if (deviceId === undefined || deviceId === '') {
    throw invalid('Device-Id', 'Device-Id header is missing');
  }
  if (!MAC_PATTERN.test(deviceId)) {
    throw invalid(
      'Device-Id',
      `Device-Id "${deviceId}" is not a lowercase MAC (aa:bb:cc:dd:ee:ff)`,
    );
  }

  const clientId = header('Client-Id');
  if (clientId === undefined || clientId === '') {
    throw invalid('Client-Id', 'Client-Id header is missing');
  }
  if (!UUID_PATTERN.test(clientId)) {
    throw invalid('Client-Id', `Client-Id "${clientId}" is not a UUID`);
  }

  const activation = header('Activation-Version') ?? '1';
  if (activation !== '1' && activation !== '2') {
    throw invalid('Activation-Version', `Activation-Version "${activation}" is not 1 or 2`);
  }
  const serialHeader = header('Serial-Number');
  const serialNumber = serialHeader === '' ? undefined : serialHeader;
  if (activation === '2' && serialNumber === undefined) {
    // Version 2 activation signs a challenge with the serial's eFuse key; without it there is
    // nothing to activate.
    throw invalid('Serial-Number', 'Serial-Number header is missing with Activation-Version 2');
  }

  const body = parseBody(input.body);
  const application = body.application;
  if (!isObject(application)) {
    throw invalid(
      'body.application',
      `body.application must be an object, got ${describe(application)}`,
    );
  }
  const version = application.version;
  if (typeof version !== 'string' || version === '') {
    throw invalid(
      'body.application.version',
      `body.application.version must be a non-empty string, got ${describe(version)}`,
    );
  }

  const userAgent = header('User-Agent');
  const boardInfo = isObject(body.board) ? body.board : {};
  const fromAgent = userAgent === undefined ? undefined : /^(.+)\/[^/]*$/.exec(userAgent)?.[1];
  const board =
    fromAgent ??
    (typeof boardInfo.name === 'string' ? boardInfo.name : undefined) ??
    (typeof boardInfo.type === 'string' ? boardInfo.type : undefined);
  const language =
    header('Accept-Language') ?? (typeof body.language === 'string' ? body.language : undefined);

  return {
    deviceId,
    clientId,
    activationVersion: activation,
    serialNumber,
    userAgent,
    language,
    board,
    version,
    elfSha256: typeof application.elf_sha256 === 'string' ? application.elf_sha256 : undefined,
    body: body as ReceivedOtaRequestBody,
  };
}
