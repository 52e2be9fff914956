import { describe, expect, it } from 'vitest';
import { headline, type RunReport } from '../model.js';
import { fixtureReport } from './fixture.test-helper.js';
import { renderJson } from './json.js';

/** The same object with every object's keys in reverse insertion order. */
function reversed(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reversed);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(
    Object.entries(value)
      .reverse()
      .map(([k, v]) => [k, reversed(v)]),
  );
}

describe('renderJson', () => {
  it('round-trips the whole report', () => {
    const report = fixtureReport();
    // With the headline every report leads with, derived from the rest.
    expect(JSON.parse(renderJson(report))).toEqual({ ...report, headline: headline(report) });
  });

  it('is pretty, ends with a newline and keeps samples on one line', () => {
    const text = renderJson(fixtureReport());
    expect(
      text.startsWith(
        '{\n  "tool": {\n    "name": "hil",\n    "version": "0.1.0"\n  },\n  "startedAt"',
      ),
    ).toBe(true);
    expect(text.endsWith('}\n')).toBe(true);
    expect(text).toMatch(/\n {10}"valuesMs": \[4\.49, 3\.75, 4\.36, [\d., ]+\],?\n/);
    expect(text).toContain('"suites": [\n    "initialize",');
  });

  it('puts keys in the same order whatever order the rig built the objects in', () => {
    const report = fixtureReport();
    const shuffled = reversed(report) as RunReport;
    expect(renderJson(shuffled)).toBe(renderJson(report));
    const parsed = JSON.parse(renderJson(shuffled)) as Record<string, unknown>;
    expect(Object.keys(parsed)).toEqual([
      'tool',
      'startedAt',
      'durationMs',
      'exitCode',
      'headline',
      'interrupted',
      'summary',
      'rig',
      'server',
      'firmware',
      'suites',
      'boards',
    ]);
    const board = (parsed.boards as Record<string, unknown>[])[2] ?? {};
    expect(Object.keys(board)).toEqual([
      'name',
      'kind',
      'status',
      'failure',
      'port',
      'chip',
      'mac',
      'variant',
      'startedAt',
      'durationMs',
      'consoleLog',
      'steps',
      'checks',
      'latency',
    ]);
    // The transport beside the board's identity.
    const robot = Object.keys((parsed.boards as Record<string, unknown>[])[1] ?? {});
    expect(robot.indexOf('transport')).toBe(robot.indexOf('variant') + 1);
  });

  it('sorts keys it does not know (check data, future fields)', () => {
    const report = fixtureReport();
    const check = report.boards[0]?.checks[9];
    if (check === undefined) throw new Error('fixture');
    Object.assign(check, { data: { zeta: 1, alpha: { y: 2, x: 1 } } });
    Object.assign(report, { zz: true, aa: false });
    const text = renderJson(report);
    expect(text).toContain(
      '"data": {\n            "alpha": {\n              "x": 1,\n              "y": 2\n            },\n            "zeta": 1',
    );
    expect(text.indexOf('"aa"')).toBeGreaterThan(text.indexOf('"boards"'));
    expect(text.indexOf('"zz"')).toBeGreaterThan(text.indexOf('"aa"'));
  });
});
