/**
 * `bridge` (opt-in): the board's tools the way an LLM client meets them. An in-process
 * `@xiaozhi-mcp/bridge` pinned to this board, on the rig's own server API, served over
 * Streamable HTTP on loopback; the official SDK `Client` lists every page and calls every safe
 * tool through it. The checks judge with their own expectations: the client's name limit and
 * the name rule the bridge documents (packages/bridge/README.md, "Tool names") as literals,
 * MCP's content shapes, the board's own listing from the session step, and the frames the
 * board itself received and sent while each call went through.
 */
import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { isDeepStrictEqual } from 'node:util';
import { readDeviceFrame } from '@xiaozhi-mcp/protocol';
import type { DeviceSession, DeviceTool } from '@xiaozhi-mcp/server';
import type { Suite, SuiteContext, SuiteOutcome } from '../suite.js';
import { CheckFailure, type CheckSpec, expectThat } from '../suite.js';
import {
  describeError,
  isRecord,
  preview,
  REPLY_TIMEOUT_MS,
  requestOptions,
  SuiteChecks,
  skip,
} from './support.js';
import {
  DEFAULT_SAFE_TOOL_TIMEOUT_MS,
  restoreSettings,
  safeToolPlan,
  settingsBefore,
  sweepArguments,
} from './tools-call.js';

/**
 * What Anthropic's API (so Claude Desktop) and Cursor accept as a tool name: a name outside it
 * is a tool those clients cannot call(Anthropic's tool-use docs, `name`).
 */
const CLIENT_TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
/**
 * Tools per `tools/list` page the bridge is told to serve: small, so that the client follows
 * cursors even on a board with a handful of tools.
 */
export const BRIDGE_PAGE_SIZE = 5;
/** A walk of more pages than this never ends. */
const MAX_PAGES = 1000;
/** The bridge's poll: once is enough here, the board's tools do not change during the suite. */
const BRIDGE_POLL_MS = 3_600_000;
/**
 * The client waits this much longer than the bridge's bound on a call (its own bound plus the
 * 5 s it allows a silent server, packages/bridge/README.md), so the bridge answers first.
 */
const CLIENT_MARGIN_MS = 10_000;

export const BRIDGE_CHECKS = {
  list: {
    id: 'list',
    description:
      "the SDK client lists the board's tools through the bridge over Streamable HTTP: every page followed to its end, as many tools as the board lists without user tools, each name within ^[a-zA-Z0-9_-]{1,64}$, none twice",
    severity: 'critical',
  },
  names: {
    id: 'names',
    description:
      "every tool the board lists for a model is served under the bridge's documented name (the board's name with '.' as '-'; otherwise titled with the board's name) with the board's input schema; no user-only tool and no tool of no board",
    severity: 'major',
  },
  callSafeTools: {
    id: 'call-safe-tools',
    description:
      'every safe tool a model is shown (as tools-call.safe-tools picks them, with the same arguments; user-only ones are not served) called through the bridge with the SDK client reaches the board under its own name and arguments, and comes back as MCP content (text or image, not empty) without isError',
    severity: 'major',
  },
} as const satisfies Record<string, CheckSpec>;

/** A tool as the client listed it. */
interface ListedTool {
  readonly name: string;
  readonly title?: string | undefined;
  readonly inputSchema: unknown;
}

/**
 * The bridge's documented name of a board tool served alone (packages/bridge/README.md, "Tool
 * names": letters, digits and `_` stand for themselves, a `.` between them is `-`), for names
 * that rule covers; other names are escaped and found by their title.
 */
export function documentedName(tool: string): string | undefined {
  if (!/^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$/.test(tool) || tool.length > 64) return undefined;
  return tool.replaceAll('.', '-');
}

/** Why the suite cannot run on this board, if it cannot. */
function unavailable(context: SuiteContext): string | undefined {
  if (context.serverApi === undefined) return 'the rig gives this suite no server API';
  let record: ReturnType<SuiteContext['record']>;
  try {
    record = context.record();
  } catch {
    return 'the board has no session';
  }
  if (record.session === undefined || record.session.closed || !record.ready)
    return 'the board has no session';
  return undefined;
}

/** One content item of a call result, judged by MCP's shapes; a problem or undefined. */
function contentProblem(item: unknown): string | undefined {
  if (!isRecord(item))
    return `a content item that is no object: ${preview(JSON.stringify(item), 80)}`;
  if (item.type === 'text')
    return typeof item.text === 'string' ? undefined : 'a text item without string text';
  if (item.type === 'image') {
    const data = item.data;
    if (
      typeof data !== 'string' ||
      data.length === 0 ||
      data.length % 4 !== 0 ||
      !/^[A-Za-z0-9+/]*={0,2}$/.test(data)
    )
      return 'an image item whose data is not base64';
    if (typeof item.mimeType !== 'string' || !item.mimeType.startsWith('image/'))
      return `an image item of mimeType ${JSON.stringify(item.mimeType)}`;
    return undefined;
  }
  return `a content item of type ${JSON.stringify(item.type)} (expected text or image)`;
}

/** The text of a result, for messages. */
function resultText(result: Record<string, unknown>): string {
  const content = Array.isArray(result.content) ? result.content : [];
  return content
    .map((item) =>
      isRecord(item) && typeof item.text === 'string' ? item.text : JSON.stringify(item),
    )
    .join(' ');
}

/** What the board received and answered while one call went through the bridge. */
interface BoardSide {
  /** Ids of the `tools/call` requests the board received with this name and arguments. */
  readonly received: (number | string)[];
  /** Every `tools/call` the board received, for messages. */
  readonly calls: string[];
  /** Ids the board answered (a result or an error). */
  readonly answered: Set<number | string | null>;
  stop(): void;
}

/** Watches the board's session for the `tools/call` of `tool` with `args`, and its reply. */
function watchBoard(
  session: DeviceSession,
  tool: string,
  args: Record<string, unknown>,
): BoardSide {
  const side: BoardSide = {
    received: [],
    calls: [],
    answered: new Set(),
    stop: () => session.off('frame', onFrame),
  };
  const onFrame = (direction: 'in' | 'out', text: string) => {
    const frame = readDeviceFrame(text);
    if (frame.kind !== 'mcp') return;
    const { message } = frame;
    if (direction === 'in') {
      if (message.kind === 'result' || message.kind === 'error') side.answered.add(message.id);
      return;
    }
    if (message.kind !== 'request' || message.method !== 'tools/call') return;
    const params = isRecord(message.params) ? message.params : {};
    side.calls.push(`${String(params.name)} ${JSON.stringify(params.arguments)}`);
    if (params.name === tool && isDeepStrictEqual(params.arguments ?? {}, args))
      side.received.push(message.id);
  };
  session.on('frame', onFrame);
  return side;
}

export const bridgeSuite: Suite = {
  name: 'bridge',
  description:
    'the board through @xiaozhi-mcp/bridge with the official MCP SDK client: list every page, call every safe tool',
  async run(context: SuiteContext): Promise<SuiteOutcome> {
    const run = new SuiteChecks('bridge', context);
    const why = unavailable(context);
    if (why !== undefined) {
      for (const spec of Object.values(BRIDGE_CHECKS)) await run.check(spec, async () => skip(why));
      return { checks: run.checks };
    }
    const api = context.serverApi as NonNullable<SuiteContext['serverApi']>;
    const timeoutMs = context.board.safeToolTimeoutMs ?? DEFAULT_SAFE_TOOL_TIMEOUT_MS;
    const bridgeLog: string[] = [];
    // Loaded when the suite runs: the bridge and the MCP SDK (zod) are most of what a run that
    // leaves this opt-in suite out would load at start.
    const [{ Client }, { StreamableHTTPClientTransport }, { serveHttp, XiaozhiBridge }] =
      await Promise.all([
        import('@modelcontextprotocol/sdk/client/index.js'),
        import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
        import('@xiaozhi-mcp/bridge'),
      ]);
    const bridge = new XiaozhiBridge({
      server: api.url,
      ...(api.token === undefined ? {} : { token: api.token }),
      device: context.deviceId,
      pageSize: BRIDGE_PAGE_SIZE,
      pollMs: BRIDGE_POLL_MS,
      callTimeoutMs: timeoutMs,
      log: (line) => bridgeLog.push(line),
    });
    const clientToken = randomUUID();
    const client = new Client({ name: 'hil', version: '0.1.0' });
    let http: Awaited<ReturnType<typeof serveHttp>> | undefined;
    // The SDK adds an abort listener to a request's signal and never removes it: its requests
    // get a signal of this run's own, not the rig's, which lives as long as the whole run.
    const aborted = new AbortController();
    setMaxListeners(0, aborted.signal);
    const onAbort = () => aborted.abort(context.signal.reason);
    context.signal.addEventListener('abort', onAbort, { once: true });
    const requests = { timeout: REPLY_TIMEOUT_MS, signal: aborted.signal };
    try {
      // Set up inside the first check: a bridge that cannot start or serve fails bridge.list.
      let listing: ListedTool[] | undefined;
      const boardTools = context.record().tools;
      const forModel = boardTools.filter((tool) => !tool.userOnly);
      await run.check(BRIDGE_CHECKS.list, async () => {
        try {
          await bridge.start();
          http = await serveHttp(bridge, { host: '127.0.0.1', port: 0, token: clientToken });
          await client.connect(
            new StreamableHTTPClientTransport(new URL(http.url), {
              requestInit: { headers: { authorization: `Bearer ${clientToken}` } },
            }),
            requests,
          );
        } catch (error) {
          throw new CheckFailure(
            `the bridge did not come up: ${describeError(error)}${bridgeLog.length > 0 ? ` (bridge: ${bridgeLog.join('; ')})` : ''}`,
          );
        }
        const tools: ListedTool[] = [];
        const cursors = new Set<string>();
        let cursor: string | undefined;
        let pages = 0;
        do {
          const page = await client.listTools(cursor === undefined ? {} : { cursor }, requests);
          pages++;
          tools.push(...page.tools);
          cursor = page.nextCursor;
          if (cursor === undefined) break;
          expectThat(
            !cursors.has(cursor),
            `the walk came back to cursor ${JSON.stringify(cursor)} after ${pages} pages`,
            'a new cursor on every page',
          );
          cursors.add(cursor);
          expectThat(pages < MAX_PAGES, `the walk did not end within ${MAX_PAGES} pages`);
        } while (cursor !== undefined);
        listing = tools;
        const problems: string[] = [];
        if (tools.length !== forModel.length)
          problems.push(
            `${tools.length} tools listed through the bridge, the board lists ${forModel.length} without user tools`,
          );
        const bad = tools.filter((tool) => !CLIENT_TOOL_NAME.test(tool.name));
        if (bad.length > 0)
          problems.push(
            `names outside ${CLIENT_TOOL_NAME.source}: ${bad.map((t) => JSON.stringify(t.name)).join(', ')}`,
          );
        const names = tools.map((tool) => tool.name);
        const twice = names.filter((name, i) => names.indexOf(name) !== i);
        if (twice.length > 0) problems.push(`listed twice: ${[...new Set(twice)].join(', ')}`);
        expectThat(
          problems.length === 0,
          `expected the board's tools through the bridge, got ${problems.join('; ')}`,
          `${forModel.length} tools`,
          `${tools.length} tools`,
        );
        return {
          note: `${tools.length} tools in ${pages} pages of at most ${BRIDGE_PAGE_SIZE}`,
          data: { tools: tools.length, pages },
        };
      });

      // The board's name of each tool listed through the bridge (built by the names check).
      const served = new Map<string, ListedTool>();
      await run.check(BRIDGE_CHECKS.names, async () => {
        if (listing === undefined) skip('no listing through the bridge (see bridge.list)');
        const byName = new Map(listing.map((tool) => [tool.name, tool]));
        const matched = new Set<string>();
        const problems: string[] = [];
        const find = (tool: DeviceTool): ListedTool | undefined => {
          const expected = documentedName(tool.name);
          if (expected !== undefined) return byName.get(expected);
          return listing?.find((listed) => listed.title === tool.name);
        };
        for (const tool of boardTools) {
          const listed = find(tool);
          if (tool.userOnly) {
            if (listed !== undefined)
              problems.push(`${tool.name} is user-only on the board but served as ${listed.name}`);
            continue;
          }
          if (listed === undefined) {
            const expected = documentedName(tool.name);
            problems.push(
              `${tool.name} is not served${expected === undefined ? ' (no tool titled so)' : ` as ${expected}`}`,
            );
            continue;
          }
          matched.add(listed.name);
          served.set(tool.name, listed);
          if (!isDeepStrictEqual(listed.inputSchema, tool.inputSchema))
            problems.push(
              `${listed.name}: inputSchema ${preview(JSON.stringify(listed.inputSchema), 120)}, the board declares ${preview(JSON.stringify(tool.inputSchema), 120)}`,
            );
        }
        const stray = listing.filter((tool) => !matched.has(tool.name)).map((tool) => tool.name);
        if (stray.length > 0) problems.push(`served but no board tool: ${stray.join(', ')}`);
        expectThat(
          problems.length === 0,
          `expected each board tool under its documented name with its schema, got ${problems.join('; ')}`,
          'the board tools, by name and schema',
          problems[0],
        );
        return `${served.size} tools under the board's names with '.' as '-'`;
      });

      await run.check(BRIDGE_CHECKS.callSafeTools, async () => {
        if (listing === undefined) skip('no listing through the bridge (see bridge.list)');
        const plan = safeToolPlan(context);
        const { listed, absent, never, wanted } = plan;
        // A model is never shown user-only tools (the board leaves them out of a plain
        // listing, docs/protocol.md §3.4), so neither does the bridge by default.
        const userOnly = plan.tools.filter((name) => listed.get(name)?.userOnly === true);
        const tools = plan.tools.filter((name) => !userOnly.includes(name));
        if (tools.length === 0)
          skip(
            `the board lists none of the safe tools for a model (${wanted.join(', ')})${userOnly.length > 0 ? `; user-only: ${userOnly.join(', ')}` : ''}`,
          );
        const before = await settingsBefore(context);
        const problems: string[] = [];
        const called: string[] = [];
        let calls = 0;
        let stuck: string | undefined;
        for (const name of tools) {
          if (stuck !== undefined) break;
          called.push(name);
          const bridged =
            served.get(name)?.name ??
            documentedName(name) ??
            listing.find((tool) => tool.title === name)?.name;
          if (bridged === undefined || !listing.some((tool) => tool.name === bridged)) {
            problems.push(`${name}: not listed through the bridge`);
            continue;
          }
          for (const args of sweepArguments(listed.get(name)?.inputSchema)) {
            calls++;
            const what = `${bridged} ${JSON.stringify(args)}`;
            const board = watchBoard(context.session(), name, args);
            const outcome = await client
              .callTool({ name: bridged, arguments: args }, undefined, {
                timeout: timeoutMs + CLIENT_MARGIN_MS,
                signal: aborted.signal,
              })
              .then(
                (result) => ({ result: result as Record<string, unknown> }),
                (error: unknown) => ({ error: describeError(error) }),
              );
            board.stop();
            const callProblems: string[] = [];
            const id = board.received[0];
            if (id === undefined) {
              callProblems.push(
                `the board received no tools/call of ${name} with these arguments${board.calls.length > 0 ? ` (it received ${board.calls.join(', ')})` : ''}`,
              );
            } else if (!board.answered.has(id)) {
              stuck = name;
              callProblems.push(`the board did not answer within ${timeoutMs} ms`);
            }
            if ('error' in outcome) callProblems.push(`the client got ${outcome.error}`);
            else {
              const { result } = outcome;
              const content = Array.isArray(result.content) ? result.content : undefined;
              if (result.isError === true)
                callProblems.push(`isError with ${preview(resultText(result), 80)}`);
              if (content === undefined || content.length === 0) callProblems.push('no content');
              for (const item of content ?? []) {
                const problem = contentProblem(item);
                if (problem !== undefined) callProblems.push(problem);
              }
            }
            if (callProblems.length > 0) problems.push(`${what}: ${callProblems.join(', ')}`);
            if (stuck !== undefined) break;
          }
        }
        // Settings put back through the board's session, whatever happened above.
        const restored =
          stuck === undefined
            ? await restoreSettings(context, before, listed, requestOptions(context, timeoutMs))
            : { restored: [], problems: [] };
        problems.push(...restored.problems);
        const left = tools.slice(called.length);
        expectThat(
          problems.length === 0,
          `expected every safe tool to answer through the bridge, got ${problems.join('; ')}${stuck === undefined ? '' : `; the sweep stopped at ${stuck}${left.length > 0 ? ` (not called: ${left.join(', ')})` : ''}`}`,
          'MCP content without isError, from the board',
          problems[0],
        );
        const notes = [
          `${calls} calls of ${tools.length} tools answered through the bridge`,
          ...(restored.restored.length > 0 ? [`restored ${restored.restored.join(', ')}`] : []),
          ...(userOnly.length > 0
            ? [`user-only, not served to a model: ${userOnly.join(', ')}`]
            : []),
          ...(absent.length > 0 ? [`not on this board: ${absent.join(', ')}`] : []),
          ...(never.length > 0 ? [`never swept: ${never.join(', ')}`] : []),
        ];
        return { note: notes.join('; '), data: { tools: called, calls } };
      });
      return { checks: run.checks };
    } finally {
      context.signal.removeEventListener('abort', onAbort);
      await client.close().catch(() => {});
      await http?.close().catch(() => {});
      await bridge.close().catch(() => {});
    }
  },
};
