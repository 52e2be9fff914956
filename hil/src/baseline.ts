/**
 * Known firmware deviations (docs/hil.md §3): a check the baseline lists reports `known-deviation`
 * instead of `failed`; a listed check that passes fails the run (the deviation is fixed: a person
 * accepts that with `hil baseline accept`), or passes with `--allow-fixed-deviations`, so the
 * baseline changes only when someone says so.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { type CheckResult, SUITE_NAMES } from './model.js';
import { NO_REPLY } from './suite.js';

export interface BaselineDeviation {
  /** The check id, `<suite>.<check>`. */
  readonly check: string;
  /** Why the firmware behaves so (quote the protocol reference). */
  readonly reason: string;
  /** The firmware the deviation was seen on (informational), e.g. `2.4.x`. */
  readonly firmware?: string;
  /**
   * What the deviation looks like: the failure's `observed` shape as the check reports it (e.g.
   * `error reply without code`). A failure of the check with another shape, or none, is a failure.
   */
  readonly observed?: string;
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
const DEVIATION_KEYS = new Set(['check', 'reason', 'firmware', 'observed']);
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
  const { check, reason, firmware, observed } = entry;
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
  if (observed !== undefined && (typeof observed !== 'string' || observed.trim() === '')) {
    invalid(
      file,
      `${at}.observed`,
      "must be a non-empty string: the failure's observed shape, as report.json records it",
    );
  }
  return {
    check,
    reason,
    ...(firmware === undefined ? {} : { firmware }),
    ...(observed === undefined ? {} : { observed }),
  };
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

/** A gone deviation's note, in the check's message whether it fails or is allowed. */
export const FIXED_DEVIATION_NOTE = 'the baseline lists this deviation but it is gone';

/** What a run does with a listed deviation that is gone (docs/hil.md §3). */
export interface FixedDeviationPolicy {
  /** `--allow-fixed-deviations`: a gone deviation passes (reported as fixed) instead of failing. */
  readonly allowFixed?: boolean;
  /** The command that accepts the change, quoted in the failure (`hil baseline accept ...`). */
  readonly acceptCommand?: string;
}

/** The command a failure quotes when the caller gives none. */
export const ACCEPT_COMMAND = 'hil baseline accept --from <out>/report.json [--baseline FILE]';

/**
 * The results with the baseline applied (new objects; the input is left as is): a listed
 * check that failed with the shape the entry records (`observed`; without one, any shape but
 * `no reply`) becomes `known-deviation`,
 * one that failed otherwise (the board stopped answering, another wrong reply) stays `failed`,
 * saying what the baseline expected; a listed check that passed means the deviation
 * is fixed: it fails, saying how to accept the change, unless `policy.allowFixed` (then it
 * stays `passed`). Either way it carries `deviation.fixed`. Skipped and unlisted checks are
 * unchanged.
 */
export function applyBaseline(
  results: readonly CheckResult[],
  baseline: Baseline,
  policy: FixedDeviationPolicy = {},
): CheckResult[] {
  const entries = new Map(baseline.deviations.map((d) => [d.check, d]));
  const accept = policy.acceptCommand ?? ACCEPT_COMMAND;
  return results.map((result) => {
    const entry = entries.get(result.id);
    if (entry === undefined) return result;
    const { reason } = entry;
    if (result.status === 'failed') {
      // An entry without its shape (an older baseline) matches any failure but a board that
      // did not answer.
      const matches =
        entry.observed === undefined
          ? result.observed !== NO_REPLY
          : entry.observed === result.observed;
      if (matches)
        return { ...result, status: 'known-deviation', deviation: { reason, fixed: false } };
      const seen =
        result.observed === undefined
          ? 'this failure is not it'
          : `this failure was seen as "${result.observed}"`;
      return {
        ...result,
        message: `${result.message} (the baseline's known deviation is ${entry.observed === undefined ? 'not a board that did not answer' : `"${entry.observed}"`}; ${seen})`,
      };
    }
    if (result.status === 'passed') {
      const passed = result.message === '' ? '' : ` (${result.message})`;
      if (policy.allowFixed === true) {
        return {
          ...result,
          message: `${FIXED_DEVIATION_NOTE}${passed}; allowed by --allow-fixed-deviations: accept it with \`${accept}\``,
          deviation: { reason, fixed: true },
        };
      }
      return {
        ...result,
        status: 'failed',
        message: `the deviation is fixed: ${FIXED_DEVIATION_NOTE}${passed}. Accept the change with \`${accept}\` (it removes the entry from the baseline), or rerun with --allow-fixed-deviations`,
        expected: `the known deviation (baseline: ${reason})`,
        actual: 'the check passed',
        deviation: { reason, fixed: true },
      };
    }
    return result;
  });
}

/** `hil baseline accept` cannot do what it was asked (bad report, unknown check to add). */
export class BaselineChangeError extends Error {
  override readonly name = 'BaselineChangeError';
}

/** What a run said about one check, as `hil baseline accept` reads it from a report. */
export interface ReportedCheck {
  readonly id: string;
  readonly status: string;
  readonly message?: string;
  /** The failure's observed shape; `--add` records it in the new entry. */
  readonly observed?: string;
  readonly deviation?: { readonly fixed?: boolean };
}

/** The part of a report (`report.json`) that `hil baseline accept` reads. */
export interface ReportedBoards {
  readonly boards: readonly {
    readonly name: string;
    readonly firmwareVersion?: string | undefined;
    readonly checks: readonly ReportedCheck[];
  }[];
}

export interface BaselineChange {
  /** Listed deviations that are gone on every board that ran their check. */
  readonly removed: readonly { readonly check: string; readonly boards: readonly string[] }[];
  /** Listed deviations gone on some boards but still there on others: kept. */
  readonly kept: readonly {
    readonly check: string;
    readonly fixedOn: readonly string[];
    readonly deviatesOn: readonly string[];
  }[];
  /** Failed checks added on request (`--add`). */
  readonly added: readonly BaselineDeviation[];
  /** The baseline file's new content (its other members kept). */
  readonly file: Readonly<Record<string, unknown>>;
}

const MAX_REASON = 300;

/**
 * The baseline a person accepts after a run (`hil baseline accept`): every listed deviation the
 * report shows fixed on each board that ran its check is removed; failed checks named in `add`
 * become new deviations, their reason quoting the failure. `file` is the baseline file as
 * parsed (validated by {@link parseBaseline}); `source` names the report in the new reasons.
 */
export function acceptBaselineChanges(
  file: Readonly<Record<string, unknown>>,
  report: ReportedBoards,
  add: readonly string[] = [],
  source = 'report.json',
): BaselineChange {
  const baseline = parseBaseline(file);
  const listed = new Set(baseline.deviations.map((d) => d.check));
  const removed: { check: string; boards: string[] }[] = [];
  const kept: { check: string; fixedOn: string[]; deviatesOn: string[] }[] = [];
  for (const { check } of baseline.deviations) {
    const fixedOn: string[] = [];
    const deviatesOn: string[] = [];
    for (const board of report.boards) {
      const result = board.checks.find((c) => c.id === check);
      if (result?.deviation?.fixed === true) fixedOn.push(board.name);
      else if (result?.status === 'known-deviation' || result?.status === 'failed')
        deviatesOn.push(board.name);
    }
    if (fixedOn.length === 0) continue;
    if (deviatesOn.length === 0) removed.push({ check, boards: fixedOn });
    else kept.push({ check, fixedOn, deviatesOn });
  }
  const added: BaselineDeviation[] = [];
  for (const check of new Set(add)) {
    if (!CHECK_ID.test(check))
      throw new BaselineChangeError(`--add ${check}: not a check id (<suite>.<check>)`);
    if (listed.has(check))
      throw new BaselineChangeError(`--add ${check}: the baseline lists it already`);
    const failed = report.boards.flatMap((board) =>
      board.checks
        .filter((c) => c.id === check && c.status === 'failed' && c.deviation === undefined)
        .map((c) => ({ board, message: c.message ?? '', observed: c.observed })),
    );
    if (failed.length === 0) {
      const failures = [
        ...new Set(
          report.boards.flatMap((b) =>
            b.checks
              .filter((c) => c.status === 'failed' && c.deviation === undefined)
              .map((c) => c.id),
          ),
        ),
      ];
      throw new BaselineChangeError(
        `--add ${check}: it did not fail in ${source} (${failures.length === 0 ? 'no check failed there' : `failed: ${failures.join(', ')}`})`,
      );
    }
    const first = failed[0];
    const quoted = `${first?.board.name}: ${first?.message}`;
    const reason = `accepted by hil baseline accept from ${source} (${failed.map((f) => f.board.name).join(', ')}): ${quoted.length > MAX_REASON ? `${quoted.slice(0, MAX_REASON)}...` : quoted}`;
    const versions = [
      ...new Set(failed.flatMap((f) => (f.board.firmwareVersion ? [f.board.firmwareVersion] : []))),
    ];
    const observed = first?.observed;
    added.push({
      check,
      reason,
      ...(versions.length === 0 ? {} : { firmware: versions.join(', ') }),
      ...(observed === undefined ? {} : { observed }),
    });
  }
  const gone = new Set(removed.map((r) => r.check));
  const deviations = [
    ...(file.deviations as readonly unknown[]).filter(
      (entry) => !gone.has((entry as BaselineDeviation).check),
    ),
    ...added,
  ];
  return { removed, kept, added, file: { ...file, deviations } };
}
