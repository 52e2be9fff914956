/**
 * The report tells the whole story (docs/hil.md §4): which image was flashed (file, SHA-256,
 * project, version, the board it is built for), the candidate `ota-upgrade` offered and the
 * version the board runs after it, the host and the tool's version, in report.json, the HTML
 * page, JUnit's properties and the console summary.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { describe, expect, it } from 'vitest';
import { hil } from './hil-main.test-helper.js';
import type { BoardConfig } from './inventory.js';
import type { RunReport } from './model.js';

const packageVersion = (
  JSON.parse(
    readFileSync(
      join(resolve(dirname(fileURLToPath(import.meta.url)), '..'), 'package.json'),
      'utf8',
    ),
  ) as { version: string }
).version;

const board: BoardConfig = {
  name: 'bread',
  port: 'virtual:bread',
  chip: 'esp32s3',
  variant: 'bread-compact-wifi',
  session: 'boot-click',
  virtual: { preset: 'bread-compact-wifi' },
};

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

describe('the report tells the whole story', () => {
  it('names the flashed image, the candidate, the version after ota-upgrade, the host and the tool', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-story-'));
    const config = join(dir, 'hil.config.json');
    writeFileSync(config, JSON.stringify({ wifi: { ssid: 'lab' }, boards: [board] }));
    const build = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '2.4.2',
      board: 'bread-compact-wifi',
    });
    const next = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '2.4.3',
      board: 'bread-compact-wifi',
    });
    const firmware = join(dir, 'merged-binary.bin');
    const candidate = join(dir, 'xiaozhi.bin');
    writeFileSync(firmware, build.merged);
    writeFileSync(candidate, next.app);
    const out = join(dir, 'out');
    const result = await hil(
      'run',
      '--config',
      config,
      '--out',
      out,
      '--firmware',
      firmware,
      '--ota-image',
      candidate,
      '--suite',
      'initialize,ota-upgrade',
    );
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);

    const run = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    expect(run.tool).toEqual({ name: 'hil', version: packageVersion });
    expect(run.host).toEqual({
      hostname: hostname(),
      os: expect.stringContaining(process.platform),
      node: process.version,
    });
    const flashed = {
      file: firmware,
      sha256: sha256(build.merged),
      bytes: build.merged.length,
      kind: 'merged',
      project: 'xiaozhi',
      version: '2.4.2',
      board: 'bread-compact-wifi',
      chip: 'esp32s3',
    };
    expect(run.firmware).toEqual(flashed);
    expect(run.otaImage).toEqual({
      file: candidate,
      sha256: sha256(next.app),
      bytes: next.app.length,
      kind: 'app',
      project: 'xiaozhi',
      version: '2.4.3',
      board: 'bread-compact-wifi',
      chip: 'esp32s3',
    });
    const [bread] = run.boards;
    expect(bread?.image).toEqual(flashed);
    expect(bread?.firmwareVersion).toBe('2.4.2');
    expect(bread?.upgradedVersion).toBe('2.4.3');

    const junit = readFileSync(join(out, 'junit.xml'), 'utf8');
    for (const [name, value] of [
      ['firmwareVersion', '2.4.2'],
      ['upgradedVersion', '2.4.3'],
      ['image.file', firmware],
      ['image.sha256', flashed.sha256],
      ['image.project', 'xiaozhi'],
      ['image.version', '2.4.2'],
      ['image.board', 'bread-compact-wifi'],
      ['otaImage.version', '2.4.3'],
      ['host', hostname()],
      ['host.node', process.version],
      ['tool', `hil ${packageVersion}`],
    ])
      expect(junit).toContain(`<property name="${name}" value="${value}"/>`);

    const html = readFileSync(join(out, 'report.html'), 'utf8');
    expect(html).toContain(flashed.sha256);
    expect(html).toContain(sha256(next.app));
    expect(html).toContain('<dt>After ota-upgrade</dt><dd>2.4.3</dd>');
    expect(html).toContain(`<dt>Host</dt><dd>${hostname()} (`);
    expect(html).toMatch(/xiaozhi 2\.4\.2 for bread-compact-wifi \(esp32s3\), merged image/);

    expect(result.stdout).toMatch(
      /Flashed: xiaozhi 2\.4\.2 for bread-compact-wifi \(esp32s3\), merged image, \d+ KB, SHA-256 [0-9a-f]{12}…; .*merged-binary\.bin/,
    );
    expect(result.stdout).toMatch(
      /OTA candidate: xiaozhi 2\.4\.3 for bread-compact-wifi .*xiaozhi\.bin/,
    );
    expect(result.stdout).toMatch(/✓ bread passed \(bread-compact-wifi, 2\.4\.2 → 2\.4\.3, /);
    expect(result.stdout).toContain(`Ran on ${hostname()} (`);
  });

  it('names the image the virtual rig built for each board', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-story-'));
    const config = join(dir, 'hil.config.json');
    writeFileSync(config, JSON.stringify({ wifi: { ssid: 'lab' }, boards: [board] }));
    const out = join(dir, 'out');
    const result = await hil('run', '--config', config, '--out', out, '--suite', 'session');
    expect(result.code).toBe(0);
    const run = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    expect(run.firmware).toBeUndefined();
    expect(run.boards[0]?.image).toMatchObject({
      file: 'virtual firmware built by hil',
      sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
      project: 'xiaozhi',
      version: '2.4.2',
      board: 'bread-compact-wifi',
    });
    expect(result.stdout).toMatch(/ {4}flashed: xiaozhi 2\.4\.2 for bread-compact-wifi/);
  });
});
