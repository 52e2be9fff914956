/**
 * When `hil compare` calls a difference a regression (docs/ci.md §1): the default thresholds,
 * which the inventory's `compare` overrides, and how a check's status move is ranked.
 */
import type { CheckStatus, CompareThresholds, FindingKind } from '../model.js';

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

/** How a check's status moved: the status pair to a finding kind (docs/ci.md §1). */
export function checkChangeKind(from: CheckStatus, to: CheckStatus): FindingKind {
  if (to === 'failed' && from !== 'failed') return 'regression';
  // A deviation that had gone is back.
  if (from === 'passed' && to === 'known-deviation') return 'regression';
  if (to === 'passed' && (from === 'failed' || from === 'known-deviation')) return 'improvement';
  return 'change';
}
