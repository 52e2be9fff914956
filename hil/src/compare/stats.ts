/**
 * The statistics `hil compare` judges latency with (docs/ci.md §1.2): the Mann-Whitney U rank
 * test with the normal approximation, the tie correction and the continuity correction (what
 * scipy's `mannwhitneyu(x, y, method='asymptotic')` computes), and medians for the effect size.
 * Written by hand: a few lines, no dependency.
 */

export type Alternative = 'two-sided' | 'less' | 'greater';

export interface MannWhitneyResult {
  /** U of the first sample: how many (x, y) pairs have x > y, ties counting one half. */
  readonly u: number;
  /** The standardised statistic the alternative looks at (continuity-corrected): p is its upper tail. */
  readonly z: number;
  readonly p: number;
  readonly n1: number;
  readonly n2: number;
}

export interface MannWhitneyOptions {
  /** `greater`: x tends to be larger than y (default `two-sided`). */
  readonly alternative?: Alternative;
  /** Subtract 0.5 from |U - mean| (default true, as scipy). */
  readonly continuity?: boolean;
}

/** Average ranks (1-based) of `values`, ties sharing the mean of their ranks; and Σ(t³ - t). */
export function rank(values: readonly number[]): { ranks: number[]; tieTerm: number } {
  const order = values.map((value, index) => ({ value, index })).sort((a, b) => a.value - b.value);
  const ranks = new Array<number>(values.length).fill(0);
  let tieTerm = 0;
  for (let start = 0; start < order.length; ) {
    let end = start + 1;
    while (end < order.length && order[end]?.value === order[start]?.value) end++;
    const average = (start + 1 + end) / 2;
    for (let i = start; i < end; i++) ranks[order[i]?.index ?? 0] = average;
    const t = end - start;
    tieTerm += t * t * t - t;
    start = end;
  }
  return { ranks, tieTerm };
}

/**
 * The complementary error function, Chebyshev fit with a fractional error below 1.2e-7
 * everywhere (Numerical Recipes' `erfcc`): p-values keep that relative precision down to the
 * tiniest.
 */
export function erfc(x: number): number {
  const z = Math.abs(x);
  const t = 1 / (1 + 0.5 * z);
  const r =
    t *
    Math.exp(
      -z * z -
        1.26551223 +
        t *
          (1.00002368 +
            t *
              (0.37409196 +
                t *
                  (0.09678418 +
                    t *
                      (-0.18628806 +
                        t *
                          (0.27886807 +
                            t *
                              (-1.13520398 +
                                t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))),
    );
  return x >= 0 ? r : 2 - r;
}

/** P(Z > z) for a standard normal Z. */
export function normalSf(z: number): number {
  return 0.5 * erfc(z / Math.SQRT2);
}

/**
 * The Mann-Whitney U test of `x` against `y`, asymptotic: U's normal approximation with the
 * variance corrected for ties, and the continuity correction. NaN samples are dropped. With an
 * empty sample, or when every value is the same, p is 1.
 */
export function mannWhitneyU(
  x: readonly number[],
  y: readonly number[],
  options: MannWhitneyOptions = {},
): MannWhitneyResult {
  const xs = x.filter(Number.isFinite);
  const ys = y.filter(Number.isFinite);
  const n1 = xs.length;
  const n2 = ys.length;
  const alternative = options.alternative ?? 'two-sided';
  if (n1 === 0 || n2 === 0) return { u: Number.NaN, z: 0, p: 1, n1, n2 };
  const { ranks, tieTerm } = rank([...xs, ...ys]);
  const r1 = ranks.slice(0, n1).reduce((sum, r) => sum + r, 0);
  const u1 = r1 - (n1 * (n1 + 1)) / 2;
  const u2 = n1 * n2 - u1;
  const n = n1 + n2;
  const mean = (n1 * n2) / 2;
  const variance = ((n1 * n2) / 12) * (n + 1 - tieTerm / (n * (n - 1)));
  if (!(variance > 0)) return { u: u1, z: 0, p: 1, n1, n2 };
  const sd = Math.sqrt(variance);
  const correction = options.continuity === false ? 0 : 0.5;
  // As scipy: the statistic the alternative looks at, its z, and its upper tail.
  const u = alternative === 'greater' ? u1 : alternative === 'less' ? u2 : Math.max(u1, u2);
  const z = (u - mean - correction) / sd;
  let p = normalSf(z);
  if (alternative === 'two-sided') p *= 2;
  return { u: u1, z, p: Math.min(1, Math.max(0, p)), n1, n2 };
}

export function median(values: readonly number[]): number {
  const sorted = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? (sorted[mid] ?? Number.NaN)
    : ((sorted[mid - 1] ?? Number.NaN) + (sorted[mid] ?? Number.NaN)) / 2;
}

/**
 * A seeded generator of uniform numbers in [0, 1) (mulberry32), for tests and synthetic
 * reports that must come out the same every time.
 */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
