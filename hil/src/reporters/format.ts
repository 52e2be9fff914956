/**
 * Wording shared by the reporters, so a failure reads the same in the console, JUnit, HTML and
 * the GitHub summary.
 */
import type {
  BoardReport,
  BoardTransport,
  CheckResult,
  ExitCode,
  HostInfo,
  ImageInfo,
  LatencyStats,
  RigStep,
  RootCause,
  RunReport,
} from '../model.js';

/** What each exit code means (docs/hil.md §5). */
export const EXIT_CODE_MEANING: Readonly<Record<ExitCode, string>> = {
  0: 'all checks passed',
  1: 'a check failed, or a regression against the base',
  2: 'bad usage or input (a build a board refuses before it is written included)',
  3: 'the rig failed (board missing, port lost, backend could not start)',
  130: 'interrupted (Ctrl-C): the reports hold what ran',
};

/** A board's outcome in words: `passed`, `failed`, `rig failed at boot`, `interrupted at suites`. */
export function boardStatusText(board: BoardReport): string {
  if (board.failure?.refused === true) return `refused at ${board.failure.step}`;
  if (board.status === 'rig-failed')
    return `rig failed at ${board.failure?.step ?? 'an unknown step'}`;
  if (board.status === 'interrupted')
    return `interrupted at ${board.failure?.step ?? 'an unknown step'}`;
  return board.status;
}

/** An image in one line: `xiaozhi 2.4.2 for bread-compact-wifi (esp32s3), merged image, 129 KB, SHA-256 0123abcd…`. */
export function imageText(image: ImageInfo): string {
  const app = [image.project, image.version].filter((v) => v !== undefined).join(' ');
  const parts = [
    `${app === '' ? 'an image' : app}${image.board === undefined ? '' : ` for ${image.board}`}${image.chip === undefined ? '' : ` (${image.chip})`}`,
    image.kind === undefined ? undefined : `${image.kind} image`,
    image.bytes === undefined ? undefined : formatBytes(image.bytes),
    `SHA-256 ${image.sha256.slice(0, 12)}…`,
  ];
  return `${parts.filter((p) => p !== undefined).join(', ')}; ${image.file}`;
}

/** `host (linux 6.8.0 x64, Node v20.19.0)`. */
export function hostText(host: HostInfo): string {
  return `${host.hostname} (${host.os}, Node ${host.node})`;
}

function formatBytes(bytes: number): string {
  if (bytes >= 1024 * 1024) return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
  if (bytes >= 1024) return `${Math.round(bytes / 1024)} KB`;
  return `${bytes} bytes`;
}

/** A board's transport in words: `MQTT`, `WebSocket`. */
export function transportText(transport: BoardTransport): string {
  return transport === 'mqtt' ? 'MQTT' : 'WebSocket';
}

/** The firmware a board ran: `2.4.2`, or `2.4.2 → 2.4.3` after an upgrade. */
export function versionText(board: BoardReport): string | undefined {
  if (board.firmwareVersion === undefined) return undefined;
  return board.upgradedVersion === undefined
    ? board.firmwareVersion
    : `${board.firmwareVersion} → ${board.upgradedVersion}`;
}

/** `850 ms`, `4.1 s`, `2 min 03 s`. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '?';
  if (ms < 999.5) return `${Math.round(ms)} ms`;
  // Bounds where rounding would print `1000 ms` or `60.0 s`.
  if (ms < 59_950) return `${(ms / 1000).toFixed(1)} s`;
  const seconds = Math.round(ms / 1000);
  return `${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, '0')} s`;
}

/** A latency in milliseconds with a precision that suits its size. */
export function formatMs(ms: number): string {
  if (!Number.isFinite(ms)) return '?';
  if (ms >= 100) return `${Math.round(ms)} ms`;
  if (ms >= 10) return `${ms.toFixed(1)} ms`;
  return `${ms.toFixed(2)} ms`;
}

/**
 * A figure that was measured: a finite number. An absent one (no ping over MQTT), or NaN (null
 * once through JSON) in a report from an older hil, is left out of plots and tables.
 */
export function isMeasured(value: number | null | undefined): value is number {
  return typeof value === 'number' && Number.isFinite(value);
}

/** A ping figure in a table: the time, or why there is none (`n/a over MQTT`: the server has no ping there). */
export function pingMs(board: BoardReport, ms: number | undefined): string {
  if (isMeasured(ms)) return formatMs(ms);
  return board.transport === 'mqtt' ? 'n/a over MQTT' : 'n/a';
}

/** The ping beside a latency series: `WebSocket ping p50 0.42 ms, p99 1.90 ms`, or why there is none. */
export function pingText(board: BoardReport, stats: LatencyStats): string {
  if (!isMeasured(stats.pingP50Ms) && !isMeasured(stats.pingP99Ms))
    return `WebSocket ping ${pingMs(board, undefined)}`;
  return `WebSocket ping p50 ${pingMs(board, stats.pingP50Ms)}, p99 ${pingMs(board, stats.pingP99Ms)}`;
}

export function plural(count: number, one: string, many = `${one}s`): string {
  return `${count} ${count === 1 ? one : many}`;
}

/**
 * The message of a check, with what was expected and what came back appended when the suite
 * recorded them apart from the message (and the message does not already say it).
 */
export function checkText(check: CheckResult): string {
  const parts: string[] = [];
  if (check.expected !== undefined && !check.message.includes(check.expected)) {
    parts.push(`expected ${check.expected}`);
  }
  if (check.actual !== undefined && !check.message.includes(check.actual)) {
    parts.push(`got ${check.actual}`);
  }
  if (parts.length === 0) return check.message;
  return check.message === '' ? parts.join(', ') : `${check.message}: ${parts.join(', ')}`;
}

export function isFlaky(check: CheckResult): boolean {
  return check.status === 'passed' && check.retries > 0;
}

export function isFixedDeviation(check: CheckResult): boolean {
  return check.status === 'passed' && check.deviation?.fixed === true;
}

/** Failures first, then what needs a look (deviations, flaky), then skipped and passed. */
function checkRank(check: CheckResult): number {
  if (check.status === 'failed') return 0;
  if (check.status === 'known-deviation') return 1;
  if (isFixedDeviation(check)) return 2;
  if (isFlaky(check)) return 3;
  if (check.status === 'skipped') return 4;
  return 5;
}

export function orderChecks(checks: readonly CheckResult[]): CheckResult[] {
  // Array.prototype.sort is stable, so checks keep the suite order within a rank.
  return [...checks].sort((a, b) => checkRank(a) - checkRank(b));
}

export interface RigFailure {
  readonly step: RigStep['step'];
  readonly reason: string;
  readonly durationMs: number;
  /**
   * `rig`: the rig's (exit 3); `board`: the board's firmware stopped the step (a panic at boot,
   * exit 1); `refused`: the board refused the build before a byte was written (exit 2).
   */
  readonly kind: 'rig' | 'board' | 'refused';
}

/**
 * The rig steps that failed for a board; `failure` is included even when the rig did not record
 * the step (e.g. the port vanished before the step started).
 */
export function rigFailures(board: BoardReport): RigFailure[] {
  // Ctrl-C is no rig failure; neither is a step a failed check stopped (the check is reported).
  if (board.status === 'interrupted') return [];
  const kind: RigFailure['kind'] =
    board.status === 'rig-failed' ? 'rig' : board.failure?.refused === true ? 'refused' : 'board';
  const failed: RigFailure[] = board.steps
    .filter((s) => s.status === 'failed' && s.check === undefined)
    .map((s) => ({
      step: s.step,
      reason: s.message ?? (board.failure?.step === s.step ? board.failure.reason : 'step failed'),
      durationMs: s.durationMs,
      kind,
    }));
  const failure = board.failure;
  if (failure !== undefined && !failed.some((f) => f.step === failure.step)) {
    failed.push({ step: failure.step, reason: failure.reason, durationMs: 0, kind });
  }
  return failed;
}

export interface CheckFinding {
  readonly board: BoardReport;
  readonly check: CheckResult;
}

/** What the summaries list, across boards, in board order. */
export function findings(report: RunReport): {
  failed: CheckFinding[];
  deviations: CheckFinding[];
  fixed: CheckFinding[];
  flaky: CheckFinding[];
} {
  const all = report.boards.flatMap((board) => board.checks.map((check) => ({ board, check })));
  return {
    failed: all.filter((f) => f.check.status === 'failed'),
    deviations: all.filter((f) => f.check.status === 'known-deviation'),
    fixed: all.filter((f) => isFixedDeviation(f.check)),
    flaky: all.filter((f) => isFlaky(f.check)),
  };
}

/**
 * The root cause in one line: `dut robustness.string-id: expected ..., got none`, what it
 * explains after it on its board appended.
 */
export function rootCauseText(cause: RootCause): string {
  const where =
    cause.rig !== undefined && cause.board === undefined
      ? `rig ${cause.rig}`
      : cause.check !== undefined
        ? `${cause.board ?? '?'} ${cause.check}`
        : `${cause.board ?? '?'} at ${cause.step ?? 'an unknown step'}`;
  const first = cause.reason.split(/\r?\n/, 1)[0]?.trim() ?? '';
  const reason = first.length <= 300 ? first : `${first.slice(0, 299)}…`;
  // What came after it on its board, which it may explain.
  const after = [
    cause.laterFailures > 0 ? `${plural(cause.laterFailures, 'more failure')}` : '',
    cause.skipped > 0
      ? `${plural(cause.skipped, 'check')} skipped, the board having stopped answering${cause.stoppedAnsweringAt === cause.check ? ' here' : ` at ${cause.stoppedAnsweringAt}`}`
      : '',
  ].filter((p) => p !== '');
  return `${where}: ${reason === '' ? 'failed' : reason}${after.length === 0 ? '' : ` (then on ${cause.board}: ${after.join(', ')})`}`;
}

/**
 * Where the run ran: its host, or for a merged report each rig's (`vm (lab-1), ci-7 (lab-2)`);
 * `an unrecorded host` only when no report recorded one.
 */
export function hostsText(report: RunReport): string {
  if (report.host !== undefined) return hostText(report.host);
  const hosts = (report.qualification?.sources ?? []).flatMap((source) =>
    source.host === undefined ? [] : [`${source.host} (${source.rig})`],
  );
  return hosts.length === 0 ? 'an unrecorded host' : hosts.join(', ');
}
