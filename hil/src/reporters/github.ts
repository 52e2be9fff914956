/**
 * A GitHub Actions step summary: the result per board at a glance, then what failed and why,
 * known deviations, and latency. Appended to `$GITHUB_STEP_SUMMARY` (several steps may write it).
 */
import { appendFile } from 'node:fs/promises';
import { renderComparisonMarkdown } from '../compare/render.js';
import { renderQualificationMarkdown } from '../merge.js';
import { type BoardReport, headline, type RunReport } from '../model.js';
import { markdownCode, markdownTable, markdownText } from './escape.js';
import {
  boardStatusText,
  checkText,
  EXIT_CODE_MEANING,
  findings,
  formatDuration,
  formatMs,
  hostsText,
  imageText,
  pingMs,
  rigFailures,
  rootCauseText,
  versionText,
} from './format.js';

const BOARD_EMOJI: Readonly<Record<BoardReport['status'], string>> = {
  passed: '✅',
  failed: '❌',
  'rig-failed': '💥',
  interrupted: '⏹️',
};

export function renderGithubSummary(report: RunReport): string {
  const out: string[] = [];
  const verdict = headline(report);
  const icon = verdict.tone === 'passed' ? '✅' : verdict.tone === 'interrupted' ? '⏹️' : '❌';
  out.push(`## ${icon} hil: ${markdownText(verdict.text)}`, '');
  // The first failure, before anything else: what follows on its board often comes from it.
  const cause = report.summary.rootCause;
  if (cause !== undefined) out.push(`**Root cause:** ${markdownText(rootCauseText(cause))}`, '');
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
      `Ran on ${markdownText(hostsText(report))} with ${markdownText(`${report.tool.name} ${report.tool.version}`)}`,
    ]
      .filter((line) => line !== undefined)
      .map((line) => `${line}  `),
    '',
  );

  out.push(
    ...markdownTable(
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
          markdownCode(b.name),
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
      ...markdownTable(
        ['Board', 'Check', 'Severity', 'Message'],
        [
          ...rig.map(({ board, failure }) => [
            markdownCode(board.name),
            markdownCode(`rig.${failure.step}`),
            failure.kind,
            markdownText(failure.reason),
          ]),
          ...found.failed.map(({ board, check }) => [
            markdownCode(board.name),
            markdownCode(check.id),
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
      ...markdownTable(
        ['Board', 'Check', 'Baseline reason', 'What came back'],
        found.deviations.map(({ board, check }) => [
          markdownCode(board.name),
          markdownCode(check.id),
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
          `- ${markdownCode(board.name)} ${markdownCode(check.id)}: ${markdownText(check.deviation?.reason ?? '')}`,
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
          `- ${markdownCode(board.name)} ${markdownCode(check.id)} passed after ${check.retries} ${check.retries === 1 ? 'retry' : 'retries'}`,
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
      ...markdownTable(
        ['Board', 'Method', 'Samples', 'min', 'p50', 'p90', 'p99', 'max', 'ping p50', 'ping p99'],
        latency.map(({ board, stats }) => [
          markdownCode(board.name),
          markdownCode(stats.method),
          String(stats.samples),
          formatMs(stats.minMs),
          formatMs(stats.p50Ms),
          formatMs(stats.p90Ms),
          formatMs(stats.p99Ms),
          formatMs(stats.maxMs),
          pingMs(board, stats.pingP50Ms),
          pingMs(board, stats.pingP99Ms),
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
