import { createHash, randomBytes } from 'node:crypto';
import { deflateSync, inflateSync, constants as zlibConstants } from 'node:zlib';
import {
  buildVirtualFirmware,
  decodeDataBlock,
  decodeRomRequest,
  readPartitionTable,
  romCommandName,
  SlipDecoder,
} from '@xiaozhi-mcp/firmware';
import {
  Flasher,
  type FlasherOptions,
  type FlashProgress,
  NodeWebSerialPort,
  RESET_SEQUENCES,
  type SerialBinding,
} from '@xiaozhi-mcp/serial';
import { until } from '@xiaozhi-mcp/test-kit';
import { ESPLoader, Transport } from 'esptool-js';
import { afterEach, describe, expect, it } from 'vitest';
import type { ChipModel } from '../board-api.js';
import { FlashStorage } from '../flash-storage.js';
import { boardPreset } from '../presets.js';
import { FAST_TIMING } from '../testing/timing.js';
import { type BoardTiming, VirtualBoard, type VirtualBoardOptions } from '../virtual-board.js';
import type { VirtualSerialDevice, VirtualSerialDeviceOptions } from './usb-device.js';
import { VirtualSerialBinding } from './virtual-binding.js';

const MB = 1024 * 1024;
const TIMING: Partial<BoardTiming> = { ...FAST_TIMING, panicRebootMs: 200 };
const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const md5 = (data: Uint8Array) => createHash('md5').update(data).digest('hex');

type LineSet = { readonly dtr: boolean; readonly rts: boolean };

/**
 * The binding as the port sees it, recording every set() of the lines, and when each set() and
 * each close came (`performance.now()`).
 */
function recording(binding: VirtualSerialBinding) {
  const sets: LineSet[] = [];
  const times: { readonly what: 'set' | 'close'; readonly atMs: number }[] = [];
  const recorded: SerialBinding = {
    list: () => binding.list(),
    open: async (options) => {
      const port = await binding.open(options);
      const set = port.set.bind(port);
      port.set = (flags) => {
        sets.push({ dtr: flags.dtr ?? true, rts: flags.rts ?? true });
        times.push({ what: 'set', atMs: performance.now() });
        return set(flags);
      };
      const close = port.close.bind(port);
      port.close = () => {
        times.push({ what: 'close', atMs: performance.now() });
        return close();
      };
      return port;
    },
  };
  return { recorded, sets, times };
}

/** A frame the host sent: the command, the rate it was sent at, and a data block's seq. */
interface HostFrame {
  readonly command: string;
  readonly baud: number;
  readonly seq?: number;
}

/** Every frame the host sends to the board, decoded, as the board's UART gets it. */
function frames(device: VirtualSerialDevice): HostFrame[] {
  const seen: HostFrame[] = [];
  const decoder = new SlipDecoder();
  const hostSend = device.hostSend.bind(device);
  device.hostSend = (bytes, baud) => {
    for (const frame of decoder.push(bytes)) {
      try {
        const request = decodeRomRequest(frame);
        const command = romCommandName(request.command) ?? `0x${request.command.toString(16)}`;
        const block = command.endsWith('_DATA') ? decodeDataBlock(request.data) : undefined;
        seen.push({ command, baud, ...(block === undefined ? {} : { seq: block.seq }) });
      } catch {
        // Not a request (a READ_FLASH acknowledgement).
      }
    }
    return hostSend(bytes, baud);
  };
  return seen;
}

/**
 * A powered board with an empty 4 MB flash on a CP2102, and a Flasher on its port. `bare`: the
 * port is named by its path only, without USB ids (a path given by hand).
 */
async function rig(
  options: VirtualSerialDeviceOptions = {},
  chip?: ChipModel,
  flasherOptions: Omit<FlasherOptions, 'port'> & { readonly bare?: boolean } = {},
  boardOptions: Pick<VirtualBoardOptions, 'silicon'> = {},
) {
  const flash = new FlashStorage({ size: 4 * MB });
  // Another chip than the preset's ESP32-S3R8: without its in-package PSRAM.
  const { inPackage: _s3r8, ...base } = boardPreset('bread-compact-wifi');
  const preset = chip === undefined ? undefined : { ...base, chip };
  const board = new VirtualBoard({
    flash,
    timing: TIMING,
    mac: 'f4:12:fa:5e:00:01',
    ...(preset === undefined ? {} : { preset }),
    ...boardOptions,
  });
  const binding = new VirtualSerialBinding();
  const device = binding.attach(board, options);
  board.powerOn();
  const [info] = await binding.list();
  if (info === undefined) throw new Error('the board is not listed');
  const { recorded, sets, times } = recording(binding);
  const { bare, ...rest } = flasherOptions;
  const port =
    bare === true
      ? new NodeWebSerialPort({ binding: recorded, path: info.path })
      : NodeWebSerialPort.fromPortInfo(recorded, info);
  const flasher = new Flasher({ platform: 'linux', ...rest, port });
  cleanups.push(async () => {
    await flasher.disconnect();
    board.powerOff();
    binding.detach(device);
  });
  return { flash, board, binding, device, port, flasher, sets, times };
}

/** The set() steps of a line sequence. */
const setsOf = (steps: readonly ({ set: LineSet } | { waitMs: number })[]): LineSet[] =>
  steps.flatMap((step) => ('set' in step ? [{ dtr: step.set.dtr, rts: step.set.rts }] : []));

const firmware = (chip: 'esp32s3' | 'esp32c3' | 'esp32c5', version = '2.6.0') =>
  buildVirtualFirmware({
    chip,
    version,
    board: 'bread-compact-wifi',
    flashSizeMb: 4,
    padToFlashSize: true,
  });

describe('flashing a virtual board with esptool-js through the virtual serial binding', () => {
  it('writes a 4 MB merged image at 921600 baud, verifies it, resets, and the board runs it', {
    timeout: 60_000,
  }, async () => {
    const { flash, board, device, flasher } = await rig();
    const fw = firmware('esp32s3');
    expect(fw.merged.length).toBe(4 * MB);
    const progress: FlashProgress[] = [];
    const booted = board.waitForLine(/app_init: App version:\s+2\.6\.0$/, 30_000);
    const started = performance.now();
    const result = await flasher.flash([{ offset: 0, data: fw.merged }], {
      baudRate: 921_600,
      onProgress: (p) => progress.push(p),
    });
    const wallMs = performance.now() - started;

    expect(result.chip).toMatchObject({
      chip: 'esp32s3',
      chipId: 9,
      // esptool-js reads the revision from eFuse, as from a real ESP32-S3 v0.2.
      description: 'ESP32-S3 (QFN56) (revision v0.2)',
      mac: board.mac,
      flashSizeMb: 4,
    });
    expect(result).toMatchObject({ flaky: false, baudRate: 921_600, bytes: 4 * MB });
    expect(flash.md5(0, 4 * MB)).toBe(md5(fw.merged));
    await booted;
    expect(board.version).toBe('2.6.0');
    expect(
      board.console.history.some((l) => l.text.includes('app_init: App version:      2.6.0')),
    ).toBe(true);

    const percents = progress.map((p) => p.percent);
    expect(percents.every((p, i) => i === 0 || p >= (percents[i - 1] ?? 0))).toBe(true);
    expect(percents.at(-1)).toBe(100);
    expect(progress.every((p) => p.attempt === 1)).toBe(true);

    // The ROM and the stub saw esptool's real sequence, through the lines and the wire.
    expect(device.lineEvents).toContainEqual({ kind: 'reset', download: true });
    expect(device.lineEvents.at(-1)).toEqual({ kind: 'reset', download: false });
    const { toBoard } = device.stats;
    expect(wallMs).toBeGreaterThan(toBoard.wireMs);
  });

  it('refuses an esp32c3 image for an esp32s3 board before writing anything', {
    timeout: 60_000,
  }, async () => {
    const { flash, device, flasher } = await rig();
    const before = flash.md5(0, 4 * MB);
    const error = await flasher
      .flash([{ offset: 0, data: firmware('esp32c3').merged }], { baudRate: 921_600 })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'CHIP_MISMATCH' });
    expect((error as Error).message).toMatch(/esp32c3.*esp32s3/);
    expect(flash.md5(0, 4 * MB)).toBe(before);
    expect(device.emulator?.history.filter((c) => c.startsWith('FLASH'))).toEqual([]);
    await expect(
      flasher.flash([{ offset: 0, data: firmware('esp32s3').merged }], { expectedChip: 'esp32c3' }),
    ).rejects.toMatchObject({ code: 'CHIP_MISMATCH' });
  });

  it('reads back the partition table it wrote', { timeout: 60_000 }, async () => {
    const { board, flasher } = await rig();
    const fw = firmware('esp32s3', '2.6.1');
    await flasher.flash([{ offset: 0, data: fw.merged }], { baudRate: 921_600 });
    const raw = await flasher.readFlash(0x8000, 0xc00);
    expect(raw).toEqual(fw.partitionTable);
    const table = await flasher.readPartitionTable();
    expect(table).toEqual(readPartitionTable(fw.partitionTable));
    expect(table.partitions.map((p) => p.label)).toContain('nvs');
    const booted = board.waitForLine(/app_init: App version:\s+2\.6\.1$/, 20_000);
    await flasher.disconnect({ reset: true });
    await booted;
  });

  it('steps down to 460800 after a failed verify at 921600, and reports the flash as flaky', {
    timeout: 60_000,
  }, async () => {
    let corrupted = false;
    const { flash, board, flasher } = await rig({
      faults: {
        flashBlock: () => {
          if (corrupted) return undefined;
          corrupted = true;
          return 'corrupt';
        },
      },
    });
    const fw = firmware('esp32s3');
    const booted = board.waitForLine(/app_init: App version:\s+2\.6\.0$/, 30_000);
    const progress: FlashProgress[] = [];
    const result = await flasher.flash([{ offset: 0, data: fw.merged }], {
      baudRate: 921_600,
      onProgress: (p) => progress.push(p),
    });
    expect(result.flaky).toBe(true);
    // Many CH340 boards run cleanly at 460800, not 921600: the next rung, not 115200.
    expect(result.baudRate).toBe(460_800);
    expect(result.failures.map((f) => f.baudRate)).toEqual([921_600]);
    expect(result.firstError).toMatch(/^verify part 1 at 0x0: .*MD5/);
    expect(progress.filter((p) => p.attempt === 2).every((p) => p.baudRate === 460_800)).toBe(true);
    expect(flash.md5(0, 4 * MB)).toBe(md5(fw.merged));
    expect(progress.filter((p) => p.attempt === 2).at(-1)?.percent).toBe(100);
    await booted;
    expect(board.version).toBe('2.6.0');
  });

  it('detects an ESP32 by its magic register (its ROM has no GET_SECURITY_INFO)', {
    timeout: 60_000,
  }, async () => {
    const { board, device, flasher } = await rig({}, 'esp32');
    const chip = await flasher.connect();
    expect(chip).toMatchObject({
      chip: 'esp32',
      chipId: 0,
      description: 'ESP32-D0WD-V3 (revision 3)',
      mac: board.mac,
      flashSizeMb: 4,
    });
    expect(device.emulator?.history.slice(0, 3)).toEqual(['SYNC', 'GET_SECURITY_INFO', 'READ_REG']);
    expect(device.emulator?.stage).toBe('stub');
  });

  it("connects over USB-Serial-JTAG with esptool's USB reset sequence", {
    timeout: 60_000,
  }, async () => {
    const { board, device, flasher } = await rig({ usbJtag: true }, 'esp32c3');
    const chip = await flasher.connect();
    expect(chip).toMatchObject({ chip: 'esp32c3', chipId: 5, mac: board.mac });
    expect(device.lineEvents).toContainEqual({ kind: 'reset', download: true });
    await flasher.disconnect();
    // Closing the port drops no line into a reset: the chip stays in the stub.
    expect(board.state).toBe('download');
  });

  it('fails naming the part when both attempts fail, and leaves the port closed', {
    timeout: 60_000,
  }, async () => {
    const { port, flasher } = await rig({ faults: { flashBlock: () => 'fail' } });
    const error = await flasher
      .flash([{ offset: 0, data: firmware('esp32s3').merged }], { baudRate: 460_800 })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'FLASH_FAILED' });
    expect((error as Error).message).toMatch(
      /^write part 1 at 0x0: .*; .*\(first attempt at 460800 baud: write part 1 at 0x0: /,
    );
    expect(port.isOpen).toBe(false);
  });

  it('sees an unplugged board as a lost port', { timeout: 60_000 }, async () => {
    const { binding, device, port } = await rig();
    await port.open({ baudRate: 115200 });
    const reader = port.readable?.getReader();
    const pending = reader?.read();
    binding.unplug(device.path);
    await expect(pending).rejects.toMatchObject({ name: 'NetworkError' });
    expect(port.lost?.message).toMatch(/disconnected/);
    expect(port.readable).toBeNull();
    await expect(port.open({ baudRate: 115200 })).rejects.toMatchObject({
      code: 'PORT_NOT_FOUND',
    });
  });
});

describe('the reset strategy: how each connect attempt gets the board into download mode', () => {
  it('plays the classic reset, one set() per step, when told to', { timeout: 60_000 }, async () => {
    const { device, flasher, sets } = await rig({}, undefined, { reset: 'classic' });
    await flasher.connect();
    // After the open's release of both lines: esptool's ClassicReset, as reset/sequences.ts has it.
    expect(sets.slice(1)).toEqual(setsOf(RESET_SEQUENCES.classic));
    expect(device.lineEvents).toContainEqual({ kind: 'reset', download: true });
  });

  it('resets nothing with `none`: the board was put into download mode by hand', {
    timeout: 60_000,
  }, async () => {
    const { board, device, flasher, sets } = await rig({}, undefined, { reset: 'none' });
    board.reset('POWERON', { download: true }); // BOOT held while RESET was pressed
    const events = device.lineEvents.length;
    const chip = await flasher.connect();
    expect(chip.chip).toBe('esp32s3');
    expect(sets).toEqual([{ dtr: false, rts: false }]); // only the open's release
    expect(device.lineEvents).toHaveLength(events);
  });

  it("touches no line after writing with `none` either: the chip is left in its ROM bootloader (esptool's --after no_reset) until RESET", {
    timeout: 60_000,
  }, async () => {
    const { board, device, flasher, sets } = await rig({}, undefined, { reset: 'none' });
    board.reset('POWERON', { download: true }); // BOOT held while RESET was pressed
    const boots = board.bootCount;
    await flasher.flash([{ offset: 0, data: firmware('esp32s3').merged }], {
      baudRate: 921_600,
    });
    expect(sets).toEqual([{ dtr: false, rts: false }]); // the open's release, nothing after
    expect(device.lineChanges).toEqual([]);
    // The stub left for the ROM (FLASH_END asking to reboot): a system reset with the straps
    // as latched, back in download mode, the ROM answering.
    await until(() => {
      expect(board.bootCount).toBe(boots + 1);
      return true;
    });
    expect(board.state).toBe('download');
    expect(device.emulator?.stage).toBe('rom');
    expect(flasher.log).toContain('Staying in bootloader.');
    // Pressing RESET runs the new firmware.
    const booted = board.waitForLine(/app_init: App version:\s+2\.6\.0$/, 30_000);
    device.pressReset();
    await booted;
  });

  it('reaches a native-USB board named by a bare path with `usb-jtag`', {
    timeout: 60_000,
  }, async () => {
    const { device, flasher, sets } = await rig({ usbJtag: true }, 'esp32c3', {
      bare: true,
      reset: 'usb-jtag',
    });
    expect(flasher.resetPlan).toEqual([{ sequence: 'usbJtag' }]);
    const chip = await flasher.connect();
    expect(chip.chip).toBe('esp32c3');
    expect(sets.slice(1)).toEqual(setsOf(RESET_SEQUENCES.usbJtag));
    expect(device.lineEvents).toContainEqual({ kind: 'reset', download: true });
  });

  it('keeps alternating the reset delay: a slow EN connects at 550 ms', {
    timeout: 60_000,
  }, async () => {
    // EN rises 60 ms after its release: with 50 ms GPIO0 is high again as the chip starts.
    const { device, flasher } = await rig({ enRiseMs: 60 }, undefined, { reset: 'classic' });
    await flasher.connect();
    expect(flasher.log.filter((l) => l.startsWith('Resetting'))).toEqual([
      'Resetting into download mode (classic 50 ms)...',
      'Resetting into download mode (classic 550 ms)...',
    ]);
    expect(device.lineEvents.filter((e) => e.kind === 'reset')).toEqual([
      { kind: 'reset', download: false },
      { kind: 'reset', download: true },
    ]);
  });

  it('says so when the ROM booted the app instead of the download mode, and what to do', {
    timeout: 60_000,
  }, async () => {
    // The USB-JTAG sequence on a USB-UART bridge's transistors resets the chip with GPIO0 high.
    const { port, flasher } = await rig({}, undefined, { reset: 'usb-jtag', connectAttempts: 2 });
    const error = await flasher.connect().catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'FLASH_FAILED' });
    const text = (error as Error).message;
    expect(text).toMatch(
      /^connect: no answer from the ROM bootloader on \/dev\/ttyVIRT\d+ after 2 attempts/,
    );
    // The reset reason depends on how far the erased board's boot loop got; the mode does not.
    expect(text).toMatch(/"rst:0x[0-9a-f]+ \([A-Z_]+\),boot:0x8 \(SPI_FAST_FLASH_BOOT\)"/);
    expect(text).toMatch(/not the download mode, so the reset did not pull GPIO0 \(BOOT\) low/);
    expect(text).toMatch(/use --reset classic or --reset tight, or hold BOOT while resetting/);
    expect(port.isOpen).toBe(false);
  });
});

describe('the watchdogs of a chip on its USB-Serial-JTAG', () => {
  /**
   * A board on native USB: a reset through the USB-Serial-JTAG leaves the RTC watchdog and the
   * super watchdog running, so each entry into download mode arms them here; their time is up
   * when the write is a third done (the test's clock), and the chip resets unless tamed.
   */
  async function nativeUsbRig(
    bare: boolean,
    chip: ChipModel = 'esp32s3',
    boardOptions: Pick<VirtualBoardOptions, 'silicon'> = {},
  ) {
    const r = await rig({ usbJtag: true }, chip, { bare, reset: 'usb-jtag' }, boardOptions);
    r.board.on('state', (state: string) => {
      if (state !== 'download') return;
      r.device.emulator?.setConsole('usb-jtag-serial');
      r.device.emulator?.armWatchdogs();
    });
    const bites: (string | undefined)[] = [];
    const expired = new Set<number>();
    const onProgress = (p: FlashProgress) => {
      if (p.percent < 33 || expired.has(p.attempt)) return;
      expired.add(p.attempt);
      const emulator = r.device.emulator;
      bites.push(emulator === undefined ? 'no emulator' : emulator.expireWatchdogs());
    };
    return { ...r, bites, onProgress };
  }

  it.each([
    ['its USB ids (303a:1001)', false],
    ['what the ROM says (a bare path)', true],
  ])(
    'disables them after connecting, known by %s, so the flash completes',
    {
      timeout: 60_000,
    },
    async (_, bare) => {
      const { flash, flasher, bites, onProgress } = await nativeUsbRig(bare);
      const fw = firmware('esp32s3');
      const result = await flasher.flash([{ offset: 0, data: fw.merged }], {
        baudRate: 921_600,
        onProgress,
      });
      expect(result.chip.usbJtagSerial).toBe(true);
      expect(bites).toEqual([undefined]); // their time came, and nothing bit
      expect(result).toMatchObject({ flaky: false, failures: [] });
      expect(flash.md5(0, 4 * MB)).toBe(md5(fw.merged));
    },
  );

  it('finds the console byte where an ESP32-C3 v1.1 keeps it (esptool: a new address from v1.1), so a bare path is tamed too', {
    timeout: 60_000,
  }, async () => {
    const { flash, flasher, bites, onProgress } = await nativeUsbRig(true, 'esp32c3', {
      silicon: { revision: { major: 1, minor: 1 } },
    });
    const fw = firmware('esp32c3');
    const result = await flasher.flash([{ offset: 0, data: fw.merged }], {
      baudRate: 921_600,
      onProgress,
    });
    expect(result.chip).toMatchObject({ usbJtagSerial: true, revision: { major: 1, minor: 1 } });
    expect(bites).toEqual([undefined]);
    expect(result).toMatchObject({ flaky: false, failures: [] });
    expect(flash.md5(0, 4 * MB)).toBe(md5(fw.merged));
  });

  it("tames an ESP32-C5's, and hard-resets it esptool's USB way: 200 ms in reset, 200 ms before the port closes", {
    timeout: 60_000,
  }, async () => {
    const { flash, flasher, bites, onProgress, sets, times } = await nativeUsbRig(true, 'esp32c5');
    const fw = firmware('esp32c5');
    const result = await flasher.flash([{ offset: 0, data: fw.merged }], {
      baudRate: 921_600,
      onProgress,
    });
    expect(result.chip).toMatchObject({ chip: 'esp32c5', usbJtagSerial: true });
    expect(bites).toEqual([undefined]);
    expect(result).toMatchObject({ flaky: false, failures: [] });
    // The board runs the image by now (its NVS at 0x9000 may have changed): up to NVS it is ours.
    expect(flash.md5(0, 0x9000)).toBe(md5(fw.merged.subarray(0, 0x9000)));
    // The hard reset is the last RTS pulse: EN low, released, then the port closes.
    const setTimes = times.filter((t) => t.what === 'set');
    const pressed = sets.findLastIndex((s) => !s.dtr && s.rts);
    expect(sets[pressed + 1]).toEqual({ dtr: false, rts: false });
    const inReset = (setTimes[pressed + 1]?.atMs ?? 0) - (setTimes[pressed]?.atMs ?? 0);
    const released = setTimes[pressed + 1]?.atMs ?? 0;
    const closed = times.find((t) => t.what === 'close' && t.atMs >= released)?.atMs ?? 0;
    // Lower bounds only: a timer never fires early by more than its millisecond rounding.
    expect(inReset).toBeGreaterThanOrEqual(199);
    expect(closed - released).toBeGreaterThanOrEqual(199);
  });
});

describe('write timeouts and cancelled attempts', () => {
  it('gives up on a block after its own timeout, cancels the attempt, and nothing of it reaches the port after the retry began', {
    timeout: 60_000,
  }, async () => {
    let device: VirtualSerialDevice | undefined;
    // At block 1 of the first attempt (at 921600) the chip hangs until it is reset.
    const r = await rig(
      {
        faults: {
          flashBlock: (block) =>
            device?.uartBaudRate === 921_600 && block.seq === 1 ? 'hang' : undefined,
        },
      },
      undefined,
      // (stepMs only bounds the other steps here. With the flasher before attempts were
      // cancelled, 4450 ms put the hung attempt's last resend of block 1 into the reconnect's
      // reset, after the port was opened again: the frames below showed it, as [1, 0, 1, 2].)
      { timeouts: { commandMs: 200, stepMs: 4450 } },
    );
    device = r.device;
    await r.flasher.connect();
    const sent = frames(r.device);
    const data = new Uint8Array(randomBytes(32 * 1024)); // blocks that do not compress
    const blocks = Math.ceil(deflateSync(data, { level: 9 }).length / 0x4000);
    const result = await r.flasher
      .flash([{ offset: 0x10_0000, data }], { baudRate: 921_600 })
      .catch((e: unknown) => e);

    // The retry began with the first frame not sent at the first attempt's rate.
    const began = sent.findIndex((f, i) => i > 0 && f.baud !== 921_600);
    expect(began).toBeGreaterThan(0);
    const after = sent.slice(began);
    // Only the retry's own blocks, each once, in order: none of the first attempt's.
    expect(after.filter((f) => f.command === 'FLASH_DEFL_DATA').map((f) => f.seq)).toEqual([
      ...Array(blocks).keys(),
    ]);
    const begin = after.findIndex((f) => f.command === 'FLASH_DEFL_BEGIN');
    expect(after.findIndex((f) => f.command === 'FLASH_DEFL_DATA')).toBeGreaterThan(begin);

    expect(result).toMatchObject({ flaky: true, baudRate: 460_800 });
    const ok = result as { firstError: string };
    // With the stub, block 1 waits as long as block 0 takes to write: 40 s per MB of what
    // block 0 inflates to (esptool's timeout_per_mb), here above the 200 ms floor.
    const compressed = deflateSync(data, { level: 9 });
    const block0 = inflateSync(compressed.subarray(0, 0x4000), {
      finishFlush: zlibConstants.Z_SYNC_FLUSH,
    }).length;
    const timeout = Math.round(Math.max(200, (40_000 * block0) / 1e6));
    expect(ok.firstError).toMatch(
      new RegExp(
        `^write part 1 at 0x100000: block 1 \\(seq 1\\): no reply within ${timeout} ms, 3 times`,
      ),
    );
    expect(r.flash.md5(0x10_0000, data.length)).toBe(md5(data));
  });

  it("sizes each block's timeout by what it inflates to, esptool's way", {
    timeout: 60_000,
  }, async () => {
    const { flasher } = await rig();
    // 48 KiB that do not compress, then 3 MiB of 0xFF that compress to a few KiB: the last
    // block inflates to about 3 MB of flash to erase and write.
    const data = new Uint8Array(48 * 1024 + 3 * MB).fill(0xff);
    data.set(randomBytes(48 * 1024));
    await flasher.flash([{ offset: 0x1_0000, data }], { baudRate: 921_600, reset: false });
    const timeouts = flasher.log
      .filter((l) => l.startsWith('trace: block '))
      .map((l) => Number(/timeout (\d+) ms/.exec(l)?.[1]));
    // The stub acknowledges a block before writing it: each waits with the one before it's.
    expect(timeouts).toEqual(timeouts.map(() => 3000));
    const last = flasher.log.find((l) => l.startsWith('trace: waiting for the last block'));
    const lastMs = Number(/timeout (\d+) ms/.exec(last ?? '')?.[1]);
    // 40 s per MB (10^6 bytes) for the ~3.15 MB the last block inflates to.
    expect(lastMs).toBeGreaterThan(120_000);
    expect(lastMs).toBeLessThan(130_000);
  });
});

describe('esptool-js reading the virtual chip as a real one', () => {
  it('sees an N16R8 preset as an ESP32-S3 v0.2 with 8 MB of PSRAM, its flash status and its flash', {
    timeout: 60_000,
  }, async () => {
    const { board, binding, flash } = await rig();
    const data = Uint8Array.from({ length: 0x3000 }, (_, i) => (i * 29 + 1) & 0xff);
    flash.program(0x20000, data);
    board.reset('EXT_SYS_RST', { download: true });
    await board.waitForState('download', 20_000);
    const [info] = await binding.list();
    if (info === undefined) throw new Error('the board is not listed');
    const transport = new (class extends Transport {
      override trace(): void {}
    })(NodeWebSerialPort.fromPortInfo(binding, info), false);
    const said: string[] = [];
    const terminal = { clean() {}, writeLine: (line: string) => said.push(line), write() {} };
    const loader = new ESPLoader({ transport, baudrate: 115200, debugLogging: false, terminal });
    try {
      await loader.main('no_reset');
      expect(said).toContain('Chip is ESP32-S3 (QFN56) (revision v0.2)');
      expect(said).toContain('Features: Wi-Fi,BLE,Embedded PSRAM 8MB (AP_3v3)');
      expect(said).toContain(`MAC: ${board.mac}`);
      // read_status as esptool does it: RDSR (0x05) and RDSR2 (0x35), 8 bits each.
      const sr1 = (await loader.runSpiflashCommand(0x05, new Uint8Array(0), 8)) & 0xff;
      const sr2 = (await loader.runSpiflashCommand(0x35, new Uint8Array(0), 8)) & 0xff;
      expect(sr1 | (sr2 << 8)).toBe(0x0200);
      expect(await loader.readFlash(0x20000, data.length)).toEqual(data);
    } finally {
      await transport.disconnect();
    }
  });
});
