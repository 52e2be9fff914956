/**
 * The hazards of an OTA reply (docs/protocol.md §7). The firmware writes the reply straight
 * into NVS and parses its versions with `std::stoi`, so a careless reply can crash a real board
 * on every boot; {@link validateOtaReply} names every such member, and everything the device
 * would ignore or misread.
 */

import { describe, isObject } from './ota-json.js';
import {
  compareVersionSegments,
  INT32_MAX,
  INT32_MIN,
  readFirmwareVersion,
  readSegment,
} from './ota-version.js';
import { byteLength } from './tools.js';

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

/** Real timezone offsets lie within ±14 h. */
const TIMEZONE_OFFSET_MAX_MINUTES = 14 * 60;

/** NVS limits count bytes (`strlen`), not characters (ASCII is counted without encoding). */
function utf8Length(text: string): number {
  return byteLength(text);
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

const HAS_ASCII_UPPER = /[A-Z]/;

/** ASCII-only lowering, as cJSON's case-insensitive key compare does it. */
function asciiLower(text: string): string {
  // Most keys are lower case already: nothing to replace, nothing allocated.
  return HAS_ASCII_UPPER.test(text) ? text.replace(/[A-Z]/g, (c) => c.toLowerCase()) : text;
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
