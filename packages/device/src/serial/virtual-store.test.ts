import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildVirtualFirmware, type PortInfo } from '@xiaozhi-mcp/firmware';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  chooseSelector,
  defaultVirtualDir,
  listVirtualBoards,
  type ResolvedPort,
  resolvePort,
  runReported,
  type SerialCommandContext,
  virtualMac,
} from './port-resolver.js';

const FAST = { bootMs: 20, wifiConnectMs: 20, panicRebootMs: 100 };
let dir: string;
const opened: ResolvedPort[] = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'hil-virtual-'));
});

afterEach(() => {
  for (const port of opened.splice(0)) port.virtual?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

async function open(selector: string, create = true): Promise<ResolvedPort> {
  const port = await resolvePort(selector, {
    virtualDir: dir,
    timing: FAST,
    ...(create ? { create: { preset: 'bread-compact-wifi', flashSizeMb: 4 } } : {}),
  });
  opened.push(port);
  return port;
}

const usbPort: PortInfo = {
  path: '/dev/ttyUSB0',
  vendorId: '10c4',
  productId: 'ea60',
  serialNumber: '0001',
  manufacturer: 'Silicon Labs',
  kind: 'usb-uart',
};

describe('resolvePort: virtual boards that persist in files', () => {
  it('creates the sidecar and the erased flash file on first use, with a MAC from the name', async () => {
    const port = await open('virtual:desk');
    expect(port.path).toBe('virtual:desk');
    expect(port.label).toBe('virtual:desk');
    expect(port.virtual?.created).toBe(true);
    const sidecar = JSON.parse(readFileSync(join(dir, 'desk.json'), 'utf8'));
    expect(sidecar).toEqual({
      preset: 'bread-compact-wifi',
      chip: 'esp32s3',
      mac: virtualMac('desk'),
      flashSizeMb: 4,
    });
    expect(statSync(join(dir, 'desk.flash')).size).toBe(4 * 1024 * 1024);
    expect(virtualMac('desk')).toMatch(/^f4:12:fa(:[0-9a-f]{2}){3}$/);
    expect(virtualMac('desk')).toBe(virtualMac('desk'));
    expect(virtualMac('desk')).not.toBe(virtualMac('bench'));
    expect(port.virtual?.board.mac).toBe(virtualMac('desk'));
    expect(port.virtual?.board.powered).toBe(true);
    // The port looks like a CP2102 bridge, as real boards do.
    expect(port.info).toMatchObject({ path: 'virtual:desk', vendorId: '10c4', kind: 'usb-uart' });
  });

  it('keeps what the sidecar says: create options apply only to a new board', async () => {
    const first = await open('virtual:desk');
    first.virtual?.dispose();
    const again = await resolvePort('virtual:desk', {
      virtualDir: dir,
      timing: FAST,
      create: { preset: 'otto-robot', flashSizeMb: 16 },
    });
    opened.push(again);
    expect(again.virtual?.created).toBe(false);
    expect(again.virtual?.entry).toMatchObject({ preset: 'bread-compact-wifi', flashSizeMb: 4 });
    expect(again.virtual?.board.preset.name).toBe('bread-compact-wifi');
  });

  it('boots what the flash file holds, in a later process as in this one', async () => {
    const fw = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '2.7.0',
      board: 'bread-compact-wifi',
      flashSizeMb: 4,
    });
    (await open('virtual:desk')).virtual?.dispose();
    // Write the firmware into the file as a flasher would have.
    const flashPath = join(dir, 'desk.flash');
    const bytes = readFileSync(flashPath);
    bytes.set(fw.merged, 0);
    writeFileSync(flashPath, bytes);
    const port = await open('virtual:desk');
    const board = port.virtual?.board;
    await board?.waitForLine(/App version:\s+2\.7\.0/, 10_000);
    expect(board?.version).toBe('2.7.0');
  });

  it('lets one process at a time use a virtual board, like a serial port', async () => {
    const port = await open('virtual:desk');
    await expect(open('virtual:desk')).rejects.toMatchObject({
      code: 'PORT_BUSY',
      message: expect.stringMatching(/virtual:desk is in use by another process \(pid \d+\)/),
    });
    port.virtual?.dispose();
    port.virtual?.dispose(); // twice is fine
    const again = await open('virtual:desk');
    expect(again.virtual?.board.powered).toBe(true);
  });

  it('refuses names that are not file names, and missing boards without create', async () => {
    await expect(open('virtual:../etc')).rejects.toMatchObject({ kind: 'usage' });
    await expect(open('virtual:')).rejects.toMatchObject({ kind: 'usage' });
    await expect(open('virtual:.hidden')).rejects.toMatchObject({ kind: 'usage' });
    await expect(open('virtual:ghost', false)).rejects.toMatchObject({
      kind: 'port',
      message: expect.stringMatching(/no virtual board 'ghost' in .*flash` creates it/),
    });
    expect(existsSync(join(dir, 'ghost.json'))).toBe(false);
  });

  it('says how to recover from a damaged sidecar', async () => {
    writeFileSync(join(dir, 'bad.json'), '{"preset":"toaster"}');
    await expect(open('virtual:bad')).rejects.toMatchObject({
      kind: 'failed',
      message: expect.stringMatching(/delete it and its \.flash file/),
    });
    expect(listVirtualBoards(dir)).toEqual([]);
  });

  it('finds a virtual board again by serial number after it re-enumerates', async () => {
    const port = await open('virtual:desk');
    const virtual = port.virtual;
    if (virtual === undefined) throw new Error('not virtual');
    const binding = port.binding as unknown as {
      unplug(path: string, o: { powerOff: boolean }): void;
      plug(d: unknown, o: { powerOn: boolean }): string;
    };
    binding.unplug(port.path, { powerOff: false });
    expect(await port.present(port.path)).toBe(false);
    const path = binding.plug(virtual.device, { powerOn: false });
    expect(path).not.toBe('virtual:desk');
    const found = await port.refind(2000);
    expect(found.path).toBe(path);
    expect(await port.present(path)).toBe(true);
  });
});

describe('resolvePort: real ports', () => {
  it('finds a port through the lister and names it by path', async () => {
    const port = await resolvePort('serial:0001', { lister: async () => [usbPort] });
    expect(port).toMatchObject({ path: '/dev/ttyUSB0', label: '/dev/ttyUSB0', info: usbPort });
    expect(port.virtual).toBeUndefined();
  });

  it('uses an existing tty no listing knows (a pty), and fails clearly for a missing one', async () => {
    const pty = join(dir, 'ttyFAKE');
    writeFileSync(pty, '');
    const port = await resolvePort(pty, { lister: async () => [], findTimeoutMs: 0 });
    expect(port.info).toEqual({ path: pty, kind: 'unknown' });
    await expect(
      resolvePort('/dev/ttyUSB9', { lister: async () => [usbPort], findTimeoutMs: 0 }),
    ).rejects.toMatchObject({
      code: 'PORT_NOT_FOUND',
      message: expect.stringMatching(/no serial port matches \/dev\/ttyUSB9.*run `ports`/),
    });
    await expect(resolvePort('ttyUSB0', { lister: async () => [] })).rejects.toMatchObject({
      code: 'OPTION_INVALID',
    });
  });
});

describe('chooseSelector: --port may be left out when there is one board', () => {
  it('picks the only board, real or virtual', async () => {
    expect(
      await chooseSelector(undefined, { virtualDir: dir, lister: async () => [usbPort] }),
    ).toBe('/dev/ttyUSB0');
    (await open('virtual:desk')).virtual?.dispose();
    expect(await chooseSelector(undefined, { virtualDir: dir, lister: async () => [] })).toBe(
      'virtual:desk',
    );
    expect(await chooseSelector('virtual:x', { virtualDir: dir })).toBe('virtual:x');
  });

  it('lists the boards when there are several, and says what to do when there is none', async () => {
    (await open('virtual:desk')).virtual?.dispose();
    await expect(
      chooseSelector(undefined, { virtualDir: dir, lister: async () => [usbPort] }),
    ).rejects.toMatchObject({
      kind: 'usage',
      message: expect.stringMatching(
        /^2 boards attached: \/dev\/ttyUSB0 \(10c4:ea60.*\); virtual:desk \(bread-compact-wifi\); choose one with --port$/,
      ),
    });
    const builtIn: PortInfo = { path: '/dev/ttyS0', kind: 'unknown' };
    await expect(
      chooseSelector(undefined, { virtualDir: join(dir, 'none'), lister: async () => [builtIn] }),
    ).rejects.toMatchObject({ kind: 'port', message: expect.stringMatching(/^no board attached/) });
  });
});

describe('failures', () => {
  it('are one line with the program name, and exit 2, 1 or the port code', async () => {
    let stderr = '';
    const context: SerialCommandContext = {
      program: 'hil',
      out: { stdout: () => {}, stderr: (t) => (stderr += t) },
      portExitCode: 3,
    };
    const fail = (error: unknown) =>
      runReported(
        context,
        () => 'flash virtual:desk',
        async () => {
          throw error;
        },
      );
    await open('virtual:desk');
    expect(await fail(await open('virtual:desk').catch((e: unknown) => e))).toBe(3);
    expect(stderr).toMatch(/^hil: flash virtual:desk: virtual:desk is in use by another process/);
    expect(await fail(new Error('two\nlines'))).toBe(1);
    expect(stderr.endsWith('hil: flash virtual:desk: two lines\n')).toBe(true);
    expect(await fail(await open('virtual:..').catch((e: unknown) => e))).toBe(2);
  });

  it('default virtual dir: $XIAOZHI_VIRTUAL_DIR, else ~/.cache/xiaozhi-mcp/virtual', () => {
    expect(defaultVirtualDir({ XIAOZHI_VIRTUAL_DIR: '/x' })).toBe('/x');
    expect(defaultVirtualDir({})).toMatch(/\.cache\/xiaozhi-mcp\/virtual$/);
  });
});
