/**
 * What a serial port is: its USB descriptors and kind, as a binding's listing or udev's
 * `/dev/serial/by-id` names give them. Pure: no listing, no native binding, so the port
 * providers (virtual boards) describe their ports the same way without loading either.
 */
import { join } from 'node:path';
import { ESPRESSIF_VID, isUsbJtagSerialPort, USB_SERIAL_JTAG_PID } from './reset/usb.js';

export type PortKind = 'usb-uart' | 'usb-serial-jtag' | 'unknown';

export interface PortInfo {
  path: string;
  /** The `/dev/serial/by-id/...` link naming this port, when udev made one. */
  byIdPath?: string;
  /**
   * The `/dev/serial/by-path/...` name of this port's USB location: udev's link, or the name
   * udev gives it, built from sysfs where udev left no link. Stays the same across resets and
   * replugs into the same socket.
   */
  byPathPath?: string;
  serialNumber?: string;
  /** Lowercase hex, 4 digits. */
  vendorId?: string;
  /** Lowercase hex, 4 digits. */
  productId?: string;
  manufacturer?: string;
  product?: string;
  kind: PortKind;
}

/** What a serialport binding's `list()` returns (`@serialport/bindings-interface` `PortInfo`). */
export interface PortInfoLike {
  path: string;
  manufacturer?: string | undefined;
  serialNumber?: string | undefined;
  vendorId?: string | undefined;
  productId?: string | undefined;
  /** On Linux, the name of the port's `/dev/serial/by-id` link. */
  pnpId?: string | undefined;
  locationId?: string | undefined;
}

/**
 * The one spelling of a port's path on `platform`: what compares equal, what a lock is keyed
 * by, and what is opened.
 *
 * - macOS has two nodes per serial device: `/dev/tty.<name>` (dial-in, what bindings-cpp lists:
 *   `darwin_list.cpp` reads `kIODialinDeviceKey`) and `/dev/cu.<name>` (call-up, what pyserial
 *   lists and users pass). esptool matches both (`loader.py` `_get_pid`: "The 'cu' (call-up)
 *   device has to be used for outgoing communication on MacOS", adding the `cu` twin of a `tty`
 *   path); here both are the `cu` path.
 * - Windows names one port `COM3`, `com3` and `\\.\COM3`; all are `COM3`. bindings-cpp puts
 *   `\\.\` in front of the path it opens (`serialport_win.cpp`, `OpenBaton::Execute`), which
 *   COM10 and above need, so the bare name is also the path that opens, where an already
 *   prefixed one would be prefixed twice.
 *
 * Any other path is itself. Pure: the platform is the caller's (`process.platform` at the edges).
 */
export function portPathIdentity(path: string, platform: NodeJS.Platform): string {
  if (platform === 'darwin') {
    const node = /^\/dev\/(?:cu|tty)\.(.+)$/.exec(path);
    if (node !== null) return `/dev/cu.${node[1]}`;
  } else if (platform === 'win32') {
    const com = /^(?:\\\\[.?]\\)?(com\d+)$/i.exec(path.trim());
    if (com !== null) return (com[1] as string).toUpperCase();
  }
  return path;
}

/** Whether two paths name the same port on `platform` ({@link portPathIdentity}). */
export function samePortPath(a: string, b: string, platform: NodeJS.Platform): boolean {
  return portPathIdentity(a, platform) === portPathIdentity(b, platform);
}

/** CP210x, CH340/CH9102, FTDI, Prolific: the bridges that sit in front of UART0 with auto-reset. */
const UART_BRIDGE_VIDS: ReadonlySet<string> = new Set(['10c4', '1a86', '0403', '067b']);

/** USB-Serial-JTAG re-enumerates on reset and has no DTR/RTS transistors to click BOOT with. */
export function portKind(vendorId: string | undefined, productId: string | undefined): PortKind {
  if (isUsbJtagSerialPort({ usbVendorId: vendorId, usbProductId: productId }))
    return 'usb-serial-jtag';
  if (vendorId !== undefined && UART_BRIDGE_VIDS.has(vendorId)) return 'usb-uart';
  return 'unknown';
}

/** `'10C4'`, `'0x10c4'`, `'403'` → `'10c4'`, `'10c4'`, `'0403'`; anything else → undefined. */
export function normalizeUsbId(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const hex = value.trim().toLowerCase().replace(/^0x/, '');
  return /^[0-9a-f]{1,4}$/.test(hex) ? hex.padStart(4, '0') : undefined;
}

/** udev's `ID_SERIAL_SHORT` etc.: whitespace runs to `_`, unsafe characters to `_`. */
export function udevSanitize(value: string): string {
  return value
    .trim()
    .replace(/\s+/g, '_')
    .replace(/[^0-9A-Za-z#+\-.:=@_\u0080-\uffff]/g, '_');
}

export interface ByIdDescriptor {
  manufacturer?: string;
  product?: string;
  serialNumber?: string;
  /** From a hex vendor token (udev uses the VID when there is no manufacturer string) or a known model. */
  vendorId?: string;
  productId?: string;
  /** `if00` → 0. */
  interfaceNumber?: number;
}

/** Multi-token (or otherwise recognisable) udev vendor strings, longest first. */
const KNOWN_VENDORS = [
  'Prolific_Technology_Inc.',
  'QinHeng_Electronics',
  'Espressif_Systems',
  'Silicon_Labs',
  'Espressif',
  'wch.cn',
  'FTDI',
];

/** udev model strings of common bridges and their VID:PID, for when sysfs cannot be read. */
const KNOWN_MODELS: ReadonlyMap<string, { vendorId: string; productId: string }> = new Map([
  ['CP2102N_USB_to_UART_Bridge_Controller', { vendorId: '10c4', productId: 'ea60' }],
  ['CP2102_USB_to_UART_Bridge_Controller', { vendorId: '10c4', productId: 'ea60' }],
  ['CP2104_USB_to_UART_Bridge_Controller', { vendorId: '10c4', productId: 'ea60' }],
  ['CP2105_Dual_USB_to_UART_Bridge_Controller', { vendorId: '10c4', productId: 'ea70' }],
  ['USB2.0-Serial', { vendorId: '1a86', productId: '7523' }],
  ['USB_Single_Serial', { vendorId: '1a86', productId: '55d4' }],
  ['USB_Dual_Serial', { vendorId: '1a86', productId: '55d2' }],
  ['FT232R_USB_UART', { vendorId: '0403', productId: '6001' }],
  ['FT231X_USB_UART', { vendorId: '0403', productId: '6015' }],
  ['Dual_RS232-HS', { vendorId: '0403', productId: '6010' }],
  ['USB_JTAG_serial_debug_unit', { vendorId: ESPRESSIF_VID, productId: USB_SERIAL_JTAG_PID }],
]);

const display = (udevName: string): string => udevName.replace(/_/g, ' ');
const isHexId = (token: string): boolean => /^[0-9a-fA-F]{4}$/.test(token);

/**
 * Reads a `/dev/serial/by-id` name, `usb-<vendor>_<model>[_<serial>]-if<NN>[-port<N>]`, where
 * udev replaced spaces with `_`. The vendor/model/serial boundaries are ambiguous in general:
 * known vendors and models settle them, otherwise the first token is the vendor and, with three
 * or more tokens, the last one the serial number. sysfs (read by {@link listPorts}) wins over
 * this guess when present. Names of spaces turn back into spaces in `manufacturer`/`product`.
 */
export function parseByIdName(name: string): ByIdDescriptor {
  const match = /^usb-(.+?)(?:-if([0-9a-fA-F]{2}))?(?:-port\d+)?$/.exec(name);
  const idSerial = match?.[1];
  if (match === null || idSerial === undefined) return {};
  const result: ByIdDescriptor = {};
  if (match[2] !== undefined) result.interfaceNumber = Number.parseInt(match[2], 16);

  const vendor =
    KNOWN_VENDORS.find((known) => idSerial.startsWith(`${known}_`)) ?? idSerial.split('_')[0];
  if (vendor === undefined || vendor === idSerial) {
    result.manufacturer = display(idSerial);
    return result;
  }
  const rest = idSerial.slice(vendor.length + 1);
  let model: string;
  let serial: string | undefined;
  const knownModel = [...KNOWN_MODELS.keys()].find(
    (known) => rest === known || rest.startsWith(`${known}_`),
  );
  if (knownModel !== undefined) {
    model = knownModel;
    serial = rest === knownModel ? undefined : rest.slice(knownModel.length + 1);
  } else {
    const tokens = rest.split('_');
    serial = tokens.length >= 2 ? tokens.pop() : undefined;
    model = tokens.join('_');
  }
  result.manufacturer = display(vendor);
  if (model !== '') result.product = display(model);
  if (serial !== undefined && serial !== '') result.serialNumber = serial;
  const ids = knownModel === undefined ? undefined : KNOWN_MODELS.get(knownModel);
  const vendorId = isHexId(vendor) ? vendor.toLowerCase() : ids?.vendorId;
  const productId = isHexId(model) ? model.toLowerCase() : ids?.productId;
  if (vendorId !== undefined) result.vendorId = vendorId;
  if (productId !== undefined) result.productId = productId;
  return result;
}

/** {@link PortInfo}'s fields as the listers gather them: any but `path` may be undefined. */
export interface PortFields {
  path: string;
  byIdPath?: string | undefined;
  byPathPath?: string | undefined;
  serialNumber?: string | undefined;
  vendorId?: string | undefined;
  productId?: string | undefined;
  manufacturer?: string | undefined;
  product?: string | undefined;
}

/** Builds a PortInfo without `undefined`-valued keys. */
export function portInfo(fields: PortFields): PortInfo {
  const info: PortInfo = { path: fields.path, kind: portKind(fields.vendorId, fields.productId) };
  for (const key of [
    'byIdPath',
    'byPathPath',
    'serialNumber',
    'vendorId',
    'productId',
    'manufacturer',
    'product',
  ] as const) {
    const value = fields[key];
    if (value !== undefined && value !== '') info[key] = value;
  }
  return info;
}

/** A udev `/dev/serial/by-id` name of a USB serial port. */
export const BY_ID_NAME = /^usb-.+-if[0-9a-fA-F]{2}/;

/**
 * A binding's `list()` entry as a {@link PortInfo}: ids normalised, the kind derived, the
 * by-id name parsed when the binding had no ids. The one mapping for real and virtual ports.
 */
export function portInfoFromBinding(port: PortInfoLike, byIdDir = '/dev/serial/by-id'): PortInfo {
  const byIdName = port.pnpId !== undefined && BY_ID_NAME.test(port.pnpId) ? port.pnpId : undefined;
  const parsed = byIdName === undefined ? {} : parseByIdName(byIdName);
  const vendorId = normalizeUsbId(port.vendorId);
  const productId = normalizeUsbId(port.productId);
  return portInfo({
    path: port.path,
    byIdPath: byIdName === undefined ? undefined : join(byIdDir, byIdName),
    serialNumber: port.serialNumber ?? parsed.serialNumber,
    // Only borrow guessed IDs when the binding had none at all, so the pair stays consistent.
    vendorId: vendorId ?? (productId === undefined ? parsed.vendorId : undefined),
    productId: productId ?? (vendorId === undefined ? parsed.productId : undefined),
    manufacturer: port.manufacturer ?? parsed.manufacturer,
    product: parsed.product,
  });
}
