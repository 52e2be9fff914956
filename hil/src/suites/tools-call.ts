/**
 * `tools/call` (docs/protocol.md §3.3, §3.4): a safe call, a state round trip on the speaker volume
 * (always restored), the firmware's validation messages, and concurrent calls matched by id.
 */
import {
  CallErrorMessage,
  type ToolResult,
  toolResultText,
  WireError,
} from '@xiaozhi-mcp/protocol';
import type { Suite, SuiteContext, SuiteOutcome } from '../suite.js';
import { CheckFailure, type CheckSpec, expectThat } from '../suite.js';
import {
  describeError,
  hasTool,
  isRecord,
  preview,
  requestOptions,
  SuiteChecks,
  skip,
} from './support.js';

export const STATUS_TOOL = 'self.get_device_status';
export const VOLUME_TOOL = 'self.audio_speaker.set_volume';
/** A name no board registers: calls to it must fail with `Unknown tool`. */
const NO_SUCH_TOOL = 'self.hil.no_such_tool';
const CONCURRENT_CALLS = 8;

export const TOOLS_CALL_CHECKS = {
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

/** The integer range of the tool's property as the board lists it, else docs/protocol.md §3.4's. */
function volumeRange(context: SuiteContext): { min: number; max: number } {
  const tool = context.record().tools.find((t) => t.name === VOLUME_TOOL);
  const properties = tool?.inputSchema.properties;
  const volume = isRecord(properties) ? properties.volume : undefined;
  const min = isRecord(volume) && typeof volume.minimum === 'number' ? volume.minimum : 0;
  const max = isRecord(volume) && typeof volume.maximum === 'number' ? volume.maximum : 100;
  return { min, max };
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

    await run.check(TOOLS_CALL_CHECKS.deviceStatus, async () => {
      need(STATUS_TOOL);
      const status = await readStatus(context);
      return `JSON with ${Object.keys(status).join(', ')}`;
    });

    await run.check(TOOLS_CALL_CHECKS.volumeRoundTrip, async () => {
      need(STATUS_TOOL, VOLUME_TOOL);
      const { min, max } = volumeRange(context);
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

    await run.check(TOOLS_CALL_CHECKS.validationErrors, async () => {
      const cases: ErrorCase[] = [
        { what: 'no params', params: undefined, message: CallErrorMessage.missingParams },
        { what: 'no name', params: { arguments: {} }, message: CallErrorMessage.missingName },
        { what: 'a numeric name', params: { name: 5 }, message: CallErrorMessage.missingName },
        // Checked before the tool is looked up: an unknown name still gets this message.
        {
          what: 'arguments null',
          params: { name: NO_SUCH_TOOL, arguments: null },
          message: CallErrorMessage.invalidArguments,
        },
        {
          what: 'an unknown tool',
          params: { name: NO_SUCH_TOOL, arguments: {} },
          message: CallErrorMessage.unknownTool(NO_SUCH_TOOL),
        },
      ];
      return expectNoProblems(await errorCaseProblems(context, cases), cases.length);
    });

    await run.check(TOOLS_CALL_CHECKS.argumentErrors, async () => {
      need(VOLUME_TOOL);
      const { min, max } = volumeRange(context);
      const call = (args: unknown) => ({ name: VOLUME_TOOL, arguments: args });
      const cases: ErrorCase[] = [
        {
          what: 'volume missing',
          params: call({}),
          message: CallErrorMessage.missingArgument('volume'),
        },
        {
          what: 'volume a string',
          params: call({ volume: 'loud' }),
          message: CallErrorMessage.missingArgument('volume'),
        },
        {
          what: `volume ${min - 1}`,
          params: call({ volume: min - 1 }),
          message: CallErrorMessage.belowMinimum(min),
        },
        {
          what: `volume ${max + 1}`,
          params: call({ volume: max + 1 }),
          message: CallErrorMessage.aboveMaximum(max),
        },
      ];
      return expectNoProblems(await errorCaseProblems(context, cases), cases.length);
    });

    await run.check(TOOLS_CALL_CHECKS.concurrent, async () => {
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
              const expected = CallErrorMessage.unknownTool(name);
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
          name === STATUS_TOOL
            ? 'its JSON status'
            : `error "${CallErrorMessage.unknownTool(name)}"`;
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

    return { checks: run.checks };
  },
};
