/**
 * The `hil compare` and `hil merge` commands, and what `hil run --compare-to` adds to a run
 * (docs/ci.md §1, §2). Exit codes: 0 no regression (merge: every board passed), 1 a regression
 * (merge: a board failed), 2 bad usage or input (a report that cannot be read), 3 the rig failed.
 */

import { existsSync } from 'node:fs';
import { appendFile, mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { loadInventory } from '../inventory.js';
import { type MergeInput, mergeReports, parseMergeArgument, rigNameFor } from '../merge.js';
import type { CompareThresholds, Comparison, RunReport } from '../model.js';
import { renderConsoleSummary } from '../reporters/console.js';
import { renderGithubSummary } from '../reporters/github.js';
import { writeReports } from '../reporters/index.js';
import { HIL_VERSION } from '../version.js';
import { compareReports } from './compare.js';
import { type LoadedReport, loadReport, ReportInputError } from './load.js';
import { comparisonLine, renderComparisonMarkdown, renderComparisonText } from './render.js';

export interface CommandOutput {
  stdout(text: string): void;
  stderr(text: string): void;
}

const COMPARE_EXIT_MEANING: Readonly<Record<Comparison['exitCode'], string>> = {
  0: 'no regression against the base',
  1: 'a regression against the base',
  3: 'the rig failed for a board of the candidate: it could not be compared',
};

/** The inventory's `compare` thresholds: `--config`, else ./hil.config.json when there is one. */
export function thresholdsFrom(configPath: string | undefined): Partial<CompareThresholds> {
  const path = configPath ?? (existsSync('hil.config.json') ? 'hil.config.json' : undefined);
  return path === undefined ? {} : (loadInventory(path).compare ?? {});
}

/**
 * `hil run --compare-to BASE`: compares the run just made with BASE and attaches the result to
 * the report; a regression turns a passing run's exit code into 1.
 */
export function attachComparison(
  report: RunReport,
  base: LoadedReport,
  thresholds: Partial<CompareThresholds> | undefined,
): Comparison {
  const comparison = compareReports(base.report, report, {
    ...(thresholds === undefined ? {} : { thresholds }),
    baseLabel: base.file,
    candidateLabel: 'this run',
  });
  report.comparison = comparison;
  if (report.exitCode === 0 && comparison.regressions > 0) report.exitCode = 1;
  return comparison;
}

export interface CompareFlags {
  readonly config?: string;
  readonly format?: string;
  readonly out?: string;
}

export const COMPARE_FORMATS = ['text', 'markdown', 'json'] as const;

/** `hil compare BASE CANDIDATE`. */
export async function compareCommand(
  basePath: string,
  candidatePath: string,
  flags: CompareFlags,
  out: CommandOutput,
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  const format = flags.format ?? 'text';
  if (!(COMPARE_FORMATS as readonly string[]).includes(format)) {
    throw new ReportInputError(
      `--format ${format} is not a format; formats: ${COMPARE_FORMATS.join(', ')}`,
    );
  }
  const thresholds = thresholdsFrom(flags.config);
  const base = loadReport(basePath);
  const candidate = loadReport(candidatePath);
  const comparison = compareReports(base.report, candidate.report, {
    thresholds,
    baseLabel: base.file,
    candidateLabel: candidate.file,
  });
  const markdown = renderComparisonMarkdown(comparison);
  if (format === 'json') out.stdout(`${JSON.stringify(comparison, null, 2)}\n`);
  else if (format === 'markdown') out.stdout(markdown);
  else {
    out.stdout(renderComparisonText(comparison));
    out.stdout(
      `\nResult: ${comparisonLine(comparison)}\nExit code ${comparison.exitCode}: ${COMPARE_EXIT_MEANING[comparison.exitCode]}\n`,
    );
  }
  if (flags.out !== undefined) {
    // The candidate's reports again, with the comparison in each.
    const outDir = resolve(flags.out);
    const report: RunReport = { ...candidate.report, comparison };
    if (report.exitCode === 0 && comparison.exitCode !== 0) report.exitCode = comparison.exitCode;
    await writeReports(report, { outDir, reporters: ['json', 'html', 'junit'] });
    await writeFile(join(outDir, 'comparison.md'), markdown, 'utf8');
  }
  const summary = env.GITHUB_STEP_SUMMARY;
  if (summary !== undefined && summary !== '') await appendFile(summary, markdown, 'utf8');
  return comparison.exitCode;
}

export interface MergeFlags {
  readonly out: string;
  readonly expect?: readonly string[];
}

/** `hil merge REPORT...`: one qualification report from the rigs' reports. */
export async function mergeCommand(
  paths: readonly string[],
  flags: MergeFlags,
  out: CommandOutput,
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  if (paths.length === 0 && (flags.expect ?? []).length === 0)
    throw new ReportInputError('hil merge needs at least one report (or --expect RIG...)');
  const inputs: MergeInput[] = paths.map((argument) => {
    const { rig, path } = parseMergeArgument(argument);
    const { report, file } = loadReport(path);
    return { rig: rig ?? rigNameFor(file, report.host?.hostname), file, report };
  });
  const outDir = resolve(flags.out);
  const merged = mergeReports(inputs, {
    outDir,
    toolVersion: HIL_VERSION,
    ...(flags.expect === undefined ? {} : { expect: flags.expect.flatMap((e) => e.split(',')) }),
  });
  await mkdir(outDir, { recursive: true });
  const files = await writeReports(merged, { outDir, reporters: ['json', 'html', 'junit'] });
  const markdown = renderGithubSummary(merged);
  const summaryFile = join(outDir, 'summary.md');
  await writeFile(summaryFile, markdown, 'utf8');
  const step = env.GITHUB_STEP_SUMMARY;
  if (step !== undefined && step !== '') await appendFile(step, markdown, 'utf8');
  out.stdout(renderConsoleSummary(merged));
  out.stdout(`reports: ${[...Object.values(files), summaryFile].join(', ')}\n`);
  return merged.exitCode;
}
