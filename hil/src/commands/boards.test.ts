/**
 * Boards that USB serial numbers cannot tell apart (CP2102 clones all reporting `0001`, CH340s
 * reporting none) get `by-path:` selectors, their USB socket, in `hil boards` and `ports`; a
 * board with a serial number of its own keeps `serial:`.
 */
import type { PortInfo } from '@xiaozhi-mcp/serial';
import { portsCommand, type SerialCommandContext } from '@xiaozhi-mcp/serial/commands';
import { describe, expect, it } from 'vitest';
import { boardEntryFor } from '../inventory.js';
import { boardsCommand } from './boards.js';

const at = (socket: string, port = true): string =>
  `/dev/serial/by-path/pci-0000:00:14.0-usb-0:${socket}:1.0${port ? '-port0' : ''}`;

const clone = (path: string, socket: string): PortInfo => ({
  path,
  byPathPath: at(socket),
  serialNumber: '0001',
  vendorId: '10c4',
  productId: 'ea60',
  manufacturer: 'Silicon Labs',
  product: 'CP2102 USB to UART Bridge Controller',
  kind: 'usb-uart',
});
const ch340 = (path: string, socket: string): PortInfo => ({
  path,
  byPathPath: at(socket),
  vendorId: '1a86',
  productId: '7523',
  product: 'USB Serial',
  kind: 'usb-uart',
});
const jtag: PortInfo = {
  path: '/dev/ttyACM0',
  byPathPath: at('3', false),
  serialNumber: 'F4:12:FA:01:02:03',
  vendorId: '303a',
  productId: '1001',
  kind: 'usb-serial-jtag',
};
const RIG: PortInfo[] = [
  clone('/dev/ttyUSB0', '1'),
  clone('/dev/ttyUSB1', '2'),
  ch340('/dev/ttyUSB2', '4.1'),
  ch340('/dev/ttyUSB3', '4.2'),
  jtag,
  { path: '/dev/ttyS0', kind: 'unknown' },
];

function output() {
  const out = { stdout: '', stderr: '' };
  return {
    out,
    sink: {
      stdout: (text: string) => {
        out.stdout += text;
      },
      stderr: (text: string) => {
        out.stderr += text;
      },
    },
  };
}

describe('hil boards: selectors that tell boards apart', () => {
  it('gives clones and CH340s their USB location, and native USB its serial number', async () => {
    const { out, sink } = output();
    expect(await boardsCommand(sink, { json: true, lister: async () => RIG })).toBe(0);
    const { boards } = JSON.parse(out.stdout) as { boards: { name: string; port: string }[] };
    expect(boards.map((b) => b.port)).toEqual([
      'by-path:pci-0000:00:14.0-usb-0:1:1.0-port0',
      'by-path:pci-0000:00:14.0-usb-0:2:1.0-port0',
      'by-path:pci-0000:00:14.0-usb-0:4.1:1.0-port0',
      'by-path:pci-0000:00:14.0-usb-0:4.2:1.0-port0',
      'serial:F4:12:FA:01:02:03',
    ]);
    expect(out.stdout).not.toContain('serial:0001');
  });

  it('prints the selector in the table of attached ports', async () => {
    const { out, sink } = output();
    expect(await boardsCommand(sink, { lister: async () => RIG })).toBe(0);
    expect(out.stdout).toMatch(
      /^ {2}\/dev\/ttyUSB1 +10c4:ea60 +usb-uart +by-path:pci-0000:00:14\.0-usb-0:2:1\.0-port0 +Silicon Labs/m,
    );
    expect(out.stdout).toMatch(/^ {2}\/dev\/ttyACM0 +303a:1001 +usb-serial-jtag +serial:F4:12/m);
  });

  it('without a USB location, a lone board is found by its USB id, twins by their path', () => {
    const { byPathPath, ...lone } = clone('/dev/ttyUSB0', '1');
    expect(byPathPath).toBeDefined();
    expect(boardEntryFor(lone, 0, [lone]).port).toBe('usb:10c4:ea60');
    const twin = { ...lone, path: '/dev/ttyUSB1' };
    expect(boardEntryFor(lone, 0, [lone, twin]).port).toBe('/dev/ttyUSB0');
  });
});

describe('hil boards: the reset each entry gets', () => {
  it("forces no reset on a bridge board (the flasher's own plan applies) and writes usb-jtag on native USB", async () => {
    const { out, sink } = output();
    expect(await boardsCommand(sink, { json: true, lister: async () => RIG })).toBe(0);
    const { boards } = JSON.parse(out.stdout) as { boards: Record<string, unknown>[] };
    // Four bridges (CP2102 clones, CH340s): esptool's plan per host, tight then classic on Unix.
    expect(boards.slice(0, 4).map((b) => 'reset' in b)).toEqual([false, false, false, false]);
    // USB-Serial-JTAG: what the port's kind implies, and its MAC from the serial number.
    expect(boards[4]).toMatchObject({
      reset: 'usb-jtag',
      deviceId: 'f4:12:fa:01:02:03',
      session: 'mqtt',
    });
  });
});

describe('ports: the USB location where it is the identity', () => {
  it('ends the row of a board told apart by its socket with its by-path selector', async () => {
    const { out, sink } = output();
    const context: SerialCommandContext = {
      program: 'xiaozhi-mcp',
      out: sink,
      env: {},
      lister: async () => RIG,
    };
    expect(await portsCommand(context, {})).toBe(0);
    const rows = out.stdout.split('\n');
    expect(rows.find((r) => r.startsWith('/dev/ttyUSB0 '))).toMatch(
      / 0001 +Silicon Labs CP2102 USB to UART Bridge Controller \(by-path:pci-0000:00:14\.0-usb-0:1:1\.0-port0\)$/,
    );
    expect(rows.find((r) => r.startsWith('/dev/ttyUSB3 '))).toMatch(
      / - +USB Serial \(by-path:pci-0000:00:14\.0-usb-0:4\.2:1\.0-port0\)$/,
    );
    expect(rows.find((r) => r.startsWith('/dev/ttyACM0 '))).not.toContain('by-path');
    // --json carries the location of every port.
    const json = output();
    await portsCommand({ ...context, out: json.sink }, { json: true });
    expect(JSON.parse(json.out.stdout).ports[2]).toMatchObject({ byPathPath: at('4.1') });
  });
});
