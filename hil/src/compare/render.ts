/**
 * A comparison (docs/ci.md §1) in each report format: console text, Markdown (the GitHub step
 * summary), an HTML section and a JUnit testsuite with a testcase per regression.
 */
import type {
  BoardComparison,
  Comparison,
  ComparisonFinding,
  FindingKind,
  MetricComparison,
} from '../model.js';
import {
  escapeHtml,
  markdownCode,
  markdownTable,
  markdownText,
  singleLine,
  xmlAttr,
  xmlText,
} from '../reporters/escape.js';
import { plural } from '../reporters/format.js';
import { describeLatency, formatP } from './compare.js';

// ---- Wording --------------------------------------------------------------------------------

const KIND_GLYPH: Readonly<Record<FindingKind, string>> = {
  regression: '✗',
  improvement: '↑',
  change: '·',
};

const KIND_EMOJI: Readonly<Record<FindingKind, string>> = {
  regression: '❌',
  improvement: '✅',
  change: 'ℹ️',
};

const KIND_RANK: Readonly<Record<FindingKind, number>> = {
  regression: 0,
  improvement: 1,
  change: 2,
};

function sorted(findings: readonly ComparisonFinding[]): ComparisonFinding[] {
  return [...findings].sort((a, b) => KIND_RANK[a.kind] - KIND_RANK[b.kind]);
}

/** `1 regression, 2 improvements, 5 changes`, or `no difference`. */
export function comparisonLine(c: Comparison): string {
  if (c.regressions + c.improvements + c.changes === 0) return 'no difference';
  return [
    plural(c.regressions, 'regression'),
    plural(c.improvements, 'improvement'),
    plural(c.changes, 'change'),
  ].join(', ');
}

function sideText(side: Comparison['base']): string {
  const facts = [side.firmware, side.startedAt].filter((v) => v !== undefined).join(', ');
  return `${side.label}${facts === '' ? '' : ` (${facts})`}`;
}

function metricValue(m: MetricComparison, value: number | undefined): string {
  if (value === undefined) return '–';
  if (m.unit === 'ms')
    return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${Math.round(value)} ms`;
  return value >= 1024 * 1024
    ? `${(value / 1024 / 1024).toFixed(2)} MiB`
    : value >= 1024
      ? `${(value / 1024).toFixed(1)} KiB`
      : `${value} B`;
}

const METRIC_LABEL: Readonly<Record<MetricComparison['metric'], string>> = {
  boot: 'boot',
  flash: 'flash',
  image: 'image',
  heap: 'min free heap',
};

function metricsText(board: BoardComparison): string {
  return board.metrics
    .filter((m) => m.verdict !== 'not-compared')
    .map(
      (m) => `${METRIC_LABEL[m.metric]} ${metricValue(m, m.base)} → ${metricValue(m, m.candidate)}`,
    )
    .join(' · ');
}

function statusText(board: BoardComparison): string {
  return `${board.base?.status ?? 'absent'} → ${board.candidate?.status ?? 'absent'}`;
}

function thresholdsText(c: Comparison): string {
  const t = c.thresholds;
  return `latency: one-sided Mann-Whitney p < ${t.latencyPValue}, median ×${t.latencyMinRatio} and +${t.latencyMinMs} ms at least, ${t.latencyMinSamples}+ samples`;
}

// ---- Console --------------------------------------------------------------------------------

export function renderComparisonText(c: Comparison): string {
  const out: string[] = [
    '',
    `Comparison with the base: ${comparisonLine(c)}`,
    `  base      ${sideText(c.base)}`,
    `  candidate ${sideText(c.candidate)}`,
    `  ${thresholdsText(c)}`,
  ];
  for (const board of c.boards) {
    const quiet = board.findings.length === 0;
    out.push(`${board.board} (${statusText(board)})${quiet ? ': no difference' : ''}`);
    for (const f of sorted(board.findings)) {
      out.push(`  ${KIND_GLYPH[f.kind]} ${f.kind.padEnd(11)} ${singleLine(f.text)}`);
    }
    for (const l of board.latency) {
      if (l.verdict !== 'same') continue;
      const significant = Math.min(l.pSlower, l.pFaster) < c.thresholds.latencyPValue;
      out.push(
        `    latency ${l.method}: ${describeLatency(l)}: ${significant ? 'under the minimum effect' : 'no significant change'}`,
      );
    }
    const figures = metricsText(board);
    if (figures !== '') out.push(`    ${figures}`);
    for (const note of board.notes) out.push(`    note: ${singleLine(note)}`);
  }
  return `${out.join('\n')}\n`;
}

// ---- Markdown -------------------------------------------------------------------------------

export function renderComparisonMarkdown(c: Comparison): string {
  const icon = c.regressions > 0 ? '❌' : '✅';
  const out: string[] = [
    `### ${icon} Comparison with the base: ${markdownText(comparisonLine(c))}`,
    '',
    `Base: ${markdownCode(c.base.label)}${c.base.firmware ? ` (${markdownText(c.base.firmware)})` : ''} · candidate: ${markdownCode(c.candidate.label)}${c.candidate.firmware ? ` (${markdownText(c.candidate.firmware)})` : ''}. ${markdownText(thresholdsText(c))}.`,
    '',
  ];
  const rows = c.boards.flatMap((board) =>
    sorted(board.findings).map((f) => [
      markdownCode(board.board),
      `${KIND_EMOJI[f.kind]} ${f.kind}`,
      markdownCode(f.id),
      markdownText(f.text),
    ]),
  );
  if (rows.length > 0) out.push(...markdownTable(['Board', 'Kind', 'What', 'Detail'], rows), '');

  const latency = c.boards.flatMap((board) => board.latency.map((l) => ({ board, l })));
  if (latency.length > 0) {
    out.push(
      ...markdownTable(
        [
          'Board',
          'Method',
          'n',
          'Median base',
          'Median candidate',
          'p slower',
          'p faster',
          'Verdict',
        ],
        latency.map(({ board, l }) => [
          markdownCode(board.board),
          markdownCode(l.method),
          `${l.baseSamples}/${l.candidateSamples}`,
          `${l.baseMedianMs} ms`,
          `${l.candidateMedianMs} ms`,
          formatP(l.pSlower),
          formatP(l.pFaster),
          l.verdict,
        ]),
      ),
      '',
    );
  }
  const figures = c.boards.filter((b) => metricsText(b) !== '');
  if (figures.length > 0) {
    out.push(
      ...markdownTable(
        ['Board', 'Boot', 'Flash', 'Image', 'Min free heap'],
        figures.map((board) => [
          markdownCode(board.board),
          ...(['boot', 'flash', 'image', 'heap'] as const).map((metric) => {
            const m = board.metrics.find((x) => x.metric === metric);
            if (m === undefined || m.verdict === 'not-compared') return '–';
            const mark = m.verdict === 'worse' ? ' ❌' : m.verdict === 'better' ? ' ✅' : '';
            return `${metricValue(m, m.base)} → ${metricValue(m, m.candidate)}${mark}`;
          }),
        ]),
      ),
      '',
    );
  }
  const notes = c.boards.flatMap((board) => board.notes.map((note) => ({ board, note })));
  if (notes.length > 0) {
    out.push(
      ...notes.map(({ board, note }) => `- ${markdownCode(board.board)}: ${markdownText(note)}`),
      '',
    );
  }
  return `${out.join('\n')}\n`;
}

// ---- HTML -----------------------------------------------------------------------------------

const KIND_CLASS: Readonly<Record<FindingKind, string>> = {
  regression: 'failed',
  improvement: 'passed',
  change: 'skipped',
};

/** A card for the HTML report, styled with the report's own classes. */
export function renderComparisonHtml(c: Comparison): string {
  const h = escapeHtml;
  const rows = c.boards.flatMap((board) =>
    sorted(board.findings).map(
      (f) =>
        `<tr class="check-row ${KIND_CLASS[f.kind]}" data-testid="comparison-finding" data-kind="${f.kind}"><td><code>${h(board.board)}</code></td><td><span class="pill ${KIND_CLASS[f.kind]}">${h(f.kind)}</span></td><td><code>${h(f.id)}</code></td><td>${h(f.text)}</td></tr>`,
    ),
  );
  const latency = c.boards.flatMap((board) =>
    board.latency.map(
      (l) =>
        `<tr><td><code>${h(board.board)}</code></td><td><code>${h(l.method)}</code></td><td class="num">${l.baseSamples}/${l.candidateSamples}</td><td class="num">${h(String(l.baseMedianMs))} ms</td><td class="num">${h(String(l.candidateMedianMs))} ms</td><td class="num">${h(formatP(l.pSlower))}</td><td class="num">${h(formatP(l.pFaster))}</td><td>${h(l.verdict)}</td></tr>`,
    ),
  );
  const figures = c.boards
    .filter((b) => metricsText(b) !== '')
    .map((b) => `<li><code>${h(b.board)}</code>: ${h(metricsText(b))}</li>`);
  const notes = c.boards.flatMap((b) =>
    b.notes.map((note) => `<li><code>${h(b.board)}</code>: ${h(note)}</li>`),
  );
  return [
    `<section class="board comparison ${c.regressions > 0 ? 'failed' : 'passed'}" id="comparison" data-testid="comparison" data-regressions="${c.regressions}">`,
    `<h2>Comparison with the base <span class="counts">${h(comparisonLine(c))}</span></h2>`,
    '<dl class="facts">',
    `<div><dt>Base</dt><dd>${h(sideText(c.base))}</dd></div>`,
    `<div><dt>Candidate</dt><dd>${h(sideText(c.candidate))}</dd></div>`,
    `<div><dt>Thresholds</dt><dd>${h(thresholdsText(c))}</dd></div>`,
    '</dl>',
    rows.length === 0
      ? '<p class="empty">No difference in checks, tools or figures.</p>'
      : `<table><thead><tr><th>Board</th><th>Kind</th><th>What</th><th>Detail</th></tr></thead><tbody>${rows.join('')}</tbody></table>`,
    latency.length === 0
      ? ''
      : `<h3>Latency (raw samples, Mann-Whitney U)</h3><table><thead><tr><th>Board</th><th>Method</th><th>n</th><th>Median base</th><th>Median candidate</th><th>p slower</th><th>p faster</th><th>Verdict</th></tr></thead><tbody>${latency.join('')}</tbody></table>`,
    figures.length === 0 ? '' : `<h3>Figures (base → candidate)</h3><ul>${figures.join('')}</ul>`,
    notes.length === 0 ? '' : `<h3>Not compared</h3><ul class="note">${notes.join('')}</ul>`,
    '</section>',
  ]
    .filter((part) => part !== '')
    .join('\n');
}

// ---- JUnit ----------------------------------------------------------------------------------

/**
 * The `comparison` testsuite: a failing testcase per regression (classname `comparison.<board>`,
 * name the finding's id); with none, one passing testcase, so the suite is never empty.
 */
export function renderComparisonTestsuite(c: Comparison): {
  xml: string;
  tests: number;
  failures: number;
} {
  const a = xmlAttr;
  const regressions = c.boards.flatMap((board) =>
    board.findings.filter((f) => f.kind === 'regression').map((f) => ({ board, f })),
  );
  const cases =
    regressions.length === 0
      ? [
          `    <testcase classname="comparison" name="no regression" time="0.000">\n      <system-out>${xmlText(`against ${c.base.label}: ${comparisonLine(c)}`)}</system-out>\n    </testcase>`,
        ]
      : regressions.map(
          ({ board, f }) =>
            `    <testcase classname="${a(`comparison.${board.board}`)}" name="${a(f.id)}" time="0.000">\n      <failure message="${a(f.text)}" type="regression">${xmlText(
              [
                f.text,
                ...(f.base === undefined ? [] : [`base: ${f.base}`]),
                ...(f.candidate === undefined ? [] : [`candidate: ${f.candidate}`]),
                `base report: ${c.base.label}`,
              ].join('\n'),
            )}</failure>\n    </testcase>`,
        );
  const tests = cases.length;
  const failures = regressions.length;
  const xml = [
    `  <testsuite name="comparison" tests="${tests}" failures="${failures}" errors="0" skipped="0" time="0.000">`,
    '    <properties>',
    `      <property name="base" value="${a(c.base.label)}"/>`,
    `      <property name="candidate" value="${a(c.candidate.label)}"/>`,
    '    </properties>',
    ...cases,
    '  </testsuite>',
  ].join('\n');
  return { xml, tests, failures };
}
