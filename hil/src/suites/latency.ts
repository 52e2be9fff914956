/**
 * Latency of a cheap tool call, sequential, after a warm-up, next to the WebSocket ping round
 * trip on the same connection (what the network alone costs). A percentile over its budget
 * fails the check: the inventory's budgets (per board, or for the rig), else
 * {@link DEFAULT_LATENCY_BUDGET}, so a build whose calls all got slower fails without any
 * configuration. Over MQTT the server has no ping (only MQTT clients ping their broker): the
 * calls are measured alone and the ping check is skipped.
 */
import { percentile } from '@xiaozhi-mcp/protocol';
import type { LatencyStats } from '../model.js';
import type { Suite, SuiteContext, SuiteOutcome } from '../suite.js';
import { type CheckSpec, expectThat } from '../suite.js';
import {
  describeError,
  hasTool,
  REPLY_TIMEOUT_MS,
  requestOptions,
  SuiteChecks,
  skip,
} from './support.js';

/**
 * The budget when the inventory sets none: generous for a board on Wi-Fi (a call is two hops
 * through the device's main loop; real boards answer in tens of milliseconds), yet failed by
 * a build whose every call is 300 ms slower.
 */
export const DEFAULT_LATENCY_BUDGET = { p50Ms: 250, p99Ms: 1000 } as const;

export const LATENCY_CHECKS = {
  calls: {
    id: 'calls',
    description: 'sequential calls of the latency tool succeed within the p50/p99 budgets',
    severity: 'major',
  },
  ping: {
    id: 'ping',
    description: 'the board answers WebSocket pings on the same connection',
    severity: 'minor',
  },
} as const satisfies Record<string, CheckSpec>;

function round(ms: number): number {
  return Math.round(ms * 100) / 100;
}

/** Call and ping samples into the report's shape (no ping figures when no ping came back). */
export function latencyStats(
  method: string,
  valuesMs: readonly number[],
  pingsMs: readonly number[],
): LatencyStats {
  const sorted = [...valuesMs].sort((a, b) => a - b);
  const pings = [...pingsMs].sort((a, b) => a - b);
  return {
    method,
    samples: valuesMs.length,
    minMs: round(sorted[0] ?? Number.NaN),
    p50Ms: round(percentile(sorted, 0.5)),
    p90Ms: round(percentile(sorted, 0.9)),
    p99Ms: round(percentile(sorted, 0.99)),
    maxMs: round(sorted.at(-1) ?? Number.NaN),
    ...(pings.length === 0
      ? {}
      : { pingP50Ms: round(percentile(pings, 0.5)), pingP99Ms: round(percentile(pings, 0.99)) }),
    valuesMs: valuesMs.map(round),
  };
}

export const latencySuite: Suite = {
  name: 'latency',
  description: 'latency: percentiles of a cheap tool call beside the WebSocket ping round trip',
  async run(context: SuiteContext): Promise<SuiteOutcome> {
    const run = new SuiteChecks('latency', context);
    const { calls, warmup, tool } = context.latency;
    const configured = context.latency.p50Ms !== undefined || context.latency.p99Ms !== undefined;
    const { p50Ms, p99Ms } = configured ? context.latency : DEFAULT_LATENCY_BUDGET;
    const method = `tools/call ${tool}`;
    const values: number[] = [];
    const pings: number[] = [];
    let pingError: string | undefined;
    /** Why no ping is measured on this session (MQTT), if so. */
    let noPing: string | undefined;
    let stats: LatencyStats | undefined;

    await run.check(LATENCY_CHECKS.calls, async () => {
      if (!hasTool(context, tool)) skip(`the board lists no ${tool}`);
      const session = context.session();
      if (!session.canPing)
        noPing = `the board is on ${session.transport}, where the server has no ping (docs/protocol.md §5: only the board pings its broker)`;
      const options = requestOptions(context);
      context.log(`latency: ${warmup} warm-up and ${calls} measured calls of ${tool}`);
      for (let i = 0; i < warmup; i++) await session.callTool(tool, {}, options);
      for (let i = 0; i < calls; i++) {
        const started = performance.now();
        await session.callTool(tool, {}, options);
        values.push(performance.now() - started);
        // Interleaved, so both see the same conditions; a board that never pongs is measured once.
        if (pingError === undefined && noPing === undefined) {
          try {
            pings.push(await session.ping(REPLY_TIMEOUT_MS));
          } catch (error) {
            pingError = describeError(error);
          }
        }
      }
      stats = latencyStats(method, values, pings);
      const summary = `p50 ${stats.p50Ms} ms, p90 ${stats.p90Ms} ms, p99 ${stats.p99Ms} ms (min ${stats.minMs}, max ${stats.maxMs}${noPing === undefined ? `; ping p50 ${stats.pingP50Ms} ms` : ''})`;
      const over: string[] = [];
      if (p50Ms !== undefined && stats.p50Ms > p50Ms)
        over.push(`p50 ${stats.p50Ms} ms > ${p50Ms} ms`);
      if (p99Ms !== undefined && stats.p99Ms > p99Ms)
        over.push(`p99 ${stats.p99Ms} ms > ${p99Ms} ms`);
      const budget = [
        ...(p50Ms === undefined ? [] : [`p50 <= ${p50Ms} ms`]),
        ...(p99Ms === undefined ? [] : [`p99 <= ${p99Ms} ms`]),
      ].join(', ');
      expectThat(
        over.length === 0,
        `expected ${budget}${configured ? '' : ' (the default budget)'} over ${calls} calls of ${tool}, got ${over.join(', ')} (${summary})`,
        budget,
        summary,
      );
      const { valuesMs: _, ...figures } = stats;
      return {
        note: `${summary}, within ${budget}${configured ? '' : ' (the default budget)'}`,
        data: figures,
      };
    });

    await run.check(LATENCY_CHECKS.ping, async () => {
      if (noPing !== undefined) skip(noPing);
      if (values.length === 0) skip('no calls were measured (see latency.calls)');
      expectThat(
        pingError === undefined,
        `expected a pong to every WebSocket ping, got ${pingError}`,
        'a pong',
        pingError,
      );
      return `ping p50 ${stats?.pingP50Ms} ms, p99 ${stats?.pingP99Ms} ms over ${pings.length} pings`;
    });

    // Reported even when a budget failed: the figures are what the report plots.
    stats ??= values.length > 0 ? latencyStats(method, values, pings) : undefined;
    return { checks: run.checks, ...(stats === undefined ? {} : { latency: [stats] }) };
  },
};
