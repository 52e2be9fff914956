/**
 * A replica rebuilt from hil's `transcript.jsonl`: a `session` note per session (its hello),
 * a line per frame (`dir` `out` from the backend, `in` from the board, `text` the envelope),
 * a `closed` note, and the `board` note hil writes with the identity. Requests and replies are
 * paired by JSON-RPC id within a session. Secrets are never copied: a call whose arguments or
 * reply hold a key named like a token or password is left out, and so is a hello holding one.
 */
import {
  type JsonRpcMessage,
  parseToolSet,
  readDeviceFrame,
  validateArgumentValues,
} from '@xiaozhi-mcp/protocol';
import {
  findReplicaSecret,
  isObject,
  REPLICA_SCHEMA_VERSION,
  type ReplicaBoard,
  type ReplicaCall,
  ReplicaError,
  type ReplicaFile,
  type ReplicaProperty,
  type ReplicaTool,
  validateReplica,
} from './replica-file.js';
import { REPLICA_BOARD_DEFAULTS } from './replica-from-tools.js';
import { REPLICA_BOARD_FIELDS } from './replica-types.js';

type Json = Record<string, unknown>;

interface Frame {
  readonly t: number;
  readonly dir: 'in' | 'out';
  readonly payloadText: string;
  readonly message: JsonRpcMessage;
}

interface Session {
  readonly id: string;
  deviceId: string | undefined;
  hello: string | undefined;
  readonly frames: Frame[];
}

/** A request and the board's reply to it. */
interface Exchange {
  readonly method: string;
  readonly params: unknown;
  readonly reply: string;
  readonly message: JsonRpcMessage;
  readonly delayMs: number;
}

function time(value: unknown): number {
  if (typeof value === 'number') return value;
  return typeof value === 'string' ? Date.parse(value) : Number.NaN;
}

function invalid(field: string, message: string): never {
  throw new ReplicaError('REPLICA_INVALID', field, `transcript: ${message}`);
}

function readLines(jsonl: string): { sessions: Session[]; board: Json | undefined } {
  const sessions = new Map<string, Session>();
  let board: Json | undefined;
  const session = (id: string): Session => {
    let s = sessions.get(id);
    if (s === undefined) {
      s = { id, deviceId: undefined, hello: undefined, frames: [] };
      sessions.set(id, s);
    }
    return s;
  };
  jsonl.split('\n').forEach((line, index) => {
    if (line.trim() === '') return;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      invalid(`line ${index + 1}`, `line ${index + 1} is not JSON`);
    }
    if (!isObject(value)) return;
    if (value.event === 'board') {
      board ??= value;
      return;
    }
    if (value.event === 'session' && typeof value.sessionId === 'string') {
      const s = session(value.sessionId);
      if (typeof value.deviceId === 'string') s.deviceId = value.deviceId;
      if (typeof value.hello === 'string') s.hello = value.hello;
      return;
    }
    if (typeof value.session !== 'string' || typeof value.text !== 'string') return;
    if (value.dir !== 'in' && value.dir !== 'out') return;
    const frame = readDeviceFrame(value.text);
    if (frame.kind !== 'mcp') return;
    session(value.session).frames.push({
      t: time(value.t),
      dir: value.dir,
      payloadText: frame.payloadText,
      message: frame.message,
    });
  });
  return { sessions: [...sessions.values()], board };
}

/** Each request of the backend with the board's reply, in request order (unanswered ones left out). */
function exchanges(session: Session): Exchange[] {
  const pending = new Map<string, { method: string; params: unknown; t: number; order: number }>();
  const out: { order: number; exchange: Exchange }[] = [];
  let order = 0;
  for (const frame of session.frames) {
    const { message } = frame;
    if (frame.dir === 'out' && message.kind === 'request') {
      pending.set(JSON.stringify(message.id), {
        method: message.method,
        params: message.params,
        t: frame.t,
        order: order++,
      });
    } else if (frame.dir === 'in' && (message.kind === 'result' || message.kind === 'error')) {
      const key = JSON.stringify(message.id);
      const request = pending.get(key);
      if (request === undefined) continue;
      pending.delete(key);
      const delay = Math.round(frame.t - request.t);
      out.push({
        order: request.order,
        exchange: {
          method: request.method,
          params: request.params,
          reply: frame.payloadText,
          message,
          delayMs: Number.isFinite(delay) && delay > 0 ? delay : 0,
        },
      });
    }
  }
  return out.sort((a, b) => a.order - b.order).map((e) => e.exchange);
}

interface Walk {
  readonly pages: string[];
  readonly tools: Json[];
  next: string | undefined;
}

/**
 * The first complete walk of each kind: from the first cursor, each request asking with the
 * previous page's `nextCursor`, until a page has none or the board answers an error.
 */
function firstWalks(all: readonly Exchange[][]): { plain?: Walk; withUserTools?: Walk } {
  const done: { plain?: Walk; withUserTools?: Walk } = {};
  for (const list of all) {
    const open: { plain?: Walk; withUserTools?: Walk } = {};
    for (const exchange of list) {
      if (exchange.method !== 'tools/list') continue;
      const params = isObject(exchange.params) ? exchange.params : {};
      const kind = params.withUserTools === true ? 'withUserTools' : 'plain';
      if (done[kind] !== undefined) continue;
      const cursor = typeof params.cursor === 'string' ? params.cursor : '';
      let walk = open[kind];
      if (cursor === '') {
        walk = { pages: [], tools: [], next: undefined };
        open[kind] = walk;
      } else if (walk === undefined || cursor !== walk.next) {
        continue;
      }
      walk.pages.push(exchange.reply);
      const { message } = exchange;
      if (message.kind !== 'result' || !isObject(message.result)) {
        done[kind] = walk; // the firmware's error ends the walk
        continue;
      }
      const tools = message.result.tools;
      if (Array.isArray(tools)) walk.tools.push(...tools.filter(isObject));
      const next = message.result.nextCursor;
      walk.next = typeof next === 'string' ? next : undefined;
      if (walk.next === undefined) done[kind] = walk;
    }
  }
  return done;
}

/** A listed tool back in the firmware's terms (the corpus README's tool shape). */
function toolFromListing(listed: Json): ReplicaTool {
  const schema = isObject(listed.inputSchema) ? listed.inputSchema : {};
  const props = isObject(schema.properties) ? schema.properties : {};
  const properties: ReplicaProperty[] = Object.entries(props).map(([name, raw]) => {
    const p = isObject(raw) ? raw : {};
    const property: ReplicaProperty = { name, type: p.type as ReplicaProperty['type'] };
    if (p.default !== undefined) property.default = p.default as string | number | boolean;
    if (typeof p.minimum === 'number') property.min = p.minimum;
    if (typeof p.maximum === 'number') property.max = p.maximum;
    return property;
  });
  const annotations = isObject(listed.annotations) ? listed.annotations : {};
  const audience = Array.isArray(annotations.audience) ? annotations.audience : [];
  return {
    name: String(listed.name),
    description: String(listed.description),
    user_only: audience.includes('user'),
    properties,
  };
}

function helloFacts(hello: string | undefined): Partial<ReplicaBoard> {
  let value: unknown;
  try {
    value = hello === undefined ? undefined : JSON.parse(hello);
  } catch {
    return {};
  }
  if (!isObject(value)) return {};
  const facts: Partial<ReplicaBoard> = {};
  if (Number.isInteger(value.version)) facts.protocolVersion = value.version as number;
  // The hello says how audio travels: `udp` is the MQTT + UDP transport.
  if (value.transport === 'udp') facts.transport = 'mqtt';
  else if (value.transport === 'websocket') facts.transport = 'websocket';
  return facts;
}

function boardFacts(note: Json | undefined): Partial<ReplicaBoard> {
  if (note === undefined) return {};
  const facts: Record<string, unknown> = {};
  for (const key of REPLICA_BOARD_FIELDS) {
    if (note[key] !== undefined && note[key] !== null) facts[key] = note[key];
  }
  return facts as Partial<ReplicaBoard>;
}

/**
 * Rebuilds a replica from a transcript: the first session's hello, the first `initialize`
 * reply, the first complete `tools/list` walk of each kind (the tools are read back from its
 * pages), and every answered `tools/call` of a listed tool with arguments the firmware took.
 * The identity is the `board` note's, else the session's device id (MAC) and the hello's
 * protocol version and transport; the variant and firmware version are what the board's
 * `initialize` reply said, when there is one. `identity` overrides all (a variant or version
 * other than the recorded reply's leaves that reply out). The result passes `parseReplica`.
 */
export function replicaFromTranscript(
  jsonl: string,
  identity: Partial<ReplicaFile['board']> = {},
): ReplicaFile {
  const { sessions, board: note } = readLines(jsonl);
  const all = sessions.map(exchanges);
  const walks = firstWalks(all);
  const listing = walks.withUserTools ?? walks.plain;
  if (listing === undefined) {
    invalid(
      'pages',
      'no session holds a complete tools/list walk: nothing to rebuild the tools from',
    );
  }
  const tools = listing.tools.map(toolFromListing);
  const model = new Map(parseToolSet(tools).map((entry) => [entry.tool.name, entry.tool]));

  let initialize: string | undefined;
  let serverInfo: Json = {};
  const calls: ReplicaCall[] = [];
  for (const exchange of all.flat()) {
    const { message } = exchange;
    if (exchange.method === 'initialize' && initialize === undefined && message.kind === 'result') {
      initialize = exchange.reply;
      const result = isObject(message.result) ? message.result : {};
      serverInfo = isObject(result.serverInfo) ? result.serverInfo : {};
    }
    if (exchange.method !== 'tools/call') continue;
    const params = isObject(exchange.params) ? exchange.params : {};
    const tool = typeof params.name === 'string' ? model.get(params.name) : undefined;
    if (tool === undefined) continue; // an unknown tool: the board's own error answers it
    const args = isObject(params.arguments) ? params.arguments : {};
    if (!validateArgumentValues(tool, args).ok) continue; // the firmware's validation answers it
    const call: ReplicaCall = {
      tool: tool.name,
      arguments: args,
      reply: exchange.reply,
      delayMs: exchange.delayMs,
    };
    if (findReplicaSecret({ calls: [call] }) !== undefined) continue; // never copy a secret
    calls.push(call);
  }

  const first = sessions.find((s) => s.hello !== undefined) ?? sessions[0];
  const hello =
    first?.hello !== undefined && findReplicaSecret({ hello: first.hello }) === undefined
      ? first.hello
      : undefined;
  const fromInitialize: Partial<ReplicaBoard> = {};
  if (typeof serverInfo.name === 'string') fromInitialize.variant = serverInfo.name;
  if (typeof serverInfo.version === 'string') fromInitialize.firmwareVersion = serverInfo.version;
  const deviceId = sessions.find((s) => s.deviceId !== undefined)?.deviceId;
  const given = boardFacts(identity as Json);
  const board = {
    ...REPLICA_BOARD_DEFAULTS,
    ...(deviceId === undefined ? {} : { mac: deviceId.toLowerCase() }),
    ...helloFacts(first?.hello),
    ...boardFacts(note),
    // What the board said in initialize is its name and version, whatever the rig believed.
    ...fromInitialize,
    ...given,
  } as ReplicaBoard;
  // A caller renaming the board: the recorded initialize reply no longer applies.
  const renamed =
    (given.variant !== undefined && given.variant !== fromInitialize.variant) ||
    (given.firmwareVersion !== undefined &&
      given.firmwareVersion !== fromInitialize.firmwareVersion);
  if (renamed) initialize = undefined;

  const replica: ReplicaFile = {
    schemaVersion: REPLICA_SCHEMA_VERSION,
    board,
    ...(hello === undefined ? {} : { hello }),
    ...(initialize === undefined ? {} : { initialize }),
    tools,
    pages: { plain: walks.plain?.pages ?? [], withUserTools: walks.withUserTools?.pages ?? [] },
    calls,
  };
  return validateReplica(replica, 'rebuilt from a transcript');
}
