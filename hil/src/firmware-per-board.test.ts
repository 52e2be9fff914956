/**
 * One image per board: the inventory (a board's `firmware`, or the rig's per variant, relative
 * to the inventory file) and `--firmware BOARD=FILE` give each board its own build, and an image
 * built for another board than the inventory's variant is refused before any board is touched.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { describe, expect, it } from 'vitest';
import { hil } from './hil-main.test-helper.js';
import type { RunReport } from './model.js';

/** A rig of a bread-compact-wifi board and an otto-robot board, and a build of each. */
function rig(inventory: Record<string, unknown> = {}, boards: Record<string, unknown>[] = []) {
  const dir = mkdtempSync(join(tmpdir(), 'hil-images-'));
  mkdirSync(join(dir, 'builds'));
  const bread = join(dir, 'builds', 'bread.bin');
  const otto = join(dir, 'builds', 'otto.bin');
  // Versions of their own, so each board's initialize says which image it runs.
  writeFileSync(
    bread,
    buildVirtualFirmware({ chip: 'esp32s3', version: '2.5.1', board: 'bread-compact-wifi' }).merged,
  );
  writeFileSync(
    otto,
    buildVirtualFirmware({ chip: 'esp32s3', version: '2.6.1', board: 'otto-robot' }).merged,
  );
  const config = join(dir, 'hil.config.json');
  writeFileSync(
    config,
    JSON.stringify({
      ...inventory,
      boards: [
        {
          name: 'desk',
          port: 'virtual:desk',
          chip: 'esp32s3',
          variant: 'bread-compact-wifi',
          session: 'boot-click',
          ...boards[0],
        },
        {
          name: 'robot',
          port: 'virtual:robot',
          chip: 'esp32s3',
          variant: 'otto-robot',
          session: 'boot-click',
          ...boards[1],
        },
      ],
    }),
  );
  return { dir, config, out: join(dir, 'out'), bread, otto };
}

function report(out: string): RunReport {
  return JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
}

/** Each board: the file flashed on it, the version in that file, the version it reported. */
function flashedOn(run: RunReport): (string | undefined)[][] {
  return run.boards.map((b) => [b.name, b.image?.file, b.image?.version, b.firmwareVersion]);
}

/** Refused with exit 2 before any board is touched: no board step, no report, no console log. */
function untouched(result: { code: number; stdout: string }, out: string): void {
  expect(result.code).toBe(2);
  expect(result.stdout).not.toMatch(/\] open /);
  expect(existsSync(join(out, 'report.json'))).toBe(false);
  expect(existsSync(join(out, 'desk', 'console.log'))).toBe(false);
  expect(existsSync(join(out, 'robot', 'console.log'))).toBe(false);
}

describe('hil run flashes each board its own image', () => {
  it('from the inventory: a board its firmware, the others theirs by variant, paths relative to the inventory', {
    timeout: 120_000,
  }, async () => {
    const { config, out, bread, otto } = rig({ firmware: { 'otto-robot': 'builds/otto.bin' } }, [
      { firmware: 'builds/bread.bin' },
    ]);
    // Run from elsewhere: the paths are the inventory's, not the working folder's.
    const result = await hil('run', '--config', config, '--out', out, '--suite', 'initialize');
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const run = report(out);
    expect(flashedOn(run)).toEqual([
      ['desk', bread, '2.5.1', '2.5.1'],
      ['robot', otto, '2.6.1', '2.6.1'],
    ]);
    // Two images: none of them is the run's one firmware.
    expect(run.firmware).toBeUndefined();
    for (const board of run.boards)
      expect(board.checks.find((c) => c.id === 'initialize.variant')?.status).toBe('passed');
  });

  it('from the command line: --firmware BOARD=FILE, each board its own, over the inventory', {
    timeout: 120_000,
  }, async () => {
    // The inventory's image is overridden for robot; desk's comes from the inventory.
    const { config, out, bread, otto } = rig(
      { firmware: { 'bread-compact-wifi': 'builds/bread.bin' } },
      [{}, { firmware: 'builds/none-such.bin' }],
    );
    const result = await hil(
      'run',
      '--config',
      config,
      '--out',
      out,
      '--suite',
      'initialize',
      '--firmware',
      `robot=${otto}`,
    );
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(flashedOn(report(out))).toEqual([
      ['desk', bread, '2.5.1', '2.5.1'],
      ['robot', otto, '2.6.1', '2.6.1'],
    ]);
  });

  it('refuses an image built for another board than the variant, before any board is touched (exit 2)', async () => {
    const { config, out, bread, otto } = rig();
    // One image for every board of a rig of two variants: the mismatch used to show after flashing.
    const every = await hil('run', '--config', config, '--out', out, '--firmware', bread);
    expect(every.stderr).toMatch(
      /^hil: --firmware \S*bread\.bin is a build for board bread-compact-wifi, but the rig's board robot \(otto-robot\) is not: give each board its own image \(--firmware BOARD=FILE, or firmware in the inventory\)/,
    );
    untouched(every, out);
    const swapped = await hil(
      'run',
      '--config',
      config,
      '--out',
      out,
      '--firmware',
      `desk=${otto}`,
      '--firmware',
      `robot=${otto}`,
    );
    expect(swapped.stderr).toMatch(
      /^hil: --firmware desk=\S*otto\.bin is a build for board otto-robot, but the rig's board desk \(bread-compact-wifi\) is not/,
    );
    untouched(swapped, out);
    // The inventory's own images are held to the same rule, named by their field.
    const { config: wrongInventory, out: out2 } = rig({}, [{ firmware: 'builds/otto.bin' }]);
    const inventory = await hil('run', '--config', wrongInventory, '--out', out2);
    expect(inventory.stderr).toMatch(
      /^hil: boards\[0\]\.firmware \S*builds\/otto\.bin is a build for board otto-robot, but the rig's board desk \(bread-compact-wifi\) is not/,
    );
    untouched(inventory, out2);
  });

  it('refuses --firmware BOARD=FILE naming a board the inventory does not have, and an inventory image that is not there (exit 2)', async () => {
    const { config, out, bread } = rig();
    const unknown = await hil(
      'run',
      '--config',
      config,
      '--out',
      out,
      '--firmware',
      `robt=${bread}`,
    );
    expect(unknown.stderr).toMatch(
      /^hil: --firmware robt=\S*bread\.bin: no board robt in the inventory; boards: desk, robot/,
    );
    untouched(unknown, out);
    const twice = await hil(
      'run',
      '--config',
      config,
      '--out',
      out,
      '--firmware',
      bread,
      '--firmware',
      bread,
    );
    expect(twice.stderr).toMatch(/^hil: --firmware names 2 images for every board/);
    untouched(twice, out);
    const { config: missing, out: out2 } = rig({ firmware: { 'otto-robot': 'builds/gone.bin' } });
    const gone = await hil('run', '--config', missing, '--out', out2);
    expect(gone.stderr).toMatch(/^hil: firmware\.otto-robot \S*builds\/gone\.bin: no such file/);
    untouched(gone, out2);
  });
});
