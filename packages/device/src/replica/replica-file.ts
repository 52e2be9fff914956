/**
 * A replica: one board's identity, hello, `initialize` reply, tool set (the corpus's tool
 * definition shape, the firmware's own terms), its `tools/list` pages as sent and the
 * `tools/call` exchanges seen. Read with {@link parseReplica}, which refuses what a replica
 * must not hold (secrets) and pages the firmware's pager would not have produced.
 */
import { CHIPS } from '@xiaozhi-mcp/firmware';
import { ProtocolError, parseToolSet } from '@xiaozhi-mcp/protocol';
import { checkReplicaPages } from './replica-pages.js';
import {
  REPLICA_BOARD_FIELDS,
  REPLICA_SCHEMA_VERSION,
  type ReplicaBoard,
  ReplicaError,
  type ReplicaFile,
  type ReplicaTool,
} from './replica-types.js';

export {
  REPLICA_ERROR_CODES,
  REPLICA_SCHEMA_VERSION,
  type ReplicaBoard,
  type ReplicaCall,
  ReplicaError,
  type ReplicaErrorCode,
  type ReplicaFile,
  type ReplicaProperty,
  type ReplicaTool,
} from './replica-types.js';

type Json = Record<string, unknown>;

const FLASH_SIZES = [4, 8, 16, 32];
const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

/** True for a JSON object (not null, not an array). */
export function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function where(source: string | undefined): string {
  return source === undefined ? 'replica' : `replica ${source}`;
}

// Keys that name a credential. Tool property names are values (`name`), so a tool may
// declare a `password` property; only a recorded value under such a key is refused.
// Read with case and separators removed: `access_token`, `Activation-Key`, `wifiPassword`.
const SECRET_KEY = /token|password|passwd|pwd|secret|activationkey|authori[sz]ation|apikey/;

/** True when a key names a secret (token, password, activation key, authorization...). */
export function isSecretKey(key: string): boolean {
  return SECRET_KEY.test(key.toLowerCase().replace(/[^a-z]/g, ''));
}

function secretPath(value: unknown, path: string): string | undefined {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = secretPath(value[i], `${path}[${i}]`);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  if (!isObject(value)) return undefined;
  for (const [key, child] of Object.entries(value)) {
    const field = /^[A-Za-z_$][\w$]*$/.test(key)
      ? `${path}.${key}`
      : `${path}[${JSON.stringify(key)}]`;
    if (isSecretKey(key)) return field;
    const found = secretPath(child, field);
    if (found !== undefined) return found;
  }
  return undefined;
}

function parsedOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** The first field holding a secret: any key named like one, in the file or in the texts it keeps. */
export function findReplicaSecret(file: Json): string | undefined {
  const { tools: _tools, pages: _pages, hello, initialize, calls, ...rest } = file;
  // Tools and pages carry tool schemas only (their property names are no values); pages are
  // checked against the tools byte for byte.
  let found = secretPath(rest, '');
  if (found !== undefined) return found.replace(/^\./, '');
  for (const [name, text] of [
    ['hello', hello],
    ['initialize', initialize],
  ] as const) {
    if (typeof text !== 'string') continue;
    found = secretPath(parsedOrUndefined(text), name);
    if (found !== undefined) return found;
  }
  if (Array.isArray(calls)) {
    for (let i = 0; i < calls.length; i++) {
      const call = calls[i];
      if (!isObject(call)) continue;
      found = secretPath(call.arguments, `calls[${i}].arguments`);
      if (found !== undefined) return found;
      if (typeof call.reply === 'string') {
        const reply = parsedOrUndefined(call.reply);
        found = secretPath(reply, `calls[${i}].reply`);
        if (found !== undefined) return found;
        // A tool's text is often JSON of its own (a status, a configuration): read it too.
        const content = (reply as { result?: { content?: unknown } } | undefined)?.result?.content;
        for (const [j, item] of (Array.isArray(content) ? content : []).entries()) {
          const text = isObject(item) && typeof item.text === 'string' ? item.text : undefined;
          if (text === undefined) continue;
          found = secretPath(
            parsedOrUndefined(text),
            `calls[${i}].reply.result.content[${j}].text`,
          );
          if (found !== undefined) return found;
        }
      }
    }
  }
  return undefined;
}

function invalid(field: string, message: string, source: string | undefined): never {
  throw new ReplicaError('REPLICA_INVALID', field, `${where(source)}: ${field} ${message}`);
}

// The fields of each object of the file (replica.schema.json's): another key is a typo or a
// newer format, refused rather than silently ignored.
const FIELDS = {
  '': [
    '$schema',
    'schemaVersion',
    'board',
    'hello',
    'initialize',
    'tools',
    'pages',
    'calls',
    'defaults',
  ],
  board: REPLICA_BOARD_FIELDS,
  tool: ['name', 'description', 'user_only', 'properties'],
  property: ['name', 'type', 'default', 'min', 'max'],
  pages: ['plain', 'withUserTools'],
  call: ['tool', 'arguments', 'reply', 'delayMs'],
  default: ['text', 'isError'],
} as const;

function onlyFields(
  value: Json,
  known: readonly string[],
  field: string,
  source: string | undefined,
): void {
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) {
      invalid(
        field === '' ? key : `${field}.${key}`,
        `is not a replica field (${known.join(', ')})`,
        source,
      );
    }
  }
}

function readBoard(raw: unknown, source: string | undefined): ReplicaBoard {
  if (!isObject(raw)) invalid('board', 'must be an object', source);
  onlyFields(raw, FIELDS.board, 'board', source);
  const need = (key: string, ok: boolean, what: string) => {
    if (!ok) invalid(`board.${key}`, what, source);
  };
  need(
    'variant',
    typeof raw.variant === 'string' && raw.variant !== '',
    'must be a non-empty string',
  );
  need(
    'firmwareVersion',
    typeof raw.firmwareVersion === 'string' && raw.firmwareVersion !== '',
    'must be a non-empty string',
  );
  need(
    'chip',
    typeof raw.chip === 'string' && CHIPS.some((c) => c.name === raw.chip),
    `must be one of ${CHIPS.map((c) => c.name).join(', ')}`,
  );
  need('flashSizeMb', FLASH_SIZES.includes(raw.flashSizeMb as number), 'must be 4, 8, 16 or 32');
  if (raw.name !== undefined) need('name', typeof raw.name === 'string', 'must be a string');
  if (raw.mac !== undefined)
    need(
      'mac',
      typeof raw.mac === 'string' && MAC.test(raw.mac),
      'must be a lowercase MAC, aa:bb:cc:dd:ee:ff',
    );
  if (raw.protocolVersion !== undefined)
    need('protocolVersion', Number.isInteger(raw.protocolVersion), 'must be an integer');
  if (raw.transport !== undefined)
    need(
      'transport',
      raw.transport === 'websocket' || raw.transport === 'mqtt',
      'must be websocket or mqtt',
    );
  return raw as unknown as ReplicaBoard;
}

function readTools(raw: unknown, source: string | undefined): ReplicaTool[] {
  if (!Array.isArray(raw)) invalid('tools', 'must be an array of tool definitions', source);
  for (let i = 0; i < raw.length; i++) {
    const tool = raw[i];
    if (!isObject(tool)) continue; // parseToolSet names it
    onlyFields(tool, FIELDS.tool, `tools[${i}]`, source);
    if (tool.user_only !== undefined && typeof tool.user_only !== 'boolean')
      invalid(`tools[${i}].user_only`, 'must be a boolean', source);
    for (const [j, p] of (
      (Array.isArray(tool.properties) ? tool.properties : []) as unknown[]
    ).entries()) {
      if (!isObject(p)) continue;
      onlyFields(p, FIELDS.property, `tools[${i}].properties[${j}]`, source);
      if (p.type === 'integer' && (p.min === undefined) !== (p.max === undefined))
        invalid(
          `tools[${i}].properties[${j}].${p.min === undefined ? 'min' : 'max'}`,
          'must be given with its pair: the firmware takes min and max together',
          source,
        );
      if (p.type !== 'integer' && (p.min !== undefined || p.max !== undefined))
        invalid(
          `tools[${i}].properties[${j}].${p.min === undefined ? 'max' : 'min'}`,
          'is for integer properties only',
          source,
        );
    }
  }
  try {
    parseToolSet(raw);
  } catch (error) {
    if (error instanceof ProtocolError) {
      const field = error.field ?? 'tools';
      throw new ReplicaError('REPLICA_INVALID', field, `${where(source)}: ${error.message}`, {
        cause: error,
      });
    }
    throw error;
  }
  // The firmware lists user-only tools after the others (they are registered last).
  const firstUser = raw.findIndex((t) => (t as Json).user_only === true);
  if (firstUser !== -1) {
    const later = raw.findIndex((t, i) => i > firstUser && (t as Json).user_only !== true);
    if (later !== -1)
      invalid(
        `tools[${later}].user_only`,
        `must be true: the firmware lists user-only tools last, and tools[${firstUser}] is one`,
        source,
      );
  }
  return raw as ReplicaTool[];
}

function readStrings(raw: unknown, field: string, source: string | undefined): string[] {
  if (!Array.isArray(raw)) invalid(field, 'must be an array of strings', source);
  raw.forEach((s, i) => {
    if (typeof s !== 'string') invalid(`${field}[${i}]`, 'must be a string', source);
  });
  return raw as string[];
}

/**
 * A replica board answers `initialize` from its board's variant and firmware version; a recorded
 * reply naming others would be answered differently, so the two must agree.
 */
function checkInitialize(replica: ReplicaFile, source: string | undefined): void {
  if (replica.initialize === undefined) return;
  const info = (
    parsedOrUndefined(replica.initialize) as { result?: { serverInfo?: Json } } | undefined
  )?.result?.serverInfo;
  if (!isObject(info)) {
    invalid('initialize', 'must be an initialize reply with result.serverInfo', source);
  }
  const { variant, firmwareVersion } = replica.board;
  if (info.name !== variant || info.version !== firmwareVersion) {
    invalid(
      'initialize',
      `reports serverInfo ${JSON.stringify(info.name)} ${JSON.stringify(info.version)}, but board.variant is ${JSON.stringify(variant)} and board.firmwareVersion ${JSON.stringify(firmwareVersion)}: a replica board answers initialize with its board's`,
      source,
    );
  }
}

/**
 * Validates a replica already parsed from JSON: schema version, required fields, no secrets,
 * pages equal to what the firmware's pager produces for the tools. Throws {@link ReplicaError}.
 */
export function validateReplica(value: unknown, source?: string): ReplicaFile {
  if (!isObject(value)) invalid('(root)', 'must be a JSON object', source);
  if (value.schemaVersion !== REPLICA_SCHEMA_VERSION) {
    throw new ReplicaError(
      'REPLICA_SCHEMA_VERSION',
      'schemaVersion',
      `${where(source)}: schemaVersion is ${JSON.stringify(value.schemaVersion) ?? 'missing'}; this version reads schemaVersion ${REPLICA_SCHEMA_VERSION}`,
    );
  }
  const secret = findReplicaSecret(value);
  if (secret !== undefined) {
    throw new ReplicaError(
      'REPLICA_SECRET',
      secret,
      `${where(source)}: ${secret} holds a secret (token, password, activation key or authorization); a replica never carries one: remove it`,
    );
  }
  onlyFields(value, FIELDS[''], '', source);
  if (value.$schema !== undefined && typeof value.$schema !== 'string')
    invalid('$schema', 'must be a string', source);
  readBoard(value.board, source);
  if (value.hello !== undefined && typeof value.hello !== 'string')
    invalid('hello', 'must be a string', source);
  if (value.initialize !== undefined && typeof value.initialize !== 'string')
    invalid('initialize', 'must be a string', source);
  const tools = readTools(value.tools, source);
  const names = new Set(tools.map((t) => t.name));
  if (value.pages !== undefined) {
    if (!isObject(value.pages)) invalid('pages', 'must be an object', source);
    onlyFields(value.pages, FIELDS.pages, 'pages', source);
    readStrings(value.pages.plain, 'pages.plain', source);
    readStrings(value.pages.withUserTools, 'pages.withUserTools', source);
  }
  if (value.calls !== undefined) {
    if (!Array.isArray(value.calls)) invalid('calls', 'must be an array', source);
    value.calls.forEach((call: unknown, i: number) => {
      const field = `calls[${i}]`;
      if (!isObject(call)) invalid(field, 'must be an object', source);
      onlyFields(call, FIELDS.call, field, source);
      if (typeof call.tool !== 'string') invalid(`${field}.tool`, 'must be a string', source);
      if (!names.has(call.tool))
        invalid(`${field}.tool`, `names no tool of the replica (${call.tool})`, source);
      if (!isObject(call.arguments)) invalid(`${field}.arguments`, 'must be an object', source);
      if (typeof call.reply !== 'string') invalid(`${field}.reply`, 'must be a string', source);
      if (
        typeof call.delayMs !== 'number' ||
        !(call.delayMs >= 0) ||
        !Number.isFinite(call.delayMs)
      )
        invalid(`${field}.delayMs`, 'must be a number of milliseconds, 0 or more', source);
    });
  }
  if (value.defaults !== undefined) {
    if (!isObject(value.defaults)) invalid('defaults', 'must be an object', source);
    for (const [tool, answer] of Object.entries(value.defaults)) {
      const field = `defaults[${JSON.stringify(tool)}]`;
      if (!names.has(tool)) invalid(field, 'names no tool of the replica', source);
      if (!isObject(answer)) invalid(field, 'must be an object', source);
      onlyFields(answer, FIELDS.default, field, source);
      if (typeof answer.text !== 'string') invalid(`${field}.text`, 'must be a string', source);
      if (answer.isError !== undefined && typeof answer.isError !== 'boolean')
        invalid(`${field}.isError`, 'must be a boolean', source);
    }
  }
  const replica = value as unknown as ReplicaFile;
  checkInitialize(replica, source);
  checkReplicaPages(replica, source);
  return replica;
}

/** Reads a replica file's text; see {@link validateReplica}. Throws {@link ReplicaError}. */
export function parseReplica(text: string, source?: string): ReplicaFile {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (cause) {
    throw new ReplicaError(
      'REPLICA_INVALID',
      '(root)',
      `${where(source)} is not valid JSON: ${cause instanceof Error ? cause.message : String(cause)}`,
      { cause },
    );
  }
  return validateReplica(value, source);
}

/** The replica as a file: stable key order, 2-space indent, a final newline. */
export function formatReplica(replica: ReplicaFile): string {
  const {
    $schema,
    schemaVersion,
    board,
    hello,
    initialize,
    tools,
    pages,
    calls,
    defaults,
    ...extra
  } = replica;
  const {
    variant,
    name,
    firmwareVersion,
    chip,
    flashSizeMb,
    mac,
    protocolVersion,
    transport,
    ...boardExtra
  } = board;
  const ordered = {
    $schema,
    schemaVersion,
    board: {
      variant,
      name,
      firmwareVersion,
      chip,
      flashSizeMb,
      mac,
      protocolVersion,
      transport,
      ...boardExtra,
    },
    hello,
    initialize,
    tools: tools.map(({ name, description, user_only, properties, ...rest }) => ({
      name,
      description,
      user_only: user_only ?? false,
      properties: (properties ?? []).map(({ name, type, default: d, min, max, ...p }) => ({
        name,
        type,
        default: d,
        min,
        max,
        ...p,
      })),
      ...rest,
    })),
    pages,
    calls: calls?.map(({ tool, arguments: args, reply, delayMs, ...rest }) => ({
      tool,
      arguments: args,
      reply,
      delayMs,
      ...rest,
    })),
    defaults,
    ...extra,
  };
  return `${JSON.stringify(ordered, null, 2)}\n`;
}
