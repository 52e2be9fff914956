/**
 * The release gate holds: every firmware regression planted in a virtual board makes
 * `hil run` exit 1, naming the check that caught it. One board per run, only the suites the
 * regression needs; the runs go in parallel. The regressions are the virtual board's own
 * (`faults.regressions`, packages/device/src/virtual-board/regressions.ts), set through the
 * inventory as a user would; a wrong board's build is planted the way it happens, by flashing it.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REGRESSION_NAMES, type RegressionName } from '@xiaozhi-mcp/device/testing';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { describe, expect, it } from 'vitest';
import { main } from './cli.js';
import type { BoardConfig } from './inventory.js';
import type { RunReport, SuiteName } from './model.js';
import { renderGithubSummary } from './reporters/github.js';

type Preset = 'bread-compact-wifi' | 'otto-robot';

interface Planted {
  /** A regression of the board's firmware, or a build for another board flashed onto it. */
  readonly plant: RegressionName | { readonly flash: Preset };
  /** The check that must fail (`session.*`: the session start's, before any suite). */
  readonly check: string;
  readonly suites: readonly SuiteName[];
  /** The tool-rich board pages; the paging regressions need it. */
  readonly preset?: Preset;
}

const TABLE: readonly Planted[] = [
  { plant: 'slow-calls', check: 'latency.calls', suites: ['latency'] },
  { plant: 'error-code', check: 'robustness.error-code', suites: ['robustness'] },
  { plant: 'hello-no-mcp', check: 'session.hello-mcp', suites: ['initialize'] },
  { plant: 'unknown-cursor-page', check: 'tools-list.unknown-cursor', suites: ['tools-list'] },
  { plant: 'tool-silent', check: 'tools-call.safe-tools', suites: ['tools-call'] },
  {
    plant: 'tool-vanishes',
    check: 'tools-list.stable',
    suites: ['tools-list'],
    preset: 'otto-robot',
  },
  {
    plant: 'cursor-skips-tool',
    check: 'tools-list.cursor-continues',
    suites: ['tools-list'],
    preset: 'otto-robot',
  },
  {
    plant: 'page-oversize',
    check: 'tools-list.page-budget',
    suites: ['tools-list'],
    preset: 'otto-robot',
  },
  {
    plant: 'page-not-maximal',
    check: 'tools-list.page-maximal',
    suites: ['tools-list'],
    preset: 'otto-robot',
  },
  // The session start's walk already refuses it (tools-list.cursors would too).
  {
    plant: 'cursor-last-tool',
    check: 'session.tools-walk',
    suites: ['tools-list'],
    preset: 'otto-robot',
  },
  { plant: 'user-tools-never', check: 'tools-list.user-only', suites: ['tools-list'] },
  { plant: 'user-tools-always', check: 'tools-list.user-only', suites: ['tools-list'] },
  { plant: 'protocol-version', check: 'initialize.protocol-version', suites: ['initialize'] },
  { plant: 'no-server-info', check: 'session.initialize', suites: ['initialize'] },
  { plant: 'no-capabilities', check: 'initialize.reply-shape', suites: ['initialize'] },
  { plant: 'range-unchecked', check: 'tools-call.argument-errors', suites: ['tools-call'] },
  { plant: 'wrong-id', check: 'tools-call.reply-id', suites: ['tools-call'] },
  { plant: 'answers-notifications', check: 'robustness.notification', suites: ['robustness'] },
  {
    plant: { flash: 'bread-compact-wifi' },
    check: 'initialize.variant',
    suites: ['initialize'],
    preset: 'otto-robot',
  },
];

function label(row: Planted): string {
  return typeof row.plant === 'string' ? row.plant : `a ${row.plant.flash} build`;
}

/** One `hil run` of one virtual board: its exit code and report. */
async function hilRun(
  preset: Preset,
  suites: readonly SuiteName[],
  options: {
    regressions?: readonly RegressionName[];
    flash?: Preset;
    /** `--reporter` (default json). */
    reporters?: readonly string[];
  } = {},
): Promise<{ code: number; report: RunReport; output: string; out: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'hil-regression-'));
  const board: BoardConfig = {
    name: 'dut',
    port: 'virtual:dut',
    chip: 'esp32s3',
    // A planted build for another board is judged after flashing (initialize.variant): the
    // board names no variant, or the image would be refused before any board is touched.
    ...(options.flash === undefined ? { variant: preset } : {}),
    session: 'boot-click',
    // Fewer calls and a shorter sweep timeout, to keep the runs short; no latency budget:
    // the default one applies.
    latency: { calls: 5, warmup: 1 },
    safeToolTimeoutMs: 1000,
    virtual: {
      preset,
      ...(options.regressions === undefined
        ? {}
        : { faults: { regressions: options.regressions } }),
    },
  };
  const config = join(dir, 'hil.config.json');
  writeFileSync(config, JSON.stringify({ wifi: { ssid: 'lab' }, boards: [board] }));
  const reporters = options.reporters ?? ['json'];
  const argv = [
    'run',
    '--config',
    config,
    '--out',
    join(dir, 'out'),
    '--reporter',
    reporters.join(','),
  ];
  argv.push('--suite', suites.join(','));
  if (options.flash !== undefined) {
    const firmware = join(dir, 'firmware.bin');
    const built = buildVirtualFirmware({ chip: 'esp32s3', version: '2.4.2', board: options.flash });
    writeFileSync(firmware, built.merged);
    argv.push('--firmware', firmware);
  }
  let output = '';
  const write = (text: string) => {
    output += text;
  };
  const code = await main(argv, { stdout: write, stderr: write });
  const report = JSON.parse(readFileSync(join(dir, 'out', 'report.json'), 'utf8')) as RunReport;
  return { code, report, output, out: join(dir, 'out') };
}

describe.concurrent('every planted firmware regression fails hil run, naming its check', () => {
  it('covers every regression the virtual board has', () => {
    const planted = TABLE.flatMap((row) => (typeof row.plant === 'string' ? [row.plant] : []));
    expect([...planted].sort()).toEqual([...REGRESSION_NAMES].sort());
  });

  it.each(['bread-compact-wifi', 'otto-robot'] as const)(
    'control: a %s board without regressions passes the same suites (exit 0)',
    async (preset) => {
      const suites = [
        ...new Set(
          TABLE.filter((row) => (row.preset ?? 'bread-compact-wifi') === preset).flatMap(
            (row) => row.suites,
          ),
        ),
      ];
      const { code, report, output } = await hilRun(preset, suites);
      expect(code, output).toBe(0);
      expect(report.boards[0]?.checks.filter((c) => c.status === 'failed')).toEqual([]);
    },
  );

  it.each(TABLE.map((row) => [label(row), row] as const))('%s', async (_, row) => {
    const { code, report, output } = await hilRun(
      row.preset ?? 'bread-compact-wifi',
      row.suites,
      typeof row.plant === 'string' ? { regressions: [row.plant] } : { flash: row.plant.flash },
    );
    const board = report.boards[0];
    const failed = board?.checks.filter((c) => c.status === 'failed').map((c) => c.id);
    expect({ code, failed }, output).toEqual({
      code: 1,
      failed: expect.arrayContaining([row.check]),
    });
    expect(board?.status).toBe('failed');
  });
});

describe('a board that stops answering mid-suite', () => {
  it('has its later checks skipped at once, naming where it stopped, so one check at most waits out its reply deadline, the first failure named as the root cause at the top of every report', async () => {
    // Replies under the wrong id: robustness's barrier is a tools/call, so its first probe
    // gets no reply; before, each of the following checks waited out its own 10 s.
    const { code, report, output, out } = await hilRun(
      'bread-compact-wifi',
      ['tools-call', 'robustness'],
      {
        regressions: ['wrong-id', 'error-code'],
        reporters: ['console', 'json', 'html', 'junit'],
      },
    );
    expect(code, output).toBe(1);
    const checks = report.boards[0]?.checks ?? [];
    const first = checks.findIndex((c) => c.status === 'failed');
    expect(checks[first]?.id).toBe('tools-call.reply-id');
    const stopped = checks.findIndex((c) => c.id === 'robustness.string-id');
    expect(checks[stopped]).toMatchObject({ status: 'failed', observed: 'no reply' });
    const later = checks.slice(stopped + 1).filter((c) => c.suite === 'robustness');
    expect(later.map((c) => c.id)).toContain('robustness.error-code');
    for (const check of later)
      expect(check, check.id).toMatchObject({
        status: 'skipped',
        message: 'the board stopped answering at robustness.string-id',
        durationMs: 0,
      });
    // From the first failure on, only the check the board stopped answering at waits out a
    // reply's 10 s (a literal: the suites' deadline); a wait is the mechanism checked, not the
    // wall clock, which a busy machine stretches.
    const waitedOut = checks.slice(first).filter((c) => c.durationMs >= 10_000);
    expect(waitedOut.map((c) => c.id).filter((id) => id !== 'robustness.string-id')).toEqual([]);

    // The first failure is the run's root cause, with what it explains after it.
    const cause = report.summary.rootCause;
    expect(cause).toMatchObject({
      board: 'dut',
      check: 'tools-call.reply-id',
      stoppedAnsweringAt: 'robustness.string-id',
      skipped: later.length,
      laterFailures: 1,
    });
    // Placed within the run by the report's own times.
    const end = Date.parse(report.startedAt) + report.durationMs;
    expect(Date.parse(cause?.at ?? '')).toBeLessThanOrEqual(end);
    expect(Date.parse(cause?.at ?? '')).toBeGreaterThan(Date.parse(report.startedAt));

    // Named at the top of every report.
    const named =
      /^Root cause:? dut tools-call\.reply-id: expected each reply under its request's id/;
    const summary = output.split('\n').filter((l) => l !== '' && !l.startsWith('[dut]'));
    expect(summary[0]).toMatch(named);
    const html = readFileSync(join(out, 'report.html'), 'utf8');
    const banner =
      /<p class="root-cause" data-testid="root-cause"><b>Root cause:<\/b> (.*?)<\/p>/.exec(html);
    expect(`Root cause: ${banner?.[1] ?? ''}`.replace(/&#39;/g, "'")).toMatch(named);
    // In the banner, before the counts and the boards' cards.
    expect(html.indexOf('data-testid="root-cause"')).toBeGreaterThan(0);
    expect(html.indexOf('data-testid="root-cause"')).toBeLessThan(
      html.indexOf('<ul class="tiles">'),
    );
    const markdown = renderGithubSummary(report)
      .split('\n')
      .filter((l) => l !== '');
    expect(markdown[0]).toMatch(/^## ❌ hil: 2 checks failed/);
    expect(markdown[1]?.replace('**Root cause:**', 'Root cause:').replace(/\\(.)/g, '$1')).toMatch(
      named,
    );
    const junit = readFileSync(join(out, 'junit.xml'), 'utf8');
    expect(junit).toMatch(
      /<property name="run.rootCause" value="dut tools-call\.reply-id: expected each reply/,
    );
  }, 120_000);
});
