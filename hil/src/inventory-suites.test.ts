/**
 * The inventory's `suites` choose what `hil run` runs on its rig; `--suite` overrides them.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { hil } from './hil-main.test-helper.js';
import type { RunReport } from './model.js';

function rig(suites: readonly string[]): { config: string; out: string } {
  const dir = mkdtempSync(join(tmpdir(), 'hil-suites-'));
  const config = join(dir, 'hil.config.json');
  writeFileSync(
    config,
    JSON.stringify({
      suites,
      boards: [
        {
          name: 'desk',
          port: 'virtual:desk',
          chip: 'esp32s3',
          variant: 'bread-compact-wifi',
          session: 'boot-click',
          virtual: { preset: 'bread-compact-wifi' },
        },
      ],
    }),
  );
  return { config, out: join(dir, 'out') };
}

function ran(out: string): { suites: readonly string[]; checked: string[] } {
  const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
  const checked = [...new Set(report.boards.flatMap((b) => b.checks.map((c) => c.suite)))];
  return { suites: report.suites, checked };
}

describe("the inventory's suites", () => {
  it('are the suites the run runs when --suite is not given', { timeout: 120_000 }, async () => {
    const { config, out } = rig(['initialize']);
    const result = await hil('run', '--config', config, '--out', out);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    // Not the defaults, nor the virtual rig's ota-upgrade: what the inventory says.
    expect(ran(out)).toEqual({
      suites: ['session', 'initialize'],
      checked: ['session', 'initialize'],
    });
  });

  it('give way to --suite', { timeout: 120_000 }, async () => {
    const { config, out } = rig(['initialize']);
    const result = await hil('run', '--config', config, '--out', out, '--suite', 'tools-list');
    expect(result.code).toBe(0);
    expect(ran(out)).toEqual({
      suites: ['session', 'tools-list'],
      checked: ['session', 'tools-list'],
    });
  });
});
