/**
 * `hil compare BASE CANDIDATE` and `hil run --compare-to BASE` (docs/ci.md §1): two reports,
 * board by board (matched by name): check status changes, the tool-list diff, pages, latency
 * judged on the raw samples with the Mann-Whitney U test and a minimum effect size, boot time,
 * flash time, image size and the free heap the board reported in its OTA check.
 */
import type {
  BoardComparison,
  BoardReport,
  CheckResult,
  CompareThresholds,
  Comparison,
  ComparisonFinding,
  ComparisonSide,
  LatencyComparison,
  LatencyStats,
  MetricComparison,
  PageSize,
  RunReport,
  ToolSummary,
} from '../model.js';
import { checkChangeKind, DEFAULT_COMPARE_THRESHOLDS } from './rules.js';
import { mannWhitneyU, median } from './stats.js';

export interface CompareOptions {
  /** Overrides of the default thresholds (the inventory's `compare`). */
  readonly thresholds?: Partial<CompareThresholds>;
  readonly baseLabel: string;
  readonly candidateLabel: string;
}

function round(value: number, digits = 2): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}

function ms(value: number): string {
  if (!Number.isFinite(value)) return '?';
  if (Math.abs(value) >= 1000) return `${round(value / 1000, 2)} s`;
  return `${round(value, Math.abs(value) >= 10 ? 1 : 2)} ms`;
}

function bytes(value: number): string {
  if (Math.abs(value) >= 1024 * 1024) return `${round(value / 1024 / 1024, 2)} MiB`;
  if (Math.abs(value) >= 1024) return `${round(value / 1024, 1)} KiB`;
  return `${value} B`;
}

function percent(ratio: number): string {
  const change = (ratio - 1) * 100;
  return `${change >= 0 ? '+' : ''}${round(change, 1)}%`;
}

/** `1.2e-9`, `0.0034`: a p-value readable at any size. */
export function formatP(p: number): string {
  if (!Number.isFinite(p)) return '?';
  if (p === 0) return '0';
  return p < 0.001 ? p.toExponential(1) : String(round(p, 4));
}

function side(report: RunReport, label: string): ComparisonSide {
  return {
    label,
    startedAt: report.startedAt,
    exitCode: report.exitCode,
    ...(report.firmware === undefined ? {} : { firmware: report.firmware.version }),
  };
}

// ---- Checks ---------------------------------------------------------------------------------

function compareChecks(
  base: BoardReport,
  candidate: BoardReport,
  findings: ComparisonFinding[],
  notes: string[],
): void {
  const before = new Map(base.checks.map((c) => [c.id, c]));
  const after = new Map(candidate.checks.map((c) => [c.id, c]));
  const removed: CheckResult[] = [];
  const added: CheckResult[] = [];
  for (const check of candidate.checks) {
    const was = before.get(check.id);
    if (was === undefined) {
      added.push(check);
      continue;
    }
    if (was.status === check.status) continue;
    const kind = checkChangeKind(was.status, check.status);
    findings.push({
      kind,
      subject: 'check',
      id: `check ${check.id}`,
      text: `${check.id}: ${was.status} → ${check.status}${kind === 'regression' && check.message !== '' ? ` (${check.message})` : ''}`,
      base: was.status,
      candidate: check.status,
    });
  }
  for (const check of base.checks) if (!after.has(check.id)) removed.push(check);
  // A board whose rig failed on one side ran only some checks: one line, not one per check.
  if (candidate.failure !== undefined && removed.length > 0) {
    notes.push(
      `${removed.length} checks of the base did not run: the candidate stopped at ${candidate.failure.step} (${candidate.status})`,
    );
  } else {
    for (const check of removed) {
      findings.push({
        kind: 'change',
        subject: 'check',
        id: `check ${check.id}`,
        text: `${check.id}: not run by the candidate (was ${check.status})`,
        base: check.status,
      });
    }
  }
  if (base.failure !== undefined && added.length > 0) {
    notes.push(
      `${added.length} checks did not run in the base: it stopped at ${base.failure.step} (${base.status})`,
    );
  } else {
    for (const check of added) {
      findings.push({
        kind: 'change',
        subject: 'check',
        id: `check ${check.id}`,
        text: `${check.id}: new check (${check.status})`,
        candidate: check.status,
      });
    }
  }
}

// ---- Tools ----------------------------------------------------------------------------------

/** JSON with sorted keys, so two schemas compare by content. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) =>
      a < b ? -1 : a > b ? 1 : 0,
    );
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'undefined';
}

function record(value: unknown): Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

/** What changed in an input schema, in words: properties added, removed or changed, required. */
export function describeSchemaChange(
  before: Readonly<Record<string, unknown>>,
  after: Readonly<Record<string, unknown>>,
): string {
  const was = record(before.properties);
  const now = record(after.properties);
  const parts: string[] = [];
  const addedProps = Object.keys(now).filter((k) => !(k in was));
  const removedProps = Object.keys(was).filter((k) => !(k in now));
  const changedProps = Object.keys(now).filter(
    (k) => k in was && canonical(was[k]) !== canonical(now[k]),
  );
  if (addedProps.length > 0) parts.push(`argument ${addedProps.join(', ')} added`);
  if (removedProps.length > 0) parts.push(`argument ${removedProps.join(', ')} removed`);
  for (const k of changedProps) parts.push(`${k}: ${canonical(was[k])} → ${canonical(now[k])}`);
  if (canonical(before.required ?? []) !== canonical(after.required ?? [])) {
    parts.push(`required ${canonical(before.required ?? [])} → ${canonical(after.required ?? [])}`);
  }
  const rest = (schema: Readonly<Record<string, unknown>>) =>
    canonical({ ...schema, properties: undefined, required: undefined });
  if (rest(before) !== rest(after)) parts.push('schema changed outside its properties');
  return parts.length === 0 ? 'schema changed' : parts.join('; ');
}

function compareTools(
  base: readonly ToolSummary[],
  candidate: readonly ToolSummary[],
  findings: ComparisonFinding[],
): void {
  const before = new Map(base.map((t) => [t.name, t]));
  const after = new Map(candidate.map((t) => [t.name, t]));
  for (const tool of base) {
    if (after.has(tool.name)) continue;
    findings.push({
      kind: 'regression',
      subject: 'tool',
      id: `tool ${tool.name}`,
      text: `${tool.name}: removed (the base lists it)`,
      base: 'listed',
      candidate: 'missing',
    });
  }
  for (const tool of candidate) {
    const was = before.get(tool.name);
    if (was === undefined) {
      findings.push({
        kind: 'change',
        subject: 'tool',
        id: `tool ${tool.name}`,
        text: `${tool.name}: added${tool.userOnly ? ' (user-only)' : ''}`,
        base: 'missing',
        candidate: 'listed',
      });
      continue;
    }
    const changes: string[] = [];
    if (was.description !== tool.description) {
      changes.push(
        `description ${JSON.stringify(was.description)} → ${JSON.stringify(tool.description)}`,
      );
    }
    if (canonical(was.inputSchema) !== canonical(tool.inputSchema)) {
      changes.push(describeSchemaChange(was.inputSchema, tool.inputSchema));
    }
    if (was.userOnly !== tool.userOnly) {
      changes.push(tool.userOnly ? 'now user-only' : 'no longer user-only');
    }
    if (changes.length > 0) {
      findings.push({
        kind: 'change',
        subject: 'tool',
        id: `tool ${tool.name}`,
        text: `${tool.name}: ${changes.join('; ')}`,
      });
    }
  }
}

// ---- Pages ----------------------------------------------------------------------------------

type Walks = Readonly<Record<'plain' | 'withUserTools', readonly PageSize[]>>;

/**
 * The pages of a board's walks: the report's `pages`, else the figures the
 * `tools-list.page-budget` check recorded (reports from before `pages` existed).
 */
function pagesOf(board: BoardReport): Walks | undefined {
  if (board.pages !== undefined) return board.pages;
  const data = board.checks.find((c) => c.id === 'tools-list.page-budget')?.data;
  const pages = Array.isArray(data?.pages) ? (data.pages as Record<string, unknown>[]) : undefined;
  if (pages === undefined || pages.length === 0) return undefined;
  const of = (walk: string): PageSize[] =>
    pages
      .filter((p) => p.walk === walk)
      .map((p) => ({ tools: Number(p.tools), bytes: Number(p.budgetBytes) }));
  return { plain: of('plain walk'), withUserTools: of('user walk') };
}

function describePages(pages: readonly PageSize[]): string {
  const total = pages.reduce((sum, p) => sum + p.bytes, 0);
  const largest = Math.max(0, ...pages.map((p) => p.bytes));
  return `${pages.length} page${pages.length === 1 ? '' : 's'}, ${bytes(total)} (largest ${largest} B)`;
}

function comparePages(base: Walks, candidate: Walks, findings: ComparisonFinding[]): void {
  for (const [walk, label] of [
    ['plain', 'plain walk'],
    ['withUserTools', 'walk with user tools'],
  ] as const) {
    const was = describePages(base[walk]);
    const now = describePages(candidate[walk]);
    if (was === now) continue;
    findings.push({
      kind: 'change',
      subject: 'pages',
      id: `pages ${walk}`,
      text: `${label}: ${was} → ${now}`,
      base: was,
      candidate: now,
    });
  }
}

// ---- Latency --------------------------------------------------------------------------------

export function compareLatency(
  base: LatencyStats,
  candidate: LatencyStats,
  thresholds: CompareThresholds,
): LatencyComparison {
  const before = (base.valuesMs ?? []).filter(Number.isFinite);
  const after = (candidate.valuesMs ?? []).filter(Number.isFinite);
  const baseMedianMs = median(before);
  const candidateMedianMs = median(after);
  const slower = mannWhitneyU(after, before, { alternative: 'greater' });
  const faster = mannWhitneyU(after, before, { alternative: 'less' });
  const ratio = candidateMedianMs / baseMedianMs;
  const deltaMs = candidateMedianMs - baseMedianMs;
  let verdict: LatencyComparison['verdict'] = 'same';
  if (before.length < thresholds.latencyMinSamples || after.length < thresholds.latencyMinSamples) {
    verdict = 'too-few-samples';
  } else if (
    slower.p < thresholds.latencyPValue &&
    ratio >= thresholds.latencyMinRatio &&
    deltaMs >= thresholds.latencyMinMs
  ) {
    verdict = 'slower';
  } else if (
    faster.p < thresholds.latencyPValue &&
    baseMedianMs / candidateMedianMs >= thresholds.latencyMinRatio &&
    -deltaMs >= thresholds.latencyMinMs
  ) {
    verdict = 'faster';
  }
  return {
    method: candidate.method,
    baseSamples: before.length,
    candidateSamples: after.length,
    baseMedianMs: round(baseMedianMs, 3),
    candidateMedianMs: round(candidateMedianMs, 3),
    ratio: round(ratio, 4),
    deltaMs: round(deltaMs, 3),
    u: slower.u,
    pSlower: slower.p,
    pFaster: faster.p,
    verdict,
  };
}

/** `median 40.1 ms → 48.2 ms (+20.2%, +8.1 ms), p = 1.2e-12, n 50/50`. */
export function describeLatency(l: LatencyComparison): string {
  const p = l.deltaMs >= 0 ? l.pSlower : l.pFaster;
  const delta = `${l.deltaMs >= 0 ? '+' : ''}${ms(l.deltaMs)}`;
  return `median ${ms(l.baseMedianMs)} → ${ms(l.candidateMedianMs)} (${percent(l.ratio)}, ${delta}), Mann-Whitney p = ${formatP(p)}, n ${l.baseSamples}/${l.candidateSamples}`;
}

// ---- Single figures -------------------------------------------------------------------------

function stepMs(board: BoardReport, step: 'boot' | 'flash'): number | undefined {
  const found = board.steps.find((s) => s.step === step);
  return found?.status === 'passed' && Number.isFinite(found.durationMs)
    ? found.durationMs
    : undefined;
}

/** `minimum_free_heap_size` of the OTA request (firmware sends a string; older ones a number). */
export function minimumFreeHeap(board: BoardReport): number | undefined {
  const value = board.otaRequest?.minimum_free_heap_size;
  const n = typeof value === 'string' ? Number(value.trim()) : value;
  return typeof n === 'number' && Number.isFinite(n) && n >= 0 ? n : undefined;
}

interface MetricRule {
  readonly metric: MetricComparison['metric'];
  readonly unit: MetricComparison['unit'];
  readonly label: string;
  readonly value: (board: BoardReport) => number | undefined;
  /** Larger is worse (times, sizes), or smaller is worse (free heap). */
  readonly worse: 'larger' | 'smaller';
  readonly minRatio: (t: CompareThresholds) => number;
  readonly minDelta: (t: CompareThresholds) => number;
}

const METRICS: readonly MetricRule[] = [
  {
    metric: 'boot',
    unit: 'ms',
    label: 'boot time',
    value: (b) => stepMs(b, 'boot'),
    worse: 'larger',
    minRatio: (t) => t.bootMinRatio,
    minDelta: (t) => t.bootMinMs,
  },
  {
    metric: 'flash',
    unit: 'ms',
    label: 'flash time',
    value: (b) => stepMs(b, 'flash'),
    worse: 'larger',
    minRatio: (t) => t.flashMinRatio,
    minDelta: (t) => t.flashMinMs,
  },
  {
    metric: 'image',
    unit: 'bytes',
    label: 'image size',
    value: (b) => b.image?.bytes,
    worse: 'larger',
    minRatio: (t) => t.imageMinRatio,
    minDelta: (t) => t.imageMinBytes,
  },
  {
    metric: 'heap',
    unit: 'bytes',
    label: 'minimum free heap',
    value: minimumFreeHeap,
    worse: 'smaller',
    minRatio: (t) => t.heapMinRatio,
    minDelta: (t) => t.heapMinBytes,
  },
];

function compareMetric(
  rule: MetricRule,
  base: BoardReport,
  candidate: BoardReport,
  thresholds: CompareThresholds,
  findings: ComparisonFinding[],
): MetricComparison {
  const was = rule.value(base);
  const now = rule.value(candidate);
  const shown = (v: number) => (rule.unit === 'ms' ? ms(v) : bytes(v));
  if (was === undefined || now === undefined) {
    return {
      metric: rule.metric,
      unit: rule.unit,
      base: was,
      candidate: now,
      verdict: 'not-compared',
    };
  }
  // How much worse the candidate is: a ratio above 1 and a positive delta are worse.
  const [worse, better] = rule.worse === 'larger' ? [now, was] : [was, now];
  const ratio = worse / better;
  const delta = worse - better;
  const beyond = (r: number, d: number) =>
    r >= rule.minRatio(thresholds) && d >= rule.minDelta(thresholds);
  let verdict: MetricComparison['verdict'] = 'same';
  if (beyond(ratio, delta)) verdict = 'worse';
  else if (beyond(1 / ratio, -delta)) verdict = 'better';
  if (verdict !== 'same') {
    findings.push({
      kind: verdict === 'worse' ? 'regression' : 'improvement',
      subject: rule.metric,
      id: rule.metric,
      text: `${rule.label}: ${shown(was)} → ${shown(now)} (${percent(now / was)})`,
      base: shown(was),
      candidate: shown(now),
    });
  }
  return { metric: rule.metric, unit: rule.unit, base: was, candidate: now, verdict };
}

// ---- Boards ---------------------------------------------------------------------------------

function summaryOf(board: BoardReport): NonNullable<BoardComparison['base']> {
  return {
    status: board.status,
    ...(board.firmwareVersion === undefined ? {} : { firmwareVersion: board.firmwareVersion }),
  };
}

function compareBoard(
  base: BoardReport,
  candidate: BoardReport,
  thresholds: CompareThresholds,
): BoardComparison {
  const findings: ComparisonFinding[] = [];
  const notes: string[] = [];
  compareChecks(base, candidate, findings, notes);
  if (base.status !== candidate.status) {
    // The checks' own changes say why a board fails now; a failure no check names (a panic) is
    // the board's own regression.
    const unexplained =
      candidate.status === 'failed' &&
      base.status !== 'failed' &&
      !findings.some((f) => f.kind === 'regression');
    findings.unshift({
      kind: unexplained ? 'regression' : 'change',
      subject: 'board',
      id: 'board',
      text: `board ${base.status} → ${candidate.status}${candidate.failure ? ` (at ${candidate.failure.step}: ${candidate.failure.reason})` : ''}`,
      base: base.status,
      candidate: candidate.status,
    });
  }

  if (base.tools !== undefined && candidate.tools !== undefined) {
    compareTools(base.tools, candidate.tools, findings);
  } else {
    notes.push(
      `tool lists not compared: the ${base.tools === undefined ? 'base' : 'candidate'} report has none`,
    );
  }

  const basePages = pagesOf(base);
  const candidatePages = pagesOf(candidate);
  if (basePages !== undefined && candidatePages !== undefined) {
    comparePages(basePages, candidatePages, findings);
  }

  const latency: LatencyComparison[] = [];
  for (const after of candidate.latency) {
    const before = base.latency.find((l) => l.method === after.method);
    if (before === undefined) {
      notes.push(`${after.method}: no latency in the base`);
      continue;
    }
    const result = compareLatency(before, after, thresholds);
    latency.push(result);
    if (result.verdict === 'too-few-samples') {
      notes.push(
        `${after.method}: ${result.baseSamples}/${result.candidateSamples} samples, fewer than ${thresholds.latencyMinSamples}: not judged`,
      );
    } else if (result.verdict !== 'same') {
      findings.push({
        kind: result.verdict === 'slower' ? 'regression' : 'improvement',
        subject: 'latency',
        id: `latency ${after.method}`,
        text: `${after.method} ${result.verdict}: ${describeLatency(result)}`,
        base: ms(result.baseMedianMs),
        candidate: ms(result.candidateMedianMs),
      });
    }
  }
  for (const before of base.latency) {
    if (!candidate.latency.some((l) => l.method === before.method))
      notes.push(`${before.method}: no latency in the candidate`);
  }

  const metrics = METRICS.map((rule) => compareMetric(rule, base, candidate, thresholds, findings));
  return {
    board: candidate.name,
    base: summaryOf(base),
    candidate: summaryOf(candidate),
    findings,
    latency,
    metrics,
    notes,
  };
}

function onlyOnOneSide(board: BoardReport, where: 'base' | 'candidate'): BoardComparison {
  const text =
    where === 'base'
      ? 'not in the candidate report (not qualified: run it with this board)'
      : 'new board: not in the base report';
  return {
    board: board.name,
    [where]: summaryOf(board),
    findings: [{ kind: 'change', subject: 'board', id: 'board', text }],
    latency: [],
    metrics: [],
    notes: [],
  };
}

export function resolveThresholds(overrides?: Partial<CompareThresholds>): CompareThresholds {
  const defined = Object.entries(overrides ?? {}).filter(([, v]) => v !== undefined);
  return { ...DEFAULT_COMPARE_THRESHOLDS, ...Object.fromEntries(defined) };
}

/** Compares two reports board by board; the result's exit code is `hil compare`'s. */
export function compareReports(
  base: RunReport,
  candidate: RunReport,
  options: CompareOptions,
): Comparison {
  const thresholds = resolveThresholds(options.thresholds);
  const boards: BoardComparison[] = [];
  for (const board of candidate.boards) {
    const before = base.boards.find((b) => b.name === board.name);
    boards.push(
      before === undefined
        ? onlyOnOneSide(board, 'candidate')
        : compareBoard(before, board, thresholds),
    );
  }
  for (const board of base.boards) {
    if (!candidate.boards.some((b) => b.name === board.name))
      boards.push(onlyOnOneSide(board, 'base'));
  }
  const all = boards.flatMap((b) => b.findings);
  const count = (kind: ComparisonFinding['kind']) => all.filter((f) => f.kind === kind).length;
  const regressions = count('regression');
  const rigFailed =
    candidate.interrupted ||
    candidate.boards.some((b) => b.status !== 'passed' && b.status !== 'failed');
  return {
    base: side(base, options.baseLabel),
    candidate: side(candidate, options.candidateLabel),
    thresholds,
    boards,
    regressions,
    improvements: count('improvement'),
    changes: count('change'),
    exitCode: rigFailed ? 3 : regressions > 0 ? 1 : 0,
  };
}
