/**
 * What `port serve` does with the line changes of a client nobody here wrote: pyserial's RFC
 * 2217 client (Debian's python3-serial under /usr/bin/python3; `.ci/run` installs it), sending
 * esptool's resets one line at a time (fixtures/pyserial-resets.py, after esptool/reset.py),
 * through our server to a virtual board. Judged by the ROM's boot lines the client reads back
 * (`boot:0x8` the app, from SPI flash; `boot:0x0` download mode, as the silicon prints them) and
 * by the board's own record of its resets.
 */
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { type ResolvedPort, Rfc2217Server } from '@xiaozhi-mcp/serial';
import { afterEach, describe, expect, it } from 'vitest';
import { FAST_TIMING } from '../testing/timing.js';
import type { BoardTiming } from '../virtual-board.js';
import { VirtualBus } from './virtual-bus.js';

const PYTHON = '/usr/bin/python3';
const SCRIPT = fileURLToPath(new URL('./fixtures/pyserial-resets.py', import.meta.url));

/** Why the tests cannot run here, or undefined when they can. */
function missing(): string | undefined {
  const probe = spawnSync(PYTHON, ['-c', 'import serial.rfc2217'], { encoding: 'utf8' });
  if (probe.error !== undefined) return `${PYTHON} cannot run (${probe.error.message})`;
  if (probe.status !== 0)
    return `${PYTHON} has no pyserial (import serial.rfc2217 failed: ${probe.stderr.trim().split('\n').at(-1) ?? ''}); install Debian's python3-serial`;
  return undefined;
}
const skipped = missing();

const TIMING: Partial<BoardTiming> = { ...FAST_TIMING, panicRebootMs: 200 };
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A board with firmware on it, its port shared by our server on 127.0.0.1. */
async function served(usb: 'uart' | 'native') {
  const bus = new VirtualBus(TIMING);
  const local = bus.plug({ preset: 'bread-compact-wifi', flashSizeMb: 4, usb }, 'virtual:resets');
  const flash = local.board.flash;
  if (flash === undefined) throw new Error('the virtual board has no flash');
  local.board.powerOff();
  const image = buildVirtualFirmware({
    chip: 'esp32s3',
    version: '2.6.4',
    board: 'bread-compact-wifi',
    flashSizeMb: 4,
    padToFlashSize: true,
  });
  flash.program(0, image.merged);
  local.board.powerOn();
  const log: string[] = [];
  const server = await Rfc2217Server.start({
    port: local satisfies ResolvedPort,
    host: '127.0.0.1',
    listenPort: 0,
    log: (line) => log.push(line),
  });
  cleanups.push(async () => {
    await server.close();
    bus.close();
  });
  return { server, log, device: local.device };
}

/** Runs the script; resolves with what it printed. */
function pyserial(mode: string, url: string): Promise<{ boots: string[]; text: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(PYTHON, [SCRIPT, mode, url], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    // A hang guard: the script bounds its own wait for the boot line.
    const timer = setTimeout(() => child.kill('SIGKILL'), 90_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      if (code !== 0) reject(new Error(`python exited ${code}: ${stderr}`));
      else resolve(JSON.parse(stdout) as { boots: string[]; text: string });
    });
  });
}

describe.skipIf(skipped !== undefined)(
  `pyserial's resets through port serve${skipped === undefined ? '' : ` (skipped: ${skipped})`}`,
  () => {
    it("boots the app after pyserial's default open and the usual hard reset (boot:0x8), as a plain bridge does", {
      timeout: 120_000,
    }, async () => {
      // pyserial's open asserts DTR and RTS; `dtr = False` next holds EN low (RTS alone), and
      // the RTS release boots the app. Not a USB-Serial-JTAG reset: the port is a bridge's.
      const { server, device } = await served('uart');
      const result = await pyserial('hard', server.url);
      expect(result.boots, result.text).toEqual([
        'rst:0x1 (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)',
      ]);
      expect(device.lineEvents.filter((e) => e.kind === 'reset' && e.download)).toHaveLength(0);
    });

    for (const [mode, name] of [
      ['classic', 'ClassicReset'],
      ['tight', 'UnixTightReset, one line at a time, DTR first'],
    ] as const)
      it(`${name} from pyserial's default open reaches download mode (boot:0x0)`, {
        timeout: 120_000,
      }, async () => {
        const { server, log, device } = await served('uart');
        const result = await pyserial(mode, server.url);
        // One at a time, UnixTightReset's first step from both lines on (D0, then R0) is an
        // RTS pulse, which through a bridge boots the app first: only the last boot counts.
        expect(result.boots.at(-1), result.text).toMatch(/,boot:0x0 \(DOWNLOAD\(USB\/UART0\)\)$/);
        expect(device.lineEvents.filter((e) => e.kind === 'reset').at(-1)).toEqual({
          kind: 'reset',
          download: true,
        });
        expect(log).toContainEqual(
          expect.stringMatching(/reset into download mode recognised \(ClassicReset order\)/),
        );
      });

    it("USBJTAGSerialReset from pyserial's default open puts a USB-Serial-JTAG board in download mode", {
      timeout: 120_000,
    }, async () => {
      const { server, log, device } = await served('native');
      await pyserial('usbjtag', server.url);
      expect(log).toContainEqual(
        expect.stringMatching(/reset into download mode recognised \(USBJTAGSerialReset order\)/),
      );
      // The board's own record: its last reset was into download mode.
      expect(device.lineEvents.filter((e) => e.kind === 'reset').at(-1)).toEqual({
        kind: 'reset',
        download: true,
      });
    });
  },
);
