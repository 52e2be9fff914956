/**
 * `devices`, `devices forget`, `tools` and `call`: a running server's devices and their tools,
 * through the one client of its API (`ApiClient` of `@xiaozhi-mcp/bridge`). What is here is the
 * command line's own: options, argument conversion and checks, output, and the CLI's wording of
 * the client's typed errors.
 */
import { ApiClient, BridgeError } from '@xiaozhi-mcp/bridge';
import {
  type ApiForgetResponse,
  type ApiTool,
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

export interface Target {
  /** As the user gave it, for messages. */
  readonly server: string;
  readonly token: string | undefined;
  /** The server's API. */
  readonly api: ApiClient;
}

function envValue(name: string): string | undefined {
  const value = process.env[name];
  return value === undefined || value === '' ? undefined : value;
}

/** The server's API and token from the options, else $XIAOZHI_SERVER and $XIAOZHI_TOKEN. */
export function targetOf(options: ClientOptions): Target {
  const server = options.server ?? envValue('XIAOZHI_SERVER') ?? DEFAULT_SERVER;
  const token = options.token ?? envValue('XIAOZHI_TOKEN');
  try {
    // No `limit`: the CLI reads the device list in the server's own pages, as it always has.
    return { server, token, api: new ApiClient({ server, token, devicesPageSize: 'server' }) };
  } catch (error) {
    if (error instanceof BridgeError && error.code === 'CONFIG_INVALID')
      throw new CliError(
        `--server must be an http:// URL, got ${JSON.stringify(server)}`,
        ExitCode.usage,
      );
    throw error;
  }
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

function record(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

/**
 * The CLI's one line for a failure of the API client: the API's own message where it gave one,
 * the client's sentence otherwise; `device` names who answered a 502.
 */
function apiFailure(target: Target, error: unknown, device?: string): unknown {
  if (!(error instanceof BridgeError)) return error;
  if (error.code === 'UNAUTHORIZED')
    return new CliError(
      `the server at ${target.server} refused the request: ${error.apiMessage ?? error.message} (pass its API token with --token or $XIAOZHI_TOKEN)`,
    );
  if (error.status === 502 && error.fromDevice && device !== undefined)
    return new CliError(`${device} answered with an error: ${error.apiMessage ?? error.message}`);
  return new CliError(error.apiMessage ?? error.message);
}

/** One request through the client, its failure in the CLI's words. */
async function ask<T>(
  target: Target,
  request: (api: ApiClient) => Promise<T>,
  device?: string,
): Promise<T> {
  try {
    return await request(target.api);
  } catch (error) {
    throw apiFailure(target, error, device);
  }
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

/** Lists every device the server has seen. */
export async function devicesCommand(io: CliIo, options: ClientOptions): Promise<number> {
  const target = targetOf(options);
  // As the server sent them: `--json` prints the API's answer.
  const devices = await ask(target, (api) => api.devicesAsSent());
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
  let answer: ApiForgetResponse;
  try {
    answer = await target.api.forget(device);
  } catch (error) {
    if (error instanceof BridgeError && error.status === 404 && error.apiCode === 'NOT_FOUND')
      throw new CliError(
        `the server at ${target.server} cannot forget devices (no DELETE /devices/:id route); it is older than this client`,
      );
    throw apiFailure(target, error);
  }
  if (options.json) {
    io.stdout(`${JSON.stringify(answer)}\n`);
    return ExitCode.ok;
  }
  io.stdout(`forgot ${answer.forgotten}; the next board with this id registers as a new device\n`);
  return ExitCode.ok;
}

// ---- tools ----

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

/** Where a device stands, from `GET /devices/:id`: whether its tool list is live. */
interface DeviceStanding {
  readonly connected: boolean;
  readonly ready: boolean;
  /** When it was last heard of, for a device that is not connected. */
  readonly lastSeen: string | undefined;
}

async function fetchStanding(target: Target, device: string): Promise<DeviceStanding> {
  const summary = await ask(target, (api) => api.device(device), device);
  const seen = [summary.disconnectedAt, summary.lastOtaCheck?.at, summary.connectedAt].find(
    (at): at is string => typeof at === 'string',
  );
  return {
    connected: summary.connected,
    ready: summary.ready,
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
  const tools = await ask(target, (api) => api.tools(device), device);
  if (cached)
    io.stderr(
      `xiaozhi-mcp: ${cachedReason(device, standing)}; this list is from its last session\n`,
    );
  if (options.json) {
    io.stdout(`${JSON.stringify({ tools, connected: standing.connected, cached })}\n`);
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
  const tools = await ask(target, (api) => api.tools(device), device);
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
  // Without --timeout the server's own call timeout applies (the client bounds the wait).
  const result = await ask(
    target,
    (api) => api.call(device, toolName, args, options.timeout),
    device,
  );
  if (options.json) io.stdout(`${JSON.stringify({ result })}\n`);
  const text = result.content.map(formatContent).join('\n');
  if (result.isError) throw new CliError(`${device} answered with an error: ${text}`);
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
