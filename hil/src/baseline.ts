/**
 * Known firmware deviations (docs/hil.md §3): a check the baseline lists reports `known-deviation`
 * instead of `failed`; a listed check that passes stays `passed` and says the deviation is
 * gone, so the baseline is kept honest.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type CheckResult, SUITE_NAMES } from './model.js';

export interface BaselineDeviation {
  /** The check id, `<suite>.<check>`. */
  readonly check: string;
  /** Why the firmware behaves so (quote the protocol reference). */
  readonly reason: string;
  /** The firmware the deviation was seen on (informational), e.g. `2.4.x`. */
  readonly firmware?: string;
}

export interface Baseline {
  readonly deviations: readonly BaselineDeviation[];
}

/** A baseline file that cannot be used; `field` names the offending member. */
export class BaselineError extends Error {
  override readonly name = 'BaselineError';
  readonly code = 'BASELINE_INVALID';

  constructor(
    message: string,
    readonly file: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

/** The baseline shipped with the package: today's firmware deviations (docs/protocol.md §10). */
export const DEFAULT_BASELINE_PATH = fileURLToPath(new URL('../baseline.json', import.meta.url));

const TOP_LEVEL_KEYS = new Set(['$schema', 'description', 'deviations']);
const DEVIATION_KEYS = new Set(['check', 'reason', 'firmware']);
const CHECK_ID = /^([a-z][a-z-]*)\.([a-z0-9][a-z0-9-]*)$/;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function invalid(file: string, field: string | undefined, message: string): never {
  throw new BaselineError(
    `${file}: ${field === undefined ? '' : `${field} `}${message}`,
    file,
    field,
  );
}

function parseDeviation(entry: unknown, at: string, file: string): BaselineDeviation {
  if (!isObject(entry)) invalid(file, at, 'must be an object with check and reason');
  for (const key of Object.keys(entry)) {
    if (!DEVIATION_KEYS.has(key)) {
      invalid(
        file,
        `${at}.${key}`,
        `is not a deviation member (expected ${[...DEVIATION_KEYS].join(', ')})`,
      );
    }
  }
  const { check, reason, firmware } = entry;
  if (typeof check !== 'string') invalid(file, `${at}.check`, 'must be a check id string');
  const suite = CHECK_ID.exec(check)?.[1];
  if (suite === undefined)
    invalid(file, `${at}.check`, `"${check}" is not a check id (<suite>.<check>)`);
  if (!(SUITE_NAMES as readonly string[]).includes(suite)) {
    invalid(file, `${at}.check`, `"${check}" names no suite (suites: ${SUITE_NAMES.join(', ')})`);
  }
  if (typeof reason !== 'string' || reason.trim() === '') {
    invalid(file, `${at}.reason`, 'must be a non-empty string saying why the firmware deviates');
  }
  if (firmware !== undefined && typeof firmware !== 'string') {
    invalid(
      file,
      `${at}.firmware`,
      'must be a string (the firmware version the deviation was seen on)',
    );
  }
  return firmware === undefined ? { check, reason } : { check, reason, firmware };
}

/** Validates a parsed baseline; `file` names it in errors. */
export function parseBaseline(value: unknown, file = 'baseline'): Baseline {
  if (!isObject(value)) invalid(file, undefined, 'must be a JSON object with a "deviations" array');
  for (const key of Object.keys(value)) {
    if (!TOP_LEVEL_KEYS.has(key)) {
      invalid(file, key, `is not a baseline member (expected ${[...TOP_LEVEL_KEYS].join(', ')})`);
    }
  }
  const { deviations } = value;
  if (!Array.isArray(deviations)) invalid(file, 'deviations', 'must be an array');
  const seen = new Set<string>();
  return {
    deviations: deviations.map((entry: unknown, index) => {
      const deviation = parseDeviation(entry, `deviations[${index}]`, file);
      if (seen.has(deviation.check)) {
        invalid(file, `deviations[${index}].check`, `"${deviation.check}" is listed twice`);
      }
      seen.add(deviation.check);
      return deviation;
    }),
  };
}

/** Reads and validates a baseline file; every problem is a {@link BaselineError}. */
export function loadBaseline(path: string): Baseline {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new BaselineError(`${path}: cannot be read (${(error as Error).message})`, path);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new BaselineError(`${path}: is not valid JSON (${(error as Error).message})`, path);
  }
  return parseBaseline(value, path);
}

/** A gone deviation's note: the baseline should drop the entry. */
export const FIXED_DEVIATION_NOTE =
  'the baseline lists this deviation but it is gone: update the baseline';

/**
 * The results with the baseline applied (new objects; the input is left as is): a listed
 * check that failed becomes `known-deviation`; a listed check that passed stays `passed`
 * with `deviation.fixed`. Skipped and unlisted checks are unchanged.
 */
export function applyBaseline(results: readonly CheckResult[], baseline: Baseline): CheckResult[] {
  const reasons = new Map(baseline.deviations.map((d) => [d.check, d.reason]));
  return results.map((result) => {
    const reason = reasons.get(result.id);
    if (reason === undefined) return result;
    if (result.status === 'failed') {
      return { ...result, status: 'known-deviation', deviation: { reason, fixed: false } };
    }
    if (result.status === 'passed') {
      return {
        ...result,
        message:
          result.message === ''
            ? FIXED_DEVIATION_NOTE
            : `${result.message}; ${FIXED_DEVIATION_NOTE}`,
        deviation: { reason, fixed: true },
      };
    }
    return result;
  });
}
