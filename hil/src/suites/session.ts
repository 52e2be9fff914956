/**
 * `session`: what the rig sees while it opens a board's session, judged as it happens: the
 * device hello (docs/protocol.md §4), the reply to the session's `initialize` (§3.1) and the
 * `tools/list` walks that list the board's tools (§3.2). A firmware fault there ends the
 * session step at once with a named check (exit 1), not with a wait for a session that never
 * gets ready (exit 3). The rig watches (`SessionWatch`) and this suite judges: it always runs,
 * as part of the rig's `session` step.
 *
 * The expectations are this file's own literals, read from docs/protocol.md, and the frames are
 * read with `JSON.parse`: nothing here comes from the protocol core that builds and walks the
 * pages, so a wrong constant there cannot pass its own check.
 */
import type {
  DeviceRecord,
  DeviceRegistry,
  DeviceSession,
  SessionStage,
} from '@xiaozhi-mcp/server';
import type { CheckResult } from '../model.js';
import { CheckFailure, type CheckSpec, runCheck, type Suite, type SuiteBoard } from '../suite.js';
import { isRecord, preview, SkipCheck, skip } from './support.js';

/** The hello's `type` (docs/protocol.md §4). */
const HELLO_TYPE = 'hello';
/** The protocol versions a hello may carry, as its upgrade request's `Protocol-Version` (§4). */
const HELLO_VERSIONS: readonly number[] = [1, 2, 3];
/** The transport a board on our WebSocket gateway names (§4). */
const HELLO_TRANSPORT = 'websocket';
/**
 * A session over MQTT opens with no hello: MCP works whenever MQTT is up (docs/protocol.md
 * §5); a hello there opens an audio session (the `audio` suite's).
 */
const MQTT_TRANSPORT = 'mqtt';
export const NO_HELLO_OVER_MQTT = 'over MQTT MCP needs no hello (docs/protocol.md §5)';

/** How long one reply at session start may take before the session counts as stuck. */
export const SESSION_REPLY_MS = 10_000;

export const SESSION_CHECKS = {
  hello: {
    id: 'hello',
    description:
      'the board opens its session with a hello: a JSON object of type "hello" the backend accepts',
    severity: 'critical',
  },
  helloVersion: {
    id: 'hello-version',
    description:
      "the hello's version is 1, 2 or 3, the Protocol-Version of its upgrade request (docs/protocol.md §4)",
    severity: 'major',
  },
  helloMcp: {
    id: 'hello-mcp',
    description: 'the hello says features.mcp is true: the board speaks MCP',
    severity: 'critical',
  },
  helloTransport: {
    id: 'hello-transport',
    description: 'the hello says transport "websocket"',
    severity: 'critical',
  },
  initialize: {
    id: 'initialize',
    description:
      "the session's initialize is answered under its id with a result carrying serverInfo {name, version}",
    severity: 'critical',
  },
  toolsWalk: {
    id: 'tools-walk',
    description:
      'the tools/list walks at session start end: every page answered under its id as {tools: [...]}, no cursor or tool seen twice',
    severity: 'critical',
  },
} as const satisfies Record<string, CheckSpec>;

/** A frame of the session, in the order it passed. */
export interface SessionFrame {
  readonly dir: 'in' | 'out';
  readonly text: string;
}

/** Why a session did not get ready: where, and what the rig saw. */
export interface SessionFailure {
  readonly stage: 'hello' | SessionStage;
  readonly reason: string;
  /** The board closed the session (a crash may be on its way over the console). */
  readonly closed?: boolean;
}

/** What the rig saw while a session opened. */
export interface SessionObservation {
  /** The board's hello as sent (`text` undefined: none came, or it was binary). */
  readonly hello:
    | { readonly text: string | undefined; readonly protocolVersion: number }
    | undefined;
  /** Why the backend refused the hello, if it did. */
  readonly refused: string | undefined;
  /** The session's frames (hello excluded), in order. */
  readonly frames: readonly SessionFrame[];
  readonly ready: boolean;
  /** The session was open before the rig watched it: its start was not seen. */
  readonly late?: boolean;
  /** How the session ran, as the server saw it (`websocket`, `mqtt`). */
  readonly transport?: string;
  readonly failure: SessionFailure | undefined;
}

// ---- Reading frames ---------------------------------------------------------------------------

interface Message {
  readonly dir: 'in' | 'out';
  readonly id: unknown;
  readonly method: string | undefined;
  readonly params: unknown;
  readonly kind: 'request' | 'result' | 'error' | 'other';
  readonly result?: unknown;
  readonly error?: unknown;
  /** The payload text, for messages. */
  readonly text: string;
}

/** An MCP frame's JSON-RPC payload, read with `JSON.parse`; an unreadable reply keeps its id if it shows. */
function readMessage(frame: SessionFrame): Message | undefined {
  let envelope: unknown;
  try {
    envelope = JSON.parse(frame.text);
  } catch {
    // The firmware's unescaped error messages make invalid JSON; the id still shows.
    const id = /"id"\s*:\s*(-?\d+)/.exec(frame.text)?.[1];
    if (!/"type"\s*:\s*"mcp"/.test(frame.text) || id === undefined) return undefined;
    return {
      dir: frame.dir,
      id: Number(id),
      method: undefined,
      params: undefined,
      kind: /"error"\s*:/.test(frame.text) ? 'error' : 'other',
      text: frame.text,
    };
  }
  if (!isRecord(envelope) || envelope.type !== 'mcp' || !isRecord(envelope.payload))
    return undefined;
  const payload = envelope.payload;
  const text = JSON.stringify(payload);
  if (typeof payload.method === 'string')
    return {
      dir: frame.dir,
      id: payload.id,
      method: payload.method,
      params: payload.params,
      kind: 'request',
      text,
    };
  if ('result' in payload)
    return {
      dir: frame.dir,
      id: payload.id,
      method: undefined,
      params: undefined,
      kind: 'result',
      result: payload.result,
      text,
    };
  if ('error' in payload)
    return {
      dir: frame.dir,
      id: payload.id,
      method: undefined,
      params: undefined,
      kind: 'error',
      error: payload.error,
      text,
    };
  return {
    dir: frame.dir,
    id: payload.id,
    method: undefined,
    params: undefined,
    kind: 'other',
    text,
  };
}

/** A request the backend sent, and what came back. */
interface Exchange {
  readonly request: Message;
  readonly reply: Message | undefined;
  /** Replies under an id no request of this session had, that came while it waited. */
  readonly strays: readonly Message[];
}

function exchanges(frames: readonly SessionFrame[]): Exchange[] {
  const messages = frames.map(readMessage).filter((m): m is Message => m !== undefined);
  const requests = messages.filter((m) => m.dir === 'out' && m.kind === 'request');
  const ids = new Set(requests.map((r) => JSON.stringify(r.id)));
  return requests.map((request) => {
    const at = messages.indexOf(request);
    const later = messages.slice(at + 1).filter((m) => m.dir === 'in' && m.kind !== 'request');
    const reply = later.find((m) => JSON.stringify(m.id) === JSON.stringify(request.id));
    const until = reply === undefined ? later.length : later.indexOf(reply);
    const strays = later.slice(0, until).filter((m) => !ids.has(JSON.stringify(m.id)));
    return { request, reply, strays };
  });
}

/** Why an exchange has no reply: a reply under another id, or what ended the wait. */
function missingReply(exchange: Exchange, what: string, observed: SessionObservation): string {
  const stray = exchange.strays[0];
  if (stray !== undefined)
    return `expected a reply to ${what} with id ${JSON.stringify(exchange.request.id)}, got a reply with id ${JSON.stringify(stray.id)}: ${preview(stray.text, 200)}`;
  const why = observed.failure?.reason ?? 'the session ended';
  return `expected a reply to ${what} (id ${JSON.stringify(exchange.request.id)}), got none (${why})`;
}

// ---- Judging ---------------------------------------------------------------------------------

/** Runs one check of the suite; a {@link SkipCheck} makes it `skipped`. */
async function check(
  spec: CheckSpec,
  body: () => Promise<string>,
  board: SuiteBoard,
): Promise<CheckResult> {
  let skipped: string | undefined;
  const result = await runCheck(
    'session',
    spec,
    async () => {
      try {
        return await body();
      } catch (error) {
        if (!(error instanceof SkipCheck)) throw error;
        skipped = error.message;
        return error.message;
      }
    },
    { board },
  );
  return skipped === undefined ? result : { ...result, status: 'skipped', message: skipped };
}

type HelloParse =
  | { readonly ok: true; readonly hello: Record<string, unknown> }
  | { readonly ok: false; readonly why: string };

function parseHello(observed: SessionObservation): HelloParse | undefined {
  const hello = observed.hello;
  if (hello === undefined) return undefined;
  if (hello.text === undefined)
    return { ok: false, why: `expected a hello, got ${observed.refused ?? 'none'}` };
  let value: unknown;
  try {
    value = JSON.parse(hello.text);
  } catch {
    return { ok: false, why: `expected a JSON hello, got ${preview(hello.text, 200)}` };
  }
  if (!isRecord(value))
    return { ok: false, why: `expected a JSON object, got ${preview(hello.text, 200)}` };
  return { ok: true, hello: value };
}

function judgeHello(observed: SessionObservation, board: SuiteBoard): Promise<CheckResult>[] {
  if (observed.transport === MQTT_TRANSPORT)
    return [
      SESSION_CHECKS.hello,
      SESSION_CHECKS.helloVersion,
      SESSION_CHECKS.helloMcp,
      SESSION_CHECKS.helloTransport,
    ].map((spec) => check(spec, async () => skip(NO_HELLO_OVER_MQTT), board));
  const parsed = parseHello(observed);
  const hello = (): Record<string, unknown> => {
    if (parsed === undefined) skip('no hello came (see session.hello)');
    if (!parsed.ok) skip('no hello to inspect (see session.hello)');
    return parsed.hello;
  };
  const version = check(
    SESSION_CHECKS.helloVersion,
    async () => {
      const actual = hello().version;
      const header = observed.hello?.protocolVersion;
      if (typeof actual !== 'number' || !HELLO_VERSIONS.includes(actual)) {
        const got = actual === undefined ? 'no version' : JSON.stringify(actual);
        throw new CheckFailure(`expected version 1, 2 or 3, got ${got}`, '1, 2 or 3', got);
      }
      if (actual !== header)
        throw new CheckFailure(
          `expected version ${header} (the Protocol-Version of the upgrade request), got ${actual}`,
          String(header),
          String(actual),
        );
      return `version ${actual}`;
    },
    board,
  );
  const mcp = check(
    SESSION_CHECKS.helloMcp,
    async () => {
      const features = hello().features;
      const actual = isRecord(features) ? features.mcp : undefined;
      if (actual !== true)
        throw new CheckFailure(
          `expected "features":{"mcp":true}, got ${features === undefined ? 'no features' : `"features":${JSON.stringify(features)}`}`,
          'features.mcp true',
          features === undefined ? 'no features' : JSON.stringify(features),
        );
      return 'features.mcp true';
    },
    board,
  );
  const transport = check(
    SESSION_CHECKS.helloTransport,
    async () => {
      const actual = hello().transport;
      if (actual !== HELLO_TRANSPORT)
        throw new CheckFailure(
          `expected "transport":"${HELLO_TRANSPORT}", got ${actual === undefined ? 'no transport' : JSON.stringify(actual)}`,
          HELLO_TRANSPORT,
          actual === undefined ? 'no transport' : JSON.stringify(actual),
        );
      return `transport ${HELLO_TRANSPORT}`;
    },
    board,
  );
  const shape = Promise.all([version, mcp, transport]).then((specific) =>
    check(
      SESSION_CHECKS.hello,
      async () => {
        if (parsed === undefined) {
          if (observed.late) skip('the session was open before the rig watched it');
          throw new CheckFailure(
            `expected a hello, got none (${observed.failure?.reason ?? 'no session'})`,
          );
        }
        if (!parsed.ok) throw new CheckFailure(parsed.why);
        const type = parsed.hello.type;
        if (type !== HELLO_TYPE) {
          const got = type === undefined ? 'no type' : JSON.stringify(type);
          throw new CheckFailure(`expected "type":"${HELLO_TYPE}", got ${got}`, HELLO_TYPE, got);
        }
        const explained = specific.filter((c) => c.status === 'failed').map((c) => c.id);
        if (observed.refused !== undefined && explained.length === 0)
          throw new CheckFailure(`the backend refused the hello: ${observed.refused}`);
        return observed.refused === undefined
          ? 'accepted'
          : `refused, for what ${explained.join(', ')} says`;
      },
      board,
    ),
  );
  return [shape, version, mcp, transport];
}

function judgeInitialize(
  observed: SessionObservation,
  all: readonly Exchange[],
  board: SuiteBoard,
): Promise<CheckResult> {
  return check(
    SESSION_CHECKS.initialize,
    async () => {
      const exchange = all.find((e) => e.request.method === 'initialize');
      if (exchange === undefined) {
        if (observed.late || observed.ready) skip('the session was open before the rig watched it');
        skip(
          observed.refused === undefined
            ? 'the backend sent no initialize (see session.hello)'
            : 'no session: the backend refused the hello (see session.hello)',
        );
      }
      const { reply } = exchange;
      if (reply === undefined)
        throw new CheckFailure(missingReply(exchange, 'initialize', observed));
      if (reply.kind !== 'result')
        throw new CheckFailure(`expected a result, got ${preview(reply.text, 300)}`);
      const result = reply.result;
      const info = isRecord(result) ? result.serverInfo : undefined;
      if (!isRecord(info) || typeof info.name !== 'string' || typeof info.version !== 'string')
        throw new CheckFailure(
          `expected serverInfo {name, version}, got ${preview(JSON.stringify(result), 300)}`,
          'serverInfo {name, version}',
          preview(JSON.stringify(result), 300),
        );
      if (!observed.ready && observed.failure?.stage === 'initialize')
        throw new CheckFailure(`the backend could not use the reply: ${observed.failure.reason}`);
      return `serverInfo ${JSON.stringify(info.name)} ${JSON.stringify(info.version)}`;
    },
    board,
  );
}

/** What is wrong with the tools/list walks seen; empty when nothing is. */
function walkProblems(observed: SessionObservation, all: readonly Exchange[]): string[] {
  const problems: string[] = [];
  const pages = all.filter((e) => e.request.method === 'tools/list');
  let walk: { name: string; cursors: Set<string>; tools: Map<string, number>; page: number } = {
    name: 'plain',
    cursors: new Set(),
    tools: new Map(),
    page: 0,
  };
  for (const exchange of pages) {
    const params = isRecord(exchange.request.params) ? exchange.request.params : {};
    const cursor =
      typeof params.cursor === 'string' && params.cursor !== '' ? params.cursor : undefined;
    if (cursor === undefined)
      walk = {
        name: params.withUserTools === true ? 'with user tools' : 'plain',
        cursors: new Set(),
        tools: new Map(),
        page: 0,
      };
    walk.page++;
    const where = `page ${walk.page} of the ${walk.name} walk${cursor === undefined ? '' : ` (cursor "${cursor}")`}`;
    const { reply } = exchange;
    if (reply === undefined) {
      problems.push(`${where}: ${missingReply(exchange, 'tools/list', observed)}`);
      break;
    }
    if (reply.kind === 'error') {
      // A board whose every tool is user-only answers its plain walk with an error page.
      if (!observed.ready) problems.push(`${where}: an error reply ${preview(reply.text, 200)}`);
      continue;
    }
    const result = reply.result;
    if (!isRecord(result) || !Array.isArray(result.tools)) {
      problems.push(`${where}: expected {tools: [...]}, got ${preview(reply.text, 200)}`);
      break;
    }
    for (const tool of result.tools) {
      const name = isRecord(tool) && typeof tool.name === 'string' ? tool.name : undefined;
      if (name === undefined) continue;
      const first = walk.tools.get(name);
      if (first !== undefined)
        problems.push(`${where} lists ${name} again (first on page ${first})`);
      else walk.tools.set(name, walk.page);
    }
    if (!('nextCursor' in result)) continue;
    const next = result.nextCursor;
    if (typeof next !== 'string') {
      problems.push(`${where}: nextCursor is ${JSON.stringify(next)}, not a tool name`);
      break;
    }
    const listed = walk.tools.get(next);
    if (walk.cursors.has(next) || cursor === next)
      problems.push(`${where}: nextCursor "${next}" was a cursor before: the walk never ends`);
    else if (listed !== undefined)
      problems.push(
        `${where}: nextCursor "${next}" names a tool already listed (page ${listed}): the walk never ends`,
      );
    if (cursor !== undefined) walk.cursors.add(cursor);
    walk.cursors.add(next);
    if (problems.length > 0) break;
  }
  return problems;
}

function judgeTools(
  observed: SessionObservation,
  all: readonly Exchange[],
  board: SuiteBoard,
): Promise<CheckResult> {
  return check(
    SESSION_CHECKS.toolsWalk,
    async () => {
      const pages = all.filter((e) => e.request.method === 'tools/list');
      const problems = walkProblems(observed, all);
      if (problems.length > 0) throw new CheckFailure(problems.slice(0, 3).join('; '));
      if (!observed.ready && observed.failure?.stage === 'tools')
        throw new CheckFailure(`the backend could not list the tools: ${observed.failure.reason}`);
      if (pages.length === 0) {
        if (observed.late || observed.ready) skip('the session was open before the rig watched it');
        skip('no tools walk (see session.initialize)');
      }
      return `${pages.length} page(s) in the plain and user-tool walks`;
    },
    board,
  );
}

/** Judges a session's start; the checks come in the order of {@link SESSION_CHECKS}. */
export async function judgeSession(
  observed: SessionObservation,
  board: SuiteBoard,
): Promise<CheckResult[]> {
  const all = exchanges(observed.frames);
  const hello = await Promise.all(judgeHello(observed, board));
  const initialize = await judgeInitialize(observed, all, board);
  const tools = await judgeTools(observed, all, board);
  return [...hello, initialize, tools];
}

// ---- Watching --------------------------------------------------------------------------------

/**
 * Watches a device's next session open on the backend: its hello (refused or accepted), its
 * frames, and the backend's verdict (`ready` or `session-failed`). Resolves `outcome` when the
 * session is ready, and as soon as it cannot be: the hello refused, `initialize` or the walk
 * failed, the board closed the session, a reply under a wrong id, or no reply within
 * `replyMs`. Create it before the session is started, so nothing is missed.
 */
export class SessionWatch {
  readonly outcome: Promise<SessionObservation>;
  #hello: SessionObservation['hello'];
  #refused: string | undefined;
  #frames: SessionFrame[] = [];
  #late = false;
  #transport: string | undefined;
  #session: DeviceSession | undefined;
  #settled = false;
  #resolve: (observed: SessionObservation) => void = () => {};
  /** Requests of the session awaiting their reply, by id, with their bound. */
  readonly #waiting = new Map<string, { method: string; timer: NodeJS.Timeout }>();
  #initialized = false;
  readonly #detach: () => void;

  /**
   * `fresh`: only a session that opens from now on counts, not one open already (a board about
   * to reconnect over MQTT after a reset: its old connection may not be closed yet).
   */
  constructor(
    readonly registry: DeviceRegistry,
    readonly deviceId: string,
    readonly replyMs: number = SESSION_REPLY_MS,
    options: { readonly fresh?: boolean } = {},
  ) {
    const id = deviceId.toLowerCase();
    this.outcome = new Promise((resolve) => {
      this.#resolve = resolve;
    });
    const onRefused = (refusal: {
      deviceId: string;
      text: string | undefined;
      reason: string;
      protocolVersion: number;
    }) => {
      if (refusal.deviceId !== id) return;
      this.#hello = { text: refusal.text, protocolVersion: refusal.protocolVersion };
      this.#refused = refusal.reason;
      this.#settle({ stage: 'hello', reason: `the backend refused the hello: ${refusal.reason}` });
    };
    const onConnected = (record: DeviceRecord) => {
      if (record.deviceId !== id || record.session === undefined) return;
      this.#follow(record.session);
    };
    const onReady = (record: DeviceRecord) => {
      if (record.deviceId !== id || record.session !== this.#session) return;
      this.#settle(undefined);
    };
    const onFailed = (record: DeviceRecord, stage: SessionStage, error: Error) => {
      if (record.deviceId !== id || record.session !== this.#session) return;
      this.#settle({ stage, reason: error.message });
    };
    registry.on('hello-refused', onRefused);
    registry.on('connected', onConnected);
    registry.on('ready', onReady);
    registry.on('session-failed', onFailed);
    this.#detach = () => {
      registry.off('hello-refused', onRefused);
      registry.off('connected', onConnected);
      registry.off('ready', onReady);
      registry.off('session-failed', onFailed);
    };
    // A session already open (a board that starts its own) is followed from here on.
    const record = registry.get(id);
    if (options.fresh !== true && record?.session !== undefined && !record.session.closed) {
      this.#late = true;
      this.#follow(record.session);
      if (record.ready) this.#settle(undefined);
    }
  }

  /** Stops watching; an unsettled watch resolves as it stands. */
  dispose(): void {
    this.#detach();
    for (const { timer } of this.#waiting.values()) clearTimeout(timer);
    this.#waiting.clear();
  }

  #follow(session: DeviceSession): void {
    if (this.#settled) return;
    this.#session = session;
    this.#transport = session.transport;
    this.#hello = { text: session.info.helloText, protocolVersion: session.info.protocolVersion };
    this.#frames = [];
    this.#initialized = false;
    session.on('frame', (dir, text) => {
      if (this.#session !== session || this.#settled) return;
      this.#frames.push({ dir, text });
      this.#track(readMessage({ dir, text }));
    });
    session.once('closed', (reason) => {
      if (this.#session !== session) return;
      this.#settle({
        stage: this.#stage(),
        reason: `the board closed the session (${reason})`,
        closed: true,
      });
    });
  }

  #stage(): SessionStage {
    return this.#initialized ? 'tools' : 'initialize';
  }

  /** Bounds each request on its reply, and settles at once on a reply under a wrong id. */
  #track(message: Message | undefined): void {
    if (message === undefined) return;
    const key = JSON.stringify(message.id);
    if (message.dir === 'out' && message.kind === 'request' && message.id !== undefined) {
      const method = message.method ?? '?';
      const timer = setTimeout(() => {
        this.#settle({
          stage: this.#stage(),
          reason: `no reply to ${method} (id ${key}) within ${this.replyMs} ms`,
        });
      }, this.replyMs);
      this.#waiting.set(key, { method, timer });
      return;
    }
    if (message.dir !== 'in' || message.kind === 'request') return;
    const waiting = this.#waiting.get(key);
    if (waiting !== undefined) {
      clearTimeout(waiting.timer);
      this.#waiting.delete(key);
      if (waiting.method === 'initialize') this.#initialized = true;
      return;
    }
    const [only] = [...this.#waiting.entries()];
    if (only !== undefined && this.#waiting.size === 1)
      this.#settle({
        stage: this.#stage(),
        reason: `a reply with id ${key}, expected ${only[0]} (${only[1].method})`,
      });
  }

  #settle(failure: SessionFailure | undefined): void {
    if (this.#settled) return;
    this.#settled = true;
    this.dispose();
    this.#resolve({
      hello: this.#hello,
      refused: this.#refused,
      frames: [...this.#frames],
      ready: failure === undefined,
      ...(this.#late ? { late: true } : {}),
      ...(this.#transport === undefined ? {} : { transport: this.#transport }),
      failure,
    });
  }
}

/** The session suite has no run of its own: its checks are judged while the rig opens the session. */
export const sessionSuite: Suite = {
  name: 'session',
  description: 'session: the device hello, initialize and the tools walk at session start',
  run: async () => ({ checks: [] }),
};
