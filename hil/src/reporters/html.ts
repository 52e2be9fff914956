/**
 * One self-contained HTML file (inline CSS, inline SVG, a few lines of inline JS, nothing
 * fetched), so it can be attached to a CI run and opened anywhere, offline. Elements carry
 * `data-testid` attributes so a browser test can check that boards and results render.
 */
import { renderComparisonHtml } from '../compare/render.js';
import { renderQualificationHtml } from '../merge.js';
import {
  type BoardReport,
  type CheckResult,
  headline,
  type LatencyStats,
  type RigStep,
  type RunReport,
} from '../model.js';
import { escapeHtml } from './escape.js';
import {
  boardStatusText,
  checkText,
  EXIT_CODE_MEANING,
  formatDuration,
  formatMs,
  hostsText,
  imageText,
  isFixedDeviation,
  isFlaky,
  isMeasured,
  orderChecks,
  pingText,
  rootCauseText,
  transportText,
} from './format.js';

const h = escapeHtml;

/**
 * A link to an artefact, relative to the report: every segment is percent-encoded, so a name
 * such as `javascript:x` stays a relative path and spaces or `#` cannot break the URL.
 */
export function artefactHref(path: string): string {
  return path.replace(/\\/g, '/').split('/').map(encodeURIComponent).join('/');
}

const STATUS_LABEL: Readonly<Record<CheckResult['status'], string>> = {
  passed: 'passed',
  failed: 'failed',
  skipped: 'skipped',
  'known-deviation': 'known deviation',
};

function checkClass(check: CheckResult): string {
  if (isFixedDeviation(check)) return 'fixed';
  if (isFlaky(check)) return 'flaky';
  return check.status;
}

// ---- Latency plots --------------------------------------------------------------------------

const PLOT = { width: 560, height: 240, left: 56, right: 112, top: 14, bottom: 34 } as const;

/** Round axis ticks (1, 2, 5 × 10^n) covering 0..max. */
function ticks(max: number, count = 5): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 5, 10].find((m) => m * magnitude >= raw) ?? 10) * magnitude;
  const out: number[] = [];
  for (let v = 0; v <= max + step * 1e-9; v += step) out.push(Number.parseFloat(v.toPrecision(12)));
  if ((out[out.length - 1] ?? 0) < max)
    out.push(Number.parseFloat((out.length * step).toPrecision(12)));
  return out;
}

function f(n: number): string {
  return Number.isFinite(n) ? n.toFixed(1) : '0';
}

function axisLabel(ms: number): string {
  return ms >= 1000 ? `${ms / 1000} s` : `${ms} ms`;
}

/** Height of a label line in the plots (11 px text), the least distance between two labels. */
export const LABEL_GAP = 13;

/**
 * Positions for labels that want to sit at `wanted` (y, in any order): each as near its wish
 * as the others allow, at least `gap` apart, within `lo`..`hi`, in the same order as wished.
 */
export function spreadLabels(
  wanted: readonly number[],
  gap: number,
  lo: number,
  hi: number,
): number[] {
  const order = wanted.map((y, i) => ({ y, i })).sort((a, b) => a.y - b.y || a.i - b.i);
  const placed: number[] = [];
  // Downwards: each below the one above it.
  for (const [k, item] of order.entries()) {
    const above = placed[k - 1];
    placed.push(Math.max(item.y, lo, above === undefined ? lo : above + gap));
  }
  // Upwards: the ones pushed past the bottom move up, and push the ones above them.
  for (let k = placed.length - 1; k >= 0; k--) {
    const below = placed[k + 1];
    placed[k] = Math.min(placed[k] ?? hi, below === undefined ? hi : below - gap);
  }
  const out = new Array<number>(wanted.length).fill(lo);
  order.forEach((item, k) => {
    out[item.i] = placed[k] ?? lo;
  });
  return out;
}

/**
 * Sorted samples against their percentile rank (a quantile curve): the shape of the tail shows
 * at once, with p50/p90/p99 marked and the ping round trip drawn as a floor for comparison.
 */
function quantilePlot(stats: LatencyStats, title: string): string {
  const sorted = [...stats.valuesMs].filter(Number.isFinite).sort((a, b) => a - b);
  const { width, height, left, right, top, bottom } = PLOT;
  const plotW = width - left - right;
  const plotH = height - top - bottom;
  // Only measured figures set the scale: one that is absent (no ping over MQTT) or NaN (a
  // report from an older hil) would make the axis 0–1 ms.
  const yTicks = ticks(
    Math.max(...[stats.maxMs, stats.pingP99Ms, sorted.at(-1)].filter(isMeasured), 0) * 1.05,
  );
  const yMax = yTicks[yTicks.length - 1] ?? 1;
  const x = (rank: number): number => left + (rank / 100) * plotW;
  const y = (ms: number): number => top + plotH - (Math.min(ms, yMax) / yMax) * plotH;

  const parts: string[] = [];
  for (const t of yTicks) {
    parts.push(
      `<line class="grid" x1="${left}" x2="${left + plotW}" y1="${f(y(t))}" y2="${f(y(t))}"/>`,
      `<text class="tick" x="${left - 6}" y="${f(y(t) + 4)}" text-anchor="end">${h(axisLabel(t))}</text>`,
    );
  }
  for (const rank of [0, 25, 50, 75, 100]) {
    parts.push(
      `<text class="tick" x="${f(x(rank))}" y="${height - bottom + 16}" text-anchor="middle">p${rank}</text>`,
    );
  }
  parts.push(
    `<text class="axis" x="${f(left + plotW / 2)}" y="${height - 4}" text-anchor="middle">percentile rank of ${sorted.length} samples</text>`,
    `<line class="frame" x1="${left}" x2="${left}" y1="${top}" y2="${top + plotH}"/>`,
    `<line class="frame" x1="${left}" x2="${left + plotW}" y1="${top + plotH}" y2="${top + plotH}"/>`,
  );

  // The labels right of the plot, each at the height of what it names (a percentile's dot, a
  // ping line), spread so that none overlaps another however close their values are.
  const labels: { cls: string; text: string; ms: number }[] = [];
  for (const [label, ms] of [
    ['p50', stats.p50Ms],
    ['p90', stats.p90Ms],
    ['p99', stats.p99Ms],
  ] as const) {
    if (Number.isFinite(ms))
      labels.push({ cls: 'marker-label', text: `${label} ${formatMs(ms)}`, ms });
  }
  for (const [label, ms] of [
    ['ping p50', stats.pingP50Ms],
    ['ping p99', stats.pingP99Ms],
  ] as const) {
    if (isMeasured(ms)) labels.push({ cls: 'ping-label', text: `${label} ${formatMs(ms)}`, ms });
  }
  const labelY = spreadLabels(
    labels.map((l) => y(l.ms) + 4),
    LABEL_GAP,
    top + 10,
    top + plotH + 4,
  );

  // Ping first, so the samples draw over it.
  for (const [label, ms] of [
    ['ping p50', stats.pingP50Ms],
    ['ping p99', stats.pingP99Ms],
  ] as const) {
    if (!isMeasured(ms)) continue;
    parts.push(
      `<line class="ping" x1="${left}" x2="${left + plotW}" y1="${f(y(ms))}" y2="${f(y(ms))}"><title>${h(`${label} ${formatMs(ms)}`)}</title></line>`,
    );
  }

  if (sorted.length > 0) {
    const points = sorted.map((ms, i) => `${f(x(((i + 0.5) / sorted.length) * 100))},${f(y(ms))}`);
    parts.push(`<polyline class="curve" points="${points.join(' ')}"/>`);
    if (sorted.length <= 300) {
      for (const point of points) {
        const [cx, cy] = point.split(',');
        parts.push(`<circle class="sample" cx="${cx}" cy="${cy}" r="1.8"/>`);
      }
    }
  }

  const marks = [
    ['p50', 50, stats.p50Ms],
    ['p90', 90, stats.p90Ms],
    ['p99', 99, stats.p99Ms],
  ] as const;
  for (const [label, rank, ms] of marks) {
    if (!Number.isFinite(ms)) continue;
    parts.push(
      `<line class="marker" x1="${f(x(rank))}" x2="${f(x(rank))}" y1="${top}" y2="${top + plotH}"/>`,
      `<circle class="marker-dot" cx="${f(x(rank))}" cy="${f(y(ms))}" r="3.5"><title>${h(`${label} ${formatMs(ms)}`)}</title></circle>`,
    );
  }
  labels.forEach((label, i) => {
    parts.push(
      `<text class="${label.cls}" x="${left + plotW + 6}" y="${f(labelY[i] ?? top)}">${h(label.text)}</text>`,
    );
  });

  return [
    `<svg class="plot" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="${h(title)}">`,
    `<title>${h(title)}</title>`,
    ...parts,
    '</svg>',
  ].join('');
}

/** Where the samples fall between min and max, with the percentiles and ping p50 marked. */
function histogram(stats: LatencyStats): string {
  const values = stats.valuesMs.filter(Number.isFinite);
  if (values.length === 0) return '';
  const width = 300;
  const height = 240;
  const left = 10;
  const top = 14;
  const plotW = width - 2 * left;
  const plotH = height - top - 34;
  const lo = Math.min(...values, ...[stats.pingP50Ms].filter(isMeasured));
  const hi = Math.max(...values);
  const bins = Math.max(5, Math.min(30, Math.ceil(Math.sqrt(values.length)) + 2));
  const span = hi - lo || 1;
  const counts = new Array<number>(bins).fill(0);
  for (const v of values) {
    const bin = Math.min(bins - 1, Math.floor(((v - lo) / span) * bins));
    counts[bin] = (counts[bin] ?? 0) + 1;
  }
  const most = Math.max(...counts, 1);
  const x = (ms: number): number => left + ((ms - lo) / span) * plotW;
  const barW = plotW / bins;
  const parts = counts.map((count, i) => {
    const barH = (count / most) * plotH;
    const from = lo + (i * span) / bins;
    const to = lo + ((i + 1) * span) / bins;
    return `<rect class="bar" x="${f(left + i * barW + 0.5)}" y="${f(top + plotH - barH)}" width="${f(Math.max(barW - 1, 0.5))}" height="${f(barH)}"><title>${h(`${formatMs(from)}–${formatMs(to)}: ${count}`)}</title></rect>`;
  });
  for (const [label, ms, cls] of [
    ['p50', stats.p50Ms, 'marker'],
    ['p90', stats.p90Ms, 'marker'],
    ['p99', stats.p99Ms, 'marker'],
    ['ping p50', stats.pingP50Ms, 'ping'],
  ] as const) {
    if (!isMeasured(ms)) continue;
    parts.push(
      `<line class="${cls}" x1="${f(x(ms))}" x2="${f(x(ms))}" y1="${top}" y2="${top + plotH}"><title>${h(`${label} ${formatMs(ms)}`)}</title></line>`,
    );
  }
  parts.push(
    `<line class="frame" x1="${left}" x2="${left + plotW}" y1="${top + plotH}" y2="${top + plotH}"/>`,
    `<text class="tick" x="${left}" y="${top + plotH + 16}">${h(formatMs(lo))}</text>`,
    `<text class="tick" x="${left + plotW}" y="${top + plotH + 16}" text-anchor="end">${h(formatMs(hi))}</text>`,
    `<text class="axis" x="${left + plotW / 2}" y="${height - 4}" text-anchor="middle">histogram (${bins} bins)</text>`,
  );
  const title = `${stats.method}: histogram of ${values.length} samples`;
  return [
    `<svg class="histogram" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="${h(title)}">`,
    `<title>${h(title)}</title>`,
    ...parts,
    '</svg>',
  ].join('');
}

function latencyFigure(board: BoardReport, stats: LatencyStats): string {
  const title = `${board.name}: ${stats.method}, latency by percentile`;
  const figures = (
    [
      ['min', stats.minMs],
      ['p50', stats.p50Ms],
      ['p90', stats.p90Ms],
      ['p99', stats.p99Ms],
      ['max', stats.maxMs],
    ] as const
  )
    .filter(([, ms]) => isMeasured(ms))
    .map(([label, ms]) => `${label} ${formatMs(ms)}`);
  const caption = `${stats.samples} samples: ${figures.join(', ')}; ${pingText(board, stats)}`;
  const body =
    stats.valuesMs.length === 0
      ? '<p class="empty">no samples recorded</p>'
      : `<div class="plots">${quantilePlot(stats, title)}${histogram(stats)}</div>`;
  return [
    `<figure class="latency" data-testid="latency-plot" data-method="${h(stats.method)}">`,
    `<h4><code>${h(stats.method)}</code></h4>`,
    body,
    `<figcaption>${h(caption)}</figcaption>`,
    '</figure>',
  ].join('\n');
}

// ---- Board cards ----------------------------------------------------------------------------

function identity(board: BoardReport): string {
  const mismatch =
    board.firmwareVersion !== undefined &&
    board.expectedVersion !== undefined &&
    board.firmwareVersion !== board.expectedVersion;
  const rows: [string, string | undefined, (string | undefined)?][] = [
    ['Name', board.name],
    ['Kind', board.kind],
    ['Variant', board.variant],
    ['Chip', board.chip],
    ['MAC', board.mac],
    ['Port', board.port],
    ['Transport', board.transport === undefined ? undefined : transportText(board.transport)],
    ['Firmware version', board.firmwareVersion, mismatch ? 'bad' : undefined],
    ['Expected version', board.expectedVersion],
    ['After ota-upgrade', board.upgradedVersion],
    ['Flashed image', board.image === undefined ? undefined : imageText(board.image)],
    ['Image SHA-256', board.image?.sha256],
    ['Started', board.startedAt],
    ['Duration', formatDuration(board.durationMs)],
  ];
  return [
    '<dl class="identity">',
    ...rows.map(
      ([term, value, cls]) =>
        `<div${cls === undefined ? '' : ` class="${cls}"`}><dt>${h(term)}</dt><dd>${value === undefined ? '<span class="none">–</span>' : h(value)}</dd></div>`,
    ),
    '</dl>',
  ].join('\n');
}

function steps(board: BoardReport): string {
  if (board.steps.length === 0) return '<p class="empty">no rig steps recorded</p>';
  const longest = Math.max(...board.steps.map((s) => s.durationMs), 1);
  const row = (s: RigStep): string => {
    const note = [s.message ?? '', s.flaky === true ? 'flaky: passed on a retry' : '']
      .filter((n) => n !== '')
      .join('; ');
    const share = Math.max(0.5, (s.durationMs / longest) * 100);
    return (
      `<tr class="step ${s.status}${s.flaky === true ? ' flaky' : ''}" data-testid="step-row" data-step="${h(s.step)}">` +
      `<td>${h(s.step)}</td><td><span class="pill ${s.status}">${h(s.status)}</span></td>` +
      `<td class="num">${h(formatDuration(s.durationMs))}</td>` +
      `<td class="timeline"><span class="bar" style="width:${share.toFixed(1)}%"></span></td>` +
      `<td>${h(note)}</td></tr>`
    );
  };
  return [
    '<table class="steps"><thead><tr><th>Step</th><th>Status</th><th>Time</th><th class="timeline">Share</th><th>Note</th></tr></thead><tbody>',
    ...board.steps.map(row),
    '</tbody></table>',
  ].join('\n');
}

function checkRow(check: CheckResult): string {
  const cls = checkClass(check);
  const notes: string[] = [];
  if (check.status === 'known-deviation' && check.deviation !== undefined) {
    notes.push(`<div class="note">known deviation: ${h(check.deviation.reason)}</div>`);
  }
  if (isFixedDeviation(check) && check.deviation !== undefined) {
    notes.push(
      `<div class="note">deviation no longer occurs (${h(check.deviation.reason)}): update the baseline</div>`,
    );
  }
  if (isFlaky(check))
    notes.push(
      `<div class="note">flaky: passed after ${check.retries} ${check.retries === 1 ? 'retry' : 'retries'}</div>`,
    );
  if (check.status === 'failed' && check.retries > 0) {
    notes.push(`<div class="note">failed on all ${check.retries + 1} attempts</div>`);
  }
  const detail: string[] = [];
  if (check.expected !== undefined)
    detail.push(`<dt>expected</dt><dd><code>${h(check.expected)}</code></dd>`);
  if (check.actual !== undefined)
    detail.push(`<dt>actual</dt><dd><code>${h(check.actual)}</code></dd>`);
  const label =
    cls === 'fixed'
      ? 'passed (fixed)'
      : cls === 'flaky'
        ? 'passed (flaky)'
        : STATUS_LABEL[check.status];
  return (
    `<tr class="check-row ${cls}" data-testid="check-row" data-check-id="${h(check.id)}" data-status="${check.status}">` +
    `<td data-testid="check-status"><span class="pill ${cls}">${h(label)}</span></td>` +
    `<td><code class="check-id">${h(check.id)}</code><div class="desc">${h(check.description)}</div></td>` +
    // Severity is coloured only on a failure: a red `critical` beside a pass reads as a failure.
    `<td class="severity${check.status === 'failed' ? ` ${check.severity}` : ''}" data-testid="check-severity">${h(check.severity)}</td>` +
    `<td class="message"><div>${h(checkText(check))}</div>${detail.length > 0 ? `<dl class="diff">${detail.join('')}</dl>` : ''}${notes.join('')}</td>` +
    `<td class="num">${h(formatDuration(check.durationMs))}</td></tr>`
  );
}

function checks(board: BoardReport): string {
  if (board.checks.length === 0) return '<p class="empty">no checks ran</p>';
  return [
    '<table class="checks"><thead><tr><th>Status</th><th>Check</th><th>Severity</th><th>Message</th><th>Time</th></tr></thead><tbody>',
    ...orderChecks(board.checks).map(checkRow),
    '</tbody></table>',
  ].join('\n');
}

function boardCard(board: BoardReport, index: number): string {
  const counts = {
    passed: board.checks.filter((c) => c.status === 'passed').length,
    failed: board.checks.filter((c) => c.status === 'failed').length,
    deviations: board.checks.filter((c) => c.status === 'known-deviation').length,
    skipped: board.checks.filter((c) => c.status === 'skipped').length,
  };
  const links = [
    board.consoleLog === undefined
      ? ''
      : `<a href="${h(artefactHref(board.consoleLog))}">console log</a>`,
    board.transcript === undefined
      ? ''
      : `<a href="${h(artefactHref(board.transcript))}">transcript</a>`,
    board.replica === undefined ? '' : `<a href="${h(artefactHref(board.replica))}">replica</a>`,
  ].filter((l) => l !== '');
  const status = board.status === 'rig-failed' ? 'rig failed' : board.status;
  const failure =
    board.failure === undefined
      ? ''
      : board.status === 'interrupted'
        ? `<p class="rig-failure interrupted" data-testid="rig-failure">Interrupted (Ctrl-C) at <b>${h(board.failure.step)}</b>: the board's verdict is unknown.</p>`
        : `<p class="rig-failure" data-testid="rig-failure">The rig failed at <b>${h(board.failure.step)}</b>: ${h(board.failure.reason)}</p>`;
  return [
    `<section class="board ${board.status}" id="board-${index}" data-testid="board-card" data-board="${h(board.name)}" data-status="${board.status}">`,
    `<h2><span class="pill ${board.status}">${h(status)}</span> <span data-testid="board-name">${h(board.name)}</span>`,
    `<span class="counts">${counts.passed} passed · ${counts.failed} failed · ${counts.deviations} known deviations · ${counts.skipped} skipped</span></h2>`,
    failure,
    identity(board),
    links.length === 0 ? '' : `<p class="files">Files: ${links.join(' · ')}</p>`,
    '<h3>Rig steps</h3>',
    steps(board),
    '<h3>Checks</h3>',
    checks(board),
    board.latency.length === 0 ? '' : '<h3>Latency</h3>',
    ...board.latency.map((stats) => latencyFigure(board, stats)),
    '</section>',
  ]
    .filter((part) => part !== '')
    .join('\n');
}

// ---- Page -----------------------------------------------------------------------------------

function summary(report: RunReport): string {
  const s = report.summary;
  const facts: [string, string | undefined][] = [
    ['Started', report.startedAt],
    ['Duration', formatDuration(report.durationMs)],
    ['Rig', report.rig],
    ['Suites', report.suites.join(', ')],
    ['OTA endpoint', report.server.ota],
    ['WebSocket', report.server.websocket],
    ['Flashed', report.firmware === undefined ? undefined : imageText(report.firmware)],
    ['SHA-256', report.firmware?.sha256],
    ['OTA candidate', report.otaImage === undefined ? undefined : imageText(report.otaImage)],
    ['OTA candidate SHA-256', report.otaImage?.sha256],
    ['Host', hostsText(report)],
    ['Tool', `${report.tool.name} ${report.tool.version}`],
  ];
  const tiles: [string, number, string][] = [
    ['boards', s.boards, ''],
    ['checks passed', s.passed, 'passed'],
    ['checks failed', s.failed, s.failed > 0 ? 'failed' : ''],
    ['known deviations', s.knownDeviations, s.knownDeviations > 0 ? 'known-deviation' : ''],
    ['deviations fixed', s.fixedDeviations, s.fixedDeviations > 0 ? 'fixed' : ''],
    ['skipped', s.skipped, ''],
    ['rig failures', s.rigFailures, s.rigFailures > 0 ? 'failed' : ''],
    ...((s.interrupted ?? 0) > 0
      ? [['interrupted', s.interrupted ?? 0, 'interrupted'] as [string, number, string]]
      : []),
  ];
  const verdict = headline(report);
  const cause = s.rootCause;
  return [
    `<header class="summary ${verdict.tone === 'passed' ? 'ok' : verdict.tone === 'interrupted' ? 'interrupted' : 'bad'}" data-testid="run-summary" data-exit-code="${report.exitCode}">`,
    `<h1>hil run: <span class="exit" data-testid="exit-code">exit ${report.exitCode}</span></h1>`,
    `<p class="result" data-testid="headline">${h(verdict.text)}</p>`,
    // The first failure, before anything else: what follows on its board often comes from it.
    cause === undefined
      ? ''
      : `<p class="root-cause" data-testid="root-cause"><b>Root cause:</b> ${h(rootCauseText(cause))}</p>`,
    `<p class="meaning">Exit code ${report.exitCode}: ${h(EXIT_CODE_MEANING[report.exitCode])}.${report.interrupted ? ' <b>Interrupted</b>: the report holds what ran.' : ''}</p>`,
    '<ul class="tiles">',
    ...tiles.map(([label, value, cls]) => `<li class="${cls}"><b>${value}</b> ${h(label)}</li>`),
    '</ul>',
    '<nav class="board-nav">',
    ...report.boards.map(
      (b, i) =>
        `<a href="#board-${i}" class="pill ${b.status}" data-testid="board-link">${h(b.name)}: ${h(boardStatusText(b))}</a>`,
    ),
    '</nav>',
    '<dl class="facts">',
    ...facts
      .filter((entry): entry is [string, string] => entry[1] !== undefined)
      .map(([term, value]) => `<div><dt>${h(term)}</dt><dd>${h(value)}</dd></div>`),
    '</dl>',
    '<label class="filter"><input type="checkbox" id="only-problems"> show only problems</label>',
    '</header>',
  ]
    .filter((line) => line !== '')
    .join('\n');
}

const CSS = `
:root{--bg:#f7f7f8;--card:#fff;--fg:#1d1d1f;--muted:#6b6b76;--line:#dcdce3;--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--info:#0969da;--curve:#0969da;--ping:#8250df}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--card:#161b22;--fg:#e6edf3;--muted:#8d96a0;--line:#30363d;--ok:#3fb950;--bad:#f85149;--warn:#d29922;--info:#58a6ff;--curve:#58a6ff;--ping:#bc8cff}}
*{box-sizing:border-box}
body{margin:0;padding:24px;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
h1{margin:0 0 4px;font-size:22px}h2{margin:0 0 12px;font-size:18px;display:flex;gap:8px;align-items:center;flex-wrap:wrap}h3{margin:20px 0 8px;font-size:15px}h4{margin:0 0 6px;font-size:13px}
code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;word-break:break-word}
.summary,.board{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:16px 20px;margin:0 auto 20px;max-width:1200px}
.summary.ok{border-top:4px solid var(--ok)}.summary.bad,.board.failed,.board.rig-failed{border-top:4px solid var(--bad)}.board.passed{border-top:4px solid var(--ok)}
.summary.ok .exit{color:var(--ok)}.summary.bad .exit{color:var(--bad)}.summary.interrupted{border-top:4px solid var(--warn)}.summary.interrupted .exit{color:var(--warn)}
.result{font-size:15px;margin:4px 0}.meaning{color:var(--muted);margin:0 0 12px}
.tiles{display:flex;flex-wrap:wrap;gap:8px;list-style:none;padding:0;margin:0 0 12px}.tiles li{border:1px solid var(--line);border-radius:8px;padding:6px 10px;color:var(--muted)}.tiles b{color:var(--fg);font-size:16px}
.tiles li.failed b{color:var(--bad)}.tiles li.passed b{color:var(--ok)}.tiles li.known-deviation b,.tiles li.fixed b{color:var(--warn)}
.board-nav{display:flex;gap:6px;flex-wrap:wrap;margin-bottom:12px}.board-nav a{text-decoration:none}
dl.facts,dl.identity{display:grid;grid-template-columns:repeat(auto-fill,minmax(230px,1fr));gap:4px 16px;margin:0}
dl.facts div,dl.identity div{min-width:0}dt{color:var(--muted);font-size:12px}dd{margin:0;word-break:break-word}.identity .bad dd{color:var(--bad);font-weight:600}.none{color:var(--muted)}
.counts{color:var(--muted);font-size:13px;font-weight:400}
.root-cause{background:color-mix(in srgb,var(--bad) 12%,transparent);border-left:4px solid var(--bad);padding:8px 12px;margin:0 0 12px}
.rig-failure{background:color-mix(in srgb,var(--bad) 12%,transparent);border-left:4px solid var(--bad);padding:8px 12px;margin:0 0 12px}
.files a{color:var(--info)}
table{border-collapse:collapse;width:100%}th,td{text-align:left;vertical-align:top;padding:5px 8px;border-bottom:1px solid var(--line)}th{color:var(--muted);font-weight:500;font-size:12px}
td.num{white-space:nowrap;text-align:right}.timeline{width:22%}.timeline .bar{display:block;height:8px;border-radius:4px;background:var(--info);opacity:.6}
tr.step.failed .bar{background:var(--bad)}
.pill{display:inline-block;border-radius:999px;padding:1px 8px;font-size:12px;font-weight:600;white-space:nowrap;border:1px solid currentColor}
.pill.passed{color:var(--ok)}.pill.failed,.pill.rig-failed{color:var(--bad)}.pill.interrupted,.tiles li.interrupted b{color:var(--warn)}.rig-failure.interrupted{border-left-color:var(--warn);background:color-mix(in srgb,var(--warn) 12%,transparent)}.pill.known-deviation,.pill.fixed,.pill.flaky{color:var(--warn)}.pill.skipped{color:var(--muted)}
tr.check-row.failed{background:color-mix(in srgb,var(--bad) 7%,transparent)}tr.check-row.known-deviation,tr.check-row.fixed{background:color-mix(in srgb,var(--warn) 7%,transparent)}
.desc,.note{color:var(--muted);font-size:12px}.note{margin-top:2px}.severity.critical{color:var(--bad);font-weight:600}
dl.diff{display:grid;grid-template-columns:auto 1fr;gap:2px 8px;margin:4px 0 0}dl.diff dt{font-size:12px}
.empty{color:var(--muted);font-style:italic}
figure.latency{margin:0 0 16px;border:1px solid var(--line);border-radius:8px;padding:10px}
figure.latency figcaption{color:var(--muted);font-size:12px;margin-top:4px}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots svg{max-width:100%;height:auto}
svg .grid{stroke:var(--line);stroke-width:1}svg .frame{stroke:var(--muted);stroke-width:1}
svg text{fill:var(--muted);font:11px system-ui,sans-serif}svg .marker-label{fill:var(--fg)}svg .ping-label{fill:var(--ping)}
svg .curve{fill:none;stroke:var(--curve);stroke-width:1.5}svg .sample{fill:var(--curve)}
svg .marker{stroke:var(--warn);stroke-dasharray:3 3}svg .marker-dot{fill:var(--warn)}svg .ping{stroke:var(--ping);stroke-dasharray:6 4;stroke-width:1.5}
svg .bar{fill:var(--curve);opacity:.75}
.filter{display:inline-block;margin-top:12px;color:var(--muted)}
body.only-problems tr.check-row.passed,body.only-problems tr.check-row.skipped,body.only-problems tr.step.passed:not(.flaky),body.only-problems tr.step.skipped{display:none}
footer{color:var(--muted);text-align:center;font-size:12px}
`;

// Only toggles a class; the report is complete without it.
const SCRIPT = `document.getElementById('only-problems').addEventListener('change',function(e){document.body.classList.toggle('only-problems',e.target.checked)});`;

export function renderHtml(report: RunReport): string {
  const title = `hil: exit ${report.exitCode}, ${headline(report).text}`;
  return [
    '<!doctype html>',
    '<html lang="en">',
    '<head>',
    '<meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>${h(title)}</title>`,
    `<style>${CSS}</style>`,
    '</head>',
    '<body>',
    summary(report),
    '<main>',
    ...(report.qualification === undefined ? [] : [renderQualificationHtml(report.qualification)]),
    ...(report.comparison === undefined ? [] : [renderComparisonHtml(report.comparison)]),
    ...report.boards.map(boardCard),
    '</main>',
    `<footer>${h(`${report.tool.name} ${report.tool.version}, run started ${report.startedAt}`)}</footer>`,
    `<script>${SCRIPT}</script>`,
    '</body>',
    '</html>',
    '',
  ].join('\n');
}
