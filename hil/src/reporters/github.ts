/**
 * A GitHub Actions step summary: the result per board at a glance, then what failed and why,
 * known deviations, and latency. Appended to `$GITHUB_STEP_SUMMARY` (several steps may write it).
 */
import { appendFile } from 'node:fs/promises';
import { renderComparisonMarkdown } from '../compare/render.js';
import { renderQualificationMarkdown } from '../merge.js';
import type { BoardReport, RunReport } from '../model.js';
import {
  boardStatusText,
  checkText,
  EXIT_CODE_MEANING,
  findings,
  formatDuration,
  formatMs,
  hostText,
  imageText,
  resultLine,
  rigFailures,
  stripControl,
  versionText,
} from './format.js';

const BOARD_EMOJI: Readonly<Record<BoardReport['status'], string>> = {
  passed: '✅',
  failed: '❌',
  'rig-failed': '💥',
  interrupted: '⏹️',
};

/**
 * Free text in Markdown: punctuation that would format, link or break a table row is
 * backslash-escaped (CommonMark), line breaks become `<br>`.
 */
export function markdownText(text: string): string {
  return stripControl(text)
    .replace(/[\\`*_[\]<>|~&]/g, '\\$&')
    .replace(/\r?\n/g, '<br>');
}

/** Ids and names as inline code; a backtick inside cannot occur in them, but stay safe. */
function code(text: string): string {
  return `\`${text.replace(/`/g, "'").replace(/\|/g, '\\|')}\``;
}

function row(cells: readonly string[]): string {
  return `| ${cells.join(' | ')} |`;
}

function table(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  align?: readonly ('l' | 'r')[],
): string[] {
  const rule = header.map((_, i) => (align?.[i] === 'r' ? '---:' : '---'));
  return [row(header), row(rule), ...rows.map(row)];
}

export function renderGithubSummary(report: RunReport): string {
  const out: string[] = [];
  const icon = report.exitCode === 0 ? '✅' : '❌';
  out.push(`## ${icon} hil: ${markdownText(resultLine(report))}`, '');
  out.push(
    report.boards.map((b) => `${BOARD_EMOJI[b.status]} ${markdownText(b.name)}`).join(' · '),
    '',
    `Exit code **${report.exitCode}**: ${markdownText(EXIT_CODE_MEANING[report.exitCode])}.` +
      (report.interrupted ? ' **Interrupted**: the report holds what ran.' : ''),
    '',
    ...[
      report.firmware === undefined
        ? undefined
        : `Flashed: ${markdownText(imageText(report.firmware))}`,
      report.otaImage === undefined
        ? undefined
        : `OTA candidate: ${markdownText(imageText(report.otaImage))}`,
      `Ran on ${report.host === undefined ? 'an unrecorded host' : markdownText(hostText(report.host))} with ${markdownText(`${report.tool.name} ${report.tool.version}`)}`,
    ]
      .filter((line) => line !== undefined)
      .map((line) => `${line}  `),
    '',
  );

  out.push(
    ...table(
      [
        '',
        'Board',
        'Status',
        'Variant',
        'Chip',
        'Firmware',
        'Passed',
        'Failed',
        'Known deviations',
        'Skipped',
        'Time',
      ],
      report.boards.map((b) => {
        const count = (status: string): string =>
          String(b.checks.filter((c) => c.status === status).length);
        const version = versionText(b);
        const firmware =
          version === undefined
            ? '–'
            : markdownText(version) +
              (b.expectedVersion !== undefined && b.expectedVersion !== b.firmwareVersion
                ? ` (expected ${markdownText(b.expectedVersion)})`
                : '');
        const status = boardStatusText(b);
        return [
          BOARD_EMOJI[b.status],
          code(b.name),
          status,
          markdownText(b.variant ?? '–'),
          markdownText(b.chip ?? '–'),
          firmware,
          count('passed'),
          count('failed'),
          count('known-deviation'),
          count('skipped'),
          formatDuration(b.durationMs),
        ];
      }),
      ['l', 'l', 'l', 'l', 'l', 'l', 'r', 'r', 'r', 'r', 'r'],
    ),
    '',
  );

  if (report.qualification !== undefined)
    out.push(renderQualificationMarkdown(report.qualification));
  if (report.comparison !== undefined) out.push(renderComparisonMarkdown(report.comparison));

  const found = findings(report);
  const rig = report.boards.flatMap((board) =>
    rigFailures(board).map((failure) => ({ board, failure })),
  );
  if (rig.length > 0 || found.failed.length > 0) {
    out.push('### Failures', '');
    out.push(
      ...table(
        ['Board', 'Check', 'Severity', 'Message'],
        [
          ...rig.map(({ board, failure }) => [
            code(board.name),
            code(`rig.${failure.step}`),
            'rig',
            markdownText(failure.reason),
          ]),
          ...found.failed.map(({ board, check }) => [
            code(board.name),
            code(check.id),
            check.severity,
            markdownText(checkText(check)) +
              (check.retries > 0 ? ` (failed on all ${check.retries + 1} attempts)` : ''),
          ]),
        ],
      ),
      '',
    );
  }

  if (found.deviations.length > 0) {
    out.push('### Known deviations', '');
    out.push(
      ...table(
        ['Board', 'Check', 'Baseline reason', 'What came back'],
        found.deviations.map(({ board, check }) => [
          code(board.name),
          code(check.id),
          markdownText(check.deviation?.reason ?? ''),
          markdownText(checkText(check)),
        ]),
      ),
      '',
    );
  }

  if (found.fixed.length > 0) {
    out.push(
      '### Deviations that disappeared',
      '',
      '> [!NOTE]',
      '> These checks pass now: remove them from the baseline file so it stays honest.',
      '',
      ...found.fixed.map(
        ({ board, check }) =>
          `- ${code(board.name)} ${code(check.id)}: ${markdownText(check.deviation?.reason ?? '')}`,
      ),
      '',
    );
  }

  if (found.flaky.length > 0) {
    out.push(
      '### Flaky',
      '',
      ...found.flaky.map(
        ({ board, check }) =>
          `- ${code(board.name)} ${code(check.id)} passed after ${check.retries} ${check.retries === 1 ? 'retry' : 'retries'}`,
      ),
      '',
    );
  }

  const latency = report.boards.flatMap((board) =>
    board.latency.map((stats) => ({ board, stats })),
  );
  if (latency.length > 0) {
    out.push('### Latency', '');
    out.push(
      ...table(
        ['Board', 'Method', 'Samples', 'min', 'p50', 'p90', 'p99', 'max', 'ping p50', 'ping p99'],
        latency.map(({ board, stats }) => [
          code(board.name),
          code(stats.method),
          String(stats.samples),
          formatMs(stats.minMs),
          formatMs(stats.p50Ms),
          formatMs(stats.p90Ms),
          formatMs(stats.p99Ms),
          formatMs(stats.maxMs),
          formatMs(stats.pingP50Ms),
          formatMs(stats.pingP99Ms),
        ]),
        ['l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
      ),
      '',
    );
  }

  return `${out.join('\n')}\n`;
}

/**
 * Appends the summary to the file `GITHUB_STEP_SUMMARY` names; outside GitHub Actions (unset)
 * it does nothing. Returns the path written, if any.
 */
export async function writeGithubSummary(
  report: RunReport,
  env: NodeJS.ProcessEnv = process.env,
): Promise<string | undefined> {
  const path = env.GITHUB_STEP_SUMMARY;
  if (path === undefined || path === '') return undefined;
  await appendFile(path, renderGithubSummary(report), 'utf8');
  return path;
}
