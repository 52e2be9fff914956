// The runner behind each package's `npm run fuzz` (its fuzz/run.ts calls `runFuzz` with its
// world and targets):
//
//   npm run fuzz -- [--cases N] [--seed S] [--target NAME,...] [--threshold-ms 50]
//                   [--max-failures N] [--max-repeats N] [--path P]
//
// Prints, per target, the cases run, each failure (a thrown or unexpected error, an unhandled
// rejection, an uncaught exception) with its shrunk counterexample and how to replay it, and the
// slowest input with its time. An input over the threshold is timed twice more and its fastest
// time kept, so a GC pause is not the input's cost. Exit codes: 0 clean, 1 a failure or an input
// slower than the threshold, 2 bad options.
import fc from 'fast-check';
import {
  type AnyTarget,
  describeError,
  fuzzProperty,
  type ProcessWatch,
  TargetStats,
} from './harness.js';

export interface FuzzOptions {
  cases: number;
  seed: number;
  targets: string[] | undefined;
  thresholdMs: number;
  maxFailures: number;
  maxRepeats: number;
  path: string | undefined;
}

/** Bad command-line options: the runner prints the problem and the usage, and exits 2. */
export class FuzzUsageError extends Error {
  override name = 'FuzzUsageError';
}

export const FUZZ_USAGE =
  'usage: npm run fuzz -- [--cases N] [--seed S] [--target NAME,...] [--threshold-ms MS] [--max-failures N] [--max-repeats N] [--path P]';

/** The runner's options from `argv` (`--name value` or `--name=value`) over `defaults`. */
export function parseFuzzOptions(
  argv: readonly string[],
  defaults: Pick<FuzzOptions, 'cases' | 'seed'>,
): FuzzOptions {
  const options: FuzzOptions = {
    cases: defaults.cases,
    seed: defaults.seed,
    targets: undefined,
    thresholdMs: 50,
    maxFailures: 5,
    maxRepeats: 3,
    path: undefined,
  };
  for (let i = 0; i < argv.length; i++) {
    const [name, inline] = (argv[i] ?? '').split('=', 2);
    const value = () => inline ?? argv[++i] ?? '';
    const int = (text: string) => {
      const n = Number(text);
      if (text === '' || !Number.isInteger(n) || n < 0)
        throw new FuzzUsageError(`${name} needs a non-negative integer, got ${text}`);
      return n;
    };
    if (name === '--cases') options.cases = int(value());
    else if (name === '--seed') options.seed = int(value());
    else if (name === '--target') options.targets = value().split(',');
    else if (name === '--threshold-ms') options.thresholdMs = int(value());
    else if (name === '--max-failures') options.maxFailures = int(value());
    else if (name === '--max-repeats') options.maxRepeats = int(value());
    else if (name === '--path') options.path = value();
    else throw new FuzzUsageError(`unknown option ${name}`);
  }
  return options;
}

/** A target with its share of the run's cases (shares are relative to each other). */
export interface WeightedTarget {
  readonly target: AnyTarget;
  readonly share: number;
}

/** What a package's fuzz/run.ts hands the runner once its world is up. */
export interface FuzzWorldSetup {
  readonly targets: readonly WeightedTarget[];
  /** The watch the targets' properties take process-level events from. */
  readonly watch: ProcessWatch;
  /** After a failure, puts the world back together before the next seed. */
  heal(): Promise<void>;
  /** Ends the world; one that does not end within 5 s fails the run (a connection it cannot end). */
  close(): Promise<void>;
}

export interface FuzzSuite {
  /** The package under attack, for the report's first line (`@xiaozhi-mcp/server`). */
  readonly name: string;
  /** Cases when neither `--cases` nor FUZZ_CASES says: the package's share of 100,000. */
  readonly defaultCases: number;
  /** Starts the world (servers, boards) and gives its targets. */
  start(): Promise<FuzzWorldSetup>;
}

interface Failure {
  /** The error's first line without numbers: failures with one signature are one bug. */
  readonly signature: string;
  readonly seed: number;
  readonly path: string | null;
  readonly input: string;
  readonly error: string;
  readonly shrinks: number;
}

interface TargetReport {
  readonly name: string;
  readonly summary: string;
  readonly budget: number;
  runs: number;
  shrinkRuns: number;
  readonly failures: Failure[];
  readonly stats: TargetStats;
  interrupted: boolean;
}

/** Runs one target's share of the cases; after a failure it heals and goes on with the next seed. */
async function fuzzTarget(
  target: AnyTarget,
  budget: number,
  seed: number,
  options: FuzzOptions,
  watch: ProcessWatch,
  heal: () => Promise<void>,
): Promise<TargetReport> {
  const report: TargetReport = {
    name: target.name,
    summary: target.summary,
    budget,
    runs: 0,
    shrinkRuns: 0,
    failures: [],
    stats: new TargetStats(),
    interrupted: false,
  };
  const property = fuzzProperty(target, watch, {
    stats: report.stats,
    retimeOverMs: options.thresholdMs,
  });
  let nextSeed = seed;
  const distinct = () => new Set(report.failures.map((f) => f.signature)).size;
  const mostSeen = () =>
    Math.max(
      0,
      ...report.failures.map(
        (f) => report.failures.filter((g) => g.signature === f.signature).length,
      ),
    );
  // Up to maxFailures distinct failures, and the same one maxRepeats times at most.
  while (
    report.runs < budget &&
    distinct() < options.maxFailures &&
    mostSeen() < options.maxRepeats
  ) {
    const details = await fc.check(property, {
      numRuns: budget - report.runs,
      seed: nextSeed,
      ...(options.path === undefined ? {} : { path: options.path }),
      timeout: 30_000,
      // Shrinking a failure must not eat the run: a failure's report then shows a less shrunk input.
      interruptAfterTimeLimit: 120_000,
    });
    report.runs += details.numRuns;
    report.shrinkRuns += details.numShrinks;
    if (details.interrupted) report.interrupted = true;
    if (!details.failed) break;
    const error = describeError(details.errorInstance);
    report.failures.push({
      signature: (error.split('\n')[0] ?? '')
        .replace(/"(?:[^"\\]|\\.)*"/g, '"…"')
        .replace(/\d+/g, 'N')
        .slice(0, 160),
      seed: nextSeed,
      path: details.counterexamplePath,
      input:
        details.counterexample === null ? '(none)' : target.describe(details.counterexample[0]),
      error,
      shrinks: details.numShrinks,
    });
    process.stdout.write(
      `  ${target.name}: failure ${report.failures.length} after ${report.runs} cases: ${describeError(details.errorInstance).split('\n')[0]}\n`,
    );
    if (options.path !== undefined) break;
    nextSeed++;
    await heal().catch((error: unknown) => {
      process.stdout.write(`  ${target.name}: could not heal the world: ${describeError(error)}\n`);
    });
  }
  return report;
}

function ms(value: number): string {
  return `${value.toFixed(value < 10 ? 2 : 1)} ms`;
}

function usage(problem: string): never {
  console.error(`${problem}\n${FUZZ_USAGE}`);
  process.exit(2);
}

/**
 * A package's whole fuzz run: options from the command line (FUZZ_CASES and FUZZ_SEED as
 * defaults), each chosen target's share of the cases, the report, and the exit code.
 */
export async function runFuzz(
  suite: FuzzSuite,
  argv: readonly string[] = process.argv.slice(2),
): Promise<never> {
  let options: FuzzOptions;
  try {
    options = parseFuzzOptions(argv, {
      cases: Number(process.env.FUZZ_CASES ?? suite.defaultCases),
      seed: Number(process.env.FUZZ_SEED ?? Math.floor(Math.random() * 2 ** 31)),
    });
  } catch (error) {
    if (error instanceof FuzzUsageError) usage(error.message);
    throw error;
  }
  const started = performance.now();
  const world = await suite.start();
  const { watch } = world;
  const chosen = world.targets.filter((t) => options.targets?.includes(t.target.name) ?? true);
  if (chosen.length === 0)
    usage(`no target among ${world.targets.map((t) => t.target.name).join(', ')}`);
  const shares = chosen.reduce((sum, t) => sum + t.share, 0);
  console.log(
    `${suite.name} fuzz: ${options.cases} cases over ${chosen.map((t) => t.target.name).join(', ')}, seed ${options.seed}, slow-input threshold ${options.thresholdMs} ms`,
  );
  const reports: TargetReport[] = [];
  for (const [index, { target, share }] of chosen.entries()) {
    const budget = Math.round((options.cases * share) / shares);
    const targetStarted = performance.now();
    console.log(`- ${target.name}: ${target.summary} (${budget} cases)`);
    const report = await fuzzTarget(
      target,
      budget,
      options.seed + index * 1000,
      options,
      watch,
      () => world.heal(),
    );
    console.log(
      `  ${target.name}: ${report.runs} cases in ${((performance.now() - targetStarted) / 1000).toFixed(1)} s`,
    );
    reports.push(report);
  }
  const leftover = watch.take();

  console.log('\nresults');
  console.log(
    `${'target'.padEnd(9)} ${'cases'.padStart(7)} ${'shrinks'.padStart(7)} ${'failures'.padStart(8)}  slowest input`,
  );
  for (const r of reports) {
    console.log(
      `${r.name.padEnd(9)} ${String(r.runs).padStart(7)} ${String(r.shrinkRuns).padStart(7)} ${String(r.failures.length).padStart(8)}  ${r.stats.slowest === undefined ? '-' : `${ms(r.stats.slowest.ms)}: ${r.stats.slowest.description}`}${r.interrupted ? ' (interrupted by the time limit)' : ''}`,
    );
  }
  const failures = reports.flatMap((r) => r.failures.map((f) => ({ target: r.name, ...f })));
  if (failures.length > 0) {
    const bySignature = new Map<string, typeof failures>();
    for (const f of failures) {
      const key = `${f.target} ${f.signature}`;
      bySignature.set(key, [...(bySignature.get(key) ?? []), f]);
    }
    console.log(
      `\ncrashes and broken properties: ${failures.length} (${bySignature.size} distinct), smallest input of each:`,
    );
    for (const same of bySignature.values()) {
      const f = same.reduce((a, b) => (b.input.length < a.input.length ? b : a));
      console.log(`[${f.target}] ${f.error.split('\n').join('\n    ')}`);
      if (same.length > 1) console.log(`    (seen ${same.length} times)`);
      console.log(`    input (shrunk ${f.shrinks} times): ${f.input}`);
      console.log(
        `    replay: npm run fuzz -- --target ${f.target} --seed ${f.seed} --path ${f.path ?? '?'}`,
      );
    }
  }
  const events = watch.all;
  const count = (kind: string) => events.filter((e) => e.kind === kind).length;
  console.log(
    `\nprocess-level events: ${count('uncaughtException')} uncaught exceptions, ${count('unhandledRejection')} unhandled rejections, ${count('warning')} warnings${leftover.length > 0 ? ` (${leftover.length} outside any case)` : ''}`,
  );
  for (const event of leftover) console.log(`  ${event.kind}: ${describeError(event.error)}`);
  const slow = reports.filter((r) => (r.stats.slowest?.ms ?? 0) > options.thresholdMs);
  for (const r of slow)
    console.log(
      `slow: ${r.name}'s slowest input took ${ms(r.stats.slowest?.ms ?? 0)}, over the ${options.thresholdMs} ms threshold`,
    );
  // The world must shut down: a socket the server cannot close is one a client can hold forever.
  const closed = await Promise.race([
    world.close().then(
      () => 'closed',
      (error: unknown) => `closing failed: ${describeError(error)}`,
    ),
    new Promise<string>((resolve) =>
      setTimeout(() => resolve('it did not close within 5 s (a connection it cannot end)'), 5000),
    ),
  ]);
  if (closed !== 'closed') console.log(`shutdown: ${closed}`);
  const total = reports.reduce((n, r) => n + r.runs, 0);
  const failed =
    failures.length > 0 || leftover.length > 0 || slow.length > 0 || closed !== 'closed';
  console.log(
    `\n${failed ? 'FAIL' : 'PASS'}: ${total} cases in ${((performance.now() - started) / 1000).toFixed(1)} s, ${failures.length} failures, ${slow.length} targets with an input over ${options.thresholdMs} ms${closed === 'closed' ? '' : ', shutdown hung'}`,
  );
  process.exit(failed ? 1 : 0);
}
