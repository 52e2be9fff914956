/**
 * The reporters `hil run --reporter` knows, and writing the file reports at the end of a run.
 * The console reporter runs live during the run (see `ConsoleReporter`); here it only names the
 * summary it prints.
 */
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { RunReport } from '../model.js';
import { renderConsoleSummary } from './console.js';
import { renderGithubSummary, writeGithubSummary } from './github.js';
import { renderHtml } from './html.js';
import { renderJson } from './json.js';
import { renderJunit } from './junit.js';
import { renderOpenMetrics } from './openmetrics.js';

export const REPORTER_NAMES = [
  'console',
  'junit',
  'json',
  'html',
  'openmetrics',
  'github',
] as const;
export type ReporterName = (typeof REPORTER_NAMES)[number];

export interface Reporter {
  readonly description: string;
  /** The file written into the output directory; none for console and GitHub. */
  readonly file: string | undefined;
  render(report: RunReport): string;
}

export const REPORTERS: Readonly<Record<ReporterName, Reporter>> = {
  console: {
    description: 'live per-board progress and a summary on stdout',
    file: undefined,
    render: (report) => renderConsoleSummary(report),
  },
  junit: {
    description: 'JUnit XML, one testsuite per board',
    file: 'junit.xml',
    render: renderJunit,
  },
  json: { description: 'the whole run as JSON', file: 'report.json', render: renderJson },
  html: {
    description: 'a self-contained HTML report with latency plots',
    file: 'report.html',
    render: renderHtml,
  },
  openmetrics: {
    description: 'OpenMetrics text (latency, check status, board up)',
    file: 'metrics.txt',
    render: renderOpenMetrics,
  },
  github: {
    description: 'a GitHub step summary, appended to $GITHUB_STEP_SUMMARY when set',
    file: undefined,
    render: renderGithubSummary,
  },
};

export interface WriteReportsOptions {
  readonly outDir: string;
  readonly reporters: readonly ReporterName[];
  /** Where `GITHUB_STEP_SUMMARY` is read (default: the process environment). */
  readonly env?: NodeJS.ProcessEnv;
}

/**
 * Writes the file reports into `outDir` (created if missing) and appends the GitHub summary when
 * asked for and `GITHUB_STEP_SUMMARY` is set. Returns the paths written, by reporter.
 */
export async function writeReports(
  report: RunReport,
  options: WriteReportsOptions,
): Promise<Partial<Record<ReporterName, string>>> {
  await mkdir(options.outDir, { recursive: true });
  const written: Partial<Record<ReporterName, string>> = {};
  for (const name of new Set(options.reporters)) {
    if (name === 'github') {
      const path = await writeGithubSummary(report, options.env);
      if (path !== undefined) written.github = path;
      continue;
    }
    const { file, render } = REPORTERS[name];
    if (file === undefined) continue;
    const path = join(options.outDir, file);
    // Write then rename, so a CI step that picks up the directory never reads half a report.
    const partial = `${path}.${process.pid}.tmp`;
    await writeFile(partial, render(report), 'utf8');
    await rename(partial, path);
    written[name] = path;
  }
  return written;
}

export { ConsoleReporter, isLiveTerminal, renderConsoleSummary } from './console.js';
export { renderGithubSummary, writeGithubSummary } from './github.js';
export { renderHtml } from './html.js';
export { renderJson } from './json.js';
export { renderJunit } from './junit.js';
export { renderOpenMetrics } from './openmetrics.js';
