import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VirtualBus, type VirtualBusBoard, type VirtualBusPort } from '@xiaozhi-mcp/device';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { placeImage } from '@xiaozhi-mcp/serial';
import { XiaozhiServer } from '@xiaozhi-mcp/server';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  BoardRunner,
  type ClosableStream,
  closeWithin,
  type RunnerTimeouts,
} from './board-runner.js';
import type { BoardConfig } from './inventory.js';
import { exitCodeFor, type SuiteName } from './model.js';
import { ConsoleReporter } from './reporters/console.js';
import { rigServerOptions } from './rig.js';
import { VIRTUAL_RIG_TIMING } from './virtual-rig.js';

afterEach(() => {
  vi.useRealTimers();
});

function stream(closes: boolean): ClosableStream & { destroyed: boolean } {
  return {
    isOpen: true,
    destroyed: false,
    close(callback) {
      // A close that takes a moment, on the tests' fake clock.
      if (closes) setTimeout(() => callback(null), 10);
    },
    destroy() {
      this.destroyed = true;
    },
  };
}

describe('closeWithin', () => {
  it('closes a port that closes', async () => {
    vi.useFakeTimers();
    const port = stream(true);
    const closing = closeWithin(port, 5000);
    await vi.advanceTimersByTimeAsync(10);
    expect(await closing).toBe(true);
    expect(port.destroyed).toBe(false);
  });

  it('abandons a port whose close hangs, after the limit and not before', async () => {
    vi.useFakeTimers();
    const port = stream(false);
    let settled = false;
    const closing = closeWithin(port, 5000).then((inTime) => {
      settled = true;
      return inTime;
    });
    await vi.advanceTimersByTimeAsync(4999);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(await closing).toBe(false);
    expect(port.destroyed).toBe(true);
  });
});

// --- The console after a reset, and the board's buttons on `reset: none` ---------------------

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

/**
 * One virtual board through a BoardRunner, flashed and provisioned as the virtual rig does:
 * identify, flash, provision, reset, boot, OTA check, session. `hands`: the virtual rig's
 * operator on its BOOT and RESET buttons.
 */
async function runBoard(
  spec: VirtualBusBoard,
  config: Omit<BoardConfig, 'name' | 'port'>,
  options: {
    readonly hands?: boolean;
    readonly flash?: boolean;
    /** What the flash step writes: the merged image at 0x0 (default) or the app image alone. */
    readonly image?: 'merged' | 'app';
    readonly suites?: readonly SuiteName[];
    readonly attended?: boolean;
    readonly timeouts?: Partial<RunnerTimeouts>;
    readonly onPlug?: (bus: VirtualBus, port: VirtualBusPort) => void;
    readonly onLog?: (text: string, port: VirtualBusPort) => void;
  } = {},
) {
  const server = await XiaozhiServer.start(rigServerOptions('127.0.0.1', 0, undefined, 0));
  cleanup.push(() => server.stop());
  const bus = new VirtualBus(VIRTUAL_RIG_TIMING);
  cleanup.push(() => bus.close());
  const port = bus.plug(spec, 'virtual:desk');
  options.onPlug?.(bus, port);
  const built = buildVirtualFirmware({
    chip: 'esp32s3',
    version: '2.4.2',
    board: 'bread-compact-wifi',
  });
  const log: string[] = [];
  const outDir = mkdtempSync(join(tmpdir(), 'hil-runner-'));
  const hands =
    options.hands === false
      ? {}
      : {
          pressBoot: () => port.board.click(),
          pressReset: (press?: { readonly boot?: boolean }) =>
            bus.binding.pressReset(port.device, press),
        };
  const flash = options.flash ?? true;
  const report = await new BoardRunner({
    config: {
      name: 'desk',
      port: 'virtual:desk',
      chip: 'esp32s3',
      variant: 'bread-compact-wifi',
      ...config,
    },
    port: async () => ({ ...port, ...hands }),
    server,
    outDir,
    firmware: flash
      ? {
          image:
            options.image === 'app'
              ? placeImage('virtual firmware', built.app, undefined)
              : placeImage('virtual firmware', built.merged, 0),
          version: built.version,
          chip: built.chip,
        }
      : undefined,
    provision: flash ? { ssid: 'lab', password: 'lab-password' } : undefined,
    candidateImage: undefined,
    suites: options.suites ?? ['session', 'initialize'],
    latency: {},
    baseline: { deviations: [] },
    reporter: new ConsoleReporter({
      write: (text) => {
        log.push(text);
        options.onLog?.(text, port);
      },
      live: false,
    }),
    signal: new AbortController().signal,
    ...(options.timeouts === undefined ? {} : { timeouts: options.timeouts }),
    ...(options.attended === undefined ? {} : { attended: options.attended }),
  }).run();
  const step = (name: string) => report.steps.find((s) => s.step === name);
  return {
    report,
    step,
    port,
    log: log.join(''),
    console: () => readFileSync(join(outDir, 'desk', 'console.log'), 'utf8'),
    exitCode: exitCodeFor([report], false),
  };
}

describe('the console after a reset', () => {
  it('passes boot by the OTA check on a native-USB board that re-enumerates in 2 s and loses its early lines', {
    timeout: 120_000,
  }, async () => {
    // ESP-IDF's USB-Serial-JTAG console drops what the board prints while no host reads: the
    // hard reset re-enumerates the board, which boots and checks OTA before its port is back.
    const { report, step, port } = await runBoard(
      { preset: 'bread-compact-wifi', flashSizeMb: 16, usb: 'native', reenumerateMs: 2000 },
      {},
    );
    expect(report.failure).toBeUndefined();
    expect(report.status).toBe('passed');
    expect(step('boot')).toMatchObject({
      status: 'passed',
      message: expect.stringMatching(
        /^runs 2\.4\.2 \(bread-compact-wifi\): its OTA check at our endpoint/,
      ),
    });
    // Its boot lines were printed and lost, not delayed: the console came back after them.
    expect(port.device.stats.droppedClosedLines).toBeGreaterThan(0);
    expect(report.port).toMatch(/\/dev\/ttyACM1\)$/);
  });

  it('finds the console again when the port comes back late and refuses its first opens', {
    timeout: 120_000,
  }, async () => {
    const { report, step, console } = await runBoard(
      { preset: 'bread-compact-wifi', flashSizeMb: 16, usb: 'native', reenumerateMs: 2000 },
      {},
      {
        onPlug: (bus) =>
          // A node that is not there yet, then a port ModemManager is probing.
          bus.binding.on('plug', (_device, path) => {
            bus.binding.failOpens(path, 2, 'ENOENT');
            bus.binding.failOpens(path, 2, 'EBUSY');
          }),
      },
    );
    expect(report.failure).toBeUndefined();
    expect(report.status).toBe('passed');
    expect(step('boot')?.status).toBe('passed');
    expect(console()).toMatch(
      /--- \/dev\/ttyACM0 closed; looking for the board again \(10 s\) ---\n--- reconnected on \/dev\/ttyACM1 ---/,
    );
  });
});

describe('the idle line a console away lost', () => {
  it('prompts a session once the console is back after the OTA check, and again after a reboot', {
    timeout: 120_000,
  }, async () => {
    // boot-click on native USB: prompted instead, once the board is idle. Its idle line comes
    // right after its OTA check, while its port is away: the console's return after the check
    // says it, and after the reboot a new check does again.
    const { report, step, log } = await runBoard(
      { preset: 'bread-compact-wifi', flashSizeMb: 16, usb: 'native', reenumerateMs: 2000 },
      { session: 'boot-click' },
      { suites: ['session', 'initialize', 'reboot'] },
    );
    expect(report.failure).toBeUndefined();
    expect(report.status).toBe('passed');
    expect(step('session')?.status).toBe('passed');
    expect(report.checks.find((c) => c.id === 'reboot.back')?.status).toBe('passed');
    expect(log.match(/press the BOOT button on the board to start a session/g)).toHaveLength(2);
  });
});

describe('the console open, in the reset step', () => {
  it('fails the reset step (exit 3) when the console does not open, saying where it looked and why', {
    timeout: 120_000,
  }, async () => {
    const { report, step, exitCode } = await runBoard(
      { preset: 'bread-compact-wifi', flashSizeMb: 16 },
      { session: 'mqtt' },
      {
        timeouts: { refindMs: 1000 },
        onPlug: (bus, port) => {
          // The flasher opens the port first; every open after it is refused (udev's mode, or
          // a user not in the port's group).
          bus.binding.once('open', () => bus.binding.failOpens(port.device.path, 1000, 'EACCES'));
        },
      },
    );
    expect(step('provision')?.status).toBe('passed');
    expect(report.status).toBe('rig-failed');
    expect(exitCode).toBe(3);
    expect(report.failure).toMatchObject({
      step: 'reset',
      reason: expect.stringMatching(
        /^the console of desk could not be opened within 1 s, at \/dev\/ttyVIRT0 and wherever virtual:desk was looked for again by its identity: \/dev\/ttyVIRT0: permission denied/,
      ),
    });
    expect(step('boot')).toBeUndefined();
  });
});

/*
 * What the board saw of DTR and RTS, from released lines: one entry per set() that changed a
 * line, as (DTR, RTS). Written out from esptool v4.12's esptool/reset.py.
 */
// ClassicReset (lines 98-104): setDTR(0); setRTS(1); setDTR(1); setRTS(0); setDTR(0).
const CLASSIC = [
  [false, true],
  [true, true],
  [true, false],
  [false, false],
];
// UnixTightReset (lines 114-121): (0,0); (1,1); (0,1); (1,0); (0,0); setDTR(0).
const TIGHT = [
  [true, true],
  [false, true],
  [true, false],
  [false, false],
];
// USBJTAGSerialReset (lines 131-142): setRTS(0); setDTR(0); setDTR(1); setRTS(0); setRTS(1);
// setDTR(0); setRTS(1); setDTR(0); setRTS(0).
const USB_JTAG = [
  [true, false],
  [true, true],
  [false, true],
  [false, false],
];
// HardReset (lines 156-165): setRTS(1); setRTS(0): the rig's reset step, the app boots.
const HARD = [
  [false, true],
  [false, false],
];

const seen = (port: VirtualBusPort) => port.device.lineChanges.map((c) => [c.dtr, c.rts]);

describe("the inventory's reset reaches the flasher and the rig", () => {
  for (const [reset, usb, connect] of [
    ['classic', 'uart', CLASSIC],
    ['tight', 'uart', TIGHT],
    ['usb-jtag', 'native', USB_JTAG],
  ] as const) {
    it(`${reset}: the flasher connects with esptool's ${reset} reset, the rig resets through RTS`, {
      timeout: 120_000,
    }, async () => {
      const { report, port } = await runBoard(
        { preset: 'bread-compact-wifi', flashSizeMb: 16, usb },
        { reset, session: 'mqtt' },
      );
      expect(report.failure).toBeUndefined();
      // Each connect attempt is this reset; esptool tries again when the ROM's answer misses
      // its sync timeout (100 ms), as a busy machine can make it: one attempt or more.
      const lines = seen(port);
      const attempts = Math.max(1, Math.round((lines.length - HARD.length) / connect.length));
      expect(lines).toEqual([...Array.from({ length: attempts }, () => connect).flat(), ...HARD]);
    });
  }

  it('none: no line is ever touched; the virtual hand holds BOOT and presses RESET to flash, presses RESET to boot', {
    timeout: 120_000,
  }, async () => {
    const { report, step, port, log, console } = await runBoard(
      { preset: 'bread-compact-wifi', flashSizeMb: 16 },
      { reset: 'none', session: 'boot-click' },
    );
    expect(report.failure).toBeUndefined();
    expect(report.status).toBe('passed');
    expect(seen(port)).toEqual([]);
    expect(step('identify')?.message).toMatch(/^BOOT held and RESET pressed by hand; ESP32-S3/);
    expect(step('reset')?.message).toBe(
      'console on /dev/ttyVIRT0; RESET pressed by hand; no line touched',
    );
    expect(step('boot')?.message).toMatch(
      /^runs 2\.4\.2 \(bread-compact-wifi\): its app_init line/,
    );
    // The flasher left the stub for the ROM (esptool's --after no_reset) before RESET was pressed.
    expect(console()).toMatch(/\[esptool\] Staying in bootloader\.\n/);
    expect(log).toMatch(
      /press RESET on desk: reset is none.*the virtual rig's operator presses it/,
    );
    // A BOOT click would toggle DTR: the session is prompted for instead.
    expect(log).toMatch(/its reset is none: .*press the BOOT button on the board/);
  });

  it('none, unattended (CI): the reset step fails at once, asking for RESET (exit 3)', {
    timeout: 120_000,
  }, async () => {
    const { report, step, port, exitCode } = await runBoard(
      { preset: 'bread-compact-wifi', flashSizeMb: 16 },
      { reset: 'none', session: 'mqtt', deviceId: 'f4:12:fa:7e:00:01' },
      { hands: false, flash: false, attended: false },
    );
    expect(report.status).toBe('rig-failed');
    expect(exitCode).toBe(3);
    expect(report.failure).toMatchObject({
      step: 'reset',
      reason: expect.stringMatching(
        /^press RESET on desk: reset is none, and nobody is at a terminal/,
      ),
    });
    expect(step('boot')).toBeUndefined();
    expect(seen(port)).toEqual([]);
  });

  it('none, attended: the person is asked for BOOT and RESET, then for RESET, and boot waits for them', {
    timeout: 120_000,
  }, async () => {
    const { report, port } = await runBoard(
      { preset: 'bread-compact-wifi', flashSizeMb: 16 },
      { reset: 'none', session: 'mqtt' },
      {
        hands: false,
        attended: true,
        // The person at the terminal does what the prompt says.
        onLog: (text, board) => {
          if (/hold BOOT and press RESET on desk/.test(text))
            board.device.pressReset({ boot: true });
          else if (/press RESET on desk: reset is none/.test(text)) board.device.pressReset();
        },
      },
    );
    expect(report.failure).toBeUndefined();
    expect(report.status).toBe('passed');
    expect(seen(port)).toEqual([]);
  });
});

describe('provisioning after the flash step', () => {
  /** The bytes the board sent its host while the provision step ran. */
  async function provisionTraffic(image: 'merged' | 'app') {
    let before: number | undefined;
    let sent: number | undefined;
    // Holding what a board holds after its first merged flash, as the virtual rig's boards do.
    const factory = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '2.4.0',
      board: 'bread-compact-wifi',
    }).merged;
    const { report, step } = await runBoard(
      { preset: 'bread-compact-wifi', flashSizeMb: 16, flashImage: factory },
      { session: 'mqtt' },
      {
        image,
        suites: ['session'],
        onLog: (text, port) => {
          if (/\] provision …/.test(text)) before = port.device.stats.toHost.bytes;
          else if (/\] provision ✓/.test(text) && before !== undefined)
            sent = port.device.stats.toHost.bytes - before;
        },
      },
    );
    expect(report.failure).toBeUndefined();
    expect(step('provision')?.message).toMatch(/^nvs at 0x9000: wifi lab, ota_url http:/);
    return sent ?? Number.NaN;
  }

  it('takes the partition table and the NVS partition from the merged image it just wrote, not from the wire', {
    timeout: 120_000,
  }, async () => {
    // The replies to the NVS write only: reading the 16 KiB partition back would send more.
    expect(await provisionTraffic('merged')).toBeLessThan(2048);
  });

  it('reads them from the board after an app image, which holds neither', {
    timeout: 120_000,
  }, async () => {
    expect(await provisionTraffic('app')).toBeGreaterThan(16 * 1024);
  });
});
