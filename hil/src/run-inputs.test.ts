/**
 * The inputs of `hil run` refused before any board is touched (exit 2): each refusal suggests
 * only what `hil run` itself accepts.
 */
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { hil } from './hil-main.test-helper.js';

function rig(): { dir: string; config: string; out: string } {
  const dir = mkdtempSync(join(tmpdir(), 'hil-inputs-'));
  const config = join(dir, 'hil.config.json');
  writeFileSync(
    config,
    JSON.stringify({
      boards: [
        {
          name: 'desk',
          port: 'virtual:desk',
          chip: 'esp32s3',
          variant: 'bread-compact-wifi',
          virtual: { preset: 'bread-compact-wifi' },
        },
      ],
    }),
  );
  return { dir, config, out: join(dir, 'out') };
}

describe('hil run refuses bad inputs with advice it can follow', () => {
  it('--firmware that is not an image names what hil run flashes, and no option it lacks', async () => {
    const { dir, config, out } = rig();
    const notes = join(dir, 'notes.txt');
    writeFileSync(notes, 'flash the robot on Tuesday\n');
    const result = await hil('run', '--config', config, '--out', out, '--firmware', notes);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(
      /^hil: --firmware \S*notes\.txt is neither a merged image .* nor an app image/,
    );
    // `hil run` has no --offset: that is `hil flash`'s.
    expect(result.stderr).not.toMatch(/--offset/);
    expect(existsSync(join(out, 'report.json'))).toBe(false);
  });

  it('--ota-image that is not an image says the OTA upgrade takes an app image, without --offset', async () => {
    const { dir, config, out } = rig();
    const notes = join(dir, 'notes.txt');
    writeFileSync(notes, 'not an image\n');
    const result = await hil('run', '--config', config, '--out', out, '--ota-image', notes);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^hil: --ota-image \S*notes\.txt is not an app image/);
    expect(result.stderr).not.toMatch(/--offset/);
  });

  it('an inventory whose virtual board has an unknown variant is refused before the backend starts', async () => {
    const { dir, out } = rig();
    const config = join(dir, 'typo.json');
    writeFileSync(
      config,
      JSON.stringify({
        boards: [{ name: 'desk', port: 'virtual:desk', variant: 'bread-compact' }],
      }),
    );
    const result = await hil('run', '--config', config, '--out', out);
    expect(result.stderr).toMatch(
      /^hil: \S*typo\.json: boards\[0\]\.variant "bread-compact" is not a virtual board's; known variants: bread-compact-wifi, otto-robot/,
    );
    expect(result.code).toBe(2);
    expect(existsSync(join(out, 'report.json'))).toBe(false);
  });

  it('--reporter that is unknown lists each reporter once', async () => {
    const { config, out } = rig();
    const result = await hil('run', '--config', config, '--out', out, '--reporter', 'pdf');
    expect(result.code).toBe(2);
    const listed = /reporters: (.*)$/m.exec(result.stderr)?.[1]?.split(', ');
    expect(listed).toEqual(['console', 'junit', 'json', 'html', 'openmetrics', 'github']);
  });
});
