/**
 * Live per-board progress on a terminal, and the summary at the end. On a TTY (and not in CI)
 * each board keeps one status line that is redrawn in place, with failures printed above the
 * block; otherwise every event is one plain line, so CI logs read top to bottom.
 */
import { renderComparisonText } from '../compare/render.js';
import { renderQualificationText } from '../merge.js';
import {
  type CheckResult,
  headline,
  type RigStep,
  type RigStepName,
  type RunReport,
} from '../model.js';
import { singleLine } from './escape.js';
import {
  boardStatusText,
  checkText,
  EXIT_CODE_MEANING,
  findings,
  formatDuration,
  hostsText,
  imageText,
  isFixedDeviation,
  isFlaky,
  plural,
  rigFailures,
  rootCauseText,
  transportText,
  versionText,
} from './format.js';

export type StepStatus = 'running' | RigStep['status'];

export interface StepDetail {
  /** When the rig measured it; otherwise the time since the step's `running` event. */
  readonly durationMs?: number;
  /** Passed on a retry (e.g. a flash that needed the lower baud). */
  readonly flaky?: boolean;
}

export interface ConsoleReporterOptions {
  /** Where text goes (default: stdout). */
  readonly write?: (text: string) => void;
  /** Redraw one status line per board (default: stdout is a TTY and `CI` is unset). */
  readonly live?: boolean;
  /** ANSI colours (default: live, unless `NO_COLOR` is set). */
  readonly color?: boolean;
  /** Terminal width, to keep live lines on one row (default: stdout's, or 100). */
  readonly columns?: number;
  readonly env?: NodeJS.ProcessEnv;
  /** Clock for step durations (tests pass their own). */
  readonly now?: () => number;
}

/** Whether the live, redrawn mode suits this stream: a TTY outside CI. */
export function isLiveTerminal(
  stream: { readonly isTTY?: boolean } = process.stdout,
  env: NodeJS.ProcessEnv = process.env,
): boolean {
  const ci = env.CI !== undefined && env.CI !== '' && env.CI !== 'false' && env.CI !== '0';
  return stream.isTTY === true && !ci && env.TERM !== 'dumb';
}

const GLYPH = {
  passed: '✓',
  failed: '✗',
  skipped: '–',
  'known-deviation': '≈',
  running: '…',
  fixed: '↑',
  flaky: '⟳',
  interrupted: '⊘',
} as const;

const ANSI = { red: 31, green: 32, yellow: 33, cyan: 36, dim: 2, bold: 1 } as const;
type Tone = keyof typeof ANSI;

interface BoardLine {
  step: RigStepName | undefined;
  stepStatus: StepStatus;
  passed: number;
  failed: number;
  deviations: number;
  skipped: number;
  last: string;
}

export class ConsoleReporter {
  private readonly writeText: (text: string) => void;
  private readonly live: boolean;
  private readonly color: boolean;
  private readonly columns: number;
  private readonly now: () => number;
  private readonly boards = new Map<string, BoardLine>();
  private readonly started = new Map<string, number>();
  /** Status lines currently on screen below the cursor's origin (live mode). */
  private drawn = 0;

  constructor(options: ConsoleReporterOptions = {}) {
    const env = options.env ?? process.env;
    this.writeText = options.write ?? ((text) => process.stdout.write(text));
    this.live = options.live ?? isLiveTerminal(process.stdout, env);
    this.color =
      options.color ?? (this.live && (env.NO_COLOR === undefined || env.NO_COLOR === ''));
    this.columns = options.columns ?? (process.stdout.columns || 100);
    this.now = options.now ?? (() => performance.now());
  }

  /** A rig step started (`running`) or ended. */
  boardStep(
    board: string,
    step: RigStepName,
    status: StepStatus,
    message?: string,
    detail: StepDetail = {},
  ): void {
    const line = this.board(board);
    const key = `${board}\u0000${step}`;
    let durationMs = detail.durationMs;
    if (status === 'running') {
      this.started.set(key, this.now());
    } else {
      const startedAt = this.started.get(key);
      if (durationMs === undefined && startedAt !== undefined) durationMs = this.now() - startedAt;
      this.started.delete(key);
    }
    line.step = step;
    line.stepStatus = status;
    line.last = singleLine(message ?? '');

    const glyph =
      detail.flaky === true && status === 'passed'
        ? `${GLYPH.passed} ${GLYPH.flaky}`
        : GLYPH[status];
    const tone: Tone | undefined =
      status === 'failed' ? 'red' : status === 'passed' ? 'green' : undefined;
    let text = `${this.prefix(board)} ${step} ${this.paint(glyph, tone)}`;
    if (durationMs !== undefined) text += ` ${formatDuration(durationMs)}`;
    const notes = [
      singleLine(message ?? ''),
      detail.flaky === true ? 'flaky: passed on a retry' : '',
    ].filter((n) => n !== '');
    if (notes.length > 0)
      text += status === 'failed' ? ` ${notes.join('; ')}` : ` (${notes.join('; ')})`;
    // A failed step is worth keeping on screen; progress only updates the status line.
    this.emit(text, status === 'failed');
  }

  /** A check finished. */
  check(board: string, result: CheckResult): void {
    const line = this.board(board);
    if (result.status === 'passed') line.passed++;
    else if (result.status === 'failed') line.failed++;
    else if (result.status === 'known-deviation') line.deviations++;
    else line.skipped++;
    line.last = `${result.id} ${GLYPH[result.status]}`;

    let text = `${this.prefix(board)} ${result.id} `;
    if (result.status === 'failed') {
      text += `${this.paint(GLYPH.failed, 'red')} ${singleLine(checkText(result))}`;
      if (result.retries > 0) text += ` (after ${plural(result.retries, 'retry', 'retries')})`;
    } else if (result.status === 'known-deviation') {
      text += `${this.paint(GLYPH['known-deviation'], 'yellow')} known deviation: ${singleLine(result.deviation?.reason ?? checkText(result))}`;
    } else if (result.status === 'skipped') {
      text += `${this.paint(GLYPH.skipped, 'dim')} skipped${result.message === '' ? '' : `: ${singleLine(result.message)}`}`;
    } else {
      text += this.paint(GLYPH.passed, 'green');
      const notes: string[] = [];
      if (result.message !== '') notes.push(singleLine(result.message));
      if (isFlaky(result))
        notes.push(`flaky: passed after ${plural(result.retries, 'retry', 'retries')}`);
      if (isFixedDeviation(result))
        notes.push('known deviation no longer occurs: update the baseline');
      if (notes.length > 0) text += ` ${notes.join('; ')}`;
    }
    this.emit(text, result.status === 'failed' || isFixedDeviation(result));
  }

  /** A progress line from the rig or a suite (also console lines worth showing). */
  log(board: string, text: string): void {
    const lines = text
      .split(/\r?\n/)
      .map(singleLine)
      .filter((l) => l.trim() !== '');
    const last = lines[lines.length - 1];
    if (last === undefined) return;
    this.board(board).last = last;
    if (this.live) {
      this.redraw('');
    } else {
      this.writeText(lines.map((l) => `${this.prefix(board)} ${l}\n`).join(''));
    }
  }

  /** Replaces the live block with the final per-board lines and prints the summary. */
  finish(report: RunReport): void {
    let out = '';
    if (this.live) {
      out += this.clearBlock();
      this.drawn = 0;
    }
    out += renderConsoleSummary(report, { color: this.color });
    this.writeText(out);
  }

  private board(name: string): BoardLine {
    let line = this.boards.get(name);
    if (line === undefined) {
      line = {
        step: undefined,
        stepStatus: 'running',
        passed: 0,
        failed: 0,
        deviations: 0,
        skipped: 0,
        last: '',
      };
      this.boards.set(name, line);
    }
    return line;
  }

  private prefix(board: string): string {
    return this.paint(`[${board}]`, 'cyan');
  }

  private paint(text: string, tone: Tone | undefined): string {
    return paint(text, tone, this.color);
  }

  /** Plain mode: one line per event. Live mode: persistent lines go above the redrawn block. */
  private emit(text: string, persistent: boolean): void {
    if (this.live) this.redraw(persistent ? `${text}\n` : '');
    else this.writeText(`${text}\n`);
  }

  private clearBlock(): string {
    // Up to the first status line, then clear to the end of the screen.
    return this.drawn > 0 ? `\u001b[${this.drawn}F\u001b[J` : '';
  }

  private redraw(above: string): void {
    let out = this.clearBlock() + above;
    for (const [name, line] of this.boards) out += `${this.statusLine(name, line)}\n`;
    this.drawn = this.boards.size;
    // One write per update, so the terminal never shows a half-drawn block.
    this.writeText(out);
  }

  private statusLine(name: string, line: BoardLine): string {
    const counts = [
      `${GLYPH.passed} ${line.passed}`,
      line.failed > 0 ? this.paint(`${GLYPH.failed} ${line.failed}`, 'red') : `${GLYPH.failed} 0`,
    ];
    if (line.deviations > 0) counts.push(`${GLYPH['known-deviation']} ${line.deviations}`);
    if (line.skipped > 0) counts.push(`${GLYPH.skipped} ${line.skipped}`);
    const step = line.step === undefined ? 'waiting' : `${line.step} ${GLYPH[line.stepStatus]}`;
    const head = `${this.prefix(name)} ${step} · ${counts.join(' ')}`;
    // Measure without colours; truncate the free text, never the head.
    const room = this.columns - 1 - visibleLength(head) - 3;
    const tail = line.last === '' || room < 8 ? '' : ` · ${truncate(line.last, room)}`;
    return head + tail;
  }
}

export interface ConsoleSummaryOptions {
  readonly color?: boolean;
}

/**
 * The end-of-run summary: per board one line, then failures (board, check id, what was expected
 * and what came back), known deviations, deviations that disappeared, flaky results, counts and
 * what the exit code means.
 */
export function renderConsoleSummary(
  report: RunReport,
  options: ConsoleSummaryOptions = {},
): string {
  const color = options.color ?? false;
  const c = (text: string, tone: Tone | undefined): string => paint(text, tone, color);
  const out: string[] = [''];
  const found = findings(report);
  const verdict = headline(report);
  const tone: Tone =
    verdict.tone === 'passed' ? 'green' : verdict.tone === 'interrupted' ? 'yellow' : 'red';
  // The first failure leads: what follows on its board often comes from it.
  const cause = report.summary.rootCause;
  if (cause !== undefined)
    out.push(c(`Root cause: ${singleLine(rootCauseText(cause))}`, 'red'), '');

  for (const board of report.boards) {
    const glyph =
      board.status === 'passed'
        ? c(GLYPH.passed, 'green')
        : board.status === 'interrupted'
          ? c(GLYPH.interrupted, 'yellow')
          : c(GLYPH.failed, 'red');
    const what = [
      board.variant,
      versionText(board),
      board.port,
      board.transport === undefined ? undefined : `over ${transportText(board.transport)}`,
    ]
      .filter((v) => v !== undefined)
      .join(', ');
    out.push(
      `${glyph} ${board.name} ${boardStatusText(board)}${what === '' ? '' : ` (${what})`} in ${formatDuration(board.durationMs)}`,
    );
    // The image a board was flashed with, when it is not the run's one --firmware.
    if (board.image !== undefined && report.firmware === undefined)
      out.push(`    flashed: ${imageText(board.image)}`);
  }
  if (report.firmware !== undefined) out.push(`Flashed: ${imageText(report.firmware)}`);
  if (report.otaImage !== undefined) out.push(`OTA candidate: ${imageText(report.otaImage)}`);

  const rig = report.boards.flatMap((board) =>
    rigFailures(board).map((failure) => ({ board, failure })),
  );
  const failureCount = found.failed.length + rig.length;
  if (failureCount > 0) {
    out.push('', c(`Failures (${failureCount})`, 'red'));
    for (const { board, failure } of rig) {
      out.push(
        `  ${c(GLYPH.failed, 'red')} ${board.name}  rig.${failure.step}  ${failure.kind === 'rig' ? '' : `[${failure.kind}] `}${singleLine(failure.reason)}`,
      );
    }
    for (const { board, check } of found.failed) {
      out.push(`  ${c(GLYPH.failed, 'red')} ${board.name}  ${check.id}  [${check.severity}]`);
      out.push(`      ${singleLine(checkText(check))}`);
      if (check.retries > 0) out.push(`      failed on all ${check.retries + 1} attempts`);
    }
  }

  if (found.deviations.length > 0) {
    out.push('', c(`Known deviations (${found.deviations.length})`, 'yellow'));
    for (const { board, check } of found.deviations) {
      out.push(
        `  ${GLYPH['known-deviation']} ${board.name}  ${check.id}  ${singleLine(check.deviation?.reason ?? '')}`,
      );
      out.push(`      ${singleLine(checkText(check))}`);
    }
  }

  if (found.fixed.length > 0) {
    out.push(
      '',
      c(
        `Deviations that disappeared (${found.fixed.length}): remove them from the baseline file`,
        'yellow',
      ),
    );
    for (const { board, check } of found.fixed) {
      out.push(
        `  ${GLYPH.fixed} ${board.name}  ${check.id}  passes now (baseline: ${singleLine(check.deviation?.reason ?? '')})`,
      );
    }
  }

  if (found.flaky.length > 0) {
    out.push('', `Flaky (${found.flaky.length})`);
    for (const { board, check } of found.flaky) {
      out.push(
        `  ${GLYPH.flaky} ${board.name}  ${check.id}  passed after ${plural(check.retries, 'retry', 'retries')}`,
      );
    }
  }

  if (report.qualification !== undefined) out.push(renderQualificationText(report.qualification));
  if (report.comparison !== undefined) out.push(renderComparisonText(report.comparison));

  const s = report.summary;
  const boardsPassed = report.boards.filter((b) => b.status === 'passed').length;
  const boardsFailed = report.boards.filter((b) => b.status === 'failed').length;
  const boardsRigFailed = report.boards.filter((b) => b.status === 'rig-failed').length;
  const missing = report.qualification?.missing ?? [];
  out.push(
    '',
    `Boards: ${s.boards} (${boardsPassed} passed, ${boardsFailed} failed, ${plural(boardsRigFailed, 'rig failure')}${(s.interrupted ?? 0) > 0 ? `, ${s.interrupted} interrupted` : ''})${missing.length === 0 ? '' : `; no report from ${missing.map((rig) => `rig ${rig}`).join(', ')} (a rig failure each)`}`,
    `Checks: ${s.passed} passed, ${s.failed} failed, ${s.knownDeviations} known ${s.knownDeviations === 1 ? 'deviation' : 'deviations'}, ${s.skipped} skipped`,
  );
  if (report.interrupted) out.push(c('Interrupted: the reports hold what ran.', 'yellow'));
  out.push(`Ran on ${hostsText(report)} with ${report.tool.name} ${report.tool.version}`);
  out.push(c(`Result: ${singleLine(verdict.text)}`, tone));
  out.push(c(`Exit code ${report.exitCode}: ${EXIT_CODE_MEANING[report.exitCode]}`, tone), '');
  return out.join('\n');
}

function paint(text: string, tone: Tone | undefined, color: boolean): string {
  return color && tone !== undefined ? `\u001b[${ANSI[tone]}m${text}\u001b[0m` : text;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: stripping colours to measure.
const SGR = /\u001b\[[0-9;]*m/g;

function visibleLength(text: string): number {
  return [...text.replace(SGR, '')].length;
}

function truncate(text: string, max: number): string {
  const chars = [...text];
  return chars.length <= max ? text : `${chars.slice(0, Math.max(0, max - 1)).join('')}…`;
}
