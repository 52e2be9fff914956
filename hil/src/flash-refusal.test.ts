/**
 * `hil run` on virtual boards whose chips' eFuses forbid the build: the flash step refuses it
 * before a byte is written, names the reason, and the run exits 2 (bad input), not 3.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { hil } from './hil-main.test-helper.js';
import type { BoardConfig } from './inventory.js';
import type { RunReport } from './model.js';

const board = (name: string, virtual: NonNullable<BoardConfig['virtual']>): BoardConfig => ({
  name,
  port: `virtual:${name}`,
  chip: 'esp32s3',
  variant: 'bread-compact-wifi',
  session: 'boot-click',
  virtual: { preset: 'bread-compact-wifi', ...virtual },
});

describe('hil run on a board whose eFuses forbid the build', () => {
  it('refuses the merged image on Secure Boot and on release-mode flash encryption, before writing, and exits 2', {
    timeout: 120_000,
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-refused-'));
    const config = join(dir, 'hil.config.json');
    const out = join(dir, 'out');
    writeFileSync(
      config,
      JSON.stringify({
        wifi: { ssid: 'lab' },
        boards: [
          board('secure', { secureBoot: true }),
          board('encrypted', { flashEncryption: true }),
        ],
      }),
    );
    const result = await hil('run', '--config', config, '--out', out, '--suite', 'initialize');
    expect(result.code).toBe(2);
    const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    expect(report.exitCode).toBe(2);
    const [secure, encrypted] = report.boards;
    expect(secure?.failure).toMatchObject({
      step: 'flash',
      refused: true,
      reason: expect.stringMatching(
        /^refusing to flash \/dev\/ttyVIRT\d: Secure Boot is enabled: the ROM refuses a bootloader written at 0x0\.\.0x7fff \(part 1 at 0x0 starts there\); flash only the app and partition table at their offsets \(or use espsecure\)$/,
      ),
    });
    expect(encrypted?.failure).toMatchObject({
      step: 'flash',
      refused: true,
      reason: expect.stringContaining(
        'flash encryption is on and encrypted download is disabled: a plaintext image would boot-loop',
      ),
    });
    for (const b of [secure, encrypted]) {
      // Identified (the chip read), then refused at flash: nothing after it ran but the close.
      expect(b?.steps.map((s) => [s.step, s.status])).toEqual([
        ['open', 'passed'],
        ['identify', 'passed'],
        ['flash', 'failed'],
        ['close', 'passed'],
      ]);
      expect(b?.checks).toEqual([]);
    }
    expect(result.stdout).toMatch(/refused at flash/);
    expect(result.stdout).toMatch(/Exit code 2/);
  });
});
