/** Naming who holds a port, read from a fake `/proc` tree. */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { describeHolders, portHolders } from './port-holders.js';

let root: string;
let proc: string;

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'port-holders-'));
  proc = join(root, 'proc');
  mkdirSync(proc);
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** A process in the fake tree: its open files as link targets, and its command name. */
function processWith(pid: number | string, links: readonly string[], comm?: string): void {
  const dir = join(proc, String(pid));
  mkdirSync(join(dir, 'fd'), { recursive: true });
  for (const [fd, target] of links.entries()) symlinkSync(target, join(dir, 'fd', String(fd)));
  if (comm !== undefined) writeFileSync(join(dir, 'comm'), `${comm}\n`);
}

describe('portHolders', () => {
  it('names the processes whose open files point at the port, with their command', () => {
    processWith(812, ['/dev/null', '/dev/ttyACM0'], 'ModemManager');
    processWith(900, ['/dev/ttyUSB0', 'socket:[1234]'], 'minicom');
    processWith(4410, ['/dev/ttyACM0']); // no comm: named by pid alone
    processWith('self', ['/dev/ttyACM0'], 'node'); // not a pid
    const holders = portHolders('/dev/ttyACM0', { procRoot: proc });
    expect(holders.sort((a, b) => a.pid - b.pid)).toEqual([
      { pid: 812, command: 'ModemManager' },
      { pid: 4410 },
    ]);
    expect(describeHolders(holders)).toBe('ModemManager (pid 812), a process (pid 4410)');
  });

  it('follows a link to the device, as /dev/serial/by-id names it', () => {
    const device = join(root, 'ttyACM3');
    writeFileSync(device, '');
    const byId = join(root, 'usb-Espressif_USB_JTAG_serial_debug_unit_F4:12:FA:01:02:03-if00');
    symlinkSync(device, byId);
    processWith(77, [device], 'picocom');
    expect(portHolders(byId, { procRoot: proc })).toEqual([{ pid: 77, command: 'picocom' }]);
  });

  it('skips what it may not read: a process without an fd directory, an fd that is no link', () => {
    mkdirSync(join(proc, '1'));
    writeFileSync(join(proc, '1', 'comm'), 'systemd\n');
    mkdirSync(join(proc, '2', 'fd'), { recursive: true });
    writeFileSync(join(proc, '2', 'fd', '0'), 'not a link');
    processWith(3, ['/dev/ttyUSB1'], 'screen');
    expect(portHolders('/dev/ttyUSB1', { procRoot: proc })).toEqual([
      { pid: 3, command: 'screen' },
    ]);
  });

  it('tells nothing where there is no /proc to read, or no device path', () => {
    expect(portHolders('/dev/cu.usbmodem1101', { platform: 'darwin' })).toEqual([]);
    expect(portHolders('COM3', { procRoot: proc })).toEqual([]);
    expect(portHolders('/dev/ttyACM0', { procRoot: join(root, 'missing') })).toEqual([]);
  });
});
