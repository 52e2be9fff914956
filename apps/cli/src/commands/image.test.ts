import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { describe, expect, it } from 'vitest';
import { runCli } from '../io.test-helper.js';

const images = join(
  resolve(dirname(fileURLToPath(import.meta.url)), '../../../..'),
  'fixtures/corpus/images',
);
const dir = mkdtempSync(join(tmpdir(), 'xz-image-'));

describe('xiaozhi-mcp image info', () => {
  it('describes the real corpus app image: chip, version, IDF, sha', async () => {
    const out = await runCli('image', 'info', join(images, 'esp_idf_blink_esp32s2.bin'));
    expect(out.code).toBe(0);
    expect(out.stdout).toMatch(/app image, 182368 bytes, sha256 [0-9a-f]{64}/);
    expect(out.stdout).toContain('chip esp32s2, blink qa-test-v5.0-20220830-4-g4532e6');
    expect(out.stdout).toContain('IDF v5.0-beta1-427-g4532e6e0b2-dirt');
    expect(out.stdout).toContain(
      'ELF sha256 3059e6b55a965865febd28fa9f6028ad5cd0dab311febb0a3ea79eaa223ac2b0',
    );
    expect(out.stdout).toContain('checksum ok, hash ok');
  });

  it('describes a merged image with its bootloader, partitions and app, also as JSON', async () => {
    const path = join(dir, 'merged.bin');
    writeFileSync(
      path,
      buildVirtualFirmware({ chip: 'esp32s3', version: '2.6.0', board: 'bread-compact-wifi' })
        .merged,
    );
    const text = await runCli('image', 'info', path);
    expect(text.stdout).toContain('bootloader at 0x0 (esp32s3, checksum ok)');
    expect(text.stdout).toContain('app in ota_0 at 0x20000:');
    expect(text.stdout).toContain('chip esp32s3, xiaozhi 2.6.0 for bread-compact-wifi');
    const json = JSON.parse((await runCli('image', 'info', path, '--json')).stdout);
    expect(json).toMatchObject({
      kind: 'merged',
      chip: 'esp32s3',
      apps: [{ partition: 'ota_0', version: '2.6.0', board: 'bread-compact-wifi' }],
    });
  });

  it('describes a partition table', async () => {
    const out = await runCli('image', 'info', join(images, 'partitions-v2-16m.bin'), '--json');
    expect(JSON.parse(out.stdout)).toMatchObject({ kind: 'partition-table', md5Valid: true });
  });

  it('fails with one line on a file that is no image, and exit 2 on a missing file', async () => {
    const junk = join(dir, 'junk.bin');
    writeFileSync(junk, 'hello');
    const bad = await runCli('image', 'info', junk);
    expect(bad.code).toBe(1);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
    const missing = await runCli('image', 'info', join(dir, 'missing.bin'));
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/no such file/);
  });
});
