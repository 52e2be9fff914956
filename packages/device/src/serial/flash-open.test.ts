/**
 * The flasher's first open of a virtual board's port that refuses to open: a port just
 * enumerated and still busy (ModemManager probing it) is retried and then flashed; one this
 * user may not open says so, and what to do, on a native-USB board too.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Flasher, NodeWebSerialPort, type SerialBinding } from '@xiaozhi-mcp/serial';
import { afterEach, describe, expect, it } from 'vitest';
import { FlashStorage } from '../flash-storage.js';
import { boardPreset } from '../presets.js';
import type { OpenFault } from '../testing/index.js';
import { FAST_TIMING } from '../testing/timing.js';
import { VirtualBoard } from '../virtual-board.js';
import { VirtualSerialBinding } from './virtual-binding.js';

const MB = 1024 * 1024;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A powered ESP32-C3 board whose first `count` opens fail with `code`, and a flasher on it. */
async function refusingBoard(count: number, code: OpenFault, usbJtag: boolean) {
  const flash = new FlashStorage({ size: 4 * MB });
  const { inPackage: _s3r8, ...preset } = boardPreset('bread-compact-wifi');
  const board = new VirtualBoard({
    flash,
    timing: FAST_TIMING,
    mac: 'f4:12:fa:5e:00:02',
    preset: { ...preset, chip: 'esp32c3' },
  });
  const binding = new VirtualSerialBinding();
  const device = binding.attach(board, { usbJtag, openFaults: { count, code } });
  board.powerOn();
  const [info] = await binding.list();
  if (info === undefined) throw new Error('the board is not listed');
  // Every open asked of the binding, and those that reached the board.
  let attempts = 0;
  const counted: SerialBinding = {
    list: () => binding.list(),
    open: (options) => {
      attempts += 1;
      return binding.open(options);
    },
  };
  const opens: string[] = [];
  binding.on('open', (_device, path) => opens.push(path));
  const flasher = new Flasher({
    platform: 'linux',
    port: NodeWebSerialPort.fromPortInfo(counted, info),
  });
  cleanups.push(async () => {
    await flasher.disconnect();
    board.powerOff();
    binding.detach(device);
  });
  return { flash, board, device, flasher, opens, attempts: () => attempts };
}

describe("the flasher's first open of a port that refuses", () => {
  it('retries a port still busy after it appeared, then flashes', { timeout: 60_000 }, async () => {
    const { flash, flasher, opens, attempts } = await refusingBoard(3, 'EBUSY', false);
    const data = randomBytes(64 * 1024);
    const result = await flasher.flash([{ offset: 0x200000, data }], {
      baudRate: 460_800,
      reset: false,
    });
    expect(result.flaky).toBe(false);
    expect(flash.md5(0x200000, data.length)).toBe(createHash('md5').update(data).digest('hex'));
    // Three refusals, then the open that reached the board, and nothing more.
    expect(attempts()).toBe(4);
    expect(opens).toHaveLength(1);
  });

  it('says permission denied and the fix on a native-USB board, never the ROM or a classic reset', {
    timeout: 60_000,
  }, async () => {
    const { board, flasher, opens, attempts } = await refusingBoard(1000, 'EACCES', true);
    const error = await flasher.connect().catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'PORT_DENIED' });
    const { message } = error as Error;
    expect(message).toMatch(/^\/dev\/ttyACM\d+: permission denied \(still, after retrying/);
    expect(message).toMatch(/dialout/);
    expect(message).not.toMatch(/no answer from the ROM|--reset (classic|tight)/);
    expect(attempts()).toBeGreaterThan(1);
    expect(opens).toEqual([]);
    expect(board.state).not.toBe('download');
  });
});
