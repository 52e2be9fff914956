/**
 * The rank test against scipy 1.17's `mannwhitneyu(x, y, alternative=..., method='asymptotic')`
 * (continuity correction on unless said), whose results are written down here as literals.
 */
import { describe, expect, it } from 'vitest';
import { type Alternative, erfc, mannWhitneyU, median, normalSf, rank } from './stats.js';

/** Equal within a relative error of `tolerance` (the erfc fit is good to 1.2e-7). */
function expectClose(actual: number, expected: number, tolerance = 1e-6): void {
  expect(Math.abs(actual - expected)).toBeLessThanOrEqual(Math.abs(expected) * tolerance + 1e-300);
}

interface Case {
  readonly name: string;
  readonly x: readonly number[];
  readonly y: readonly number[];
  /** scipy's statistic (U of x) and p-values per alternative, and two-sided without continuity. */
  readonly u: number;
  readonly p: Readonly<Record<Alternative | 'no-continuity', number>>;
}

const SCIPY: readonly Case[] = [
  {
    name: 'fully separated, no ties',
    x: [1.1, 2.3, 3.5, 4.2, 5.9],
    y: [6.1, 7.4, 8.8, 9.0, 10.2, 11.5],
    u: 0,
    p: {
      'two-sided': 0.00811311726556578,
      less: 0.00405655863278289,
      greater: 0.9976718713764371,
      'no-continuity': 0.00616989932054416,
    },
  },
  {
    name: 'overlapping, no ties',
    x: [19, 22, 16, 29, 24],
    y: [20, 11, 17, 12],
    u: 17,
    p: {
      'two-sided': 0.11134688653314041,
      less: 0.9669037101389033,
      greater: 0.055673443266570206,
      'no-continuity': 0.0864107329737,
    },
  },
  {
    name: 'integers with many ties',
    x: [1, 2, 2, 3, 3, 3, 4],
    y: [2, 3, 4, 4, 5, 5, 6, 6],
    u: 8.5,
    p: {
      'two-sided': 0.025144761173357368,
      less: 0.012572380586678684,
      greater: 0.9907889372729505,
      'no-continuity': 0.0215562667600163,
    },
  },
  {
    name: 'latencies rounded to 0.01 ms (ties across samples)',
    x: [0.41, 0.41, 0.43, 0.4, 0.42, 0.44, 0.41, 0.45],
    y: [0.41, 0.46, 0.47, 0.43, 0.48, 0.41, 0.49, 0.5, 0.47],
    u: 13.5,
    p: {
      'two-sided': 0.03186670542703166,
      less: 0.01593335271351583,
      greater: 0.987571816135011,
      'no-continuity': 0.02817413339385986,
    },
  },
  {
    name: '30 against 30, shifted by 20',
    x: Array.from({ length: 30 }, (_, i) => i),
    y: Array.from({ length: 30 }, (_, i) => i + 20),
    u: 50,
    p: {
      'two-sided': 3.479739872462848e-9,
      less: 1.739869936231424e-9,
      greater: 0.9999999984096084,
      // not computed for this case
      'no-continuity': Number.NaN,
    },
  },
];

describe('mannWhitneyU', () => {
  for (const c of SCIPY) {
    it(`matches scipy: ${c.name}`, () => {
      for (const alternative of ['two-sided', 'less', 'greater'] as const) {
        const result = mannWhitneyU(c.x, c.y, { alternative });
        expect(result.u).toBe(c.u);
        expectClose(result.p, c.p[alternative]);
      }
      if (!Number.isNaN(c.p['no-continuity'])) {
        expectClose(mannWhitneyU(c.x, c.y, { continuity: false }).p, c.p['no-continuity']);
      }
    });
  }

  it('keeps tiny p-values precise (scipy: 7.17542653196834e-15)', () => {
    const x = Array.from({ length: 40 }, (_, i) => i);
    const y = Array.from({ length: 40 }, (_, i) => i + 40.5);
    const result = mannWhitneyU(x, y, { alternative: 'less' });
    expect(result.u).toBe(0);
    expectClose(result.p, 7.17542653196834e-15);
  });

  it('gives p = 1 when nothing can be told apart (all equal, or a sample empty)', () => {
    expect(mannWhitneyU([5, 5, 5], [5, 5, 5, 5]).p).toBe(1);
    expect(mannWhitneyU([], [1, 2]).p).toBe(1);
    expect(mannWhitneyU([1, Number.NaN], [Number.NaN]).p).toBe(1);
  });

  it('is symmetric: x against y is y against x with the alternative turned', () => {
    const x = [3, 1, 4, 1, 5, 9, 2, 6];
    const y = [2, 7, 1, 8, 2, 8, 1, 8, 2];
    expect(mannWhitneyU(x, y, { alternative: 'greater' }).p).toBeCloseTo(
      mannWhitneyU(y, x, { alternative: 'less' }).p,
      12,
    );
  });
});

describe('the pieces', () => {
  it('ranks ties by their mean rank and counts the tie term', () => {
    expect(rank([10, 20, 20, 30, 20])).toEqual({ ranks: [1, 3, 3, 5, 3], tieTerm: 24 });
  });

  it('erfc and the normal tail agree with known values', () => {
    expectClose(erfc(0), 1);
    expectClose(erfc(1), 0.15729920705028513);
    expectClose(erfc(-1), 1.8427007929497148);
    expectClose(normalSf(1.959963984540054), 0.025);
    expectClose(normalSf(6), 9.865876450376946e-10);
  });

  it('takes the median of the finite values', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([Number.NaN, 1])).toBe(1);
    expect(median([])).toBeNaN();
  });
});
