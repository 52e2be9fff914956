import type { Command } from 'commander';
import { CliError, type CliIo, ExitCode } from '../io.js';

/** Where a client command finds the server; unset members fall back to the environment. */
export interface ClientOptions {
  server?: string;
  token?: string;
  json?: boolean;
}

export interface CallOptions extends ClientOptions {
  /** Bound on the device's reply, sent to the server as `timeoutMs`. */
  timeout?: number;
}

export const DEFAULT_SERVER = 'http://127.0.0.1:8000';
/** Bound on the listing requests, which the server answers from memory. */
const LIST_TIMEOUT_MS = 10_000;
/** Bound on a call without `--timeout`, when the server's own call timeout applies. */
const CALL_TIMEOUT_MS = 120_000;
/** Time the server gets beyond the device's bound to answer a call. */
const CALL_MARGIN_MS = 5_000;

interface Target {
  /** As the user gave it, for messages. */
  readonly server: string;
  readonly api: string;
  readonly token: string | undefined;
}

function envValue(name: string): string | undefined {
  const value = process.env[name];
  return value === undefined || value === '' ? undefined : value;
}

function targetOf(options: ClientOptions): Target {
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
  method: 'GET' | 'POST',
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
      `the server at ${target.server} refused the request: ${message} (pass --token or set XIAOZHI_TOKEN)`,
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

/** Lists every device the server has seen. */
export async function devicesCommand(io: CliIo, options: ClientOptions): Promise<number> {
  const target = targetOf(options);
  const body = await getJson(target, '/devices');
  const devices = record(body).devices;
  if (!Array.isArray(devices)) throw unexpected(target, 'a device list');
  if (options.json) {
    io.stdout(`${JSON.stringify(body)}\n`);
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
      cell(d.toolCount),
      typeof at === 'string' ? at.replace(/\.\d+Z$/, 'Z') : '-',
    ];
  });
  io.stdout(table([['DEVICE', 'BOARD', 'VERSION', 'STATE', 'TOOLS', 'LAST OTA CHECK'], ...rows]));
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
  const body = await getJson(target, `/devices/${encodeURIComponent(device)}/tools`, device);
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

/** Lists a device's tools, one signature a line. */
export async function toolsCommand(
  io: CliIo,
  deviceInput: string,
  options: ClientOptions,
): Promise<number> {
  const target = targetOf(options);
  const device = normalizeDeviceId(deviceInput);
  if (options.json) {
    const body = await getJson(target, `/devices/${encodeURIComponent(device)}/tools`, device);
    io.stdout(`${JSON.stringify(body)}\n`);
    return ExitCode.ok;
  }
  const tools = await fetchTools(target, device);
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
  if (tool === undefined) {
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
  const args = buildArguments(tool, words);
  const answer = await request(
    target,
    'POST',
    `/devices/${encodeURIComponent(device)}/call`,
    options.timeout === undefined ? CALL_TIMEOUT_MS : options.timeout + CALL_MARGIN_MS,
    {
      name: tool.name,
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

function withClientOptions(command: Command): Command {
  return command
    .option(
      '--server <url>',
      `the server's base URL (default: $XIAOZHI_SERVER, else ${DEFAULT_SERVER})`,
    )
    .option('--token <token>', 'sent as a Bearer token (default: $XIAOZHI_TOKEN)')
    .option('--json', "print the API's JSON answer");
}

export function registerClient(program: Command, io: CliIo, setExit: (code: number) => void): void {
  withClientOptions(
    program
      .command('devices')
      .description('list the devices a running server has seen: board, version, state, tools'),
  ).action(async (options: ClientOptions) => setExit(await devicesCommand(io, options)));

  withClientOptions(
    program
      .command('tools')
      .description("list a device's tools with their arguments ([user]: user-only)")
      .argument('<device>', 'device id (the MAC, in any case)'),
  ).action(async (device: string, options: ClientOptions) =>
    setExit(await toolsCommand(io, device, options)),
  );

  withClientOptions(
    program
      .command('call')
      .description("call a device's tool through a running server and print the result")
      .argument('<device>', 'device id (the MAC, in any case)')
      .argument('<tool>', 'tool name, e.g. self.audio_speaker.set_volume')
      .argument('[arguments...]', 'key=value, converted by the tool schema (e.g. volume=30)'),
  )
    .option(
      '--timeout <ms>',
      "bound on the device's reply (default: the server's call timeout)",
      timeoutMs,
    )
    .action(async (device: string, tool: string, words: string[], options: CallOptions) =>
      setExit(await callCommand(io, device, tool, words, options)),
    );
}
