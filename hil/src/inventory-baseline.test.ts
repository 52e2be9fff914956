/**
 * The inventory's `baseline` (relative to the inventory file) is the baseline `hil run` applies;
 * `--baseline` overrides it.
 */
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { hil } from './hil-main.test-helper.js';
import type { RunReport } from './model.js';

describe("the inventory's baseline", () => {
  it('is the one the run applies, from the inventory folder, unless --baseline says otherwise', {
    timeout: 120_000,
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-inv-baseline-'));
    mkdirSync(join(dir, 'rig'));
    // No known deviation: robustness's three firmware deviations fail as such.
    writeFileSync(join(dir, 'rig', 'strict.json'), JSON.stringify({ deviations: [] }));
    const config = join(dir, 'rig', 'hil.config.json');
    writeFileSync(
      config,
      JSON.stringify({
        baseline: 'strict.json',
        boards: [
          {
            name: 'desk',
            port: 'virtual:desk',
            chip: 'esp32s3',
            variant: 'bread-compact-wifi',
            session: 'boot-click',
          },
        ],
      }),
    );
    const out = join(dir, 'out');
    const strict = await hil('run', '--config', config, '--out', out, '--suite', 'robustness');
    expect(strict.stderr).toBe('');
    const run = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    expect(run.baseline).toBe(join(dir, 'rig', 'strict.json'));
    expect(strict.code).toBe(1);
    expect(run.boards[0]?.checks.filter((c) => c.status === 'failed').map((c) => c.id)).toEqual([
      'robustness.error-code',
      'robustness.escaped-messages',
      'robustness.ping',
    ]);

    // --baseline wins: the shipped baseline lists the three, so they are known deviations.
    const shipped = join(import.meta.dirname, '..', 'baseline.json');
    const lenient = await hil(
      'run',
      '--config',
      config,
      '--out',
      out,
      '--suite',
      'robustness',
      '--baseline',
      shipped,
    );
    expect(lenient.code).toBe(0);
    const again = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    expect(again.baseline).toBe(shipped);
  });
});
