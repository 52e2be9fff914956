import { describe, expect, it } from 'vitest';
import type { CheckResult } from '../model.js';
import { ConsoleReporter, isLiveTerminal, renderConsoleSummary } from './console.js';
import { fixtureReport, passingReport, ROBOT_BOARD, VIRTUAL_BOARD } from './fixture.test-helper.js';

function capture(
  live: boolean,
  columns = 100,
): { reporter: ConsoleReporter; writes: string[]; clock: { t: number } } {
  const writes: string[] = [];
  const clock = { t: 0 };
  const reporter = new ConsoleReporter({
    write: (text) => writes.push(text),
    live,
    color: false,
    columns,
    now: () => clock.t,
  });
  return { reporter, writes, clock };
}

function check(
  id: string,
  status: CheckResult['status'],
  extra: Partial<CheckResult> = {},
): CheckResult {
  return {
    id,
    suite: 'tools-list',
    description: 'd',
    severity: 'major',
    status,
    message: '',
    durationMs: 1,
    retries: 0,
    ...extra,
  };
}

describe('ConsoleReporter, plain mode', () => {
  it('prints one line per event', () => {
    const { reporter, writes, clock } = capture(false);
    reporter.boardStep(VIRTUAL_BOARD, 'flash', 'running');
    clock.t = 4100;
    reporter.boardStep(VIRTUAL_BOARD, 'flash', 'passed', '1.0 MB at 921600 baud');
    reporter.check(
      ROBOT_BOARD,
      check('tools-list.page-budget', 'failed', {
        message: 'page 2 is over the budget',
        expected: '≤ 8000 bytes by the firmware rule',
        actual: '8123',
      }),
    );
    reporter.check(VIRTUAL_BOARD, check('tools-list.user-only', 'passed'));
    reporter.check(
      VIRTUAL_BOARD,
      check('tools-call.error-code', 'known-deviation', {
        message: 'no code',
        deviation: { reason: 'firmware error replies carry no code', fixed: false },
      }),
    );
    reporter.check(
      VIRTUAL_BOARD,
      check('initialize.vision', 'skipped', { message: 'skipped by the inventory' }),
    );
    reporter.check(VIRTUAL_BOARD, check('tools-call.volume', 'passed', { retries: 2 }));
    reporter.check(
      VIRTUAL_BOARD,
      check('robustness.ping', 'passed', { deviation: { reason: 'no ping', fixed: true } }),
    );
    reporter.boardStep('vanished', 'session', 'failed', 'port vanished', { durationMs: 30_000 });
    reporter.boardStep(ROBOT_BOARD, 'flash', 'passed', '1.0 MB at 115200 baud', {
      durationMs: 850,
      flaky: true,
    });
    reporter.log(ROBOT_BOARD, 'I (1234) wifi: connected\n\u001b[0;32mI (1300) ota: ok\u001b[0m\n');
    expect(writes.join('')).toBe(
      [
        '[bread-compact-wifi] flash …',
        '[bread-compact-wifi] flash ✓ 4.1 s (1.0 MB at 921600 baud)',
        '[robot] tools-list.page-budget ✗ page 2 is over the budget: expected ≤ 8000 bytes by the firmware rule, got 8123',
        '[bread-compact-wifi] tools-list.user-only ✓',
        '[bread-compact-wifi] tools-call.error-code ≈ known deviation: firmware error replies carry no code',
        '[bread-compact-wifi] initialize.vision – skipped: skipped by the inventory',
        '[bread-compact-wifi] tools-call.volume ✓ flaky: passed after 2 retries',
        '[bread-compact-wifi] robustness.ping ✓ known deviation no longer occurs: update the baseline',
        '[vanished] session ✗ 30.0 s port vanished',
        '[robot] flash ✓ ⟳ 850 ms (1.0 MB at 115200 baud; flaky: passed on a retry)',
        '[robot] I (1234) wifi: connected',
        '[robot] I (1300) ota: ok',
        '',
      ].join('\n'),
    );
  });

  it('keeps each event on one line whatever the message holds', () => {
    const { reporter, writes } = capture(false);
    reporter.check(ROBOT_BOARD, check('x.y', 'failed', { message: 'line one\nline two\u0007' }));
    expect(writes).toEqual(['[robot] x.y ✗ line one line two\n']);
  });

  it('ends with the summary: failures, deviations, disappeared deviations, counts, exit code', () => {
    const { reporter, writes } = capture(false);
    reporter.finish(fixtureReport());
    const text = writes.join('');
    // Each board's line says its transport.
    expect(text).toMatch(/✗ robot failed \(otto-robot, .*, over MQTT\)/);
    expect(text).toMatch(/✓ bread-compact-wifi passed \(bread-compact-wifi, .*, over WebSocket\)/);
    const order = [
      '✗ vanished rig failed at session',
      'Failures (3)',
      '  ✗ vanished  rig.session  port /dev/ttyUSB1 vanished while waiting for the hello',
      '  ✗ robot  tools-list.page-budget  [major]\n      page 2 is over the budget: expected ≤ 8000 bytes by the firmware rule, got 8123',
      '  ✗ robot  tools-call.concurrent  [major]\n      reply for id 7 answered id 8\n      failed on all 3 attempts',
      'Known deviations (3)',
      '  ≈ bread-compact-wifi  tools-call.error-code  firmware error replies carry no code (baseline)',
      'Deviations that disappeared (1): remove them from the baseline file',
      '  ↑ bread-compact-wifi  robustness.ping  passes now (baseline: firmware has no ping)',
      'Flaky (1)',
      'Boards: 3 (1 passed, 1 failed, 1 rig failure)',
      'Checks: 10 passed, 2 failed, 3 known deviations, 1 skipped',
      'Exit code 3: the rig failed (board missing, port lost, backend could not start)',
    ];
    let from = 0;
    for (const part of order) {
      const at = text.indexOf(part, from);
      expect(at, part).toBeGreaterThanOrEqual(from);
      from = at + part.length;
    }
    expect(text.includes('\u001b')).toBe(false);
  });

  it('says when all passed, and when the run was interrupted', () => {
    const report = passingReport();
    expect(renderConsoleSummary(report)).toContain(
      'Result: all 7 checks passed, 2 known deviations, 1 deviation fixed (update the baseline)\nExit code 0: all checks passed\n',
    );
    expect(renderConsoleSummary(report)).not.toContain('Failures');
    report.interrupted = true;
    expect(renderConsoleSummary(report)).toContain('Interrupted: the reports hold what ran.');
  });

  it('colours only when asked', () => {
    expect(renderConsoleSummary(fixtureReport(), { color: true })).toContain(
      '\u001b[31mFailures (3)\u001b[0m',
    );
  });
});

describe('ConsoleReporter, live mode', () => {
  it('keeps one status line per board and redraws the block in place', () => {
    const { reporter, writes } = capture(true);
    reporter.boardStep(VIRTUAL_BOARD, 'flash', 'running');
    reporter.boardStep(ROBOT_BOARD, 'boot', 'running');
    reporter.check(VIRTUAL_BOARD, check('tools-list.user-only', 'passed'));
    expect(writes[0]).toBe('[bread-compact-wifi] flash … · ✓ 0 ✗ 0\n');
    // Cursor up to the first status line, clear to the end, draw both lines again.
    expect(writes[1]).toBe(
      '\u001b[1F\u001b[J[bread-compact-wifi] flash … · ✓ 0 ✗ 0\n[robot] boot … · ✓ 0 ✗ 0\n',
    );
    expect(writes[2]).toBe(
      '\u001b[2F\u001b[J[bread-compact-wifi] flash … · ✓ 1 ✗ 0 · tools-list.user-only ✓\n[robot] boot … · ✓ 0 ✗ 0\n',
    );
  });

  it('prints failures above the block so they stay on screen', () => {
    const { reporter, writes } = capture(true);
    reporter.boardStep(ROBOT_BOARD, 'suites', 'running');
    reporter.check(
      ROBOT_BOARD,
      check('tools-list.page-budget', 'failed', { message: 'page 2 is over the budget' }),
    );
    expect(writes[1]).toBe(
      '\u001b[1F\u001b[J[robot] tools-list.page-budget ✗ page 2 is over the budget\n' +
        '[robot] suites … · ✓ 0 ✗ 1 · tools-list.page-budget ✗\n',
    );
  });

  it('truncates the free text to the terminal width', () => {
    const { reporter, writes } = capture(true, 50);
    reporter.log(ROBOT_BOARD, 'x'.repeat(200));
    const line = writes[0]?.trimEnd() ?? '';
    expect([...line].length).toBeLessThanOrEqual(49);
    expect(line.endsWith('…')).toBe(true);
  });

  it('clears the block before the summary', () => {
    const { reporter, writes } = capture(true);
    reporter.boardStep(VIRTUAL_BOARD, 'flash', 'running');
    reporter.boardStep(ROBOT_BOARD, 'flash', 'running');
    reporter.finish(passingReport());
    expect(writes[2]?.startsWith('\u001b[2F\u001b[J\n✓ bread-compact-wifi passed')).toBe(true);
  });
});

describe('isLiveTerminal', () => {
  it('is live on a TTY outside CI only', () => {
    expect(isLiveTerminal({ isTTY: true }, {})).toBe(true);
    expect(isLiveTerminal({ isTTY: true }, { CI: 'true' })).toBe(false);
    expect(isLiveTerminal({ isTTY: true }, { CI: 'false' })).toBe(true);
    expect(isLiveTerminal({ isTTY: true }, { TERM: 'dumb' })).toBe(false);
    expect(isLiveTerminal({ isTTY: false }, {})).toBe(false);
    expect(isLiveTerminal({}, {})).toBe(false);
  });
});
