import {
  defineTool,
  type Property,
  type Tool,
  validateArgumentValues,
} from '@xiaozhi-mcp/protocol';
import type { Command } from 'commander';
import { CliError, type CliIo, ExitCode } from '../io.js';

/** Where a client command finds the server; unset members fall back to the environment. */
export interface ClientOptions {
  server?: string;
  token?: string;
  json?: boolean;
}

export interface ToolsOptions extends ClientOptions {
  /** Only a live list will do: a device that is offline (a cached list) fails with exit 1. */
  online?: boolean;
}

export interface CallOptions extends ClientOptions {
  /** Bound on the device's reply, sent to the server as `timeoutMs`. */
  timeout?: number;
  /** `--no-check` sets it false: the arguments are sent as given, unchecked (robustness tests). */
  check?: boolean;
}

export const DEFAULT_SERVER = 'http://127.0.0.1:8000';
/** Bound on the listing requests, which the server answers from memory. */
const LIST_TIMEOUT_MS = 10_000;
/** Bound on a call without `--timeout`, when the server's own call timeout applies. */
const CALL_TIMEOUT_MS = 120_000;
/** Time the server gets beyond the device's bound to answer a call. */
const CALL_MARGIN_MS = 5_000;

export interface Target {
  /** As the user gave it, for messages. */
  readonly server: string;
  readonly api: string;
  readonly token: string | undefined;
}

function envValue(name: string): string | undefined {
  const value = process.env[name];
  return value === undefined || value === '' ? undefined : value;
}

/** The server's API and token from the options, else $XIAOZHI_SERVER and $XIAOZHI_TOKEN. */
export function targetOf(options: ClientOptions): Target {
  const server = options.server ?? envValue('XIAOZHI_SERVER') ?? DEFAULT_SERVER;
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw new CliError(
      `--server must be an http:// URL, got ${JSON.stringify(server)}`,
      ExitCode.usage,
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new CliError(
      `--server must be an http:// URL, got ${JSON.stringify(server)}`,
      ExitCode.usage,
    );
  // The base URL of the server; one that already ends in /api is taken as the API itself.
  const base = `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
  const api = base.endsWith('/api') ? base : `${base}/api`;
  return { server, api, token: options.token ?? envValue('XIAOZHI_TOKEN') };
}

/** A device id as the server keys it: MACs in lower case with colons, whatever was typed. */
export function normalizeDeviceId(input: string): string {
  const id = input.trim().toLowerCase();
  if (id === '') throw new CliError('the device id is empty', ExitCode.usage);
  const mac =
    /^([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})$/.exec(
      id,
    );
  return mac === null ? id : mac.slice(1).join(':');
}

interface ApiAnswer {
  readonly status: number;
  readonly body: unknown;
}

async function request(
  target: Target,
  method: 'GET' | 'POST' | 'DELETE',
  path: string,
  timeoutMs: number,
  body?: unknown,
): Promise<ApiAnswer> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (target.token !== undefined) headers.authorization = `Bearer ${target.token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let response: Response;
  let text: string;
  try {
    response = await fetch(`${target.api}${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    text = await response.text();
  } catch (error) {
    if (error instanceof Error && error.name === 'TimeoutError')
      throw new CliError(`the server at ${target.server} did not answer within ${timeoutMs} ms`);
    // fetch hides the reason (ECONNREFUSED, ENOTFOUND...) in `cause`.
    const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error;
    throw new CliError(
      `cannot reach the server at ${target.server}: ${cause instanceof Error ? cause.message : String(cause)}`,
    );
  }
  try {
    return { status: response.status, body: JSON.parse(text) as unknown };
  } catch {
    throw new CliError(
      `the server at ${target.server} answered HTTP ${response.status} with something that is not JSON (is it a xiaozhi-mcp server?)`,
    );
  }
}

function record(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

/** The one-line error for a non-2xx answer; `device` names who answered a 502. */
function apiFailure(target: Target, answer: ApiAnswer, device?: string): CliError {
  const error = record(answer.body).error;
  const details = record(error);
  const message =
    typeof details.message === 'string'
      ? details.message
      : typeof error === 'string'
        ? error
        : `HTTP ${answer.status}`;
  if (answer.status === 401)
    return new CliError(
      `the server at ${target.server} refused the request: ${message} (pass its API token with --token or $XIAOZHI_TOKEN)`,
    );
  if (answer.status === 502 && details.source === 'device' && device !== undefined)
    return new CliError(`${device} answered with an error: ${message}`);
  return new CliError(message);
}

async function getJson(target: Target, path: string, device?: string): Promise<unknown> {
  const answer = await request(target, 'GET', path, LIST_TIMEOUT_MS);
  if (answer.status !== 200) throw apiFailure(target, answer, device);
  return answer.body;
}

function unexpected(target: Target, what: string): CliError {
  return new CliError(`the server at ${target.server} answered without ${what}`);
}

// ---- devices ----

/** A table cell from an API field that may be missing on another server's answer. */
function cell(value: unknown): string {
  return typeof value === 'string' || typeof value === 'number' ? String(value) : '-';
}

function table(rows: readonly (readonly string[])[]): string {
  const widths: number[] = [];
  for (const row of rows)
    row.forEach((cell, i) => {
      widths[i] = Math.max(widths[i] ?? 0, cell.length);
    });
  return rows
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i] ?? 0))
        .join('  ')
        .trimEnd(),
    )
    .map((line) => `${line}\n`)
    .join('');
}

/**
 * Every device the server has seen, page by page: `GET /devices?cursor=C` answers
 * `{devices, nextCursor?}`, without `nextCursor` on the last page (and from a server that does
 * not paginate).
 */
async function listDevices(target: Target): Promise<unknown[]> {
  const devices: unknown[] = [];
  const cursors = new Set<string>();
  let cursor: string | undefined;
  for (;;) {
    const query = cursor === undefined ? '' : `?${new URLSearchParams({ cursor })}`;
    const body = record(await getJson(target, `/devices${query}`));
    if (!Array.isArray(body.devices)) throw unexpected(target, 'a device list');
    devices.push(...body.devices);
    const next = body.nextCursor;
    if (next === undefined || next === null) return devices;
    if (typeof next !== 'string' || next === '')
      throw new CliError(
        `the server at ${target.server} answered with a nextCursor that is not a string: ${JSON.stringify(next)}`,
      );
    // A server that hands out a cursor twice would be followed forever.
    if (cursors.has(next))
      throw new CliError(
        `the server at ${target.server} gave the device list cursor ${JSON.stringify(next)} twice`,
      );
    cursors.add(next);
    cursor = next;
  }
}

/** Lists every device the server has seen. */
export async function devicesCommand(io: CliIo, options: ClientOptions): Promise<number> {
  const target = targetOf(options);
  const devices = await listDevices(target);
  if (options.json) {
    io.stdout(`${JSON.stringify({ devices })}\n`);
    return ExitCode.ok;
  }
  if (devices.length === 0) {
    io.stdout(`no device has been seen by the server at ${target.server}\n`);
    return ExitCode.ok;
  }
  const rows = devices.map((value) => {
    const d = record(value);
    const at = record(d.lastOtaCheck).at;
    return [
      cell(d.deviceId),
      cell(d.board),
      cell(d.version),
      d.ready === true ? 'ready' : d.connected === true ? 'connected' : 'offline',
      // How it is connected, or was last; a server older than MQTT sends none.
      cell(d.transport),
      cell(d.toolCount),
      typeof at === 'string' ? timestamp(at) : '-',
    ];
  });
  io.stdout(
    table([
      ['DEVICE', 'BOARD', 'VERSION', 'STATE', 'TRANSPORT', 'TOOLS', 'LAST OTA CHECK'],
      ...rows,
    ]),
  );
  return ExitCode.ok;
}

/** An API timestamp to the second. */
function timestamp(at: string): string {
  return at.replace(/\.\d+Z$/, 'Z');
}

/**
 * Makes the server forget a device (`DELETE /devices/:id`): its record, its token and the
 * Client-Id it is pinned to, so that a board replaced under the same MAC can register again.
 */
export async function forgetCommand(
  io: CliIo,
  deviceInput: string,
  options: ClientOptions,
): Promise<number> {
  const target = targetOf(options);
  const device = normalizeDeviceId(deviceInput);
  const answer = await request(
    target,
    'DELETE',
    `/devices/${encodeURIComponent(device)}`,
    LIST_TIMEOUT_MS,
  );
  if (answer.status === 404 && record(record(answer.body).error).code === 'NOT_FOUND')
    throw new CliError(
      `the server at ${target.server} cannot forget devices (no DELETE /devices/:id route); it is older than this client`,
    );
  if (answer.status !== 200) throw apiFailure(target, answer);
  if (options.json) {
    io.stdout(`${JSON.stringify(answer.body)}\n`);
    return ExitCode.ok;
  }
  const forgotten = record(answer.body).forgotten;
  io.stdout(
    `forgot ${typeof forgotten === 'string' ? forgotten : device}; the next board with this id registers as a new device\n`,
  );
  return ExitCode.ok;
}

// ---- tools ----

export interface ApiTool {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: Record<string, unknown>;
  readonly userOnly: boolean;
}

interface PropertySchema {
  readonly name: string;
  readonly type: string;
  readonly required: boolean;
  readonly schema: Record<string, unknown>;
}

function propertiesOf(tool: ApiTool): PropertySchema[] {
  const schema = record(tool.inputSchema);
  const required = Array.isArray(schema.required) ? schema.required : [];
  return Object.entries(record(schema.properties)).map(([name, value]) => {
    const property = record(value);
    return {
      name,
      type: typeof property.type === 'string' ? property.type : 'any',
      required: required.includes(name),
      schema: property,
    };
  });
}

/** What a property takes: `integer 0..100`, `string`... */
function describeType(property: PropertySchema): string {
  const { minimum, maximum } = property.schema;
  if (typeof minimum === 'number' && typeof maximum === 'number')
    return `${property.type} ${minimum}..${maximum}`;
  if (typeof minimum === 'number') return `${property.type} >= ${minimum}`;
  if (typeof maximum === 'number') return `${property.type} <= ${maximum}`;
  return property.type;
}

/** `name(volume: integer 0..100, seconds?: integer 1..60 = 5)`. */
export function toolSignature(tool: ApiTool): string {
  const params = propertiesOf(tool).map((p) => {
    const fallback = 'default' in p.schema ? ` = ${JSON.stringify(p.schema.default)}` : '';
    return `${p.name}${p.required ? '' : '?'}: ${describeType(p)}${fallback}`;
  });
  return `${tool.name}(${params.join(', ')})`;
}

async function fetchTools(target: Target, device: string): Promise<ApiTool[]> {
  return toolsOf(
    target,
    await getJson(target, `/devices/${encodeURIComponent(device)}/tools`, device),
  );
}

function toolsOf(target: Target, body: unknown): ApiTool[] {
  const tools = record(body).tools;
  if (!Array.isArray(tools)) throw unexpected(target, 'a tool list');
  return tools.map((value) => {
    const tool = record(value);
    return {
      name: typeof tool.name === 'string' ? tool.name : '',
      description: typeof tool.description === 'string' ? tool.description : '',
      inputSchema: record(tool.inputSchema),
      userOnly: tool.userOnly === true,
    };
  });
}

/** Where a device stands, from `GET /devices/:id`: whether its tool list is live. */
interface DeviceStanding {
  readonly connected: boolean;
  readonly ready: boolean;
  /** When it was last heard of, for a device that is not connected. */
  readonly lastSeen: string | undefined;
}

async function fetchStanding(target: Target, device: string): Promise<DeviceStanding> {
  const summary = record(
    record(await getJson(target, `/devices/${encodeURIComponent(device)}`, device)).device,
  );
  const seen = [summary.disconnectedAt, record(summary.lastOtaCheck).at, summary.connectedAt].find(
    (at): at is string => typeof at === 'string',
  );
  return {
    connected: summary.connected === true,
    ready: summary.ready === true,
    lastSeen: seen === undefined ? undefined : timestamp(seen),
  };
}

/** Why a tool list is not the device's live one. */
function cachedReason(device: string, standing: DeviceStanding): string {
  return standing.connected
    ? `device ${device} is connected but has not listed its tools yet`
    : `device ${device} is offline (last seen ${standing.lastSeen ?? 'at an unknown time'})`;
}

/**
 * Lists a device's tools, one signature a line. The server keeps the list of a device that
 * went offline: it is still printed, with a note on stderr (`--online` makes it a failure).
 */
export async function toolsCommand(
  io: CliIo,
  deviceInput: string,
  options: ToolsOptions,
): Promise<number> {
  const target = targetOf(options);
  const device = normalizeDeviceId(deviceInput);
  const standing = await fetchStanding(target, device);
  const cached = !standing.ready;
  if (cached && options.online)
    throw new CliError(`${cachedReason(device, standing)}; --online wants its live tool list`);
  const body = await getJson(target, `/devices/${encodeURIComponent(device)}/tools`, device);
  const tools = toolsOf(target, body);
  if (cached)
    io.stderr(
      `xiaozhi-mcp: ${cachedReason(device, standing)}; this list is from its last session\n`,
    );
  if (options.json) {
    io.stdout(`${JSON.stringify({ ...record(body), connected: standing.connected, cached })}\n`);
    return ExitCode.ok;
  }
  io.stdout(
    tools.map((tool) => `${toolSignature(tool)}${tool.userOnly ? ' [user]' : ''}\n`).join(''),
  );
  return ExitCode.ok;
}

// ---- call ----

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current[j] = Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, substitution);
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}

/** Tool names close to a mistyped one: a few edits away, containing it, or with its last part. */
export function closeNames(wanted: string, names: readonly string[], limit = 5): string[] {
  const query = wanted.toLowerCase();
  const lastPart = (name: string) => name.slice(name.lastIndexOf('.') + 1);
  const scored = names.map((name) => {
    const lower = name.toLowerCase();
    let score = editDistance(query, lower);
    if (lower.includes(query) || query.includes(lower)) score = Math.min(score, 1);
    score = Math.min(score, editDistance(lastPart(query), lastPart(lower)) + 1);
    return { name, score };
  });
  const bound = Math.max(2, Math.floor(query.length / 3));
  return scored
    .filter((s) => s.score <= bound)
    .sort((a, b) => a.score - b.score || a.name.localeCompare(b.name))
    .slice(0, limit)
    .map((s) => s.name);
}

/** Converts one `key=value` by the property's schema type; a bad value names what was expected. */
function convert(tool: ApiTool, property: PropertySchema, text: string): unknown {
  const bad = (expected: string) =>
    new CliError(
      `${tool.name}: ${property.name} must be ${expected}, got ${JSON.stringify(text)}`,
      ExitCode.usage,
    );
  switch (property.type) {
    case 'integer': {
      const n = Number(text);
      if (!/^[-+]?\d+$/.test(text) || !Number.isSafeInteger(n)) throw bad('an integer');
      return n;
    }
    case 'number': {
      const n = Number(text);
      if (text.trim() === '' || !Number.isFinite(n)) throw bad('a number');
      return n;
    }
    case 'boolean': {
      const lower = text.toLowerCase();
      if (lower === 'true' || lower === '1') return true;
      if (lower === 'false' || lower === '0') return false;
      throw bad('true, false, 1 or 0');
    }
    case 'object':
    case 'array': {
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch {
        throw bad(`JSON ${property.type === 'array' ? 'array' : 'object'}`);
      }
      if (Array.isArray(value) !== (property.type === 'array') || typeof value !== 'object')
        throw bad(`a JSON ${property.type}`);
      return value;
    }
    default:
      // string, and untyped properties: the text as given.
      return text;
  }
}

/** Builds a call's arguments from `key=value` words, checked against the tool's schema. */
export function buildArguments(tool: ApiTool, words: readonly string[]): Record<string, unknown> {
  const properties = propertiesOf(tool);
  const args: Record<string, unknown> = {};
  for (const word of words) {
    const equals = word.indexOf('=');
    if (equals < 1)
      throw new CliError(`arguments are key=value, got ${JSON.stringify(word)}`, ExitCode.usage);
    const key = word.slice(0, equals);
    const property = properties.find((p) => p.name === key);
    if (property === undefined) {
      const known =
        properties.length === 0
          ? 'it takes no arguments'
          : `it takes ${properties.map((p) => p.name).join(', ')}`;
      throw new CliError(
        `${tool.name} has no property ${JSON.stringify(key)}; ${known}`,
        ExitCode.usage,
      );
    }
    if (Object.hasOwn(args, key)) throw new CliError(`${key} is given twice`, ExitCode.usage);
    args[key] = convert(tool, property, word.slice(equals + 1));
  }
  const missing = properties.filter((p) => p.required && !Object.hasOwn(args, p.name));
  if (missing.length > 0)
    throw new CliError(
      `${tool.name} needs ${missing.map((p) => `${p.name}=<${describeType(p)}>`).join(' ')}`,
      ExitCode.usage,
    );
  return args;
}

const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;

function isInt32(value: unknown): value is number {
  return (
    Number.isInteger(value) && (value as number) >= INT32_MIN && (value as number) <= INT32_MAX
  );
}

/**
 * A listed property in the firmware's property model (boolean, integer with an optional range,
 * string), for the protocol core to check a value as the firmware will; undefined for what the
 * firmware never lists (other types, a range that is not int32), which is left unchecked.
 */
function firmwareProperty(property: PropertySchema): Property | undefined {
  const { name, type, schema } = property;
  if (type === 'boolean' || type === 'string') return { name, type };
  if (type !== 'integer') return undefined;
  const { minimum, maximum } = schema;
  if (minimum === undefined && maximum === undefined) return { name, type };
  if ((minimum !== undefined && !isInt32(minimum)) || (maximum !== undefined && !isInt32(maximum)))
    return undefined;
  // The firmware's ranges have both ends; a one-sided one from elsewhere is open at int32.
  return {
    name,
    type,
    minimum: isInt32(minimum) ? minimum : INT32_MIN,
    maximum: isInt32(maximum) ? maximum : INT32_MAX,
  };
}

/** What a property's bounds allow, in words: `an integer from 0 to 100`. */
function describeBounds(property: PropertySchema): string {
  const { minimum, maximum } = property.schema;
  if (typeof minimum === 'number' && typeof maximum === 'number')
    return `an integer from ${minimum} to ${maximum}`;
  if (typeof minimum === 'number') return `an integer of at least ${minimum}`;
  if (typeof maximum === 'number') return `an integer of at most ${maximum}`;
  return `a ${property.type}`;
}

/**
 * Checks arguments against the listed schema by the firmware's own rules (the protocol core's
 * `validateArgumentValues`: types, int32 saturation, then the range), property by property in
 * declaration order, so a refusal names the argument the device would refuse. Throws exit 2.
 */
export function checkArguments(tool: ApiTool, args: Readonly<Record<string, unknown>>): void {
  for (const property of propertiesOf(tool)) {
    if (!Object.hasOwn(args, property.name)) continue;
    const model = firmwareProperty(property);
    if (model === undefined) continue;
    let single: Tool;
    try {
      single = defineTool({ name: tool.name, description: '', properties: [model] });
    } catch {
      continue; // a range the firmware could not register: nothing to check it by
    }
    const value = args[property.name];
    const outcome = validateArgumentValues(single, { [property.name]: value });
    if (!outcome.ok)
      throw new CliError(
        `${tool.name}: ${property.name} must be ${describeBounds(property)}, got ${JSON.stringify(value)} (the device would answer "${outcome.message}"); --no-check sends it anyway`,
        ExitCode.usage,
      );
  }
}

/** A value by its property's type when it converts, else a JSON literal, else the text. */
function asGiven(text: string, byType: () => unknown): unknown {
  try {
    const value = byType();
    if (value !== undefined) return value;
  } catch {
    // not of the property's type: sent all the same
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/**
 * `--no-check`: arguments as given, for robustness tests. A value is converted by its
 * property's type when it can be, else read as a JSON literal (`3.5`, `null`), else sent as
 * the text; unknown properties and missing required ones are not refused.
 */
export function uncheckedArguments(
  tool: ApiTool | undefined,
  words: readonly string[],
): Record<string, unknown> {
  const properties = tool === undefined ? [] : propertiesOf(tool);
  const args: Record<string, unknown> = {};
  for (const word of words) {
    const equals = word.indexOf('=');
    if (equals < 1)
      throw new CliError(`arguments are key=value, got ${JSON.stringify(word)}`, ExitCode.usage);
    const key = word.slice(0, equals);
    const text = word.slice(equals + 1);
    if (Object.hasOwn(args, key)) throw new CliError(`${key} is given twice`, ExitCode.usage);
    const property = properties.find((p) => p.name === key);
    args[key] = asGiven(text, () =>
      tool === undefined || property === undefined ? undefined : convert(tool, property, text),
    );
  }
  return args;
}

/** One line for a content item: its text, or a short note for an image or anything else. */
export function formatContent(item: unknown): string {
  const content = record(item);
  if (content.type === 'text' && typeof content.text === 'string') return content.text;
  if (content.type === 'image' && typeof content.data === 'string') {
    const mimeType = typeof content.mimeType === 'string' ? content.mimeType : 'unknown type';
    return `[image ${mimeType}, ${Buffer.from(content.data, 'base64').length} bytes]`;
  }
  return `[${typeof content.type === 'string' ? content.type : 'unknown'} content]`;
}

/** Calls a tool on a device through the server, after checking the arguments locally. */
export async function callCommand(
  io: CliIo,
  deviceInput: string,
  toolName: string,
  words: readonly string[],
  options: CallOptions,
): Promise<number> {
  const target = targetOf(options);
  const device = normalizeDeviceId(deviceInput);
  const tools = await fetchTools(target, device);
  const tool = tools.find((t) => t.name === toolName);
  const unchecked = options.check === false;
  if (tool === undefined && !unchecked) {
    const close = closeNames(
      toolName,
      tools.map((t) => t.name),
    );
    const hint =
      close.length === 0
        ? `"xiaozhi-mcp tools ${device}" lists its ${tools.length} tools`
        : `did you mean ${close.join(', ')}?`;
    throw new CliError(
      `${device} has no tool ${JSON.stringify(toolName)}; ${hint}`,
      ExitCode.usage,
    );
  }
  let args: Record<string, unknown>;
  if (unchecked || tool === undefined) {
    args = uncheckedArguments(tool, words);
  } else {
    args = buildArguments(tool, words);
    checkArguments(tool, args);
  }
  const answer = await request(
    target,
    'POST',
    `/devices/${encodeURIComponent(device)}/call`,
    options.timeout === undefined ? CALL_TIMEOUT_MS : options.timeout + CALL_MARGIN_MS,
    {
      name: toolName,
      arguments: args,
      ...(options.timeout === undefined ? {} : { timeoutMs: options.timeout }),
    },
  );
  if (answer.status !== 200) throw apiFailure(target, answer, device);
  const result = record(record(answer.body).result);
  if (!Array.isArray(result.content)) throw unexpected(target, 'a tool result');
  if (options.json) io.stdout(`${JSON.stringify(answer.body)}\n`);
  const text = result.content.map(formatContent).join('\n');
  if (result.isError === true) throw new CliError(`${device} answered with an error: ${text}`);
  if (!options.json) io.stdout(`${text}\n`);
  return ExitCode.ok;
}

// ---- registration ----

function timeoutMs(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < 1 || n > 2_147_483_647)
    throw new CliError(
      `--timeout must be a positive integer of milliseconds, got ${JSON.stringify(value)}`,
      ExitCode.usage,
    );
  return n;
}

/** `--server` and `--token`: how every command that talks to a running server names it. */
export function withServerOptions(command: Command): Command {
  return command
    .option(
      '--server <url>',
      `the server's base URL (default: $XIAOZHI_SERVER, else ${DEFAULT_SERVER})`,
    )
    .option(
      '--token <token>',
      "the server's API token, sent as a Bearer token (default: $XIAOZHI_TOKEN)",
    );
}

function withClientOptions(command: Command): Command {
  return withServerOptions(command).option('--json', "print the API's JSON answer");
}

export function registerClient(program: Command, io: CliIo, setExit: (code: number) => void): void {
  const devices = withClientOptions(
    program
      .command('devices')
      .description(
        'list the devices a running server has seen: board, version, state, transport, tools',
      ),
  ).action(async (options: ClientOptions) => setExit(await devicesCommand(io, options)));

  withClientOptions(
    devices
      .command('forget')
      .description(
        'make the server forget a device: its record, token and Client-Id pin (a replaced board registers anew)',
      )
      .argument('<device>', 'device id (the MAC, in any case)'),
  ).action(async (device: string, _options: ClientOptions, command: Command) =>
    // `devices --server X forget ID` gives the options to `devices`: take both.
    setExit(await forgetCommand(io, device, command.optsWithGlobals<ClientOptions>())),
  );

  withClientOptions(
    program
      .command('tools')
      .description("list a device's tools with their arguments ([user]: user-only)")
      .argument('<device>', 'device id (the MAC, in any case)'),
  )
    .option(
      '--online',
      'fail (exit 1) when the device is offline, instead of listing the tools of its last session',
    )
    .action(async (device: string, options: ToolsOptions) =>
      setExit(await toolsCommand(io, device, options)),
    );

  withClientOptions(
    program
      .command('call')
      .description("call a device's tool through a running server and print the result")
      .argument('<device>', 'device id (the MAC, in any case)')
      .argument('<tool>', 'tool name, e.g. self.audio_speaker.set_volume')
      .argument(
        '[arguments...]',
        'key=value, converted by the tool schema and checked against it (e.g. volume=30)',
      ),
  )
    .option(
      '--timeout <ms>',
      "bound on the device's reply (default: the server's call timeout)",
      timeoutMs,
    )
    .option(
      '--no-check',
      'send the arguments as given, without checking them against the schema (robustness tests)',
    )
    .action(async (device: string, tool: string, words: string[], options: CallOptions) =>
      setExit(await callCommand(io, device, tool, words, options)),
    );
}
