import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  applyBaseline,
  type Baseline,
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
    { check: 'robustness.error-code', reason: 'no code' },
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
  it('turns a listed failure into a known deviation and flags a listed pass as fixed', () => {
    const results = [
      result('robustness.error-code', 'failed', 'expected a code, got none'),
      result('robustness.ping', 'passed', 'answered with a result'),
      result('latency.ping', 'skipped', 'no calls'),
      result('robustness.alive', 'failed', 'no reply'),
      result('robustness.string-id', 'passed'),
    ];
    const applied = applyBaseline(results, BASELINE);
    expect(applied.map((c) => [c.id, c.status, c.deviation])).toEqual([
      ['robustness.error-code', 'known-deviation', { reason: 'no code', fixed: false }],
      ['robustness.ping', 'passed', { reason: 'no ping', fixed: true }],
      ['latency.ping', 'skipped', undefined],
      ['robustness.alive', 'failed', undefined],
      ['robustness.string-id', 'passed', undefined],
    ]);
    // The failure still says what came back; the fixed one says to update the baseline.
    expect(applied[0]?.message).toBe('expected a code, got none');
    expect(applied[1]?.message).toBe(`answered with a result; ${FIXED_DEVIATION_NOTE}`);
    // The input is left as it was.
    expect(results[0]?.status).toBe('failed');
    expect(results[1]?.deviation).toBeUndefined();
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
