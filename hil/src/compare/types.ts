/**
 * What `hil compare` finds between a base report and a candidate report (docs/ci.md §1): per
 * board, what got worse (regressions, exit 1), what got better, and what merely changed.
 * A `RunReport` carries one as `comparison` when `hil run --compare-to` made it.
 */
import type { BoardStatus, CheckStatus } from '../model.js';

/**
 * When a difference is a regression. Ratios say how many times worse the candidate must be
 * (slower, bigger, or less free heap); the absolute floors keep tiny figures from tripping
 * them. Set in the inventory's `compare` (hil.config.schema.json).
 */
export interface CompareThresholds {
  /** The rank test's one-sided p-value below which a latency difference is real. */
  readonly latencyPValue: number;
  /** The candidate's median over the base's, at least (1.1: 10 % slower). */
  readonly latencyMinRatio: number;
  /** And the medians at least this far apart. */
  readonly latencyMinMs: number;
  /** Fewer samples on either side: latency is listed, not judged. */
  readonly latencyMinSamples: number;
  /** Boot (reset to the board's identity line on the console) this many times slower... */
  readonly bootMinRatio: number;
  /** ...and at least this much slower. */
  readonly bootMinMs: number;
  readonly flashMinRatio: number;
  readonly flashMinMs: number;
  /** The flashed image this many times bigger, and at least `imageMinBytes` bigger. */
  readonly imageMinRatio: number;
  readonly imageMinBytes: number;
  /** `minimum_free_heap_size` of the OTA request: the base's over the candidate's, at least... */
  readonly heapMinRatio: number;
  /** ...and at least this many bytes less. */
  readonly heapMinBytes: number;
}

export const DEFAULT_COMPARE_THRESHOLDS: CompareThresholds = {
  latencyPValue: 0.01,
  latencyMinRatio: 1.1,
  latencyMinMs: 0.5,
  latencyMinSamples: 20,
  bootMinRatio: 1.25,
  bootMinMs: 2000,
  flashMinRatio: 1.25,
  flashMinMs: 5000,
  imageMinRatio: 1.05,
  imageMinBytes: 65_536,
  heapMinRatio: 1.1,
  heapMinBytes: 8192,
};

export type FindingKind = 'regression' | 'improvement' | 'change';

export type FindingSubject =
  | 'board'
  | 'check'
  | 'tool'
  | 'pages'
  | 'latency'
  | 'boot'
  | 'flash'
  | 'image'
  | 'heap';

export interface ComparisonFinding {
  readonly kind: FindingKind;
  readonly subject: FindingSubject;
  /**
   * What it is about, stable between runs (a JUnit testcase name): `check tools-list.walk`,
   * `tool self.lamp.turn_on`, `latency tools/call self.get_device_status`, `boot`.
   */
  readonly id: string;
  /** One line: what it was, what it is. */
  readonly text: string;
  readonly base?: string;
  readonly candidate?: string;
}

export type LatencyVerdict = 'slower' | 'faster' | 'same' | 'too-few-samples';

/** One method's samples, base against candidate. */
export interface LatencyComparison {
  readonly method: string;
  readonly baseSamples: number;
  readonly candidateSamples: number;
  readonly baseMedianMs: number;
  readonly candidateMedianMs: number;
  /** The candidate's median over the base's. */
  readonly ratio: number;
  readonly deltaMs: number;
  /** Mann-Whitney U of the candidate's samples against the base's. */
  readonly u: number;
  /** One-sided p-values: the candidate is slower; the candidate is faster. */
  readonly pSlower: number;
  readonly pFaster: number;
  readonly verdict: LatencyVerdict;
}

/** A single figure of each side (boot time, flash time, image size, free heap). */
export interface MetricComparison {
  readonly metric: 'boot' | 'flash' | 'image' | 'heap';
  readonly unit: 'ms' | 'bytes';
  readonly base: number | undefined;
  readonly candidate: number | undefined;
  readonly verdict: 'worse' | 'better' | 'same' | 'not-compared';
}

export interface BoardSideSummary {
  readonly status: BoardStatus;
  readonly firmwareVersion?: string;
}

export interface BoardComparison {
  readonly board: string;
  /** Absent when the board is only in the other report. */
  readonly base?: BoardSideSummary;
  readonly candidate?: BoardSideSummary;
  readonly findings: ComparisonFinding[];
  readonly latency: LatencyComparison[];
  readonly metrics: MetricComparison[];
  /** What could not be compared, and why (a report without tool list, too few samples). */
  readonly notes: string[];
}

export interface ComparisonSide {
  /** Where the report came from (its path), or `this run`. */
  readonly label: string;
  readonly startedAt: string;
  readonly exitCode: number;
  /** The firmware the report names (the flashed file's version), if any. */
  readonly firmware?: string;
}

export interface Comparison {
  readonly base: ComparisonSide;
  readonly candidate: ComparisonSide;
  readonly thresholds: CompareThresholds;
  readonly boards: BoardComparison[];
  readonly regressions: number;
  readonly improvements: number;
  readonly changes: number;
  /**
   * 0 no regression, 1 a regression, 3 the candidate's rig failed (a board could not be
   * qualified, so it could not be compared either).
   */
  readonly exitCode: 0 | 1 | 3;
}

/** How a check's status moved: the status pair to a finding kind (docs/ci.md §1). */
export function checkChangeKind(from: CheckStatus, to: CheckStatus): FindingKind {
  if (to === 'failed' && from !== 'failed') return 'regression';
  // A deviation that had gone is back.
  if (from === 'passed' && to === 'known-deviation') return 'regression';
  if (to === 'passed' && (from === 'failed' || from === 'known-deviation')) return 'improvement';
  return 'change';
}
