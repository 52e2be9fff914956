/**
 * What a `hil run` produces: per board, the rig steps it went through and the checks of each
 * suite; with `--compare-to` its comparison with a base, and from `hil merge` the qualification
 * table. Every reporter (console, JUnit, JSON, HTML, OpenMetrics, GitHub summary) reads this,
 * and `hil compare` and `hil merge` build on it: the model imports none of them.
 */

export const SUITE_NAMES = [
  // Judged while the rig opens the session (the device hello, initialize, the tools walk); it
  // always runs, whatever `--suite` says.
  'session',
  'initialize',
  'tools-list',
  'tools-call',
  'robustness',
  'latency',
  // Over MQTT: a BOOT click opens an audio session, its UDP uplink judged (suites/audio.ts).
  'audio',
  'reboot',
  'ota-upgrade',
  // Opt-in: the board's tools through @xiaozhi-mcp/bridge with the MCP SDK's client (suites/bridge.ts).
  'bridge',
] as const;
export type SuiteName = (typeof SUITE_NAMES)[number];
/** Suites that run only when `--suite` names them. */
const OPT_IN_SUITES: readonly SuiteName[] = ['reboot', 'ota-upgrade', 'bridge'];
/** Suites that run unless `--suite` says otherwise: all but `session` (always judged) and the opt-in ones. */
export const DEFAULT_SUITES: readonly SuiteName[] = SUITE_NAMES.filter(
  (suite) => suite !== 'session' && !OPT_IN_SUITES.includes(suite),
);

export type Severity = 'critical' | 'major' | 'minor';

/**
 * `known-deviation`: failed, but the baseline lists it as a known firmware deviation (not a
 * failure). A known deviation that passes is `passed` with `deviation.fixed` set.
 */
export type CheckStatus = 'passed' | 'failed' | 'skipped' | 'known-deviation';

export interface CheckResult {
  /** `<suite>.<check>`, e.g. `tools-list.page-budget`. */
  readonly id: string;
  readonly suite: SuiteName;
  readonly description: string;
  readonly severity: Severity;
  status: CheckStatus;
  /** For a failure: what was expected and what came back. Otherwise a short note. */
  message: string;
  readonly expected?: string;
  readonly actual?: string;
  /**
   * A failure's observable shape, a stable key the check emits (e.g. `error reply without code`):
   * a baseline deviation matches a failure only when it records the same shape.
   */
  readonly observed?: string;
  readonly durationMs: number;
  /** Attempts beyond the first; a check that passed after a retry is flaky. */
  readonly retries: number;
  deviation?: { readonly reason: string; readonly fixed: boolean };
  /** Skipped because of an earlier check's failure: the board stopped answering at that check. */
  readonly skippedAfter?: string;
  /** Measurements, e.g. latency percentiles. */
  readonly data?: Readonly<Record<string, unknown>>;
}

export type RigStepName =
  /** The rig's own backend (OTA endpoint, gateway, broker): fails only when it cannot start. */
  | 'backend'
  | 'open'
  | 'identify'
  | 'flash'
  | 'provision'
  | 'reset'
  | 'boot'
  | 'ota-check'
  | 'session'
  | 'suites'
  | 'close';

export interface RigStep {
  readonly step: RigStepName;
  /** `interrupted`: cut short by Ctrl-C. */
  status: 'passed' | 'failed' | 'skipped' | 'interrupted';
  durationMs: number;
  message?: string;
  /** The step stopped because this check failed (e.g. `session.hello-transport`): not a rig failure. */
  check?: string;
  /** Passed on a retry (e.g. a flash that needed the lower baud). */
  flaky?: boolean;
}

export interface LatencyStats {
  /** The method measured, e.g. `tools/call self.get_device_status`. */
  readonly method: string;
  readonly samples: number;
  readonly minMs: number;
  readonly p50Ms: number;
  readonly p90Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
  /**
   * WebSocket ping round trip on the same connection, for comparison. Absent when no ping was
   * measured: over MQTT the server has no ping, so there is no figure, not a NaN.
   */
  readonly pingP50Ms?: number;
  readonly pingP99Ms?: number;
  /** Every sample in milliseconds, in order (the HTML report plots them). */
  readonly valuesMs: readonly number[];
}

/** How a board's session ran: WebSocket (opened by a click) or MQTT (connected from boot on). */
export type BoardTransport = 'websocket' | 'mqtt';

/** `interrupted`: cut short by Ctrl-C before its verdict. */
export type BoardStatus = 'passed' | 'failed' | 'rig-failed' | 'interrupted';

/** A firmware image the run used: what was flashed, or offered in `ota-upgrade`. */
export interface ImageInfo {
  /** The file, or how the rig made it (`virtual firmware built by hil`). */
  readonly file: string;
  readonly sha256: string;
  readonly bytes?: number;
  /** `merged` (flashed at 0x0) or `app`. */
  readonly kind?: string;
  /** From the app description. */
  readonly project?: string;
  readonly version?: string;
  /** The board the build is for (`BOARD_NAME` in the app). */
  readonly board?: string;
  readonly chip?: string;
}

/** A tool as the board listed it. */
export interface ToolSummary {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: Readonly<Record<string, unknown>>;
  /** Listed only with user tools (annotations.audience = ["user"]). */
  readonly userOnly: boolean;
}

/** One page of a tools/list walk. */
export interface PageSize {
  readonly tools: number;
  /** The bytes the firmware's page budget counts. */
  readonly bytes: number;
}

export interface BoardReport {
  /** The inventory name. */
  readonly name: string;
  /** `network`: a board without a serial port, reached at its OTA check (network-board.ts). */
  readonly kind: 'virtual' | 'serial' | 'network';
  port?: string;
  chip?: string;
  mac?: string;
  /** The board variant (`BOARD_NAME`). */
  variant?: string | undefined;
  /** The transport of the board's last session, as the server saw it. */
  transport?: BoardTransport;
  /** The version the board reported in `initialize`. */
  firmwareVersion?: string | undefined;
  /** The version inside the flashed image, when the run flashed one. */
  expectedVersion?: string;
  /** The version the board reported last, when a suite changed it (`ota-upgrade`). */
  upgradedVersion?: string;
  /** The image the run flashed onto this board. */
  image?: ImageInfo;
  status: BoardStatus;
  /**
   * Why the rig could not finish with this board (exit 3): the step and the reason; `refused`:
   * the flasher refused the build before writing a byte, for the board's security eFuses or chip
   * revision (exit 2).
   */
  failure?: { readonly step: RigStepName; readonly reason: string; readonly refused?: true };
  readonly steps: RigStep[];
  readonly checks: CheckResult[];
  readonly latency: LatencyStats[];
  /** The tools the board listed at the start of its session (user tools included): `hil compare` diffs them. */
  tools?: ToolSummary[];
  /** The pages of the session's tools/list walks: tools and bytes of each (the firmware's budget count). */
  pages?: { readonly plain: readonly PageSize[]; readonly withUserTools: readonly PageSize[] };
  /** The body of the board's OTA check at our endpoint (its system info: `minimum_free_heap_size`, ...). */
  otaRequest?: Readonly<Record<string, unknown>>;
  /** Paths of the board's artefacts, relative to the output directory. */
  consoleLog?: string;
  transcript?: string;
  /** The board as recorded (`replica.json`), for a board that reached a session. */
  replica?: string;
  readonly startedAt: string;
  durationMs: number;
}

/**
 * The first failure of a run, which the reports name at their top: what later failed or was
 * skipped on its board often follows from it (a board that stopped answering skips the rest).
 */
export interface RootCause {
  /** The board it happened on; absent for a rig of `hil merge --expect` that sent no report. */
  readonly board?: string;
  /** The check that failed first, when a check did. */
  readonly check?: string;
  /** The rig step that failed first (the rig's, or the board's: a panic at boot), when a step did. */
  readonly step?: RigStepName;
  /** The rig that sent no report (`hil merge --expect`). */
  readonly rig?: string;
  readonly reason: string;
  /**
   * When it happened, as the report's durations place it: the board's start plus its steps and
   * checks up to the end of this one. Absent for a missing report.
   */
  readonly at?: string;
  /**
   * Checks of its board skipped after it because the board stopped answering (at it, or at a
   * later check), and that check.
   */
  readonly skipped: number;
  readonly stoppedAnsweringAt?: string;
  /** Failures of its board after it (failed checks, a rig failure): often its consequences. */
  readonly laterFailures: number;
}

export interface RunSummary {
  readonly boards: number;
  readonly passed: number;
  readonly failed: number;
  readonly knownDeviations: number;
  readonly fixedDeviations: number;
  readonly skipped: number;
  readonly rigFailures: number;
  /** Boards cut short by Ctrl-C. */
  readonly interrupted?: number;
  /** The run's first failure, if anything failed. */
  readonly rootCause?: RootCause;
}

/** 0 all passed, 1 a check failed, 2 bad usage or config, 3 the rig failed, 130 interrupted. */
export type ExitCode = 0 | 1 | 2 | 3 | 130;

/** Where the run ran. */
export interface HostInfo {
  readonly hostname: string;
  /** `linux 6.8.0 x64`. */
  readonly os: string;
  /** `v20.19.0`. */
  readonly node: string;
}

export interface RunReport {
  readonly tool: { readonly name: 'hil'; readonly version: string };
  readonly startedAt: string;
  durationMs: number;
  readonly rig: 'virtual' | 'inventory';
  readonly server: {
    readonly ota: string;
    readonly websocket: string;
    /** The embedded MQTT broker, as boards reach it, when a board ran over MQTT. */
    readonly mqtt?: string;
  };
  /** `--firmware`: the image flashed onto every board. */
  readonly firmware?: ImageInfo & { readonly version: string; readonly chip: string };
  /** `--ota-image`: the candidate `ota-upgrade` offered. */
  readonly otaImage?: ImageInfo;
  readonly host?: HostInfo;
  readonly suites: readonly SuiteName[];
  /** The baseline file the run applied: `hil baseline accept` rewrites it by default. */
  readonly baseline?: string;
  readonly boards: BoardReport[];
  summary: RunSummary;
  exitCode: ExitCode;
  /** Stopped by Ctrl-C; the reports hold what ran. */
  interrupted: boolean;
  /** `hil run --compare-to`: this run against a base report (docs/ci.md §1). */
  comparison?: Comparison;
  /** `hil merge`: the rigs' reports this one combines (docs/ci.md §2). */
  qualification?: Qualification;
}

// ---- The comparison section: `hil compare`, `hil run --compare-to` (docs/ci.md §1) ---------

/**
 * When a difference is a regression. Ratios say how many times worse the candidate must be
 * (slower, bigger, or less free heap); the absolute floors keep tiny figures from tripping
 * them. Set in the inventory's `compare` (hil.config.schema.json).
 */
export interface CompareThresholds {
  /** The rank test's one-sided p-value below which a latency difference is real. */
  readonly latencyPValue: number;
  /** The candidate's median over the base's, at least (1.1: 10 % slower). */
  readonly latencyMinRatio: number;
  /** And the medians at least this far apart. */
  readonly latencyMinMs: number;
  /** Fewer samples on either side: latency is listed, not judged. */
  readonly latencyMinSamples: number;
  /** Boot (reset to the board's identity line on the console) this many times slower... */
  readonly bootMinRatio: number;
  /** ...and at least this much slower. */
  readonly bootMinMs: number;
  readonly flashMinRatio: number;
  readonly flashMinMs: number;
  /** The flashed image this many times bigger, and at least `imageMinBytes` bigger. */
  readonly imageMinRatio: number;
  readonly imageMinBytes: number;
  /** `minimum_free_heap_size` of the OTA request: the base's over the candidate's, at least... */
  readonly heapMinRatio: number;
  /** ...and at least this many bytes less. */
  readonly heapMinBytes: number;
}

export type FindingKind = 'regression' | 'improvement' | 'change';

export type FindingSubject =
  | 'board'
  | 'check'
  | 'tool'
  | 'pages'
  | 'latency'
  | 'boot'
  | 'flash'
  | 'image'
  | 'heap';

export interface ComparisonFinding {
  readonly kind: FindingKind;
  readonly subject: FindingSubject;
  /**
   * What it is about, stable between runs (a JUnit testcase name): `check tools-list.walk`,
   * `tool self.lamp.turn_on`, `latency tools/call self.get_device_status`, `boot`.
   */
  readonly id: string;
  /** One line: what it was, what it is. */
  readonly text: string;
  readonly base?: string;
  readonly candidate?: string;
}

export type LatencyVerdict = 'slower' | 'faster' | 'same' | 'too-few-samples';

/** One method's samples, base against candidate. */
export interface LatencyComparison {
  readonly method: string;
  readonly baseSamples: number;
  readonly candidateSamples: number;
  readonly baseMedianMs: number;
  readonly candidateMedianMs: number;
  /** The candidate's median over the base's. */
  readonly ratio: number;
  readonly deltaMs: number;
  /** Mann-Whitney U of the candidate's samples against the base's. */
  readonly u: number;
  /** One-sided p-values: the candidate is slower; the candidate is faster. */
  readonly pSlower: number;
  readonly pFaster: number;
  readonly verdict: LatencyVerdict;
}

/** A single figure of each side (boot time, flash time, image size, free heap). */
export interface MetricComparison {
  readonly metric: 'boot' | 'flash' | 'image' | 'heap';
  readonly unit: 'ms' | 'bytes';
  readonly base: number | undefined;
  readonly candidate: number | undefined;
  readonly verdict: 'worse' | 'better' | 'same' | 'not-compared';
}

export interface BoardSideSummary {
  readonly status: BoardStatus;
  readonly firmwareVersion?: string;
}

export interface BoardComparison {
  readonly board: string;
  /** Absent when the board is only in the other report. */
  readonly base?: BoardSideSummary;
  readonly candidate?: BoardSideSummary;
  readonly findings: ComparisonFinding[];
  readonly latency: LatencyComparison[];
  readonly metrics: MetricComparison[];
  /** What could not be compared, and why (a report without tool list, too few samples). */
  readonly notes: string[];
}

export interface ComparisonSide {
  /** Where the report came from (its path), or `this run`. */
  readonly label: string;
  readonly startedAt: string;
  readonly exitCode: number;
  /** The firmware the report names (the flashed file's version), if any. */
  readonly firmware?: string;
}

/**
 * What `hil compare` finds between a base report and a candidate report: per board, what got
 * worse (regressions, exit 1), what got better, and what merely changed.
 */
export interface Comparison {
  readonly base: ComparisonSide;
  readonly candidate: ComparisonSide;
  readonly thresholds: CompareThresholds;
  readonly boards: BoardComparison[];
  readonly regressions: number;
  readonly improvements: number;
  readonly changes: number;
  /**
   * 0 no regression, 1 a regression, 3 the candidate's rig failed (a board could not be
   * qualified, so it could not be compared either).
   */
  readonly exitCode: 0 | 1 | 3;
}

// ---- The qualification section: `hil merge` (docs/ci.md §2) --------------------------------

export interface QualificationSource {
  /** The rig's name: `NAME=PATH` on the command line, else the report's folder name. */
  readonly rig: string;
  readonly file: string;
  readonly startedAt: string;
  readonly exitCode: number;
  readonly interrupted: boolean;
  readonly boards: number;
  readonly firmware?: string;
  /** The machine the rig's run ran on. */
  readonly host?: string;
}

/** One board of one rig on one build. */
export interface QualificationEntry {
  readonly rig: string;
  /** The board's inventory name on its rig. */
  readonly board: string;
  /** Its name in the merged report. */
  readonly key: string;
  readonly build: string;
  /** `missing`: a rig named by `--expect` sent no report. */
  readonly status: BoardStatus | 'missing';
  readonly variant?: string;
  readonly firmwareVersion?: string;
}

/** The reports of several rigs as one: each board's verdict per build. */
export interface Qualification {
  readonly sources: QualificationSource[];
  /** The builds, in order of appearance: the table's columns. */
  readonly builds: string[];
  readonly entries: QualificationEntry[];
  /** Rigs `--expect` named that sent no report: each a rig failure. */
  readonly missing: string[];
}

// ---- Derived from the boards ----------------------------------------------------------------

/** Counts checks and boards; a board that failed its rig steps counts as a rig failure. */
export function summarize(boards: readonly BoardReport[]): RunSummary {
  const checks = boards.flatMap((b) => b.checks);
  const rootCause = firstFailure(boards);
  return {
    ...(rootCause === undefined ? {} : { rootCause }),
    boards: boards.length,
    passed: checks.filter((c) => c.status === 'passed').length,
    failed: checks.filter((c) => c.status === 'failed').length,
    knownDeviations: checks.filter((c) => c.status === 'known-deviation').length,
    fixedDeviations: checks.filter((c) => c.deviation?.fixed === true).length,
    skipped: checks.filter((c) => c.status === 'skipped').length,
    rigFailures: boards.filter((b) => b.status === 'rig-failed').length,
    interrupted: boards.filter((b) => b.status === 'interrupted').length,
  };
}

/** The exit code docs/hil.md §5 defines, from what happened; a run cut short by Ctrl-C is 130. */
export function exitCodeFor(boards: readonly BoardReport[], interrupted = false): ExitCode {
  if (interrupted || boards.some((b) => b.status === 'interrupted')) return 130;
  if (boards.some((b) => b.status === 'rig-failed')) return 3;
  if (boards.some((b) => b.failure?.refused === true)) return 2;
  if (boards.some((b) => b.status === 'failed')) return 1;
  return 0;
}

// ---- The root cause and the headline ---------------------------------------------------------

/** The steps no check runs before: a failure there comes before any check's. */
const STEPS_BEFORE_CHECKS: readonly RigStepName[] = [
  'backend',
  'open',
  'identify',
  'flash',
  'provision',
  'reset',
  'boot',
  'ota-check',
];

/** The first line of a reason, short enough for a headline. */
function firstLine(text: string, max = 160): string {
  const line = text.split(/\r?\n/, 1)[0]?.trim() ?? '';
  return line.length <= max ? line : `${line.slice(0, max - 1)}…`;
}

/** When a board's step ended, from the board's start and the durations of the steps before it. */
function stepTimes(board: BoardReport): Map<RigStepName, { start: number; end: number }> {
  let at = Date.parse(board.startedAt);
  const times = new Map<RigStepName, { start: number; end: number }>();
  for (const step of board.steps) {
    const duration = Number.isFinite(step.durationMs) ? step.durationMs : 0;
    times.set(step.step, { start: at, end: at + duration });
    at += duration;
  }
  return times;
}

/**
 * A board's first failure: a rig step before any check could run, else its first failed check
 * (checks are recorded in the order they ran), else the step its rig or firmware failed at.
 * A board cut short by Ctrl-C has none: it did not fail.
 */
export function boardRootCause(board: BoardReport): RootCause | undefined {
  if (board.status === 'interrupted') return undefined;
  const times = stepTimes(board);
  const stamp = (ms: number | undefined) =>
    ms === undefined || !Number.isFinite(ms) ? {} : { at: new Date(ms).toISOString() };
  const failure = board.failure;
  const index = board.checks.findIndex((c) => c.status === 'failed');
  if (failure !== undefined && (STEPS_BEFORE_CHECKS.includes(failure.step) || index < 0)) {
    return {
      board: board.name,
      step: failure.step,
      reason: failure.reason,
      ...stamp(times.get(failure.step)?.end),
      skipped: 0,
      laterFailures: 0,
    };
  }
  const check = board.checks[index];
  if (check === undefined) return undefined;
  // The session's checks are judged in the session step, the rest one after another in suites.
  const inSession = check.suite === 'session';
  const step = times.get(inSession ? 'session' : 'suites');
  const before = board.checks
    .slice(0, index + 1)
    .filter((c) => (c.suite === 'session') === inSession)
    .reduce((sum, c) => sum + (Number.isFinite(c.durationMs) ? c.durationMs : 0), 0);
  const later = board.checks.slice(index + 1);
  const unanswered = later.filter((c) => c.status === 'skipped' && c.skippedAfter !== undefined);
  const stoppedAt = unanswered[0]?.skippedAfter;
  return {
    board: board.name,
    check: check.id,
    reason: check.message,
    ...stamp(step === undefined ? undefined : Math.min(step.start + before, step.end)),
    skipped: unanswered.length,
    ...(stoppedAt === undefined ? {} : { stoppedAnsweringAt: stoppedAt }),
    laterFailures:
      later.filter((c) => c.status === 'failed').length + (failure === undefined ? 0 : 1),
  };
}

/** The earliest of the boards' first failures (by when the report's durations place them). */
function firstFailure(boards: readonly BoardReport[]): RootCause | undefined {
  let first: RootCause | undefined;
  for (const board of boards) {
    const cause = boardRootCause(board);
    if (cause === undefined) continue;
    const at = cause.at === undefined ? Number.POSITIVE_INFINITY : Date.parse(cause.at);
    const best = first?.at === undefined ? Number.POSITIVE_INFINITY : Date.parse(first.at);
    if (first === undefined || at < best) first = cause;
  }
  return first;
}

/** `passed`: exit 0; `failed`: 1, 2 or 3; `interrupted`: 130. */
export type HeadlineTone = 'passed' | 'failed' | 'interrupted';

/** The verdict every report leads with. */
export interface Headline {
  readonly text: string;
  readonly tone: HeadlineTone;
}

function count(n: number, one: string, many = `${one}s`): string {
  return `${n} ${n === 1 ? one : many}`;
}

/**
 * The run's verdict in one line, led by the reason for its exit code (docs/hil.md §5): every
 * reporter shows this one, so none can read "all passed" beside a failing exit code. Rig
 * failures and missing reports for 3, a refused build for 2, failed checks, crashed boards or
 * regressions for 1, Ctrl-C for 130; then the check counts.
 */
export function headline(report: RunReport): Headline {
  const s = report.summary;
  const boards = report.boards;
  const missing = report.qualification?.missing ?? [];
  const extras: string[] = [];
  if (s.knownDeviations > 0) extras.push(count(s.knownDeviations, 'known deviation'));
  if (s.fixedDeviations > 0)
    extras.push(`${count(s.fixedDeviations, 'deviation')} fixed (update the baseline)`);
  const regressions = report.comparison?.regressions ?? 0;
  if (report.exitCode === 0) {
    return {
      tone: 'passed',
      text: [`all ${count(s.passed, 'check')} passed`, ...extras].join(', '),
    };
  }
  const checks = [
    `${count(s.passed, 'check')} passed`,
    ...(s.skipped > 0 ? [`${s.skipped} skipped`] : []),
    ...extras,
  ].join(', ');
  const failedChecks = s.failed > 0 ? [`${count(s.failed, 'check')} failed`] : [];
  const at = (b: BoardReport) => `${b.name} at ${b.failure?.step ?? 'an unknown step'}`;
  const sources = (code: number) =>
    (report.qualification?.sources ?? []).filter((x) => x.exitCode === code).map((x) => x.rig);

  let causes: string[];
  if (report.exitCode === 130) {
    const cut = boards.filter((b) => b.status === 'interrupted');
    const lead = `interrupted (Ctrl-C)${cut.length === 0 ? '' : `: ${count(cut.length, 'board')} cut short (${cut.map(at).join(', ')})`}`;
    return { tone: 'interrupted', text: [lead, ...failedChecks, `before it ${checks}`].join('; ') };
  }
  if (report.exitCode === 3) {
    causes = [
      ...missing.map((rig) => `no report from rig ${rig}`),
      ...boards.filter((b) => b.status === 'rig-failed').map(at),
      // A merged rig's board cut short has no verdict: its rig failed.
      ...boards.filter((b) => b.status === 'interrupted').map((b) => `${at(b)} interrupted`),
    ];
    if (causes.length === 0) causes = sources(3).map((rig) => `rig ${rig}'s run exited 3`);
    causes = [`rig failed: ${causes.length === 0 ? 'see the rig failures' : causes.join('; ')}`];
    causes.push(...failedChecks);
  } else if (report.exitCode === 2) {
    const refused = boards.filter((b) => b.failure?.refused === true);
    causes = [
      refused.length === 0
        ? 'bad usage or input'
        : `refused: ${refused.map((b) => `${at(b)}: ${firstLine(b.failure?.reason ?? '')}`).join('; ')}`,
      ...failedChecks,
    ];
  } else {
    causes = [...failedChecks];
    // A board its firmware failed without a named check: a panic at boot.
    for (const b of boards) {
      if (b.status === 'failed' && b.failure !== undefined && b.failure.refused !== true)
        causes.push(`${b.name} failed at ${b.failure.step}: ${firstLine(b.failure.reason)}`);
    }
    if (regressions > 0) causes.push(`${count(regressions, 'regression')} against the base`);
    if (causes.length === 0) causes = sources(1).map((rig) => `rig ${rig}'s run exited 1`);
    if (causes.length === 0) causes = ['failed (exit 1)'];
  }
  return { tone: 'failed', text: [...causes, checks].join('; ') };
}
