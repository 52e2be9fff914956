/**
 * `xiaozhi-mcp flash` from a shell against a virtual board whose chip has Secure Boot burnt in
 * (its sidecar says so): the merged image is refused before a byte is written, in one line
 * naming the reason, with exit 2; the app alone goes to its partition.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnCommand } from '../io.test-helper.js';

// The binaries need the workspace built (`npx turbo run build`; `npm test` builds first).
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');
const xiaozhiMcp = join(root, 'apps/cli/bin/xiaozhi-mcp.js');

let dir: string;

const flash = (...args: string[]) => {
  const env: NodeJS.ProcessEnv = { ...process.env, XIAOZHI_VIRTUAL_DIR: join(dir, 'virtual') };
  delete env.FORCE_COLOR;
  delete env.NO_COLOR;
  return spawnCommand(xiaozhiMcp, ['flash', ...args], { env, timeoutMs: 45_000 }).done;
};

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'xiaozhi-refused-'));
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('xiaozhi-mcp flash on a board with Secure Boot', () => {
  it('refuses a merged image with exit 2 before writing, naming why; takes the app at its partition', {
    timeout: 120_000,
  }, async () => {
    const fw = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '2.7.0',
      board: 'bread-compact-wifi',
      flashSizeMb: 4,
    });
    const merged = join(dir, 'merged-binary.bin');
    const app = join(dir, 'xiaozhi.bin');
    writeFileSync(merged, fw.merged);
    writeFileSync(app, fw.app);
    // A board made as `--create` makes one, with the eFuse added to its sidecar by hand.
    const created = await flash(
      merged,
      '--port',
      'virtual:secure',
      '--create',
      '--flash-size',
      '4',
    );
    expect(created.code).toBe(0);
    const sidecar = join(dir, 'virtual', 'secure.json');
    const spec = JSON.parse(readFileSync(sidecar, 'utf8')) as Record<string, unknown>;
    writeFileSync(sidecar, JSON.stringify({ ...spec, secureBoot: true }));
    const flashFile = join(dir, 'virtual', 'secure.flash');
    const before = createHash('md5').update(readFileSync(flashFile)).digest('hex');

    const refused = await flash(merged, '--port', 'virtual:secure');
    expect(refused.code).toBe(2);
    expect(refused.stderr).toBe(
      'xiaozhi-mcp: flash virtual:secure: refusing to flash virtual:secure: Secure Boot is enabled: the ROM refuses a bootloader written at 0x0..0x7fff (part 1 at 0x0 starts there); flash only the app and partition table at their offsets (or use espsecure)\n',
    );
    expect(createHash('md5').update(readFileSync(flashFile)).digest('hex')).toBe(before);

    const appOnly = await flash(
      app,
      '--port',
      'virtual:secure',
      '--offset',
      `0x${fw.appOffset.toString(16)}`,
    );
    expect(appOnly.stderr).toBe('');
    expect(appOnly.code).toBe(0);
    expect(appOnly.stdout).toMatch(/MD5 verified/);
  });
});
