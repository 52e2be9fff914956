/**
 * Nearest-rank percentile, the one definition behind every latency figure the toolkit reports
 * (hil's latency suite and reports, the benchmarks), so that a p50 means the same everywhere.
 * `sorted` ascending, `q` in 0..1; NaN when there are no samples.
 */
export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil(q * sorted.length)));
  return sorted[rank - 1] ?? Number.NaN;
}
