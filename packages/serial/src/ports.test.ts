import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SerialError } from './errors.js';
import type { PortInfo } from './port-info.js';
import { normalizeUsbId, parseByIdName, portKind, udevSanitize } from './port-info.js';
import type { PortLister, PortSelector } from './port-selector.js';
import {
  describePorts,
  findPort,
  formatPortSelector,
  isGenericSerialNumber,
  matchPorts,
  parsePortSelector,
  portIdentity,
} from './port-selector.js';
import type { ListPortsOptions } from './ports.js';
import { listPorts, usbLocationOf } from './ports.js';

const CP2102N = 'usb-Silicon_Labs_CP2102N_USB_to_UART_Bridge_Controller_0001-if00-port0';
const JTAG = 'usb-Espressif_USB_JTAG_serial_debug_unit_F4:12:FA:01:02:03-if00';
const CH9102 = 'usb-1a86_USB_Single_Serial_54D2012345-if00';
const CH340 = 'usb-1a86_USB2.0-Serial-if00-port0';
const FTDI = 'usb-FTDI_FT232R_USB_UART_A50285BI-if00-port0';
/** A CH340 in socket 1 of a hub in socket 2 of the host's xHCI controller. */
const CH340_AT = 'pci-0000:00:14.0-usb-0:2.1:1.0-port0';

async function rejection(promise: Promise<unknown>): Promise<SerialError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof SerialError) return error;
    throw error;
  }
  throw new Error('expected a rejection');
}

describe('parseByIdName', () => {
  it('CP2102N', () => {
    expect(parseByIdName(CP2102N)).toEqual({
      manufacturer: 'Silicon Labs',
      product: 'CP2102N USB to UART Bridge Controller',
      serialNumber: '0001',
      vendorId: '10c4',
      productId: 'ea60',
      interfaceNumber: 0,
    });
  });

  it('Espressif USB-Serial-JTAG with a MAC-like serial', () => {
    expect(parseByIdName(JTAG)).toEqual({
      manufacturer: 'Espressif',
      product: 'USB JTAG serial debug unit',
      serialNumber: 'F4:12:FA:01:02:03',
      vendorId: '303a',
      productId: '1001',
      interfaceNumber: 0,
    });
  });

  it('CH9102 (no manufacturer string: udev uses the VID)', () => {
    expect(parseByIdName(CH9102)).toEqual({
      manufacturer: '1a86',
      product: 'USB Single Serial',
      serialNumber: '54D2012345',
      vendorId: '1a86',
      productId: '55d4',
      interfaceNumber: 0,
    });
  });

  it('CH340 without a serial number', () => {
    expect(parseByIdName(CH340)).toEqual({
      manufacturer: '1a86',
      product: 'USB2.0-Serial',
      vendorId: '1a86',
      productId: '7523',
      interfaceNumber: 0,
    });
  });

  it('FTDI FT232R', () => {
    expect(parseByIdName(FTDI)).toEqual({
      manufacturer: 'FTDI',
      product: 'FT232R USB UART',
      serialNumber: 'A50285BI',
      vendorId: '0403',
      productId: '6001',
      interfaceNumber: 0,
    });
  });

  it('an unknown device: first token vendor, last token serial, no guessed IDs', () => {
    expect(parseByIdName('usb-Acme_Widget_Pro_XYZ123-if02')).toEqual({
      manufacturer: 'Acme',
      product: 'Widget Pro',
      serialNumber: 'XYZ123',
      interfaceNumber: 2,
    });
    expect(parseByIdName('usb-Acme_Widget-if00')).toEqual({
      manufacturer: 'Acme',
      product: 'Widget',
      interfaceNumber: 0,
    });
  });

  it('hex vendor and model tokens are the VID and PID', () => {
    expect(parseByIdName('usb-abcd_1234-if00')).toMatchObject({
      vendorId: 'abcd',
      productId: '1234',
    });
  });

  it('a name that is not a USB by-id name', () => {
    expect(parseByIdName('pci-0000:00:1f.3')).toEqual({});
  });
});

describe('small helpers', () => {
  it('normalizeUsbId', () => {
    expect(normalizeUsbId('10C4')).toBe('10c4');
    expect(normalizeUsbId('0x303A')).toBe('303a');
    expect(normalizeUsbId('403')).toBe('0403');
    expect(normalizeUsbId('xyz')).toBeUndefined();
    expect(normalizeUsbId('12345')).toBeUndefined();
    expect(normalizeUsbId(undefined)).toBeUndefined();
  });

  it('udevSanitize matches udev: whitespace runs and unsafe characters become _', () => {
    expect(udevSanitize('  Silicon Labs  ')).toBe('Silicon_Labs');
    expect(udevSanitize('A  B/C')).toBe('A_B_C');
    expect(udevSanitize('F4:12:FA:01:02:03')).toBe('F4:12:FA:01:02:03');
  });

  it('portKind', () => {
    expect(portKind('303a', '1001')).toBe('usb-serial-jtag');
    expect(portKind('303a', '4001')).toBe('unknown');
    expect(portKind('10c4', 'ea60')).toBe('usb-uart');
    expect(portKind('1a86', '7523')).toBe('usb-uart');
    expect(portKind('1a86', '55d4')).toBe('usb-uart');
    expect(portKind('0403', '6001')).toBe('usb-uart');
    expect(portKind(undefined, undefined)).toBe('unknown');
  });
});

describe('listPorts', () => {
  let root: string;
  let dev: string;
  let byId: string;
  let byPath: string;
  let sys: string;

  const failingBinding = {
    list: async (): Promise<never[]> => {
      throw new Error('spawn udevadm ENOENT');
    },
  };

  /**
   * A USB device in the fake sysfs, with a tty below `<device>/<interface>[/<tty>]`. Its bus
   * path nests as in sysfs: `1-2.1` (socket 1 of the hub in socket 2) sits in `1-2`. A
   * usb-serial port (the tty under the interface) has its `port_number`.
   */
  async function usbDevice(
    busPath: string,
    files: Record<string, string>,
    tty: string,
    ttyUnderInterface: boolean,
    controller = join(sys, 'devices', 'pci0000:00', '0000:00:14.0', 'usb1'),
  ): Promise<string> {
    const [bus, ports = ''] = busPath.split('-');
    const hops = ports.split('.').map((_, i, all) => `${bus}-${all.slice(0, i + 1).join('.')}`);
    const device = join(controller, ...hops);
    const iface = join(device, `${busPath}:1.0`);
    const ttyDevice = ttyUnderInterface ? join(iface, tty) : iface;
    await mkdir(ttyDevice, { recursive: true });
    if (ttyUnderInterface) await writeFile(join(ttyDevice, 'port_number'), '0\n');
    for (const [name, text] of Object.entries(files)) {
      await writeFile(join(device, name), `${text}\n`);
    }
    await mkdir(join(sys, 'class', 'tty', tty), { recursive: true });
    await symlink(ttyDevice, join(sys, 'class', 'tty', tty, 'device'));
    return device;
  }

  async function byIdLink(name: string, tty: string, dir = byId): Promise<void> {
    // udev makes relative links: ../../ttyUSB0
    await symlink(join('..', '..', tty), join(dir, name));
  }

  const lister = (extra: Partial<ListPortsOptions> = {}): ListPortsOptions => ({
    binding: failingBinding,
    byIdDir: byId,
    byPathDir: byPath,
    sysfsRoot: sys,
    devDir: dev,
    ...extra,
  });

  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'ports-test-'));
    dev = join(root, 'dev');
    byId = join(dev, 'serial', 'by-id');
    byPath = join(dev, 'serial', 'by-path');
    sys = join(root, 'sys');
    await mkdir(byId, { recursive: true });
    await mkdir(byPath, { recursive: true });
    for (const tty of ['ttyUSB0', 'ttyACM0', 'ttyACM1', 'ttyUSB1', 'ttyUSB2', 'ttyS0']) {
      await writeFile(join(dev, tty), '');
    }
    // CP2102N on ttyUSB0 (usb-serial: the tty sits below the interface), with sysfs.
    await usbDevice(
      '1-1',
      {
        idVendor: '10c4',
        idProduct: 'ea60',
        manufacturer: 'Silicon Labs',
        product: 'CP2102N USB to UART Bridge Controller',
        serial: '0001',
      },
      'ttyUSB0',
      true,
    );
    await byIdLink(CP2102N, 'ttyUSB0');
    // ESP32-S3 USB-Serial-JTAG on ttyACM0 (cdc-acm: the interface is the tty's device).
    await usbDevice(
      '1-2',
      {
        idVendor: '303a',
        idProduct: '1001',
        manufacturer: 'Espressif',
        product: 'USB JTAG/serial debug unit',
        serial: 'F4:12:FA:01:02:03',
      },
      'ttyACM0',
      false,
    );
    await byIdLink(JTAG, 'ttyACM0');
    // udev's by-path links for it, with the newer twin that names the USB revision.
    await byIdLink('pci-0000:00:14.0-usbv2-0:2:1.0', 'ttyACM0', byPath);
    await byIdLink('pci-0000:00:14.0-usb-0:2:1.0', 'ttyACM0', byPath);
    // CH9102 on ttyACM1 and FTDI on ttyUSB1: udev links only, no sysfs.
    await byIdLink(CH9102, 'ttyACM1');
    await byIdLink(FTDI, 'ttyUSB1');
    await byIdLink('pci-0000:00:14.0-usb-0:4:1.0-port0', 'ttyUSB1', byPath);
    // A device that went away: its link dangles.
    await byIdLink('usb-Gone_Device_123-if00-port0', 'ttyUSB9');
    // A USB device with no by-id link (no udev), found through sysfs alone.
    await usbDevice(
      '1-3',
      { idVendor: '1a86', idProduct: '7523', product: 'USB Serial' },
      'ttyUSB2',
      true,
    );
    // sysfs knows it but this "container" has no device node for it.
    await usbDevice(
      '1-4',
      { idVendor: '10c4', idProduct: 'ea60', serial: 'HOST' },
      'ttyUSB7',
      true,
    );
    // A built-in UART: no USB parent.
    const platform = join(sys, 'devices', 'platform', 'serial8250', 'tty', 'ttyS0');
    await mkdir(platform, { recursive: true });
    await mkdir(join(sys, 'class', 'tty', 'ttyS0'), { recursive: true });
    await symlink(dirname(dirname(platform)), join(sys, 'class', 'tty', 'ttyS0', 'device'));
  });

  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  const expected = (): PortInfo[] => [
    {
      path: join(dev, 'ttyACM0'),
      byIdPath: join(byId, JTAG),
      byPathPath: join(byPath, 'pci-0000:00:14.0-usb-0:2:1.0'),
      serialNumber: 'F4:12:FA:01:02:03',
      vendorId: '303a',
      productId: '1001',
      manufacturer: 'Espressif',
      product: 'USB JTAG/serial debug unit',
      kind: 'usb-serial-jtag',
    },
    {
      path: join(dev, 'ttyACM1'),
      byIdPath: join(byId, CH9102),
      serialNumber: '54D2012345',
      vendorId: '1a86',
      productId: '55d4',
      manufacturer: '1a86',
      product: 'USB Single Serial',
      kind: 'usb-uart',
    },
    {
      path: join(dev, 'ttyUSB0'),
      byIdPath: join(byId, CP2102N),
      // No link: the name udev would give it, from sysfs.
      byPathPath: join(byPath, 'pci-0000:00:14.0-usb-0:1:1.0-port0'),
      serialNumber: '0001',
      vendorId: '10c4',
      productId: 'ea60',
      manufacturer: 'Silicon Labs',
      product: 'CP2102N USB to UART Bridge Controller',
      kind: 'usb-uart',
    },
    {
      path: join(dev, 'ttyUSB1'),
      byIdPath: join(byId, FTDI),
      byPathPath: join(byPath, 'pci-0000:00:14.0-usb-0:4:1.0-port0'),
      serialNumber: 'A50285BI',
      vendorId: '0403',
      productId: '6001',
      manufacturer: 'FTDI',
      product: 'FT232R USB UART',
      kind: 'usb-uart',
    },
    {
      path: join(dev, 'ttyUSB2'),
      byPathPath: join(byPath, 'pci-0000:00:14.0-usb-0:3:1.0-port0'),
      vendorId: '1a86',
      productId: '7523',
      product: 'USB Serial',
      kind: 'usb-uart',
    },
  ];

  it('falls back to /dev/serial/by-id and sysfs when the binding fails (no udevadm)', async () => {
    expect(await listPorts(lister())).toEqual(expected());
  });

  it('falls back as well when the binding lists nothing', async () => {
    expect(await listPorts(lister({ binding: { list: async () => [] } }))).toEqual(expected());
  });

  it('returns nothing when neither directory exists', async () => {
    const ports = await listPorts(
      lister({
        byIdDir: join(root, 'missing'),
        byPathDir: join(root, 'missing-by-path'),
        sysfsRoot: join(root, 'missing-sys'),
      }),
    );
    expect(ports).toEqual([]);
  });

  it('normalizes what a working binding reports, completing it from the by-id name', async () => {
    const ports = await listPorts({
      binding: {
        list: async () => [
          {
            path: '/dev/ttyUSB0',
            manufacturer: 'Silicon Labs',
            serialNumber: '0001',
            pnpId: CP2102N,
            locationId: undefined,
            vendorId: '10C4',
            productId: 'EA60',
          },
          {
            path: 'COM7',
            vendorId: '303A',
            productId: '1001',
            serialNumber: 'F4:12:FA:01:02:03',
            pnpId: 'USB\\VID_303A&PID_1001\\F4:12:FA:01:02:03',
          },
          {
            path: '/dev/ttyS0',
            manufacturer: undefined,
            serialNumber: undefined,
            pnpId: undefined,
          },
        ],
      },
      byIdDir: byId,
      byPathDir: byPath,
      sysfsRoot: sys,
    });
    expect(ports).toEqual([
      {
        path: '/dev/ttyUSB0',
        byIdPath: join(byId, CP2102N),
        // udevadm gives no by-path; sysfs does.
        byPathPath: join(byPath, 'pci-0000:00:14.0-usb-0:1:1.0-port0'),
        serialNumber: '0001',
        vendorId: '10c4',
        productId: 'ea60',
        manufacturer: 'Silicon Labs',
        product: 'CP2102N USB to UART Bridge Controller',
        kind: 'usb-uart',
      },
      {
        path: 'COM7',
        serialNumber: 'F4:12:FA:01:02:03',
        vendorId: '303a',
        productId: '1001',
        kind: 'usb-serial-jtag',
      },
      { path: '/dev/ttyS0', kind: 'unknown' },
    ]);
  });

  it('tells apart boards whose serial numbers are missing or shared by their USB location', async () => {
    // Two CH340s without a serial number, in sockets 1 and 2 of a hub in socket 5, and a
    // second CP2102 clone reporting 0001 like the one on ttyUSB0.
    for (const tty of ['ttyUSB3', 'ttyUSB4', 'ttyUSB5']) await writeFile(join(dev, tty), '');
    const ch340 = { idVendor: '1a86', idProduct: '7523', product: 'USB Serial' };
    await usbDevice('1-5.1', ch340, 'ttyUSB3', true);
    await usbDevice('1-5.2', ch340, 'ttyUSB4', true);
    await usbDevice(
      '1-6',
      { idVendor: '10c4', idProduct: 'ea60', serial: '0001' },
      'ttyUSB5',
      true,
    );
    const ports = await listPorts(lister());
    const identities = Object.fromEntries(
      ports.map((port) => [basename(port.path), formatPortSelector(portIdentity(port, ports))]),
    );
    expect(identities).toEqual({
      ttyACM0: 'serial:F4:12:FA:01:02:03',
      ttyACM1: 'serial:54D2012345',
      ttyUSB0: 'by-path:pci-0000:00:14.0-usb-0:1:1.0-port0',
      ttyUSB1: 'by-path:pci-0000:00:14.0-usb-0:4:1.0-port0', // A50285BI: a counterfeit FTDI's
      ttyUSB2: 'by-path:pci-0000:00:14.0-usb-0:3:1.0-port0',
      ttyUSB3: 'by-path:pci-0000:00:14.0-usb-0:5.1:1.0-port0',
      ttyUSB4: 'by-path:pci-0000:00:14.0-usb-0:5.2:1.0-port0',
      ttyUSB5: 'by-path:pci-0000:00:14.0-usb-0:6:1.0-port0',
    });
    // Each identity finds its board, and only it.
    for (const port of ports) {
      const found = await findPort(portIdentity(port, ports), {
        lister: { list: () => listPorts(lister()) },
        timeoutMs: 10_000,
      });
      expect(found.path).toBe(port.path);
    }
    // serial:0001 is two boards: the error names the selectors that tell them apart.
    const shared = await rejection(
      findPort(parsePortSelector('serial:0001'), {
        lister: { list: () => listPorts(lister()) },
        timeoutMs: 0,
      }),
    );
    expect(shared.message).toContain(
      'one of by-path:pci-0000:00:14.0-usb-0:1:1.0-port0, by-path:pci-0000:00:14.0-usb-0:6:1.0-port0',
    );
  });

  it('finds a CH340 board again by its USB location after it re-enumerated', async () => {
    await writeFile(join(dev, 'ttyUSB3'), '');
    const ch340 = { idVendor: '1a86', idProduct: '7523', product: 'USB Serial' };
    const device = await usbDevice('1-5.1', ch340, 'ttyUSB3', true);
    const before = await listPorts(lister());
    const board = before.find((port) => port.path === join(dev, 'ttyUSB3')) as PortInfo;
    const identity = portIdentity(board, before);
    expect(identity).toEqual({ byPath: 'pci-0000:00:14.0-usb-0:5.1:1.0-port0' });
    // A reset: the board leaves and comes back in the same socket as ttyUSB8.
    await rm(device, { recursive: true });
    await rm(join(sys, 'class', 'tty', 'ttyUSB3'), { recursive: true });
    await rm(join(dev, 'ttyUSB3'));
    await writeFile(join(dev, 'ttyUSB8'), '');
    await usbDevice('1-5.1', ch340, 'ttyUSB8', true);
    const found = await findPort(identity, {
      lister: { list: () => listPorts(lister()) },
      timeoutMs: 0,
    });
    expect(found).toMatchObject({ path: join(dev, 'ttyUSB8'), vendorId: '1a86' });
  });

  it('names USB locations as udev does, on PCI and platform controllers', async () => {
    // Raspberry Pi 4: the USB controller is a PCIe device behind a platform bridge.
    const pi4 = join(sys, 'devices', 'platform', 'scb', 'fd500000.pcie', 'pci0000:00');
    await usbDevice(
      '1-1.3',
      { idVendor: '1a86', idProduct: '7523' },
      'ttyUSB10',
      true,
      join(pi4, '0000:00:00.0', '0000:01:00.0', 'usb1'),
    );
    // Raspberry Pi 3: the controller is on the SoC; a native-USB board (ttyACM: no port).
    await usbDevice(
      '1-1.2',
      { idVendor: '303a', idProduct: '1001', serial: 'F4:12:FA:01:02:04' },
      'ttyACM10',
      false,
      join(sys, 'devices', 'platform', 'soc', '3f980000.usb', 'usb1'),
    );
    expect(await usbLocationOf(sys, 'ttyUSB10')).toBe(
      'platform-fd500000.pcie-pci-0000:01:00.0-usb-0:1.3:1.0-port0',
    );
    expect(await usbLocationOf(sys, 'ttyACM10')).toBe('platform-3f980000.usb-usb-0:1.2:1.0');
    expect(await usbLocationOf(sys, 'ttyUSB0')).toBe('pci-0000:00:14.0-usb-0:1:1.0-port0');
    // Not on USB, or not known to sysfs.
    expect(await usbLocationOf(sys, 'ttyS0')).toBeUndefined();
    expect(await usbLocationOf(sys, 'ttyUSB99')).toBeUndefined();
  });

  it('with the default binding on this host, resolves (udevadm or not)', async () => {
    await expect(listPorts()).resolves.toBeInstanceOf(Array);
  });
});

describe('parsePortSelector', () => {
  it.each<[string, PortSelector]>([
    ['/dev/ttyUSB0', { path: '/dev/ttyUSB0' }],
    ['  /dev/ttyACM1 ', { path: '/dev/ttyACM1' }],
    ['COM3', { path: 'COM3' }],
    ['path:/dev/cu.usbserial-0001', { path: '/dev/cu.usbserial-0001' }],
    ['serial:ABC123', { serialNumber: 'ABC123' }],
    ['serial:F4:12:FA:01:02:03', { serialNumber: 'F4:12:FA:01:02:03' }],
    ['usb:10c4:ea60', { vidPid: '10c4:ea60' }],
    ['USB:10C4:EA60', { vidPid: '10c4:ea60' }],
    ['usb:0x303a:0x1001', { vidPid: '303a:1001' }],
    ['usb:303a:1001:F4:12:FA:01:02:03', { vidPid: '303a:1001:F4:12:FA:01:02:03' }],
    [`by-id:${CP2102N}`, { byId: CP2102N }],
    [`/dev/serial/by-id/${CP2102N}`, { path: `/dev/serial/by-id/${CP2102N}` }],
    [`by-path:${CH340_AT}`, { byPath: CH340_AT }],
    [`/dev/serial/by-path/${CH340_AT}`, { path: `/dev/serial/by-path/${CH340_AT}` }],
    [CH340, { byId: CH340 }],
  ])('%j', (text, selector) => {
    expect(parsePortSelector(text)).toEqual(selector);
  });

  it.each([
    ['', 'empty'],
    ['serial:', 'empty serial number'],
    ['usb:10c4', '4-digit hex'],
    ['usb:xyz:ea60', '4-digit hex'],
    ['usb:10c4:ea6', '4-digit hex'],
    ['usb:10c4:ea60:', 'empty serial number'],
    ['by-id:', 'empty by-id name'],
    ['by-path:', 'empty by-path name'],
    ['foo:bar', "unknown prefix 'foo:'"],
    ['ttyUSB0', 'not a path'],
  ])('rejects %j', (text, fragment) => {
    let caught: unknown;
    try {
      parsePortSelector(text);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(SerialError);
    const error = caught as SerialError;
    expect(error.code).toBe('OPTION_INVALID');
    expect(error.message).toContain(fragment);
    expect(error.message).toContain('serial:<serial number>');
  });

  it('formatPortSelector round-trips', () => {
    for (const text of [
      '/dev/ttyUSB0',
      'serial:ABC',
      'usb:10c4:ea60',
      'usb:303a:1001:F4:12',
      `by-id:${JTAG}`,
      `by-path:${CH340_AT}`,
    ]) {
      expect(formatPortSelector(parsePortSelector(text))).toBe(text);
    }
  });
});

const board = (fields: Partial<PortInfo> & { path: string }): PortInfo => ({
  kind: 'unknown',
  ...fields,
});

const PORTS: PortInfo[] = [
  board({
    path: '/dev/ttyUSB0',
    byIdPath: `/dev/serial/by-id/${CP2102N}`,
    serialNumber: '0001',
    vendorId: '10c4',
    productId: 'ea60',
    kind: 'usb-uart',
  }),
  board({
    path: '/dev/ttyUSB1',
    serialNumber: '0002',
    vendorId: '10c4',
    productId: 'ea60',
    kind: 'usb-uart',
  }),
  board({
    path: '/dev/ttyACM0',
    byIdPath: `/dev/serial/by-id/${JTAG}`,
    serialNumber: 'F4:12:FA:01:02:03',
    vendorId: '303a',
    productId: '1001',
    kind: 'usb-serial-jtag',
  }),
  board({ path: '/dev/ttyS0' }),
  board({
    path: '/dev/ttyUSB2',
    byPathPath: `/dev/serial/by-path/${CH340_AT}`,
    vendorId: '1a86',
    productId: '7523',
    kind: 'usb-uart',
  }),
];

describe('matchPorts', () => {
  const paths = (selector: PortSelector) => matchPorts(PORTS, selector).map((port) => port.path);

  it('by serial number, case-insensitively', () => {
    expect(paths({ serialNumber: '0002' })).toEqual(['/dev/ttyUSB1']);
    expect(paths({ serialNumber: 'f4:12:fa:01:02:03' })).toEqual(['/dev/ttyACM0']);
    expect(paths({ serialNumber: 'nope' })).toEqual([]);
  });

  it('by VID:PID, optionally narrowed by serial number', () => {
    expect(paths({ vidPid: '10c4:ea60' })).toEqual(['/dev/ttyUSB0', '/dev/ttyUSB1']);
    expect(paths({ vidPid: '10C4:EA60:0001' })).toEqual(['/dev/ttyUSB0']);
    expect(paths({ vidPid: '303a:1001:F4:12:FA:01:02:03' })).toEqual(['/dev/ttyACM0']);
    expect(paths({ vidPid: '0403:6001' })).toEqual([]);
  });

  it('by path: the device path or its by-id link', () => {
    expect(paths({ path: '/dev/ttyS0' })).toEqual(['/dev/ttyS0']);
    expect(paths({ path: `/dev/serial/by-id/${JTAG}` })).toEqual(['/dev/ttyACM0']);
  });

  it('by by-id name or by-id path', () => {
    expect(paths({ byId: CP2102N })).toEqual(['/dev/ttyUSB0']);
    expect(paths({ byId: `/dev/serial/by-id/${CP2102N}` })).toEqual(['/dev/ttyUSB0']);
    expect(paths({ byId: FTDI })).toEqual([]);
  });

  it('by by-path name (or its USB-revision twin), by-path path, or the link as a path', () => {
    expect(paths({ byPath: CH340_AT })).toEqual(['/dev/ttyUSB2']);
    expect(paths({ byPath: CH340_AT.replace('-usb-', '-usbv2-') })).toEqual(['/dev/ttyUSB2']);
    expect(paths({ byPath: `/dev/serial/by-path/${CH340_AT}` })).toEqual(['/dev/ttyUSB2']);
    expect(paths({ byPath: `/elsewhere/${CH340_AT}` })).toEqual([]);
    expect(paths({ path: `/dev/serial/by-path/${CH340_AT}` })).toEqual(['/dev/ttyUSB2']);
    expect(paths({ byPath: 'pci-0000:00:14.0-usb-0:2.2:1.0-port0' })).toEqual([]);
  });

  it('rejects a malformed vidPid', () => {
    expect(() => matchPorts(PORTS, { vidPid: '10c4' })).toThrow(SerialError);
  });
});

describe('one port under its several spellings, on the host given', () => {
  // What bindings-cpp lists on macOS (the dial-in node, darwin_list.cpp) and on Windows.
  const macJtag = board({
    path: '/dev/tty.usbmodem1101',
    serialNumber: 'F4:12:FA:01:02:03',
    vendorId: '303a',
    productId: '1001',
    kind: 'usb-serial-jtag',
  });
  const winBridge = board({ path: 'COM12', vendorId: '10c4', productId: 'ea60', kind: 'usb-uart' });
  const on = (platform: NodeJS.Platform, path: string) =>
    matchPorts([macJtag, winBridge], { path }, platform).map((port) => port.path);

  it('matchPorts: macOS cu and tty nodes, Windows COM12, com12 and \\\\.\\COM12', () => {
    expect(on('darwin', '/dev/cu.usbmodem1101')).toEqual(['/dev/tty.usbmodem1101']);
    expect(on('darwin', '/dev/tty.usbmodem1101')).toEqual(['/dev/tty.usbmodem1101']);
    expect(on('win32', '\\\\.\\COM12')).toEqual(['COM12']);
    expect(on('win32', 'com12')).toEqual(['COM12']);
    // Elsewhere the names are not one port's.
    expect(on('linux', '/dev/cu.usbmodem1101')).toEqual([]);
    expect(on('darwin', 'com12')).toEqual([]);
  });

  it('listPorts lists macOS ports as users and esptool name them, /dev/cu.*', async () => {
    const listed = [
      {
        path: '/dev/tty.usbmodem1101',
        vendorId: '303A',
        productId: '1001',
        serialNumber: 'F4:12:FA:01:02:03',
      },
      { path: '/dev/tty.Bluetooth-Incoming-Port' },
    ];
    expect(
      (await listPorts({ binding: { list: async () => listed }, platform: 'darwin' })).map((p) => [
        p.path,
        p.kind,
      ]),
    ).toEqual([
      ['/dev/cu.usbmodem1101', 'usb-serial-jtag'],
      ['/dev/cu.Bluetooth-Incoming-Port', 'unknown'],
    ]);
    const windows = await listPorts({
      binding: { list: async () => [{ path: 'COM12', vendorId: '10C4', productId: 'EA60' }] },
      platform: 'win32',
    });
    expect(windows.map((p) => p.path)).toEqual(['COM12']);
  });

  it('findPort finds a macOS board named by its cu node in a listing of tty nodes', async () => {
    const found = await findPort(
      { path: '/dev/cu.usbmodem1101' },
      { lister: { list: async () => [macJtag] }, timeoutMs: 0, platform: 'darwin' },
    );
    expect(found).toEqual(macJtag);
    // A board listed twice under its two names is one board: its serial number stays its identity.
    const twin = { ...macJtag, path: '/dev/cu.usbmodem1101' };
    expect(portIdentity(macJtag, [macJtag, twin], 'darwin')).toEqual({
      serialNumber: 'F4:12:FA:01:02:03',
    });
  });
});

describe('portIdentity: what finds a board again', () => {
  const clone = (path: string, socket: string): PortInfo =>
    board({
      path,
      serialNumber: '0001',
      vendorId: '10c4',
      productId: 'ea60',
      byPathPath: `/dev/serial/by-path/pci-0000:00:14.0-usb-0:${socket}:1.0-port0`,
      kind: 'usb-uart',
    });

  it('is the serial number when it is there, not generic and not shared', () => {
    const jtag = PORTS[2] as PortInfo;
    expect(portIdentity(jtag, PORTS)).toEqual({ serialNumber: 'F4:12:FA:01:02:03' });
    const twin = { ...jtag, path: '/dev/ttyACM7', serialNumber: 'f4:12:fa:01:02:03' };
    expect(portIdentity(jtag, [jtag, twin])).toEqual({ path: '/dev/ttyACM0' });
  });

  it('is the USB location for generic, shared or missing serial numbers', () => {
    const a = clone('/dev/ttyUSB0', '1');
    expect(portIdentity(a, [a])).toEqual({ byPath: 'pci-0000:00:14.0-usb-0:1:1.0-port0' });
    const shared = { ...clone('/dev/ttyUSB1', '2'), serialNumber: 'ABC' };
    expect(portIdentity(shared, [shared, { ...a, serialNumber: 'abc' }])).toEqual({
      byPath: 'pci-0000:00:14.0-usb-0:2:1.0-port0',
    });
    expect(portIdentity(PORTS[4] as PortInfo, PORTS)).toEqual({ byPath: CH340_AT });
  });

  it('is the path when nothing else is known', () => {
    expect(portIdentity(PORTS[0] as PortInfo, PORTS)).toEqual({ path: '/dev/ttyUSB0' });
    expect(portIdentity(board({ path: '/dev/pts/3' }))).toEqual({ path: '/dev/pts/3' });
  });

  it('knows the generic serial numbers', () => {
    for (const serial of ['0001', '0000', '00000000', '1', '0', 'A50285BI', 'a50285bi'])
      expect(isGenericSerialNumber(serial)).toBe(true);
    for (const serial of ['0002', 'A1', 'F4:12:FA:01:02:03', '54D2012345', '10'])
      expect(isGenericSerialNumber(serial)).toBe(false);
  });
});

describe('describePorts', () => {
  it('lists USB ports first and caps the list', () => {
    const text = describePorts([board({ path: '/dev/ttyS0' }), ...PORTS.slice(0, 2)], 2);
    expect(text).toBe(
      `/dev/ttyUSB0 (10c4:ea60, serial 0001, usb-uart, by-id ${CP2102N}); /dev/ttyUSB1 (10c4:ea60, serial 0002, usb-uart); and 1 more`,
    );
    expect(describePorts([])).toBe('no serial ports');
  });

  it('names the USB location where it is what tells a board apart', () => {
    expect(describePorts([PORTS[4] as PortInfo])).toBe(
      `/dev/ttyUSB2 (1a86:7523, usb-uart, by-path ${CH340_AT})`,
    );
  });
});

/** A lister that plays a script, one entry per call, repeating the last. */
function scripted(script: Array<PortInfo[] | Error>): PortLister & { calls: number } {
  const lister = {
    calls: 0,
    async list(): Promise<PortInfo[]> {
      const entry = script[Math.min(lister.calls, script.length - 1)] ?? [];
      lister.calls += 1;
      if (entry instanceof Error) throw entry;
      return entry;
    },
  };
  return lister;
}

describe('findPort', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  const other = board({
    path: '/dev/ttyUSB0',
    serialNumber: '0001',
    vendorId: '10c4',
    productId: 'ea60',
  });
  const before = board({
    path: '/dev/ttyACM0',
    serialNumber: 'F4:12:FA:01:02:03',
    vendorId: '303a',
    productId: '1001',
    kind: 'usb-serial-jtag',
  });
  const after = { ...before, path: '/dev/ttyACM1' };

  it('waits for a re-enumerated USB-Serial-JTAG board: new path, same serial number', async () => {
    // Reset: ttyACM0 is gone, nothing for a while, then the board is back as ttyACM1.
    const lister = scripted([[other], [other], [other], [other, after]]);
    const found = findPort({ serialNumber: 'F4:12:FA:01:02:03' }, { lister, pollMs: 250 });
    await vi.advanceTimersByTimeAsync(750);
    await expect(found).resolves.toEqual(after);
    expect(lister.calls).toBe(4);
  });

  it('the old path is not found again after re-enumeration, the serial number is', async () => {
    const script = [[other], [other, after]];
    const byPath = rejection(
      findPort({ path: '/dev/ttyACM0' }, { lister: scripted(script), timeoutMs: 1000 }),
    );
    await vi.advanceTimersByTimeAsync(1000);
    expect((await byPath).code).toBe('PORT_NOT_FOUND');
    const bySerial = findPort(parsePortSelector('serial:F4:12:FA:01:02:03'), {
      lister: scripted(script),
    });
    await vi.advanceTimersByTimeAsync(250);
    await expect(bySerial).resolves.toMatchObject({ path: '/dev/ttyACM1' });
  });

  it('returns at once when the port is already there', async () => {
    const lister = scripted([[other, before]]);
    await expect(findPort({ vidPid: '303a:1001' }, { lister })).resolves.toEqual(before);
    expect(lister.calls).toBe(1);
  });

  it('times out with PORT_NOT_FOUND naming the selector and what was seen', async () => {
    const lister = scripted([[other, board({ path: '/dev/ttyS0' })]]);
    const result = rejection(
      findPort({ serialNumber: 'NOPE' }, { lister, timeoutMs: 1000, pollMs: 250 }),
    );
    await vi.advanceTimersByTimeAsync(999);
    expect(lister.calls).toBe(4);
    await vi.advanceTimersByTimeAsync(1);
    const error = await result;
    expect(error.code).toBe('PORT_NOT_FOUND');
    expect(error.message).toContain('serial:NOPE');
    expect(error.message).toContain('after 1000 ms');
    expect(error.message).toContain('/dev/ttyUSB0 (10c4:ea60, serial 0001)');
    expect(error.message).toContain('/dev/ttyS0');
    // Polls at 0, 250, 500, 750 and a last look at the deadline.
    expect(lister.calls).toBe(5);
  });

  it('looks once with timeoutMs 0', async () => {
    const lister = scripted([[]]);
    const error = await rejection(findPort({ path: '/dev/ttyUSB0' }, { lister, timeoutMs: 0 }));
    expect(error.message).toContain('seen: no serial ports');
    expect(lister.calls).toBe(1);
  });

  it('rejects an ambiguous selector on the second poll, asking for a serial number', async () => {
    const twin = board({
      path: '/dev/ttyUSB1',
      serialNumber: '0002',
      vendorId: '10c4',
      productId: 'ea60',
    });
    const lister = scripted([[other, twin]]);
    const result = rejection(findPort({ vidPid: '10c4:ea60' }, { lister, pollMs: 250 }));
    await vi.advanceTimersByTimeAsync(250);
    const error = await result;
    expect(error.code).toBe('PORT_NOT_FOUND');
    expect(error.message).toContain('2 serial ports match usb:10c4:ea60');
    expect(error.message).toContain('/dev/ttyUSB0');
    expect(error.message).toContain('/dev/ttyUSB1');
    expect(error.message).toContain('more specific selector (serial:<serial number>');
    expect(lister.calls).toBe(2);
  });

  it('a passing ambiguity that resolves is not an error', async () => {
    const twin = { ...before, path: '/dev/ttyACM9' };
    const lister = scripted([[before, twin], [before]]);
    const found = findPort({ serialNumber: 'F4:12:FA:01:02:03' }, { lister });
    await vi.advanceTimersByTimeAsync(250);
    await expect(found).resolves.toEqual(before);
  });

  it('keeps polling through lister failures and reports the last one', async () => {
    const failure = new Error('spawn udevadm ENOENT');
    const recovering = scripted([failure, failure, [before]]);
    const found = findPort({ serialNumber: 'F4:12:FA:01:02:03' }, { lister: recovering });
    await vi.advanceTimersByTimeAsync(500);
    await expect(found).resolves.toEqual(before);

    const broken = scripted([failure]);
    const result = rejection(findPort({ serialNumber: 'x' }, { lister: broken, timeoutMs: 500 }));
    await vi.advanceTimersByTimeAsync(500);
    const error = await result;
    expect(error.message).toContain('listing failed: spawn udevadm ENOENT');
    expect(error.cause).toBe(failure);
  });

  it('bounds a lister that never answers', async () => {
    const lister: PortLister = { list: () => new Promise(() => {}) };
    const result = rejection(findPort({ serialNumber: 'x' }, { lister, timeoutMs: 1000 }));
    await vi.advanceTimersByTimeAsync(1000);
    const error = await result;
    expect(error.code).toBe('PORT_NOT_FOUND');
    expect(error.message).toContain('did not answer within 1000 ms');
  });

  it('is cancellable while waiting', async () => {
    const lister = scripted([[]]);
    const controller = new AbortController();
    const result = findPort({ serialNumber: 'x' }, { lister, signal: controller.signal }).catch(
      (error: unknown) => error,
    );
    await vi.advanceTimersByTimeAsync(300);
    const reason = new Error('cancelled');
    controller.abort(reason);
    expect(await result).toBe(reason);
    const calls = lister.calls;
    await vi.advanceTimersByTimeAsync(5000);
    expect(lister.calls).toBe(calls);
  });

  it('rejects bad timing options', async () => {
    const lister = scripted([[]]);
    for (const options of [
      { timeoutMs: Number.POSITIVE_INFINITY },
      { timeoutMs: -1 },
      { pollMs: 0 },
    ]) {
      const error = await rejection(findPort({ serialNumber: 'x' }, { lister, ...options }));
      expect(error.code).toBe('OPTION_INVALID');
    }
  });
});
