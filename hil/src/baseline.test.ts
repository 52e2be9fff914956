import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  acceptBaselineChanges,
  applyBaseline,
  type Baseline,
  BaselineChangeError,
  BaselineError,
  DEFAULT_BASELINE_PATH,
  FIXED_DEVIATION_NOTE,
  loadBaseline,
  parseBaseline,
} from './baseline.js';
import type { CheckResult } from './model.js';
import { allCheckIds } from './suites/index.js';

function result(id: string, status: CheckResult['status'], message = ''): CheckResult {
  const [suite = 'robustness'] = id.split('.');
  return {
    id,
    suite: suite as CheckResult['suite'],
    description: id,
    severity: 'minor',
    status,
    message,
    durationMs: 1,
    retries: 0,
  };
}

const BASELINE: Baseline = {
  deviations: [
    { check: 'robustness.error-code', reason: 'no code', observed: 'error reply without code' },
    { check: 'robustness.ping', reason: 'no ping', firmware: '2.4.x' },
    { check: 'latency.ping', reason: 'skipped here' },
  ],
};

describe('the default baseline', () => {
  it('lists the three firmware deviations, each a real check, each quoting docs/protocol.md', () => {
    const baseline = loadBaseline(DEFAULT_BASELINE_PATH);
    expect(baseline.deviations.map((d) => d.check)).toEqual([
      'robustness.error-code',
      'robustness.escaped-messages',
      'robustness.ping',
    ]);
    const ids = allCheckIds();
    for (const deviation of baseline.deviations) {
      expect(ids).toContain(deviation.check);
      expect(deviation.reason).toMatch(/^docs\/protocol\.md §2/);
      expect(deviation.firmware).toBe('2.4.x');
    }
  });
});

describe('applyBaseline', () => {
  const results = [
    {
      ...result('robustness.error-code', 'failed', 'expected a code, got none'),
      observed: 'error reply without code',
    },
    result('robustness.ping', 'passed', 'answered with a result'),
    result('latency.ping', 'skipped', 'no calls'),
    result('robustness.alive', 'failed', 'no reply'),
    result('robustness.string-id', 'passed'),
  ];

  it('turns a listed failure into a known deviation, and fails a listed check that passes: the deviation is fixed', () => {
    const accept = 'hil baseline accept --from out/report.json --baseline rig.json';
    const applied = applyBaseline(results, BASELINE, { acceptCommand: accept });
    expect(applied.map((c) => [c.id, c.status, c.deviation])).toEqual([
      ['robustness.error-code', 'known-deviation', { reason: 'no code', fixed: false }],
      ['robustness.ping', 'failed', { reason: 'no ping', fixed: true }],
      ['latency.ping', 'skipped', undefined],
      ['robustness.alive', 'failed', undefined],
      ['robustness.string-id', 'passed', undefined],
    ]);
    // The known deviation still says what came back; the fixed one says how a person accepts it.
    expect(applied[0]?.message).toBe('expected a code, got none');
    expect(applied[1]).toMatchObject({
      message: `the deviation is fixed: ${FIXED_DEVIATION_NOTE} (answered with a result). Accept the change with \`${accept}\` (it removes the entry from the baseline), or rerun with --allow-fixed-deviations`,
      expected: 'the known deviation (baseline: no ping)',
      actual: 'the check passed',
    });
    // The input is left as it was.
    expect(results[0]?.status).toBe('failed');
    expect(results[1]?.deviation).toBeUndefined();
  });

  it('lets a fixed deviation pass, reported as fixed, when allowed (--allow-fixed-deviations)', () => {
    const applied = applyBaseline(results, BASELINE, { allowFixed: true });
    expect(applied[1]).toMatchObject({
      status: 'passed',
      deviation: { reason: 'no ping', fixed: true },
      message: expect.stringMatching(
        /^the baseline lists this deviation but it is gone \(answered with a result\); allowed by --allow-fixed-deviations: accept it with `hil baseline accept --from/,
      ),
    });
    expect(applied[0]?.status).toBe('known-deviation');
  });
});

describe('a known deviation must match what was seen', () => {
  it('the default baseline records the shape of each deviation as the check reports it', () => {
    expect(
      loadBaseline(DEFAULT_BASELINE_PATH).deviations.map((d) => [d.check, d.observed]),
    ).toEqual([
      ['robustness.error-code', 'error reply without code'],
      ['robustness.escaped-messages', 'error reply that is invalid JSON'],
      ['robustness.ping', 'error reply "Method not implemented: ping"'],
    ]);
  });

  it('a listed check that failed otherwise (the board stopped answering) stays a failure, saying so', () => {
    const timedOut = result(
      'robustness.error-code',
      'failed',
      'expected the reply to the barrier request within 10000 ms, got none',
    );
    const [applied] = applyBaseline([timedOut], BASELINE);
    expect(applied).toMatchObject({
      status: 'failed',
      message:
        'expected the reply to the barrier request within 10000 ms, got none (the baseline\'s known deviation is "error reply without code"; this failure is not it)',
    });
    expect(applied?.deviation).toBeUndefined();
    const [other] = applyBaseline([{ ...timedOut, observed: 'error reply "x"' }], BASELINE);
    expect(other?.status).toBe('failed');
    expect(other?.message).toMatch(/this failure was seen as "error reply "x""\)$/);
  });

  it('an entry without its shape matches any failure but a board that did not answer', () => {
    const failed = result('robustness.ping', 'failed', 'expected a result');
    const [applied, silent] = applyBaseline(
      [
        { ...failed, observed: 'error reply "y"' },
        { ...failed, observed: 'no reply' },
      ],
      BASELINE,
    );
    expect(applied?.status).toBe('known-deviation');
    expect(silent?.status).toBe('failed');
    expect(silent?.message).toContain('not a board that did not answer');
  });
});

describe('acceptBaselineChanges (hil baseline accept)', () => {
  const file = {
    $schema: './baseline.schema.json',
    description: 'rig A',
    deviations: [
      { check: 'robustness.error-code', reason: 'no code', firmware: '2.4.x' },
      { check: 'robustness.ping', reason: 'no ping' },
      { check: 'robustness.escaped-messages', reason: 'unescaped' },
    ],
  };
  const fixed = (id: string): CheckResult => ({
    ...result(id, 'failed'),
    deviation: { reason: 'x', fixed: true },
  });
  const known = (id: string): CheckResult => ({
    ...result(id, 'known-deviation'),
    deviation: { reason: 'x', fixed: false },
  });

  it('removes a deviation fixed on every board that ran it, keeps one still seen on another board, adds only what is named', () => {
    const report = {
      boards: [
        {
          name: 'a',
          firmwareVersion: '2.5.0',
          checks: [
            fixed('robustness.error-code'),
            fixed('robustness.ping'),
            result('latency.calls', 'failed', 'p50 412 ms over the 100 ms budget'),
            result('tools-call.concurrent', 'failed', 'no reply'),
          ],
        },
        { name: 'b', checks: [fixed('robustness.error-code'), known('robustness.ping')] },
      ],
    };
    const change = acceptBaselineChanges(file, report, ['latency.calls'], 'out/report.json');
    expect(change.removed).toEqual([{ check: 'robustness.error-code', boards: ['a', 'b'] }]);
    expect(change.kept).toEqual([{ check: 'robustness.ping', fixedOn: ['a'], deviatesOn: ['b'] }]);
    expect(change.added).toEqual([
      {
        check: 'latency.calls',
        reason:
          'accepted by hil baseline accept from out/report.json (a): a: p50 412 ms over the 100 ms budget',
        firmware: '2.5.0',
      },
    ]);
    // The file keeps its other members and the entries it keeps, in order; the result is valid.
    expect(change.file).toEqual({
      $schema: './baseline.schema.json',
      description: 'rig A',
      deviations: [file.deviations[1], file.deviations[2], change.added[0]],
    });
    expect(parseBaseline(change.file).deviations).toHaveLength(3);
    // tools-call.concurrent failed too, but nobody named it: it stays a failure.
    expect(change.file.deviations).not.toContainEqual(
      expect.objectContaining({ check: 'tools-call.concurrent' }),
    );
  });

  it('refuses to add a check that did not fail, or one listed already', () => {
    const report = { boards: [{ name: 'a', checks: [result('latency.calls', 'failed', 'slow')] }] };
    expect(() => acceptBaselineChanges(file, report, ['initialize.vision'])).toThrow(
      new BaselineChangeError(
        '--add initialize.vision: it did not fail in report.json (failed: latency.calls)',
      ),
    );
    expect(() => acceptBaselineChanges(file, report, ['robustness.ping'])).toThrow(
      /lists it already/,
    );
    expect(() => acceptBaselineChanges(file, report, ['latency'])).toThrow(/not a check id/);
  });
});

describe('loadBaseline errors name the file and the field', () => {
  const dir = mkdtempSync(join(tmpdir(), 'hil-baseline-'));
  const file = (name: string, text: string) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  };

  it.each([
    ['not JSON', '{"deviations": [', undefined, /is not valid JSON/],
    ['not an object', '[]', undefined, /must be a JSON object/],
    [
      'an unknown member',
      '{"deviations": [], "deviation": []}',
      'deviation',
      /not a baseline member/,
    ],
    ['no deviations', '{}', 'deviations', /deviations must be an array/],
    ['an entry not an object', '{"deviations": ["x"]}', 'deviations[0]', /must be an object/],
    [
      'a check that is not a string',
      '{"deviations": [{"check": 1, "reason": "r"}]}',
      'deviations[0].check',
      /must be a check id string/,
    ],
    [
      'a check without a suite part',
      '{"deviations": [{"check": "ping", "reason": "r"}]}',
      'deviations[0].check',
      /"ping" is not a check id/,
    ],
    [
      'an unknown suite',
      '{"deviations": [{"check": "speed.ping", "reason": "r"}]}',
      'deviations[0].check',
      /"speed\.ping" names no suite/,
    ],
    [
      'an empty reason',
      '{"deviations": [{"check": "robustness.ping", "reason": " "}]}',
      'deviations[0].reason',
      /must be a non-empty string/,
    ],
    [
      'a firmware that is not a string',
      '{"deviations": [{"check": "robustness.ping", "reason": "r", "firmware": 2}]}',
      'deviations[0].firmware',
      /must be a string/,
    ],
    [
      'a misspelt member',
      '{"deviations": [{"check": "robustness.ping", "reson": "r"}]}',
      'deviations[0].reson',
      /not a deviation member/,
    ],
    [
      'a check listed twice',
      '{"deviations": [{"check": "robustness.ping", "reason": "r"}, {"check": "robustness.ping", "reason": "s"}]}',
      'deviations[1].check',
      /listed twice/,
    ],
  ])('%s', (name, text, field, message) => {
    const path = file(`${name.replaceAll(' ', '-')}.json`, text);
    const error = (() => {
      try {
        loadBaseline(path);
      } catch (caught) {
        return caught;
      }
      return undefined;
    })();
    expect(error).toBeInstanceOf(BaselineError);
    expect(error).toMatchObject({ code: 'BASELINE_INVALID', file: path, field });
    expect((error as BaselineError).message).toMatch(message);
    expect((error as BaselineError).message.startsWith(`${path}: `)).toBe(true);
    if (field !== undefined) expect((error as BaselineError).message).toContain(field);
  });

  it('a missing file', () => {
    expect(() => loadBaseline(join(dir, 'missing.json'))).toThrow(/missing\.json: cannot be read/);
  });

  it('accepts $schema and description beside the deviations', () => {
    expect(
      parseBaseline({
        $schema: 'x',
        description: 'y',
        deviations: [{ check: 'robustness.ping', reason: 'r' }],
      }),
    ).toEqual({ deviations: [{ check: 'robustness.ping', reason: 'r' }] });
  });
});
