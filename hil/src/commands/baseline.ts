/**
 * `hil baseline accept --from <out>/report.json [--baseline FILE] [--add CHECK...]`: a person
 * accepts what a run found (docs/hil.md §3). Deviations the report shows fixed leave the
 * baseline; a failed check becomes a known deviation only when named with `--add`. Prints what
 * it changed.
 */
import { existsSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import {
  acceptBaselineChanges,
  BaselineChangeError,
  BaselineError,
  parseBaseline,
  type ReportedBoards,
} from '../baseline.js';
import type { Output } from './boards.js';

export interface BaselineAcceptFlags {
  /** A report file, or the `--out` folder of a run (its `report.json`). */
  readonly from: string;
  /** The baseline to rewrite; default the one the run used (the report says). */
  readonly baseline?: string;
  /** Failed checks to add as known deviations. */
  readonly add?: readonly string[];
}

function readReport(from: string): {
  path: string;
  report: ReportedBoards & { baseline?: unknown };
} {
  const path = existsSync(from) && statSync(from).isDirectory() ? join(from, 'report.json') : from;
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    const reason =
      (error as NodeJS.ErrnoException).code === 'ENOENT'
        ? 'no such file'
        : (error as Error).message;
    throw new BaselineChangeError(`--from ${path}: cannot read a report (${reason})`);
  }
  const boards = (value as { boards?: unknown } | null)?.boards;
  if (
    !Array.isArray(boards) ||
    !boards.every(
      (b) =>
        typeof b === 'object' &&
        b !== null &&
        typeof (b as { name?: unknown }).name === 'string' &&
        Array.isArray((b as { checks?: unknown }).checks),
    )
  ) {
    throw new BaselineChangeError(
      `--from ${path}: not a hil report (expected "boards" with each board's "checks"; the run's report.json)`,
    );
  }
  return { path, report: value as ReportedBoards & { baseline?: unknown } };
}

/** Exit codes: 0 written (or nothing to change), 2 bad input. */
export function baselineAcceptCommand(out: Output, flags: BaselineAcceptFlags): number {
  try {
    const { path: reportPath, report } = readReport(flags.from);
    const used = typeof report.baseline === 'string' ? report.baseline : undefined;
    const file = flags.baseline ?? used;
    if (file === undefined) {
      throw new BaselineChangeError(
        `${reportPath} does not say which baseline the run used: give --baseline FILE`,
      );
    }
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (error) {
      throw new BaselineError(`${file}: cannot be read (${(error as Error).message})`, file);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (error) {
      throw new BaselineError(`${file}: is not valid JSON (${(error as Error).message})`, file);
    }
    const before = parseBaseline(parsed, file).deviations.length;
    const change = acceptBaselineChanges(
      parsed as Record<string, unknown>,
      report,
      flags.add ?? [],
      reportPath,
    );
    out.stdout(`baseline ${resolve(file)}, from ${reportPath}:\n`);
    for (const { check, boards } of change.removed)
      out.stdout(`  - removed ${check}: fixed on ${boards.join(', ')}\n`);
    for (const { check, fixedOn, deviatesOn } of change.kept)
      out.stdout(
        `  = kept ${check}: fixed on ${fixedOn.join(', ')} but still deviates on ${deviatesOn.join(', ')}\n`,
      );
    for (const { check, reason } of change.added) out.stdout(`  + added ${check}: ${reason}\n`);
    if (change.removed.length === 0 && change.added.length === 0) {
      out.stdout('nothing to change: no listed deviation is fixed on every board, none added\n');
      return 0;
    }
    writeFileSync(file, `${JSON.stringify(change.file, null, 2)}\n`);
    const after = (change.file.deviations as readonly unknown[]).length;
    out.stdout(`wrote ${file}: ${before} → ${after} deviations\n`);
    return 0;
  } catch (error) {
    if (error instanceof BaselineChangeError || error instanceof BaselineError) {
      out.stderr(`hil: ${error.message}\n`);
      return 2;
    }
    throw error;
  }
}
