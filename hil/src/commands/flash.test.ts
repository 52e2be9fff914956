import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { type ResolvedVirtual, VirtualBoardStore } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { type ProviderRequest, placeImage } from '@xiaozhi-mcp/serial';
import { flashCommand, type SerialCommandContext } from '@xiaozhi-mcp/serial/commands';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { main } from '../cli.js';

let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'hil-flash-'));
});

afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

function store(onBoard?: (virtual: ResolvedVirtual) => void): VirtualBoardStore {
  return new VirtualBoardStore({
    dir: join(dir, 'virtual'),
    timing: FAST_TIMING,
    ...(onBoard === undefined ? {} : { onBoard }),
  });
}

function capture(
  extra: Partial<SerialCommandContext> & { onBoard?: (virtual: ResolvedVirtual) => void } = {},
) {
  const { onBoard, ...rest } = extra;
  const out = { stdout: '', stderr: '' };
  const context: SerialCommandContext = {
    program: 'xiaozhi-mcp',
    out: { stdout: (t) => (out.stdout += t), stderr: (t) => (out.stderr += t) },
    env: {},
    lister: async () => [],
    providers: [store(onBoard)],
    ...rest,
  };
  return { context, out };
}

/** Plugs a virtual board in, as another process would: its port and the board behind it. */
async function plugIn(selector: string, create?: ProviderRequest['create']) {
  let virtual: ResolvedVirtual | undefined;
  const port = await store((v) => {
    virtual = v;
  }).resolve(selector, create === undefined ? {} : { create });
  if (virtual === undefined) throw new Error(`${selector}: no board was plugged in`);
  return { port, board: virtual.board };
}

function firmware(chip: 'esp32s3' | 'esp32c3' = 'esp32s3', version = '2.7.0') {
  const fw = buildVirtualFirmware({ chip, version, board: 'bread-compact-wifi' });
  const merged = join(dir, `merged-${chip}-${version}.bin`);
  const app = join(dir, `xiaozhi-${chip}-${version}.bin`);
  writeFileSync(merged, fw.merged);
  writeFileSync(app, fw.app);
  return { fw, merged, app };
}

function flashFileMd5(name: string, offset: number, length: number): string {
  const fd = openSync(join(dir, 'virtual', `${name}.flash`), 'r');
  try {
    const bytes = Buffer.alloc(length);
    readSync(fd, bytes, 0, length, offset);
    return createHash('md5').update(bytes).digest('hex');
  } finally {
    closeSync(fd);
  }
}

const md5 = (data: Uint8Array) => createHash('md5').update(data).digest('hex');

describe('placeImage, as the flash command places images', () => {
  const fw = buildVirtualFirmware({ chip: 'esp32s3', version: '2.7.0', board: 'b' });
  // `flash` keeps the rule that an app image needs --offset.
  const place = (file: string, data: Uint8Array, offset: number | undefined) =>
    placeImage(file, data, offset, { appNeedsOffset: true });

  it('puts a merged image at 0x0 and an app image at its offset', () => {
    expect(place('m.bin', fw.merged, undefined)).toMatchObject({
      kind: 'merged',
      offset: 0,
      chip: 'esp32s3',
      version: '2.7.0',
      board: 'b',
      partitionsEnd: 16 * 1024 * 1024,
    });
    expect(place('a.bin', fw.app, 0x20000)).toMatchObject({
      kind: 'app',
      offset: 0x20000,
      version: '2.7.0',
    });
    expect(place('assets.bin', new Uint8Array(64), 0x800000)).toMatchObject({
      kind: 'data',
    });
  });

  it('refuses an image where it does not belong, saying where it does', () => {
    expect(() => place('a.bin', fw.app, undefined)).toThrow(
      /a\.bin is an app image \(xiaozhi 2\.7\.0\), not a merged image: flash it at its app partition with --offset/,
    );
    expect(() => place('m.bin', fw.merged, 0x20000)).toThrow(
      /merged image: it belongs at 0x0, not 0x20000/,
    );
    expect(() => place('x.bin', new Uint8Array(64), undefined)).toThrow(
      /neither a merged image .* nor an app image/,
    );
  });
});

describe('flash against a virtual port', () => {
  it('writes a merged image into the board and its flash file, verified, and resets it', {
    timeout: 60_000,
  }, async () => {
    const { fw, merged } = firmware();
    const { context, out } = capture();
    const code = await flashCommand(context, merged, { create: true, port: 'virtual:desk' });
    expect(out.stderr).toBe('');
    expect(code).toBe(0);
    const lines = out.stdout.split('\n');
    expect(lines[0]).toMatch(
      /^created virtual board virtual:desk: bread-compact-wifi \(esp32s3, 16 MB flash, MAC f4:12:fa(:[0-9a-f]{2}){3}\) in /,
    );
    expect(lines[1]).toMatch(
      /^virtual:desk: ESP32-S3 .*, MAC f4:12:fa(:[0-9a-f]{2}){3}, 16 MB flash$/,
    );
    expect(lines[2]).toBe(
      `image: merged image for esp32s3, xiaozhi 2.7.0 for bread-compact-wifi, ${fw.merged.length} bytes at 0x0`,
    );
    expect(out.stdout).toMatch(/^flash: 100%$/m);
    expect(out.stdout).toMatch(
      new RegExp(
        `^wrote ${fw.merged.length} bytes \\(128\\.7 KB\\) at 0x0 in \\d+\\.\\d s at 921600 baud; MD5 verified \\(${md5(fw.merged)}\\)$`,
        'm',
      ),
    );
    expect(out.stdout).toMatch(/^virtual:desk: hard reset; the board runs its new firmware$/m);
    expect(flashFileMd5('desk', 0, fw.merged.length)).toBe(md5(fw.merged));

    // The next process's board boots what this one wrote.
    const { port, board } = await plugIn('virtual:desk');
    try {
      await board.waitForLine(/App version:\s+2\.7\.0/, 10_000);
    } finally {
      port.dispose();
    }
  });

  it('writes an app image at its partition, after a merged image', {
    timeout: 60_000,
  }, async () => {
    const base = firmware('esp32s3', '2.7.0');
    const next = firmware('esp32s3', '2.7.1');
    const { context, out } = capture();
    expect(await flashCommand(context, base.merged, { create: true, port: 'virtual:desk' })).toBe(
      0,
    );
    expect(await flashCommand(context, next.app, { port: 'virtual:desk', offset: '0x20000' })).toBe(
      0,
    );
    expect(out.stdout).toMatch(/image: app image for esp32s3, xiaozhi 2\.7\.1 .* at 0x20000/);
    expect(flashFileMd5('desk', 0x20000, next.fw.app.length)).toBe(md5(next.fw.app));
    const wrong = await flashCommand(context, next.app, {
      port: 'virtual:desk',
      offset: '0x30000',
    });
    expect(wrong).toBe(2);
    expect(out.stderr).toMatch(
      /^xiaozhi-mcp: flash virtual:desk: 0x30000 is not an app partition on this board; its app partitions: ota_0 at 0x20000, ota_1 at 0x410000$/m,
    );
  });

  it('refuses an image for another chip, writing nothing', { timeout: 60_000 }, async () => {
    const { merged } = firmware('esp32c3');
    const { context, out } = capture();
    const code = await flashCommand(context, merged, { create: true, port: 'virtual:desk' });
    expect(code).toBe(1);
    expect(out.stderr).toMatch(
      /^xiaozhi-mcp: flash virtual:desk: refusing to flash: part 1 at 0x0 is an image for esp32c3 .* the board is an esp32s3 .*; use the esp32s3 build\n$/,
    );
    expect(flashFileMd5('desk', 0, 4096)).toBe(md5(new Uint8Array(4096).fill(0xff)));
  });

  it('refuses a partition table bigger than the board flash', { timeout: 60_000 }, async () => {
    const { merged } = firmware();
    const { context, out } = capture();
    const code = await flashCommand(context, merged, {
      create: true,
      port: 'virtual:small',
      flashSize: '4',
    });
    expect(code).toBe(2);
    expect(out.stderr).toMatch(
      /the image's partition table needs 16 MB of flash, the board has 4 MB; use the build for 4 MB boards/,
    );
  });

  it('steps down the baud ladder after a failed write and reports the flash as flaky', {
    timeout: 60_000,
  }, async () => {
    const { fw, merged } = firmware();
    let corrupted = false;
    const { context, out } = capture({
      onBoard: (virtual) => {
        virtual.device.faults = {
          flashBlock: () => {
            if (corrupted) return undefined;
            corrupted = true;
            return 'corrupt';
          },
        };
      },
    });
    expect(await flashCommand(context, merged, { create: true, port: 'virtual:desk' })).toBe(0);
    expect(out.stdout).toMatch(
      /^flash: the write at 921600 baud failed; retrying at 460800 baud$/m,
    );
    expect(out.stdout).toMatch(/ at 460800 baud; MD5 verified /);
    expect(out.stdout).toMatch(
      /^flaky: the first attempt failed \(at 921600 baud: verify part 1 at 0x0: .*MD5.*\); the write at 460800 baud succeeded. Try a shorter cable, or --baud 460800$/m,
    );
    expect(flashFileMd5('desk', 0, fw.merged.length)).toBe(md5(fw.merged));
  });

  it('resets the board the way --reset says, and says why a board did not enter download mode', {
    timeout: 60_000,
  }, async () => {
    const { fw, merged } = firmware();
    const { context, out } = capture();
    expect(
      await flashCommand(context, merged, { create: true, port: 'virtual:desk', reset: 'classic' }),
    ).toBe(0);
    expect(out.stdout).toMatch(/MD5 verified/);
    expect(flashFileMd5('desk', 0, fw.merged.length)).toBe(md5(fw.merged));
    // The USB-JTAG reset on the virtual board's USB-UART bridge resets it with GPIO0 high.
    const wrong = capture();
    expect(
      await flashCommand(wrong.context, merged, { port: 'virtual:desk', reset: 'usb-jtag' }),
    ).toBe(1);
    expect(wrong.out.stderr).toMatch(
      /^xiaozhi-mcp: flash virtual:desk: connect: no answer from the ROM bootloader on .* after 7 attempts \(reset USB-JTAG\); the ROM printed "rst:0x1 \(POWERON\),boot:0x8 \(SPI_FAST_FLASH_BOOT\)": the board booted 0x8 \(SPI_FAST_FLASH_BOOT\), not the download mode, so the reset did not pull GPIO0 \(BOOT\) low; on a board with a USB-UART bridge \(CP210x, CH340\) use --reset classic or --reset tight/m,
    );
  });

  it('draws a progress bar on a terminal', { timeout: 60_000 }, async () => {
    const { merged } = firmware();
    const terminal = Object.assign(new PassThrough(), { isTTY: true, columns: 100 });
    let drawn = '';
    terminal.on('data', (chunk: Buffer) => {
      drawn += chunk.toString();
    });
    const { context, out } = capture({ terminal });
    expect(await flashCommand(context, merged, { create: true, port: 'virtual:desk' })).toBe(0);
    expect(drawn).toMatch(/flash \|.*\| 100% \| 131776\/131776 bytes \| attempt 1/);
    expect(out.stdout).not.toMatch(/^flash: \d+%$/m);
  });

  it('fails clearly when the board is busy, the file is missing or the options are wrong', {
    timeout: 60_000,
  }, async () => {
    const { merged } = firmware();
    const { context, out } = capture();
    const { port: holder } = await plugIn('virtual:desk', {
      board: 'bread-compact-wifi',
      flashSize: '16',
    });
    try {
      expect(await flashCommand(context, merged, { port: 'virtual:desk' })).toBe(1);
      expect(out.stderr).toMatch(
        /^xiaozhi-mcp: flash virtual:desk: virtual:desk is in use by another process \(pid \d+\); close the other program \(a monitor, a flash\) first\n$/,
      );
    } finally {
      holder.dispose();
    }
    const cases: [Parameters<typeof flashCommand>[2], string, RegExp][] = [
      [
        { create: true, port: 'virtual:desk' },
        join(dir, 'none.bin'),
        /cannot read .*none\.bin: no such file/,
      ],
      [{ create: true, port: 'virtual:desk', baud: 'fast' }, merged, /--baud must be a baud rate/],
      [
        { create: true, port: 'virtual:desk', reset: 'hard' },
        merged,
        /--reset must be one of auto, classic, tight, usb-jtag, none, got "hard"/,
      ],
      [{ create: true, port: 'virtual:desk', offset: '0x123' }, merged, /not a multiple of 0x1000/],
      [
        { create: true, port: 'virtual:desk', flashSize: '32' },
        merged,
        /--flash-size must be 4, 8 or 16/,
      ],
      [
        { create: true, port: 'virtual:desk', board: 'toaster' },
        merged,
        /unknown board preset "toaster"/,
      ],
      [{ port: 'ttyUSB0' }, merged, /port selector 'ttyUSB0'/],
    ];
    for (const [options, file, message] of cases) {
      const { context: c, out: o } = capture();
      expect(await flashCommand(c, file, options)).toBe(2);
      expect(o.stderr).toMatch(message);
      expect(o.stderr.split('\n')).toHaveLength(2);
    }
  });
});

describe('hil flash', () => {
  it('is registered in the hil CLI, with exit 3 for a missing port', {
    timeout: 60_000,
  }, async () => {
    const { merged } = firmware();
    const out = { stdout: '', stderr: '' };
    const io = {
      stdout: (t: string) => (out.stdout += t),
      stderr: (t: string) => (out.stderr += t),
    };
    const previous = process.env.XIAOZHI_VIRTUAL_DIR;
    process.env.XIAOZHI_VIRTUAL_DIR = join(dir, 'virtual');
    try {
      expect(await main(['flash', merged, '--port', 'virtual:rig1', '--create'], io)).toBe(0);
      expect(out.stdout).toMatch(/MD5 verified/);
      expect(await main(['flash', merged, '--port', '/dev/ttyNOPE9'], io)).toBe(3);
      expect(out.stderr).toMatch(/^hil: flash \/dev\/ttyNOPE9: no serial port matches/m);
      // hil has no `ports`: it suggests what hil offers for listing them.
      expect(out.stderr).toMatch(
        /; check the cable, or run `hil boards` to see what is attached$/m,
      );
      expect(out.stderr).not.toMatch(/`(xiaozhi-mcp )?ports`/);
      expect(await main(['flash'], io)).toBe(2);
    } finally {
      if (previous === undefined) delete process.env.XIAOZHI_VIRTUAL_DIR;
      else process.env.XIAOZHI_VIRTUAL_DIR = previous;
    }
  });
});

// The binary needs hil built (`npx turbo run build`; `npm test` builds first).
const hilBin = resolve(dirname(fileURLToPath(import.meta.url)), '../../bin/hil.js');

/** Runs the built `hil` as a shell would, with its own virtual dir and plain output. */
function shell(
  ...args: string[]
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, XIAOZHI_VIRTUAL_DIR: join(dir, 'virtual') };
  delete env.FORCE_COLOR;
  delete env.NO_COLOR;
  const child = spawn(process.execPath, [hilBin, ...args], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const run = { code: null as number | null, stdout: '', stderr: '' };
  // Decoded as text across chunks: a read may end inside a multi-byte character.
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    run.stdout += chunk;
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    run.stderr += chunk;
  });
  return new Promise((done) => {
    // Every run is bounded: a hung command fails the test instead of hanging it.
    const timer = setTimeout(() => child.kill('SIGKILL'), 45_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      run.code = code;
      done(run);
    });
  });
}

describe('hil flash from a shell', () => {
  // Moved here from apps/cli's shell tests: xiaozhi-mcp no longer depends on hil, so only
  // hil's own tests are sure to run after hil is built.
  it('works the same way as xiaozhi-mcp flash', { timeout: 60_000 }, async () => {
    const { merged } = firmware();
    const run = await shell('flash', merged, '--port', 'virtual:rig', '--create');
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/MD5 verified/);
    const missing = await shell('flash', join(dir, 'none.bin'), '--port', 'virtual:rig');
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(
      /^hil: flash virtual:rig: cannot read .*none\.bin: no such file\n$/,
    );
  });
});
