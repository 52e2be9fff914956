/**
 * The OTA check (docs/protocol.md §7): the request a device POSTs at every boot, and the reply that
 * tells it where its backend is. The reply is written straight into NVS by the firmware, so a
 * careless reply can crash a real board on every boot; {@link validateOtaReply} refuses those.
 */

import { ProtocolError } from './errors.js';

// ---------------------------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------------------------

/**
 * Longest NVS key, in bytes (ESP-IDF `NVS_KEY_NAME_MAX_SIZE` is 16 including the NUL). The
 * firmware stores every member of `websocket` and `mqtt` under its own key; a longer key makes
 * `nvs_set_*` fail with `ESP_ERR_NVS_KEY_TOO_LONG`, `ESP_ERROR_CHECK` aborts, and since the same
 * reply comes back after the reboot, the board reboot-loops.
 */
export const OTA_NVS_KEY_MAX = 15;

/**
 * Longest NVS string value, in UTF-8 bytes. NVS strings hold at most 4000 bytes including the
 * terminating NUL (`ESP_ERR_NVS_VALUE_TOO_LONG` beyond), and the failed write aborts as above.
 */
export const OTA_NVS_STRING_MAX_BYTES = 3999;

/** Largest value `std::stoi` accepts for a firmware version segment (int32 on the ESP32). */
const INT32_MAX = 2_147_483_647;
const INT32_MIN = -2_147_483_648;

/** Real timezone offsets lie within ±14 h. */
const TIMEZONE_OFFSET_MAX_MINUTES = 14 * 60;

const encoder = new TextEncoder();

/** NVS limits count bytes (`strlen`), not characters. */
function utf8Length(text: string): number {
  return encoder.encode(text).length;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

// ---------------------------------------------------------------------------------------------
// Firmware versions
// ---------------------------------------------------------------------------------------------

/** The `std::stoi` exception a segment throws: no leading number, or past int32. */
export type StoiException = 'invalid_argument' | 'out_of_range';

export type FirmwareVersionRead =
  | {
      readonly ok: true;
      readonly segments: number[];
      /** Segments with text after their number, which `stoi` ignores (`"2rc1"` reads as 2). */
      readonly loose: string[];
    }
  | {
      readonly ok: false;
      /** Why, as a phrase after the version: `"1..2" has an empty segment`. */
      readonly reason: string;
      readonly segment: string;
      readonly exception: StoiException;
    };

export interface FirmwareVersionOptions {
  /**
   * Read exactly as a board does, for code that must behave like one (the virtual board):
   * `std::stoi` also skips leading whitespace and takes a sign, and the `std::getline` loop of
   * `Ota::ParseVersion` adds no segment for a trailing dot, so `" 2.+4."` reads as `[2, 4]`.
   * Off by default: the OTA validator refuses such versions, which parse only by accident.
   */
  readonly lax?: boolean;
}

type SegmentRead =
  | { ok: true; value: number; exact: boolean }
  | { ok: false; reason: string; exception: StoiException };

// `std::stoi`: isspace(), an optional sign, digits; the strict read wants the digits alone.
const STOI_SEGMENT = /^[ \t\n\v\f\r]*([+-]?)([0-9]+)/;
const STRICT_SEGMENT = /^()([0-9]+)/;

/** One dot-separated segment as `std::stoi` reads it: a leading number, anything after ignored. */
function readSegment(segment: string, lax: boolean): SegmentRead {
  const match = (lax ? STOI_SEGMENT : STRICT_SEGMENT).exec(segment);
  const digits = match?.[2];
  if (match === null || digits === undefined) {
    return {
      ok: false,
      exception: 'invalid_argument',
      reason:
        segment === ''
          ? 'has an empty segment'
          : `has a segment "${segment}" that does not start with a digit`,
    };
  }
  const negative = match[1] === '-';
  const significant = digits.replace(/^0+/, '');
  const magnitude = significant === '' ? 0 : Number(significant);
  // Past 10 digits Number() may round; the length test keeps the range check exact.
  if (significant.length > 10 || magnitude > (negative ? -INT32_MIN : INT32_MAX)) {
    return {
      ok: false,
      exception: 'out_of_range',
      reason: `has a segment "${segment}" that overflows a 32-bit int`,
    };
  }
  return {
    ok: true,
    value: negative ? -magnitude : magnitude,
    exact: match[0].length === segment.length,
  };
}

/**
 * Reads a firmware version segment by segment without throwing, saying which `std::stoi`
 * exception a board would abort with. Strictly (the default) every dot splits, so `""` and
 * `"1.2."` have an empty segment; see {@link FirmwareVersionOptions.lax} for a board's own read.
 */
export function readFirmwareVersion(
  version: string,
  options: FirmwareVersionOptions = {},
): FirmwareVersionRead {
  const lax = options.lax === true;
  const parts = version.split('.');
  if (lax && parts.at(-1) === '') parts.pop();
  const segments: number[] = [];
  const loose: string[] = [];
  for (const segment of parts) {
    const read = readSegment(segment, lax);
    if (!read.ok) return { ok: false, reason: read.reason, segment, exception: read.exception };
    segments.push(read.value);
    if (!read.exact) loose.push(segment);
  }
  return { ok: true, segments, loose };
}

/**
 * The segments of a firmware version as the firmware parses them (`Ota::ParseVersion`:
 * `std::stoi` on each dot-separated segment). Trailing text in a segment is ignored as `stoi`
 * does (`"2rc1"` reads as 2). Throws `OTA_INVALID` for a version the firmware would abort on,
 * and (unless `lax`) for one it reads only by accident (see {@link FirmwareVersionOptions}).
 */
export function parseFirmwareVersion(
  version: string,
  options: FirmwareVersionOptions = {},
): number[] {
  const read = readFirmwareVersion(version, options);
  if (!read.ok) {
    throw new ProtocolError('OTA_INVALID', `firmware version "${version}" ${read.reason}`);
  }
  return read.segments;
}

/**
 * Compares two firmware versions by the firmware's own rule (`Ota::IsNewVersionAvailable`):
 * segment by segment as integers, the first difference decides; when all common segments are
 * equal, the version with more segments is newer, so `2.4.0` is newer than `2.4`. Returns 1
 * when `a` is newer than `b`, -1 when older, 0 when neither is newer (`2.4.2` vs `2.04.2`).
 * Throws `OTA_INVALID` if either cannot be parsed (see {@link parseFirmwareVersion}).
 */
export function compareFirmwareVersions(a: string, b: string): -1 | 0 | 1 {
  return compareVersionSegments(parseFirmwareVersion(a), parseFirmwareVersion(b));
}

/** `Ota::IsNewVersionAvailable` on parsed segments: 1 when `a` is newer than `b`, -1 when older. */
export function compareVersionSegments(a: readonly number[], b: readonly number[]): -1 | 0 | 1 {
  const common = Math.min(a.length, b.length);
  for (let i = 0; i < common; i++) {
    const x = a[i] ?? 0;
    const y = b[i] ?? 0;
    if (x > y) return 1;
    if (x < y) return -1;
  }
  if (a.length === b.length) return 0;
  return a.length > b.length ? 1 : -1;
}

/** True when the device running `current` would upgrade to `candidate` without `force`. */
export function isNewFirmwareVersion(current: string, candidate: string): boolean {
  return compareFirmwareVersions(candidate, current) > 0;
}

// ---------------------------------------------------------------------------------------------
// The request
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// The reply
// ---------------------------------------------------------------------------------------------

/** `websocket`: stored in NVS namespace `websocket`; makes the device use WebSocket. */
export interface OtaReplyWebSocket {
  /** `ws://` or `wss://` (public CA bundle only). */
  url: string;
  /** Sent as `Authorization: Bearer <token>`; `""` clears a stored token. */
  token?: string;
  /** Binary protocol version; a **number**. */
  version?: 1 | 2 | 3;
}

/**
 * `mqtt`: stored in NVS namespace `mqtt`. At boot a stored, non-empty `endpoint` wins over a
 * stored websocket url, so `{"endpoint": ""}` next to `websocket` moves a board back to WebSocket.
 */
export interface OtaReplyMqtt {
  /**
   * `host[:port]` (the port is `std::stoi` of what follows the first `:`, so no IPv6 address);
   * without a port, 8883; TLS only on 8883. `""` blanks a stored endpoint.
   */
  endpoint: string;
  client_id?: string;
  username?: string;
  password?: string;
  /** Seconds; the device defaults to 240. */
  keepalive?: number;
  publish_topic?: string;
}

/** `server_time`: sets the device clock. */
export interface OtaReplyServerTime {
  /** Epoch milliseconds. */
  timestamp: number;
  /** Minutes east of UTC (480 for UTC+8), added to `timestamp` by the device. */
  timezone_offset?: number;
}

/** `firmware`: the device upgrades when `version` is newer or `force` is the number 1. */
export interface OtaReplyFirmware {
  version: string;
  /** Plain GET, 200 with `Content-Length`, the app image (`xiaozhi.bin`). */
  url: string;
  force?: number;
}

/** `activation`: shows and speaks a code; with `challenge`, the device POSTs `<ota_url>/activate`. */
export interface OtaReplyActivation {
  message: string;
  code: string;
  challenge?: string;
  timeout_ms?: number;
}

/** The OTA reply (HTTP 200, JSON object); every section is optional. */
export interface OtaReply {
  activation?: OtaReplyActivation;
  mqtt?: OtaReplyMqtt;
  websocket?: OtaReplyWebSocket;
  server_time?: OtaReplyServerTime;
  firmware?: OtaReplyFirmware;
}

/** What the backend knows about the device it answers. */
export interface OtaReplyContext {
  /** The version the device runs now (`application.version` of its request). */
  currentVersion?: string;
}

/**
 * - `hazard`: the reply can crash, boot-loop or upgrade-loop a real board.
 * - `error`: the device ignores or misreads a member; the reply will not do what is meant.
 * - `warning`: allowed, but probably a mistake.
 */
export type OtaFindingSeverity = 'hazard' | 'error' | 'warning';

export interface OtaFinding {
  /** Dotted path, e.g. `websocket.version`; `''` for the reply itself. */
  field: string;
  severity: OtaFindingSeverity;
  /** Starts with the field. */
  message: string;
}

type Report = (severity: OtaFindingSeverity, field: string, text: string) => void;

const WEBSOCKET_MEMBERS: Readonly<Record<string, 'string' | 'number'>> = {
  url: 'string',
  token: 'string',
  version: 'number',
};

const MQTT_MEMBERS: Readonly<Record<string, 'string' | 'number'>> = {
  endpoint: 'string',
  client_id: 'string',
  username: 'string',
  password: 'string',
  keepalive: 'number',
  publish_topic: 'string',
};

/** ASCII-only lowering, as cJSON's case-insensitive key compare does it. */
function asciiLower(text: string): string {
  return text.replace(/[A-Z]/g, (c) => c.toLowerCase());
}

/**
 * `cJSON_GetObjectItem` matches keys case-insensitively and takes the first match, so
 * `"Firmware"` is read as `firmware`; we look sections and members up the same way.
 */
function member(
  object: Record<string, unknown>,
  name: string,
  path: string,
  report: Report,
): { key: string; field: string; value: unknown } | undefined {
  let found: { key: string; field: string; value: unknown } | undefined;
  for (const [key, value] of Object.entries(object)) {
    if (asciiLower(key) !== name) continue;
    const field = path === '' ? key : `${path}.${key}`;
    if (found === undefined) {
      found = { key, field, value };
    } else {
      report('warning', field, `ignored: the device reads only the first "${name}" (${found.key})`);
    }
  }
  return found;
}

function section(
  reply: Record<string, unknown>,
  name: string,
  report: Report,
): { field: string; value: Record<string, unknown> } | undefined {
  const found = member(reply, name, '', report);
  if (found === undefined) return undefined;
  if (isObject(found.value)) return { field: found.field, value: found.value };
  if (found.value === null) {
    report('warning', found.field, 'is null; the device ignores it (omit the section instead)');
  } else {
    report('error', found.field, `must be an object, got ${describe(found.value)}; ignored`);
  }
  return undefined;
}

/**
 * The members of `websocket` / `mqtt`. The firmware writes every string member with
 * `nvs_set_str` and every number member with `nvs_set_i32`, each under the member's own key,
 * inside `ESP_ERROR_CHECK`: a write NVS refuses aborts the board, and it gets the same reply
 * after every reboot. Keys are never erased, so unknown members linger in NVS.
 */
function checkNvsSection(
  path: string,
  values: Record<string, unknown>,
  known: Readonly<Record<string, 'string' | 'number'>>,
  report: Report,
): void {
  for (const [key, value] of Object.entries(values)) {
    const field = `${path}.${key}`;
    const keyBytes = utf8Length(key);
    if (keyBytes > OTA_NVS_KEY_MAX) {
      // Refused whatever the value type: cheap, and the next firmware may store more types.
      report(
        'hazard',
        field,
        `key is ${keyBytes} bytes, NVS keys hold at most ${OTA_NVS_KEY_MAX}: the write fails, the firmware aborts and the board reboot-loops`,
      );
    }
    const expected = Object.hasOwn(known, key) ? known[key] : undefined;
    if (typeof value === 'string') {
      const bytes = utf8Length(value);
      if (bytes > OTA_NVS_STRING_MAX_BYTES) {
        report(
          'hazard',
          field,
          `value is ${bytes} UTF-8 bytes, NVS strings hold at most ${OTA_NVS_STRING_MAX_BYTES} (4000 with the NUL): the write fails, the firmware aborts and the board reboot-loops`,
        );
      }
    } else if (typeof value === 'number') {
      if (
        expected !== 'number' &&
        (!Number.isInteger(value) || value > INT32_MAX || value < INT32_MIN)
      ) {
        report('warning', field, `${value} is stored as a 32-bit int (truncated or saturated)`);
      }
    } else {
      report(
        'warning',
        field,
        `is ${describe(value)}; only strings and numbers are stored, ignored`,
      );
      continue;
    }
    if (expected === undefined) {
      report(
        'warning',
        field,
        'is not read by the firmware, but is stored in NVS and never erased',
      );
    } else if (typeof value !== expected) {
      if (path === 'websocket' && key === 'version') {
        report(
          'hazard',
          field,
          'must be a number (1, 2 or 3), not a string: the device stores it as an NVS string, reads the key with nvs_get_i32, gets nothing and falls back to protocol 1, so binary audio frames are misparsed',
        );
      } else {
        report(
          'error',
          field,
          `must be a ${expected}, got a ${typeof value}: stored with the wrong NVS type, the device cannot read it`,
        );
      }
    }
  }
}

function checkWebSocket(path: string, values: Record<string, unknown>, report: Report): void {
  checkNvsSection(path, values, WEBSOCKET_MEMBERS, report);
  const { url, version } = values;
  if (url === undefined) {
    report('warning', path, 'has no url; the device keeps any url it stored before');
  } else if (typeof url === 'string' && !/^wss?:\/\/\S+$/.test(url)) {
    // Case-sensitive on purpose: the firmware picks TLS by `url.find("wss://") == 0`.
    report('error', `${path}.url`, `"${url}" is not a ws:// or wss:// URL`);
  }
  if (typeof version === 'number' && version !== 1 && version !== 2 && version !== 3) {
    report('error', `${path}.version`, `must be 1, 2 or 3, got ${version}`);
  }
}

/**
 * How `MqttProtocol::StartMqttClient` (xiaozhi-esp32 `main/protocols/mqtt_protocol.cc`) reads a
 * stored endpoint at every boot: the host is everything before the first `:`, the port is
 * `std::stoi` of everything after it, and without a `:` the port is 8883, where the board
 * speaks TLS.
 */
const MQTT_DEFAULT_PORT = 8883;
const MQTT_TLS_PORT = 8883;

function checkMqttEndpoint(field: string, endpoint: string, report: Report): void {
  const colon = endpoint.indexOf(':');
  if (colon === -1) {
    report(
      'warning',
      field,
      `"${endpoint}" has no port: the device connects to port ${MQTT_DEFAULT_PORT} with TLS; a plain broker needs host:1883`,
    );
    return;
  }
  const portText = endpoint.slice(colon + 1);
  const read = readSegment(portText, true);
  if (!read.ok) {
    report(
      'hazard',
      field,
      `"${endpoint}": the port after the first ":" ("${portText}") is not a number std::stoi reads (an IPv6 address cannot be given): the firmware throws and the board aborts at every boot`,
    );
    return;
  }
  if (!read.exact || read.value < 1 || read.value > 65535) {
    report(
      'error',
      field,
      `"${endpoint}" has no TCP port after the first ":" (read as ${read.value})`,
    );
  } else if (read.value === MQTT_TLS_PORT) {
    report(
      'warning',
      field,
      `"${endpoint}" is port ${MQTT_TLS_PORT}, where the device speaks TLS; a plain broker needs another port (1883)`,
    );
  }
}

function checkMqtt(
  path: string,
  values: Record<string, unknown>,
  hasWebsocket: boolean,
  report: Report,
): void {
  checkNvsSection(path, values, MQTT_MEMBERS, report);
  const { endpoint, keepalive } = values;
  if (endpoint === undefined) {
    report('warning', path, 'has no endpoint; the device keeps any endpoint it stored before');
  } else if (endpoint === '') {
    // The way to take a board off MQTT: NVS keys are only ever overwritten.
    if (!hasWebsocket)
      report(
        'warning',
        `${path}.endpoint`,
        'is empty: the device stops using MQTT and uses the websocket url it stored before, if any',
      );
  } else if (typeof endpoint === 'string') {
    checkMqttEndpoint(`${path}.endpoint`, endpoint, report);
  }
  if (typeof keepalive === 'number' && !(Number.isInteger(keepalive) && keepalive > 0)) {
    report(
      'warning',
      `${path}.keepalive`,
      `should be a positive number of seconds, got ${keepalive}`,
    );
  }
}

function checkServerTime(path: string, values: Record<string, unknown>, report: Report): void {
  const timestamp = member(values, 'timestamp', path, report);
  const offset = member(values, 'timezone_offset', path, report);
  if (timestamp === undefined) {
    report('warning', path, 'has no timestamp; the clock is not set');
  } else if (typeof timestamp.value !== 'number') {
    report(
      'error',
      timestamp.field,
      `must be a number (epoch ms), got ${describe(timestamp.value)}`,
    );
  } else if (timestamp.value < 1e11) {
    report(
      'warning',
      timestamp.field,
      `${timestamp.value} looks like seconds; it must be epoch milliseconds`,
    );
  }
  if (offset === undefined) return;
  if (typeof offset.value !== 'number') {
    report('error', offset.field, `must be a number (minutes), got ${describe(offset.value)}`);
    return;
  }
  const minutes = offset.value;
  if (Math.abs(minutes) > TIMEZONE_OFFSET_MAX_MINUTES) {
    report('error', offset.field, `${minutes} is beyond ±14 h; it must be minutes, not seconds`);
  } else if (minutes !== 0 && Math.abs(minutes) <= 14) {
    report(
      'warning',
      offset.field,
      `${minutes} looks like hours; it must be minutes (480 for UTC+8)`,
    );
  } else if (!Number.isInteger(minutes)) {
    report('warning', offset.field, `${minutes} is truncated to whole minutes`);
  }
}

/**
 * `firmware`. The device parses its own version and `firmware.version` with `std::stoi` on
 * every segment; `stoi` throws on a segment without leading digits (`invalid_argument`) or one
 * past int32 (`out_of_range`), nothing catches it, and the board aborts on every OTA check. We
 * refuse such a version even without a `url` (when the firmware would skip the parse).
 */
function checkFirmware(
  path: string,
  values: Record<string, unknown>,
  context: OtaReplyContext,
  report: Report,
): void {
  const version = member(values, 'version', path, report);
  const url = member(values, 'url', path, report);
  const force = member(values, 'force', path, report);

  let target: number[] | undefined;
  if (version === undefined) {
    report('error', path, 'has no version; the device ignores the section');
  } else if (typeof version.value !== 'string') {
    report('error', version.field, `must be a string, got ${describe(version.value)}; ignored`);
  } else {
    const read = readFirmwareVersion(version.value);
    if (!read.ok) {
      report(
        'hazard',
        version.field,
        `"${version.value}" ${read.reason}: the firmware's std::stoi throws and the board aborts on every OTA check`,
      );
    } else {
      target = read.segments;
      for (const segment of read.loose) {
        report(
          'warning',
          version.field,
          `segment "${segment}" is read as ${Number.parseInt(segment, 10)}`,
        );
      }
    }
  }
  if (url === undefined) {
    if (version !== undefined)
      report('error', path, 'has a version but no url; the device ignores the section');
  } else if (typeof url.value !== 'string') {
    report('error', url.field, `must be a string, got ${describe(url.value)}; ignored`);
  }
  // Backends commonly send `url: ""` with the running version to say "no upgrade"; a bad url
  // only matters when the device would download, so its severity is decided below.
  const badUrl = typeof url?.value === 'string' && !/^https?:\/\/\S+$/.test(url.value);
  const reportBadUrl = (severity: 'error' | 'warning', why: string) => {
    if (badUrl && url !== undefined) {
      report(severity, url.field, `"${String(url.value)}" is not an http:// or https:// URL${why}`);
    }
  };

  // cJSON's valueint truncates, so 1.5 forces too.
  const forced = typeof force?.value === 'number' && Math.trunc(force.value) === 1;
  if (force !== undefined && typeof force.value !== 'number') {
    report(
      'warning',
      force.field,
      `is ${describe(force.value)}; only the number 1 forces, ignored`,
    );
  } else if (force !== undefined && force.value !== 0 && force.value !== 1) {
    report(
      'warning',
      force.field,
      `${String(force.value)} ${forced ? 'is read as 1' : 'does not force; only 1 does'}`,
    );
  }

  const current = context.currentVersion;
  const parses = typeof version?.value === 'string' && typeof url?.value === 'string';
  if (current === undefined) {
    reportBadUrl(
      forced ? 'error' : 'warning',
      forced ? '' : '; a device older than this version would fail to download',
    );
    if (forced) {
      report(
        'warning',
        force?.field ?? path,
        'forces an upgrade at every check; pass currentVersion so a loop can be detected',
      );
    }
    return;
  }
  const running = readFirmwareVersion(current);
  if (!running.ok) {
    if (parses) {
      report(
        'hazard',
        path,
        `the device's own version "${current}" ${running.reason}: the firmware parses it for this section and aborts; omit the firmware section`,
      );
    }
    return;
  }
  if (target === undefined) {
    reportBadUrl('error', '');
    return;
  }
  const order = compareVersionSegments(target, running.segments);
  if (forced || order > 0) reportBadUrl('error', ': the device will try to download it');
  if (forced && order === 0) {
    report(
      'hazard',
      force?.field ?? path,
      `forces version ${String(version?.value)}, which the device already runs (${current}): it flashes, reboots, checks again and loops`,
    );
  } else if (!forced && order <= 0) {
    report(
      'warning',
      version?.field ?? path,
      `${String(version?.value)} is not newer than ${current}; no upgrade will happen (the device compares dot-separated integers)`,
    );
  }
}

function checkActivation(path: string, values: Record<string, unknown>, report: Report): void {
  for (const [name, type] of [
    ['message', 'string'],
    ['code', 'string'],
    ['challenge', 'string'],
    ['timeout_ms', 'number'],
  ] as const) {
    const found = member(values, name, path, report);
    if (found !== undefined && typeof found.value !== type) {
      report('error', found.field, `must be a ${type}, got ${describe(found.value)}; ignored`);
    }
  }
}

/**
 * Every problem the firmware would have with an OTA reply, in reply order. Hazards (docs/protocol.md
 * §7) are: a `websocket`/`mqtt` key over {@link OTA_NVS_KEY_MAX} bytes; a string value there over
 * {@link OTA_NVS_STRING_MAX_BYTES} UTF-8 bytes; a `firmware.version` segment `std::stoi` rejects
 * or overflows; `force: 1` to the version the device already runs; `websocket.version` as a
 * string; an `mqtt.endpoint` whose port `std::stoi` rejects. Sections are looked up
 * case-insensitively, as the firmware does. A `websocket` section without `"mqtt":
 * {"endpoint": ""}` is a warning: it leaves a board that was given MQTT on MQTT.
 */
export function validateOtaReply(reply: unknown, context: OtaReplyContext = {}): OtaFinding[] {
  const findings: OtaFinding[] = [];
  const report: Report = (severity, field, text) => {
    findings.push({ field, severity, message: `${field === '' ? 'reply' : field} ${text}` });
  };
  if (!isObject(reply)) {
    report('error', '', `must be a JSON object, got ${describe(reply)}`);
    return findings;
  }
  const activation = section(reply, 'activation', report);
  if (activation) checkActivation(activation.field, activation.value, report);
  const mqtt = section(reply, 'mqtt', report);
  const websocket = section(reply, 'websocket', report);
  if (mqtt) checkMqtt(mqtt.field, mqtt.value, websocket !== undefined, report);
  if (websocket) {
    checkWebSocket(websocket.field, websocket.value, report);
    // NVS keys are exact: only `endpoint` blanks what the board stored under `endpoint`.
    const endpoint = mqtt?.value.endpoint;
    if (typeof endpoint === 'string' && endpoint !== '') {
      report(
        'warning',
        websocket.field,
        'is unused: with a non-empty mqtt.endpoint the device uses MQTT',
      );
    } else if (endpoint !== '') {
      report(
        'warning',
        websocket.field,
        'leaves a board that was given MQTT on MQTT: a stored, non-empty mqtt endpoint wins over the websocket url, and stored keys are never erased; add "mqtt": {"endpoint": ""}',
      );
    }
  }
  const serverTime = section(reply, 'server_time', report);
  if (serverTime) checkServerTime(serverTime.field, serverTime.value, report);
  const firmware = section(reply, 'firmware', report);
  if (firmware) checkFirmware(firmware.field, firmware.value, context, report);
  return findings;
}

/**
 * Throws `OTA_HAZARD` for the first hazard, else `OTA_INVALID` for the first error (such as the
 * reply not being an object); warnings pass. The error's `field` names the member.
 */
export function assertSafeOtaReply(
  reply: unknown,
  context: OtaReplyContext = {},
): asserts reply is OtaReply {
  const findings = validateOtaReply(reply, context);
  const hazard = findings.find((f) => f.severity === 'hazard');
  if (hazard) throw new ProtocolError('OTA_HAZARD', hazard.message, { field: hazard.field });
  const error = findings.find((f) => f.severity === 'error');
  if (error) throw new ProtocolError('OTA_INVALID', error.message, { field: error.field });
}

/** Options of {@link buildOtaReply}, in camelCase; each present option becomes a section. */
export interface OtaReplyOptions {
  websocket?: { url: string; token?: string; version?: 1 | 2 | 3 };
  mqtt?: {
    endpoint: string;
    clientId?: string;
    username?: string;
    password?: string;
    keepalive?: number;
    publishTopic?: string;
  };
  /** `now` defaults to the current time; the offset is omitted unless given. */
  serverTime?: { now?: Date | number; timezoneOffsetMinutes?: number };
  /** `force: true` sends the number 1, the only value the firmware honours. */
  firmware?: { version: string; url: string; force?: boolean };
  activation?: { message: string; code: string; challenge?: string; timeoutMs?: number };
}

/**
 * Builds an OTA reply and checks it with {@link assertSafeOtaReply}: throws `OTA_HAZARD` if it
 * could harm the board, `OTA_INVALID` if the device would ignore or misread part of it.
 */
export function buildOtaReply(options: OtaReplyOptions, context: OtaReplyContext = {}): OtaReply {
  const reply: OtaReply = {};
  const { activation, mqtt, websocket, serverTime, firmware } = options;
  if (activation) {
    reply.activation = {
      message: activation.message,
      code: activation.code,
      ...(activation.challenge !== undefined ? { challenge: activation.challenge } : {}),
      ...(activation.timeoutMs !== undefined ? { timeout_ms: activation.timeoutMs } : {}),
    };
  }
  if (mqtt) {
    reply.mqtt = {
      endpoint: mqtt.endpoint,
      ...(mqtt.clientId !== undefined ? { client_id: mqtt.clientId } : {}),
      ...(mqtt.username !== undefined ? { username: mqtt.username } : {}),
      ...(mqtt.password !== undefined ? { password: mqtt.password } : {}),
      ...(mqtt.keepalive !== undefined ? { keepalive: mqtt.keepalive } : {}),
      ...(mqtt.publishTopic !== undefined ? { publish_topic: mqtt.publishTopic } : {}),
    };
  }
  if (websocket) {
    reply.websocket = {
      url: websocket.url,
      ...(websocket.token !== undefined ? { token: websocket.token } : {}),
      ...(websocket.version !== undefined ? { version: websocket.version } : {}),
    };
  }
  if (serverTime) {
    const now = serverTime.now ?? Date.now();
    const timestamp = now instanceof Date ? now.getTime() : now;
    if (!Number.isFinite(timestamp)) {
      throw invalid(
        'server_time.timestamp',
        'server_time.timestamp: serverTime.now is not a valid time',
      );
    }
    const offset = serverTime.timezoneOffsetMinutes;
    reply.server_time = { timestamp, ...(offset !== undefined ? { timezone_offset: offset } : {}) };
  }
  if (firmware) {
    reply.firmware = {
      version: firmware.version,
      url: firmware.url,
      ...(firmware.force ? { force: 1 } : {}),
    };
  }
  assertSafeOtaReply(reply, context);
  return reply;
}
