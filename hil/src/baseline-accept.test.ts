/**
 * Baseline changes need a person (docs/hil.md §3): a known deviation the board no longer has
 * fails the run, naming the check and the command that accepts the change;
 * `--allow-fixed-deviations` lets it pass; `hil baseline accept` rewrites the baseline, and the
 * next run passes. Planted with a baseline listing a deviation the virtual board does not have.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { hil } from './hil-main.test-helper.js';
import type { BoardConfig } from './inventory.js';
import type { CheckResult, RunReport } from './model.js';

const board: BoardConfig = {
  name: 'bread',
  port: 'virtual:bread',
  chip: 'esp32s3',
  variant: 'bread-compact-wifi',
  session: 'boot-click',
  virtual: { preset: 'bread-compact-wifi' },
  // A budget no board keeps: latency.calls fails (the check `--add` accepts).
  latency: { calls: 5, warmup: 1, p50Ms: 0.001 },
};

function setup(): { dir: string; config: string; baseline: string } {
  const dir = mkdtempSync(join(tmpdir(), 'hil-baseline-'));
  const config = join(dir, 'hil.config.json');
  writeFileSync(config, JSON.stringify({ wifi: { ssid: 'lab' }, boards: [board] }));
  const baseline = join(dir, 'baseline.json');
  writeFileSync(
    baseline,
    `${JSON.stringify(
      {
        description: 'this rig',
        deviations: [
          // The virtual board answers 2024-11-05: this deviation is gone.
          {
            check: 'initialize.protocol-version',
            reason: 'an old build answered 2024-10-07',
            firmware: '2.3.x',
          },
        ],
      },
      null,
      2,
    )}\n`,
  );
  return { dir, config, baseline };
}

function checkOf(out: string, id: string): CheckResult {
  const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
  const check = report.boards[0]?.checks.find((c) => c.id === id);
  if (check === undefined) throw new Error(`no check ${id} in ${out}`);
  return check;
}

describe('a known deviation that disappears', () => {
  it('fails the run (exit 1) naming the check and the accept command; hil baseline accept rewrites the baseline and the next run passes', async () => {
    const { dir, config, baseline } = setup();
    const run = (out: string, ...more: string[]) =>
      hil(
        'run',
        '--config',
        config,
        '--suite',
        'initialize,latency',
        '--baseline',
        baseline,
        '--out',
        join(dir, out),
        '--reporter',
        'console,json',
        ...more,
      );

    const first = await run('first');
    expect(first.code).toBe(1);
    const fixed = checkOf(join(dir, 'first'), 'initialize.protocol-version');
    expect(fixed).toMatchObject({
      status: 'failed',
      deviation: { fixed: true, reason: 'an old build answered 2024-10-07' },
    });
    const accept = `hil baseline accept --from ${join(dir, 'first', 'report.json')} --baseline ${baseline}`;
    expect(fixed.message).toContain('the deviation is fixed');
    expect(fixed.message).toContain(accept);
    expect(fixed.message).toContain('--allow-fixed-deviations');
    expect(first.stdout).toContain('initialize.protocol-version');
    expect(checkOf(join(dir, 'first'), 'latency.calls').status).toBe('failed');

    // A check that did not fail cannot be added; the baseline is left alone (exit 2).
    const wrong = await hil(
      'baseline',
      'accept',
      '--from',
      join(dir, 'first'),
      '--add',
      'initialize.vision',
    );
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toMatch(
      /--add initialize\.vision: it did not fail .*failed: .*latency\.calls/,
    );
    expect(readFileSync(baseline, 'utf8')).toContain('initialize.protocol-version');

    // A person accepts: the fixed deviation leaves, the named failure becomes a known one. The
    // report says which baseline the run used, so --baseline may be left out.
    const accepted = await hil(
      'baseline',
      'accept',
      '--from',
      join(dir, 'first', 'report.json'),
      '--add',
      'latency.calls',
    );
    expect(accepted.stderr).toBe('');
    expect(accepted.code).toBe(0);
    expect(accepted.stdout).toContain('- removed initialize.protocol-version: fixed on bread');
    expect(accepted.stdout).toContain('+ added latency.calls');
    expect(accepted.stdout).toContain(`wrote ${baseline}: 1 → 1 deviations`);
    const rewritten = JSON.parse(readFileSync(baseline, 'utf8')) as {
      description: string;
      deviations: { check: string; reason: string }[];
    };
    expect(rewritten.description).toBe('this rig');
    expect(rewritten.deviations.map((d) => d.check)).toEqual(['latency.calls']);
    expect(rewritten.deviations[0]?.reason).toMatch(
      /^accepted by hil baseline accept from .*: bread: /,
    );

    const second = await run('second');
    expect(second.code).toBe(0);
    expect(checkOf(join(dir, 'second'), 'initialize.protocol-version').status).toBe('passed');
    expect(checkOf(join(dir, 'second'), 'latency.calls').status).toBe('known-deviation');
  });

  it('passes with --allow-fixed-deviations, reported as fixed', async () => {
    const { dir, config, baseline } = setup();
    const out = join(dir, 'out');
    const result = await hil(
      'run',
      '--config',
      config,
      '--suite',
      'initialize',
      '--baseline',
      baseline,
      '--out',
      out,
      '--reporter',
      'console,json',
      '--allow-fixed-deviations',
    );
    expect(result.code).toBe(0);
    expect(checkOf(out, 'initialize.protocol-version')).toMatchObject({
      status: 'passed',
      deviation: { fixed: true },
      message: expect.stringContaining('allowed by --allow-fixed-deviations'),
    });
    const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    expect(report.summary.fixedDeviations).toBe(1);
    expect(report.baseline).toBe(baseline);
  });
});
