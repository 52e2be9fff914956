/**
 * Reading a `report.json` back for `hil compare` and `hil merge`: a path to the file or to the
 * folder holding it (a CI artefact). What is not a hil report is bad input (exit 2), named.
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { RunReport } from '../model.js';

export class ReportInputError extends Error {
  override readonly name = 'ReportInputError';
}

export interface LoadedReport {
  readonly report: RunReport;
  /** The file read. */
  readonly file: string;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The first thing that keeps `value` from being a hil `RunReport`, or undefined. */
function shapeProblem(value: unknown): string | undefined {
  if (!isRecord(value)) return 'it is not a JSON object';
  if (!isRecord(value.tool) || value.tool.name !== 'hil') return 'tool.name is not "hil"';
  if (typeof value.startedAt !== 'string') return 'startedAt is missing';
  if (!Array.isArray(value.boards)) return 'boards is not a list';
  for (const [index, board] of value.boards.entries()) {
    if (!isRecord(board) || typeof board.name !== 'string')
      return `boards[${index}].name is missing`;
    for (const key of ['checks', 'steps', 'latency'] as const) {
      if (!Array.isArray(board[key])) return `boards[${index}].${key} is not a list`;
    }
    if (typeof board.status !== 'string') return `boards[${index}].status is missing`;
  }
  return undefined;
}

/** Reads a report: `report.json`, or a folder that holds one. */
export function loadReport(path: string): LoadedReport {
  let file = path;
  try {
    if (statSync(path).isDirectory()) file = join(path, 'report.json');
  } catch {
    throw new ReportInputError(`${path}: no such file or folder`);
  }
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new ReportInputError(
      code === 'ENOENT'
        ? `${path} holds no report.json (pass a hil report file or the folder --out wrote)`
        : `cannot read ${file}: ${(error as Error).message}`,
    );
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ReportInputError(`${file} is not JSON: ${(error as Error).message}`);
  }
  const problem = shapeProblem(value);
  if (problem !== undefined)
    throw new ReportInputError(`${file} is not a hil report (report.json): ${problem}`);
  const report = value as RunReport;
  // NaN figures were written as null; the comparison reads them as missing.
  for (const board of report.boards) {
    for (const stats of board.latency) {
      if (!Array.isArray(stats.valuesMs)) (stats as { valuesMs: readonly number[] }).valuesMs = [];
    }
  }
  return { report, file };
}
