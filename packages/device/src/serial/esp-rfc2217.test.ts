/**
 * Our RFC 2217 client against a server with the line rules of Espressif's esp_rfc2217_server
 * (fixtures/esp-like-rfc2217-server.py: written on Debian's pyserial `rfc2217.PortManager`, the
 * class Espressif's EspPortManager extends; `.ci/run` installs python3-serial), in front of a
 * virtual board shared by our own `port serve`. The server plays resets itself: `DTR on` is a
 * reset into download mode, `RTS off` a hard reset, other line changes are dropped and none is
 * answered. Judged by the board's own record of its resets and by what it runs afterwards.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import {
  NodeWebSerialPort,
  type ResolvedPort,
  Rfc2217Server,
  resolvePort,
} from '@xiaozhi-mcp/serial';
import {
  flashCommand,
  monitorCommand,
  type SerialCommandContext,
} from '@xiaozhi-mcp/serial/commands';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { FAST_TIMING } from '../testing/timing.js';
import type { BoardTiming } from '../virtual-board.js';
import { VirtualBus } from './virtual-bus.js';

const PYTHON = '/usr/bin/python3';
const SERVER = fileURLToPath(new URL('./fixtures/esp-like-rfc2217-server.py', import.meta.url));

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

const firmware = (version: string) =>
  buildVirtualFirmware({ chip: 'esp32s3', version, board: 'bread-compact-wifi', flashSizeMb: 4 });

/**
 * A board running `installed` on a USB-UART bridge, shared by our server, behind the esp-like
 * server: resolves with the esp-like server's URL.
 */
async function behindEspServer(installed: string) {
  const bus = new VirtualBus(TIMING);
  const local = bus.plug(
    { preset: 'bread-compact-wifi', flashSizeMb: 4, usb: 'uart' },
    'virtual:esp',
  );
  const flash = local.board.flash;
  if (flash === undefined) throw new Error('the virtual board has no flash');
  local.board.powerOff();
  flash.program(0, firmware(installed).merged);
  local.board.powerOn();
  const ours = await Rfc2217Server.start({
    port: local satisfies ResolvedPort,
    host: '127.0.0.1',
    listenPort: 0,
  });
  cleanups.push(async () => {
    await ours.close();
    bus.close();
  });
  const child: ChildProcess = spawn(PYTHON, [SERVER, ours.url], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) resolve();
        else {
          child.once('close', () => resolve());
          child.kill('SIGKILL');
        }
      }),
  );
  const port = await new Promise<number>((resolve, reject) => {
    let stdout = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      const line = stdout.split('\n')[0];
      if (stdout.includes('\n') && line !== undefined)
        resolve((JSON.parse(line) as { port: number }).port);
    });
    child.once('close', (code) => reject(new Error(`the server exited (${code}): ${stderr}`)));
  });
  await until(() => local.board.console.history.some((l) => /-> wifi_configuring/.test(l.text)), {
    what: 'the first boot',
    timeoutMs: 30_000,
  });
  const resets = () => local.device.lineEvents.filter((e) => e.kind === 'reset');
  return { url: `rfc2217://127.0.0.1:${port}`, board: local.board, resets };
}

function context(): SerialCommandContext & { text: () => string } {
  const out: string[] = [];
  return {
    program: 'xiaozhi-mcp',
    out: { stdout: (t) => out.push(t), stderr: (t) => out.push(t) },
    env: { NO_COLOR: '1' },
    text: () => out.join(''),
  };
}

describe.skipIf(skipped !== undefined)(
  `our client through esp_rfc2217_server's line rules${skipped === undefined ? '' : ` (skipped: ${skipped})`}`,
  () => {
    it('opens without resetting the board, and knows it cannot click BOOT through it', {
      timeout: 120_000,
    }, async () => {
      const { url, resets } = await behindEspServer('2.6.0');
      const before = resets().length;
      const resolved = await resolvePort(url);
      expect(resolved.lineControl).toBe('resets');
      const port = NodeWebSerialPort.fromPortInfo(resolved.binding, {
        ...resolved.info,
        path: resolved.path,
      });
      await port.open({ baudRate: 115_200 });
      // What every open does: the lines released, which there would be a hard reset.
      await port.setSignals({ dataTerminalReady: false, requestToSend: false });
      await port.close();
      resolved.dispose();
      expect(resets().length).toBe(before);
    });

    it('`flash` resets into download mode with one DTR on, writes, verifies and hard-resets into the new app', {
      timeout: 180_000,
    }, async () => {
      const { url, board, resets } = await behindEspServer('2.6.0');
      const dir = await mkdtemp(join(tmpdir(), 'esp-rfc2217-'));
      cleanups.push(() => rm(dir, { recursive: true, force: true }));
      const image = join(dir, 'merged-binary.bin');
      await writeFile(image, firmware('2.6.5').merged);
      const before = resets().length;
      const booted = board.waitForLine(/app_init: App version:\s+2\.6\.5$/, 120_000);
      const ctx = context();
      expect(await flashCommand(ctx, image, { port: url }), ctx.text()).toBe(0);
      await booted;
      expect(ctx.text()).toMatch(/MD5 verified/);
      // One reset into download mode (the first attempt synced), then the hard reset.
      expect(resets().slice(before)).toEqual([
        { kind: 'reset', download: true },
        { kind: 'reset', download: false },
      ]);
      expect(board.version).toBe('2.6.5');
    });

    it('`monitor --reset` hard-resets the board and reads its boot log', {
      timeout: 120_000,
    }, async () => {
      const { url, resets } = await behindEspServer('2.6.0');
      const before = resets().length;
      const ctx = context();
      const code = await monitorCommand(ctx, {
        port: url,
        reset: true,
        until: 'App version',
        timeout: '60',
      });
      expect(code, ctx.text()).toBe(0);
      expect(ctx.text()).toMatch(/rst:0x1 \(POWERON\),boot:0x8 \(SPI_FAST_FLASH_BOOT\)/);
      expect(ctx.text()).toMatch(/app_init: App version:\s+2\.6\.0/);
      expect(resets().slice(before)).toEqual([{ kind: 'reset', download: false }]);
    });

    it('`monitor --click` is refused (exit 2) before anything reaches the board', {
      timeout: 120_000,
    }, async () => {
      const { url, resets } = await behindEspServer('2.6.0');
      const before = resets().length;
      const ctx = context();
      expect(await monitorCommand(ctx, { port: url, click: true, timeout: '5' })).toBe(2);
      expect(ctx.text()).toMatch(/--click needs DTR to reach GPIO0 alone/);
      expect(resets().length).toBe(before);
    });
  },
);
