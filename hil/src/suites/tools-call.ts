/**
 * `tools/call` (docs/protocol.md §3.3, §3.4): replies under their request's id, a safe call, a
 * state round trip on the speaker volume (always restored), the firmware's validation messages
 * (literals from firmware-facts.ts), concurrent calls matched by id, and a sweep over every tool
 * the inventory marks safe, with arguments from each tool's schema.
 */
import { encodeRequest, type ToolResult, toolResultText, WireError } from '@xiaozhi-mcp/protocol';
import { type DeviceTool, type RequestOptions, ServerError } from '@xiaozhi-mcp/server';
import type { Suite, SuiteContext, SuiteOutcome } from '../suite.js';
import { CheckFailure, type CheckSpec, expectThat } from '../suite.js';
import { CALL_ERRORS, NEVER_SWEPT, VOLUME_RANGE } from './firmware-facts.js';
import {
  describeError,
  exchange,
  hasTool,
  isRecord,
  preview,
  replyId,
  requestOptions,
  SuiteChecks,
  skip,
  type WireReply,
} from './support.js';

export const STATUS_TOOL = 'self.get_device_status';
export const VOLUME_TOOL = 'self.audio_speaker.set_volume';
/** A name no board registers: calls to it must fail with `Unknown tool`. */
const NO_SUCH_TOOL = 'self.hil.no_such_tool';
const CONCURRENT_CALLS = 8;
/** Ids of the reply-id probes, far from the session's own counter and robustness's probes. */
const FIRST_PROBE_ID = 1_800_000_000;

/**
 * The tools the safe-tools sweep calls when the inventory names none: read-only, or settings
 * the sweep puts back (volume, brightness, theme) from `self.get_device_status`.
 */
export const DEFAULT_SAFE_TOOLS: readonly string[] = [
  'self.get_device_status',
  'self.audio_speaker.set_volume',
  'self.screen.set_brightness',
  'self.screen.set_theme',
  'self.screen.get_info',
  'self.get_system_info',
];
export const DEFAULT_SAFE_TOOL_TIMEOUT_MS = 5000;

/** Settings the sweep may change, where `self.get_device_status` shows them and how to set them back. */
const RESTORABLE = [
  { path: ['audio_speaker', 'volume'], tool: VOLUME_TOOL, argument: 'volume' },
  { path: ['screen', 'brightness'], tool: 'self.screen.set_brightness', argument: 'brightness' },
  { path: ['screen', 'theme'], tool: 'self.screen.set_theme', argument: 'theme' },
] as const;

export const TOOLS_CALL_CHECKS = {
  replyId: {
    id: 'reply-id',
    description:
      'a reply carries the id of its request (an error and a successful call, sent alone)',
    severity: 'critical',
  },
  deviceStatus: {
    id: 'device-status',
    description: `${STATUS_TOOL} succeeds and returns JSON text`,
    severity: 'critical',
  },
  volumeRoundTrip: {
    id: 'volume-round-trip',
    description: 'the volume set with set_volume reads back from get_device_status (then restored)',
    severity: 'major',
  },
  validationErrors: {
    id: 'validation-errors',
    description:
      "bad tools/call params get the firmware's messages (Missing params, Missing name, Invalid arguments, Unknown tool)",
    severity: 'major',
  },
  argumentErrors: {
    id: 'argument-errors',
    description:
      "bad set_volume arguments get the firmware's messages (Missing valid argument, below minimum, above maximum)",
    severity: 'major',
  },
  concurrent: {
    id: 'concurrent',
    description: `${CONCURRENT_CALLS} calls in flight each get their own reply (matched by id)`,
    severity: 'major',
  },
  safeTools: {
    id: 'safe-tools',
    description:
      'every tool the inventory marks safe answers calls with arguments from its schema (defaults, bounds, a value inside the range), each within its timeout',
    severity: 'major',
  },
} as const satisfies Record<string, CheckSpec>;

function callOptions(context: SuiteContext) {
  return requestOptions(context);
}

/** The JSON object `self.get_device_status` returns. */
async function readStatus(context: SuiteContext): Promise<Record<string, unknown>> {
  const result = await context.session().callTool(STATUS_TOOL, {}, callOptions(context));
  const text = toolResultText(result);
  expectThat(
    !result.isError,
    `expected ${STATUS_TOOL} to succeed, got isError with ${JSON.stringify(text)}`,
  );
  let status: unknown;
  try {
    status = JSON.parse(text);
  } catch {
    throw new CheckFailure(
      `expected ${STATUS_TOOL} to return JSON text, got ${JSON.stringify(preview(text))}`,
      'JSON object text',
      preview(text),
    );
  }
  expectThat(
    isRecord(status),
    `expected ${STATUS_TOOL} to return a JSON object, got ${preview(text)}`,
    'JSON object',
    preview(text),
  );
  return status;
}

async function readVolume(context: SuiteContext): Promise<number> {
  const status = await readStatus(context);
  const speaker = status.audio_speaker;
  const volume = isRecord(speaker) ? speaker.volume : undefined;
  expectThat(
    typeof volume === 'number',
    `expected audio_speaker.volume in ${STATUS_TOOL}, got ${preview(JSON.stringify(status))}`,
    'audio_speaker.volume (a number)',
    preview(JSON.stringify(status)),
  );
  return volume;
}

async function setVolume(context: SuiteContext, volume: number): Promise<ToolResult> {
  const result = await context.session().callTool(VOLUME_TOOL, { volume }, callOptions(context));
  expectThat(
    !result.isError,
    `expected ${VOLUME_TOOL} ${volume} to succeed, got isError with ${JSON.stringify(toolResultText(result))}`,
  );
  return result;
}

/**
 * The arguments the sweep calls a tool with, from its schema: the required properties only
 * (defaults apply to the others), with a value inside each range; then each ranged integer at
 * its minimum and at its maximum; then each default given explicitly.
 */
export function sweepArguments(inputSchema: unknown): Record<string, unknown>[] {
  const properties =
    isRecord(inputSchema) && isRecord(inputSchema.properties) ? inputSchema.properties : {};
  const base: Record<string, unknown> = {};
  const variants: Record<string, unknown>[] = [];
  for (const [key, schema] of Object.entries(properties)) {
    if (!isRecord(schema)) continue;
    const min = typeof schema.minimum === 'number' ? schema.minimum : undefined;
    const max = typeof schema.maximum === 'number' ? schema.maximum : undefined;
    if (!('default' in schema)) {
      base[key] =
        schema.type === 'integer'
          ? min !== undefined && max !== undefined
            ? Math.floor((min + max) / 2)
            : (min ?? max ?? 0)
          : schema.type === 'boolean'
            ? false
            : 'hil';
    } else {
      variants.push({ [key]: schema.default });
    }
    if (schema.type === 'integer' && min !== undefined) variants.push({ [key]: min });
    if (schema.type === 'integer' && max !== undefined) variants.push({ [key]: max });
  }
  const sets = [base, ...variants.map((variant) => ({ ...base, ...variant }))];
  const seen = new Set<string>();
  return sets.filter((args) => {
    const key = JSON.stringify(args);
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  });
}

/** What a safe-tools sweep calls on this board (`tools-call.safe-tools`, `bridge.call-safe-tools`). */
export interface SafeToolPlan {
  /** The board's tools by name, user-only ones included. */
  readonly listed: ReadonlyMap<string, DeviceTool>;
  /** The inventory's `safeTools`, else {@link DEFAULT_SAFE_TOOLS}. */
  readonly wanted: readonly string[];
  /** What the sweep calls, in order: wanted, listed, never a tool whose reply is lost. */
  readonly tools: readonly string[];
  /** Wanted but not listed by this board. */
  readonly absent: readonly string[];
  /** Wanted but never swept (docs/protocol.md §3.4). */
  readonly never: readonly string[];
}

export function safeToolPlan(context: SuiteContext): SafeToolPlan {
  const listed = new Map(context.record().tools.map((tool) => [tool.name, tool]));
  const wanted = context.board.safeTools ?? DEFAULT_SAFE_TOOLS;
  const never = wanted.filter((name) => NEVER_SWEPT.includes(name));
  const absent = wanted.filter((name) => !never.includes(name) && !listed.has(name));
  const tools = wanted.filter((name) => !never.includes(name) && listed.has(name));
  return { listed, wanted, tools, absent, never };
}

/** The settings a sweep may change, read before it (undefined where the board cannot say). */
export async function settingsBefore(
  context: SuiteContext,
): Promise<Record<string, unknown> | undefined> {
  return hasTool(context, STATUS_TOOL)
    ? await readStatus(context).catch(() => undefined)
    : undefined;
}

/**
 * Puts back, through the board's session, every setting a sweep changed since `before`
 * ({@link settingsBefore}); says what it restored and what it could not.
 */
export async function restoreSettings(
  context: SuiteContext,
  before: Record<string, unknown> | undefined,
  listed: ReadonlyMap<string, DeviceTool>,
  options: RequestOptions,
): Promise<{ restored: string[]; problems: string[] }> {
  const restored: string[] = [];
  const problems: string[] = [];
  if (before === undefined) return { restored, problems };
  const after = await readStatus(context).catch(() => undefined);
  for (const { path, tool, argument } of RESTORABLE) {
    const was = statusValue(before, path);
    if (after === undefined || was === undefined || statusValue(after, path) === was) continue;
    if (!listed.has(tool)) continue;
    await context
      .session()
      .callTool(tool, { [argument]: was }, options)
      .then(() => restored.push(`${path.join('.')} ${JSON.stringify(was)}`))
      .catch((error: unknown) =>
        problems.push(`restoring ${path.join('.')} with ${tool}: ${describeError(error)}`),
      );
  }
  return { restored, problems };
}

function statusValue(status: Record<string, unknown>, path: readonly string[]): unknown {
  let value: unknown = status;
  for (const key of path) value = isRecord(value) ? value[key] : undefined;
  return value;
}

interface ErrorCase {
  readonly what: string;
  readonly params: unknown;
  readonly message: string;
}

/** Sends each case and lists the ones that did not fail with exactly the expected message. */
async function errorCaseProblems(
  context: SuiteContext,
  cases: readonly ErrorCase[],
): Promise<string[]> {
  const problems: string[] = [];
  for (const c of cases) {
    const outcome = await context
      .session()
      .request('tools/call', c.params, callOptions(context))
      .then(
        (result) => `a result ${preview(JSON.stringify(result), 120)}`,
        (error: unknown) =>
          error instanceof WireError && error.message === c.message
            ? undefined
            : describeError(error),
      );
    if (outcome !== undefined) {
      problems.push(`${c.what}: expected error "${c.message}", got ${outcome}`);
    }
  }
  return problems;
}

function expectNoProblems(problems: readonly string[], total: number): string {
  expectThat(
    problems.length === 0,
    `${problems.length} of ${total} replies differ from the firmware's: ${problems.join('; ')}`,
    'the firmware messages',
    problems[0],
  );
  return `${total} error replies as the firmware sends them`;
}

export const toolsCallSuite: Suite = {
  name: 'tools-call',
  description: 'tools/call: a safe call, a state round trip, validation messages, concurrency',
  async run(context: SuiteContext): Promise<SuiteOutcome> {
    const run = new SuiteChecks('tools-call', context);
    const need = (...tools: string[]) => {
      const missing = tools.filter((tool) => !hasTool(context, tool));
      if (missing.length > 0) skip(`the board lists no ${missing.join(' and no ')}`);
    };
    // Once replies are known to come back under other ids, every other check would only wait
    // out its timeout: they are skipped, pointing at reply-id.
    let idsBroken = false;
    const check = (
      spec: CheckSpec,
      body: () => Promise<string | { note: string; data: Record<string, unknown> }>,
    ) =>
      run.check(spec, async () => {
        if (idsBroken) skip('replies come back under other ids (see tools-call.reply-id)');
        return body();
      });

    const replyIdCheck = await run.check(TOOLS_CALL_CHECKS.replyId, async () => {
      let nextId = FIRST_PROBE_ID;
      const probes: {
        what: string;
        payload: (id: number) => string;
        ours: (reply: WireReply) => boolean;
      }[] = [
        {
          // An error (one hop): recognised by the tool name it quotes, whatever its id.
          what: `tools/call of the unknown ${NO_SUCH_TOOL}_id`,
          payload: (id) =>
            encodeRequest(id, 'tools/call', { name: `${NO_SUCH_TOOL}_id`, arguments: {} }),
          ours: (reply) =>
            reply.message.kind === 'error' &&
            reply.message.error.message.includes(`${NO_SUCH_TOOL}_id`),
        },
      ];
      if (hasTool(context, STATUS_TOOL)) {
        probes.push({
          // A successful call (two hops), sent alone: the next result is its reply.
          what: `tools/call of ${STATUS_TOOL}`,
          payload: (id) => encodeRequest(id, 'tools/call', { name: STATUS_TOOL, arguments: {} }),
          ours: (reply) => reply.message.kind === 'result',
        });
      }
      const problems: string[] = [];
      for (const probe of probes) {
        const id = nextId++;
        const replies = await exchange(
          context.session(),
          [probe.payload(id)],
          (reply) => replyId(reply) === id || probe.ours(reply),
          `a reply to ${probe.what} (id ${id})`,
        );
        const reply = replies.at(-1);
        const got = reply === undefined ? undefined : replyId(reply);
        if (got !== id) {
          problems.push(
            `the reply to ${probe.what} (id ${id}) came with id ${JSON.stringify(got)}: ${preview(reply?.payloadText ?? '', 120)}`,
          );
        }
      }
      expectThat(
        problems.length === 0,
        `expected each reply under its request's id, got ${problems.join('; ')}`,
        'the id of the request',
        problems[0],
      );
      return `${probes.length} replies, each under its request's id`;
    });
    idsBroken = replyIdCheck.status === 'failed' && /came with id/.test(replyIdCheck.message);

    await check(TOOLS_CALL_CHECKS.deviceStatus, async () => {
      need(STATUS_TOOL);
      const status = await readStatus(context);
      return `JSON with ${Object.keys(status).join(', ')}`;
    });

    await check(TOOLS_CALL_CHECKS.volumeRoundTrip, async () => {
      need(STATUS_TOOL, VOLUME_TOOL);
      const { min, max } = VOLUME_RANGE;
      const original = await readVolume(context);
      // Far enough from the original to be unmistakable, inside the range.
      const target = original - min >= (max - min) / 2 ? original - 20 : original + 20;
      let failure: unknown;
      try {
        await setVolume(context, target);
        const back = await readVolume(context);
        expectThat(
          back === target,
          `expected volume ${target} after set_volume, read back ${back}`,
          String(target),
          String(back),
        );
      } catch (error) {
        failure = error;
      }
      // Restored whatever happened above, so the board leaves as it came.
      let restoreProblem: string | undefined;
      try {
        await setVolume(context, original);
        const restored = await readVolume(context);
        if (restored !== original)
          restoreProblem = `restoring volume ${original} read back ${restored}`;
      } catch (error) {
        restoreProblem = `restoring volume ${original} failed: ${describeError(error)}`;
      }
      if (failure !== undefined) {
        if (restoreProblem === undefined) throw failure;
        const first = failure instanceof CheckFailure ? failure : undefined;
        throw new CheckFailure(
          `${describeError(failure)}; ${restoreProblem}`,
          first?.expected,
          first?.actual,
        );
      }
      expectThat(restoreProblem === undefined, `${restoreProblem}`, String(original));
      return `volume ${original} -> ${target} -> ${original}`;
    });

    await check(TOOLS_CALL_CHECKS.validationErrors, async () => {
      const cases: ErrorCase[] = [
        { what: 'no params', params: undefined, message: CALL_ERRORS.missingParams },
        { what: 'no name', params: { arguments: {} }, message: CALL_ERRORS.missingName },
        { what: 'a numeric name', params: { name: 5 }, message: CALL_ERRORS.missingName },
        // Checked before the tool is looked up: an unknown name still gets this message.
        {
          what: 'arguments null',
          params: { name: NO_SUCH_TOOL, arguments: null },
          message: CALL_ERRORS.invalidArguments,
        },
        {
          what: 'an unknown tool',
          params: { name: NO_SUCH_TOOL, arguments: {} },
          message: CALL_ERRORS.unknownTool(NO_SUCH_TOOL),
        },
      ];
      return expectNoProblems(await errorCaseProblems(context, cases), cases.length);
    });

    await check(TOOLS_CALL_CHECKS.argumentErrors, async () => {
      need(VOLUME_TOOL);
      const { min, max } = VOLUME_RANGE;
      const call = (args: unknown) => ({ name: VOLUME_TOOL, arguments: args });
      const cases: ErrorCase[] = [
        {
          what: 'volume missing',
          params: call({}),
          message: CALL_ERRORS.missingArgument('volume'),
        },
        {
          what: 'volume a string',
          params: call({ volume: 'loud' }),
          message: CALL_ERRORS.missingArgument('volume'),
        },
        {
          what: `volume ${min - 1}`,
          params: call({ volume: min - 1 }),
          message: CALL_ERRORS.belowMinimum(min),
        },
        {
          what: `volume ${max + 1}`,
          params: call({ volume: max + 1 }),
          message: CALL_ERRORS.aboveMaximum(max),
        },
      ];
      return expectNoProblems(await errorCaseProblems(context, cases), cases.length);
    });

    await check(TOOLS_CALL_CHECKS.concurrent, async () => {
      const session = context.session();
      const status = hasTool(context, STATUS_TOOL);
      // Errors (one hop) and successful calls (two hops) mixed: replies come out of order, and
      // each error names its own tool, so a reply matched to the wrong request shows.
      const calls = Array.from({ length: CONCURRENT_CALLS }, (_, index) => {
        const name = status && index % 2 === 1 ? STATUS_TOOL : `${NO_SUCH_TOOL}_${index}`;
        return { index, name };
      });
      const settled: number[] = [];
      const outcomes = await Promise.all(
        calls.map(({ index, name }) =>
          session.callTool(name, {}, callOptions(context)).then(
            (result) => {
              settled.push(index);
              const text = toolResultText(result);
              if (name !== STATUS_TOOL) return `a result ${preview(text, 80)}`;
              try {
                return isRecord(JSON.parse(text)) ? undefined : `${preview(text, 80)}`;
              } catch {
                return `non-JSON text ${preview(text, 80)}`;
              }
            },
            (error: unknown) => {
              settled.push(index);
              const expected = CALL_ERRORS.unknownTool(name);
              if (name === STATUS_TOOL) return describeError(error);
              return error instanceof WireError && error.message === expected
                ? undefined
                : describeError(error);
            },
          ),
        ),
      );
      const problems = outcomes.flatMap((outcome, index) => {
        const name = calls[index]?.name ?? '';
        const expected =
          name === STATUS_TOOL ? 'its JSON status' : `error "${CALL_ERRORS.unknownTool(name)}"`;
        return outcome === undefined
          ? []
          : [`call ${index} (${name}): expected ${expected}, got ${outcome}`];
      });
      expectThat(
        problems.length === 0,
        `replies not matched to their requests: ${problems.join('; ')}`,
        'each reply to its own request',
        problems[0],
      );
      const reordered = settled.some((value, position) => value !== position);
      return {
        note: `${CONCURRENT_CALLS} replies matched${reordered ? ', arriving out of order' : ''}`,
        data: { settledOrder: settled },
      };
    });

    await check(TOOLS_CALL_CHECKS.safeTools, async () => {
      const { listed, tools, absent, never, wanted } = safeToolPlan(context);
      if (tools.length === 0) skip(`the board lists none of the safe tools (${wanted.join(', ')})`);
      const timeoutMs = context.board.safeToolTimeoutMs ?? DEFAULT_SAFE_TOOL_TIMEOUT_MS;
      const session = context.session();
      const options = { ...requestOptions(context, timeoutMs) };
      const before = await settingsBefore(context);
      const problems: string[] = [];
      const called: string[] = [];
      let calls = 0;
      let stuck: string | undefined;
      for (const name of tools) {
        if (stuck !== undefined) break;
        called.push(name);
        for (const args of sweepArguments(listed.get(name)?.inputSchema)) {
          calls++;
          const what = `${name} ${JSON.stringify(args)}`;
          const problem = await session.callTool(name, args, options).then(
            (result) =>
              result.isError ? `isError with ${preview(toolResultText(result), 80)}` : undefined,
            (error: unknown) => {
              if (error instanceof ServerError && error.code === 'REQUEST_TIMEOUT') {
                stuck = name;
                return `no reply within ${timeoutMs} ms`;
              }
              return describeError(error);
            },
          );
          if (problem !== undefined) problems.push(`${what}: ${problem}`);
          if (stuck !== undefined) break;
        }
      }
      // Settings put back as they were, whatever happened above.
      const restored =
        stuck === undefined
          ? await restoreSettings(context, before, listed, options)
          : { restored: [], problems: [] };
      problems.push(...restored.problems);
      const left = tools.slice(called.length);
      expectThat(
        problems.length === 0,
        `expected every safe tool to answer, got ${problems.join('; ')}${stuck === undefined ? '' : `; the sweep stopped at ${stuck}${left.length > 0 ? ` (not called: ${left.join(', ')})` : ''}`}`,
        'a result to every call',
        problems[0],
      );
      const notes = [
        `${calls} calls of ${tools.length} tools answered`,
        ...(restored.restored.length > 0 ? [`restored ${restored.restored.join(', ')}`] : []),
        ...(absent.length > 0 ? [`not on this board: ${absent.join(', ')}`] : []),
        ...(never.length > 0
          ? [`never swept (the reply is lost, docs/protocol.md §3.4): ${never.join(', ')}`]
          : []),
      ];
      return { note: notes.join('; '), data: { tools: called, calls } };
    });

    return { checks: run.checks };
  },
};
