import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { deepNesting, hugeString } from './arbitraries.js';
import {
  CaseFailure,
  type FuzzTarget,
  fuzzProperty,
  nestingDepth,
  ProcessWatch,
  TargetStats,
} from './harness.js';
import { FuzzUsageError, parseFuzzOptions } from './runner.js';

const defaults = { cases: 100, seed: 7 };

describe('parseFuzzOptions', () => {
  it('reads every option, as --name value or --name=value', () => {
    expect(
      parseFuzzOptions(
        [
          '--cases',
          '500',
          '--seed=3',
          '--target',
          'gateway,api',
          '--threshold-ms=80',
          '--max-failures',
          '2',
          '--max-repeats=1',
          '--path',
          '4:1:0',
        ],
        defaults,
      ),
    ).toEqual({
      cases: 500,
      seed: 3,
      targets: ['gateway', 'api'],
      thresholdMs: 80,
      maxFailures: 2,
      maxRepeats: 1,
      path: '4:1:0',
    });
  });

  it('keeps the defaults it is given when nothing is said', () => {
    expect(parseFuzzOptions([], defaults)).toMatchObject({ cases: 100, seed: 7, thresholdMs: 50 });
  });

  it('refuses an unknown option, a negative or missing number', () => {
    expect(() => parseFuzzOptions(['--case', '1'], defaults)).toThrow(FuzzUsageError);
    expect(() => parseFuzzOptions(['--cases', '-1'], defaults)).toThrow(/non-negative integer/);
    expect(() => parseFuzzOptions(['--seed'], defaults)).toThrow(FuzzUsageError);
  });
});

describe('fuzzProperty', () => {
  const target = (run: (n: number) => Promise<number | undefined>): FuzzTarget<number> => ({
    name: 'n',
    summary: 'numbers',
    arbitrary: fc.integer({ min: 0, max: 100 }),
    run,
    describe: (n) => `n=${n}`,
  });

  it('counts each case and keeps the slowest input the target reports', async () => {
    const stats = new TargetStats();
    const watch = new ProcessWatch();
    await fc.assert(
      fuzzProperty(
        target(async (n) => n),
        watch,
        { stats },
      ),
      {
        seed: 1,
        numRuns: 50,
      },
    );
    expect(stats.cases).toBe(50);
    expect(stats.slowest?.description).toBe(`n=${stats.slowest?.ms}`);
  });

  it("fails on the target's error and shrinks the input", async () => {
    const watch = new ProcessWatch();
    const property = fuzzProperty(
      target(async (n) => {
        if (n >= 10) throw new CaseFailure(`${n} is too big`);
        return 0;
      }),
      watch,
    );
    const details = await fc.check(property, { seed: 1, numRuns: 200 });
    expect(details.failed).toBe(true);
    expect(details.counterexample).toEqual([10]);
  });
});

describe('arbitraries', () => {
  it('deep nesting and huge strings stay within the byte limit', () => {
    fc.assert(
      fc.property(deepNesting(4096), hugeString(4096), (deep, huge) => {
        expect(Buffer.byteLength(deep)).toBeLessThanOrEqual(4096);
        expect(Buffer.byteLength(huge)).toBeLessThanOrEqual(4096);
      }),
      { seed: 1, numRuns: 200 },
    );
  });

  it('nestingDepth skips brackets inside strings', () => {
    expect(nestingDepth('[[{"a":"[[[["}]]')).toBe(3);
  });
});
