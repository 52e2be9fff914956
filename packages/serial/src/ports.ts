/**
 * Finding boards on serial ports. `SerialPort.list()` asks `udevadm` on Linux, which containers
 * and minimal hosts lack (docs/hil.md §6), so listing falls back to what udev left in
 * `/dev/serial/by-id` and to sysfs. Native-USB chips (USB-Serial-JTAG) re-enumerate on reset
 * under a new path but the same serial number, so `findPort` polls for a selector rather than
 * trusting a path.
 *
 * A board's identity ({@link portIdentity}) is its USB serial number, unless it has none (CH340),
 * a generic one (CP2102 clones' `0001`) or one another attached port shares; then it is its
 * physical USB location, the `/dev/serial/by-path` name (`pci-0000:00:14.0-usb-0:2.1:1.0-port0`,
 * read from udev's link or built from sysfs the way udev builds it); then the device path.
 */
import { readdir, readFile, realpath, stat } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, relative, sep } from 'node:path';
import { SerialError } from './errors.js';
import { ESPRESSIF_VID, isUsbJtagSerialPort, USB_SERIAL_JTAG_PID } from './reset/usb.js';
import { abortableWait, abortReason } from './wait.js';

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

export interface PortLister {
  list(): Promise<PortInfo[]>;
}

export interface ListPortsOptions {
  /** Default: `@serialport/bindings-cpp`'s `autoDetect()`, what `SerialPort.list()` uses. */
  binding?: { list(): Promise<PortInfoLike[]> };
  /** Default `/dev/serial/by-id`. */
  byIdDir?: string;
  /** Default `/dev/serial/by-path`. */
  byPathDir?: string;
  /** Default `/sys`. */
  sysfsRoot?: string;
  /** Where tty device nodes live, for ports found through sysfs alone. Default `/dev`. */
  devDir?: string;
}

/** CP210x, CH340/CH9102, FTDI, Prolific: the bridges that sit in front of UART0 with auto-reset. */
const UART_BRIDGE_VIDS: ReadonlySet<string> = new Set(['10c4', '1a86', '0403', '067b']);
/** Bounds `udevadm info -e` (via the binding), which is quick when it works at all. */
const BINDING_LIST_TIMEOUT_MS = 10_000;
/** sysfs levels walked up from a tty to its USB device (tty → interface → device is 2–3). */
const SYSFS_MAX_DEPTH = 8;

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
interface PortFields {
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
function portInfo(fields: PortFields): PortInfo {
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

const BY_ID_NAME = /^usb-.+-if[0-9a-fA-F]{2}/;

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

async function readTrimmed(path: string): Promise<string | undefined> {
  try {
    const text = (await readFile(path, 'utf8')).trim();
    return text === '' ? undefined : text;
  } catch {
    return undefined;
  }
}

interface UsbDevice {
  vendorId?: string;
  productId?: string;
  manufacturer?: string;
  product?: string;
  serial?: string;
}

/** The USB device above a tty: the nearest parent of `class/tty/<name>/device` with `idVendor`. */
async function usbDeviceOf(sysfsRoot: string, ttyName: string): Promise<UsbDevice | undefined> {
  let dir: string;
  let root: string;
  try {
    dir = await realpath(join(sysfsRoot, 'class', 'tty', ttyName, 'device'));
    root = await realpath(sysfsRoot);
  } catch {
    return undefined;
  }
  for (let depth = 0; depth < SYSFS_MAX_DEPTH; depth += 1) {
    const vendorId = normalizeUsbId(await readTrimmed(join(dir, 'idVendor')));
    if (vendorId !== undefined) {
      const device: UsbDevice = { vendorId };
      const productId = normalizeUsbId(await readTrimmed(join(dir, 'idProduct')));
      const manufacturer = await readTrimmed(join(dir, 'manufacturer'));
      const product = await readTrimmed(join(dir, 'product'));
      const serial = await readTrimmed(join(dir, 'serial'));
      if (productId !== undefined) device.productId = productId;
      if (manufacturer !== undefined) device.manufacturer = manufacturer;
      if (product !== undefined) device.product = product;
      if (serial !== undefined) device.serial = serial;
      return device;
    }
    const parent = dirname(dir);
    if (parent === dir || dir === root) return undefined;
    dir = parent;
  }
  return undefined;
}

const USB_INTERFACE = /^\d+-[\d.]+:\d+\.\d+$/;
const USB_DEVICE = /^(\d+-[\d.]+|usb\d+)$/;
const PCI_DEVICE = /^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/;
const PCI_ROOT = /^pci[0-9a-f]{4}:[0-9a-f]{2}$/;

/**
 * The `/dev/serial/by-path` name udev gives a USB tty (its `path_id` builtin, then
 * `60-serial.rules`), built from sysfs: `pci-<controller>-usb-0:<ports>:<config>.<interface>`,
 * preceded by `platform-<device>` where the controller sits on a platform bus, followed by
 * `-port<n>` for a usb-serial port (ttyUSB). `usb-0:2.1:1.0` is socket 1 of the hub in socket 2.
 */
export async function usbLocationOf(
  sysfsRoot: string,
  ttyName: string,
): Promise<string | undefined> {
  let device: string;
  let root: string;
  try {
    device = await realpath(join(sysfsRoot, 'class', 'tty', ttyName, 'device'));
    root = await realpath(join(sysfsRoot, 'devices'));
  } catch {
    return undefined;
  }
  const rel = relative(root, device);
  if (rel.startsWith('..') || isAbsolute(rel)) return undefined;
  const chain = rel.split(sep); // outermost first
  const at = chain.findLastIndex((name) => USB_INTERFACE.test(name));
  const iface = chain[at];
  if (iface === undefined) return undefined;
  let suffix = '';
  if (chain.length > at + 1) {
    // A usb-serial port (ttyUSB<n>) below the interface: udev appends its port number.
    const port = await readTrimmed(join(device, 'port_number'));
    if (port !== undefined && /^\d+$/.test(port)) suffix = `-port${port}`;
  }
  const parts = [`usb-0:${iface.slice(iface.indexOf('-') + 1)}`];
  let i = at - 1;
  while (i >= 0 && USB_DEVICE.test(chain[i] as string)) i -= 1;
  while (i >= 0) {
    const name = chain[i] as string;
    if (PCI_DEVICE.test(name)) {
      parts.unshift(`pci-${name}`);
      while (i >= 0 && PCI_DEVICE.test(chain[i] as string)) i -= 1;
    } else if (chain[0] === 'platform' && i > 0 && !PCI_ROOT.test(name)) {
      parts.unshift(`platform-${name}`);
      break; // udev names the nearest platform device only
    } else {
      i -= 1; // a PCI root bus (pci0000:00) and the like: not part of the name
    }
  }
  return `${parts.join('-')}${suffix}`;
}

/** udev's newer by-path links name the USB revision (`usbv2-0:...`) too; both mean one socket. */
const byPathKey = (name: string): string => name.replace(/-usbv\d+-/g, '-usb-');

/** The `/dev/serial/by-path` links, by the device they point to. */
async function byPathLinks(byPathDir: string): Promise<Map<string, string>> {
  const links = new Map<string, string>();
  // Plain `usb-` names first, so that they win over their `usbv<n>-` twins.
  const names = (await listDir(byPathDir)).sort(
    (a, b) => Number(a !== byPathKey(a)) - Number(b !== byPathKey(b)) || (a < b ? -1 : 1),
  );
  for (const name of names) {
    try {
      const target = await realpath(join(byPathDir, name));
      if (!links.has(target)) links.set(target, join(byPathDir, name));
    } catch {
      // dangling: the device went away while we looked
    }
  }
  return links;
}

/** Gives each port its by-path name: udev's link, else the name built from sysfs. */
async function withLocations(
  ports: PortInfo[],
  byPathDir: string,
  sysfsRoot: string,
): Promise<PortInfo[]> {
  const links = await byPathLinks(byPathDir);
  const located: PortInfo[] = [];
  for (const port of ports) {
    const real = await realpath(port.path).catch(() => port.path);
    const link = links.get(real);
    const built = link === undefined ? await usbLocationOf(sysfsRoot, basename(real)) : undefined;
    const byPathPath = link ?? (built === undefined ? undefined : join(byPathDir, built));
    located.push(byPathPath === undefined ? port : portInfo({ ...port, byPathPath }));
  }
  return located;
}

async function listDir(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch {
    return [];
  }
}

/** Ports from `/dev/serial/by-id` links, completed from sysfs where it can be read. */
async function listFromById(byIdDir: string, sysfsRoot: string): Promise<PortInfo[]> {
  const ports: PortInfo[] = [];
  for (const name of (await listDir(byIdDir)).sort()) {
    let target: string;
    try {
      target = await realpath(join(byIdDir, name));
    } catch {
      continue; // a dangling link: the device went away while we looked
    }
    const parsed = parseByIdName(name);
    const usb = await usbDeviceOf(sysfsRoot, basename(target));
    ports.push(
      portInfo({
        path: target,
        byIdPath: join(byIdDir, name),
        // udev builds the link name from the sanitized serial, so sanitize sysfs's to match.
        serialNumber: usb?.serial === undefined ? parsed.serialNumber : udevSanitize(usb.serial),
        vendorId: usb?.vendorId ?? parsed.vendorId,
        productId: usb?.vendorId === undefined ? parsed.productId : usb.productId,
        manufacturer: usb?.manufacturer ?? parsed.manufacturer,
        product: usb?.product ?? parsed.product,
      }),
    );
  }
  return ports;
}

/** USB ttys that sysfs knows and `devDir` holds, for hosts without udev (no by-id links). */
async function listFromSysfs(
  sysfsRoot: string,
  devDir: string,
  known: ReadonlySet<string>,
): Promise<PortInfo[]> {
  const ports: PortInfo[] = [];
  for (const name of (await listDir(join(sysfsRoot, 'class', 'tty'))).sort()) {
    if (known.has(name)) continue;
    const usb = await usbDeviceOf(sysfsRoot, name);
    if (usb === undefined) continue;
    const path = join(devDir, name);
    // sysfs may describe the host's devices while this container has no node for them.
    if (
      !(await stat(path).then(
        () => true,
        () => false,
      ))
    )
      continue;
    ports.push(
      portInfo({
        path,
        serialNumber: usb.serial === undefined ? undefined : udevSanitize(usb.serial),
        vendorId: usb.vendorId,
        productId: usb.productId,
        manufacturer: usb.manufacturer,
        product: usb.product,
      }),
    );
  }
  return ports;
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}

/**
 * Serial ports with their USB descriptors. Asks the binding first; when it fails or finds
 * nothing (Linux without `udevadm`), reads `/dev/serial/by-id` and sysfs instead. Off Linux,
 * with no directories given, a failing binding's error is rethrown.
 */
export async function listPorts(options: ListPortsOptions = {}): Promise<PortInfo[]> {
  const byIdDir = options.byIdDir ?? '/dev/serial/by-id';
  const byPathDir = options.byPathDir ?? '/dev/serial/by-path';
  const sysfsRoot = options.sysfsRoot ?? '/sys';
  const devDir = options.devDir ?? '/dev';
  // udev's directories and sysfs: Linux, or wherever a test puts them.
  const linuxLike =
    process.platform === 'linux' ||
    options.byIdDir !== undefined ||
    options.byPathDir !== undefined ||
    options.sysfsRoot !== undefined;
  let bindingError: unknown;
  try {
    // Loaded on demand so that importing this module never loads the native addon.
    const binding = options.binding ?? (await import('@serialport/bindings-cpp')).autoDetect();
    const listed = await withTimeout(binding.list(), BINDING_LIST_TIMEOUT_MS, 'serial port list');
    if (listed.length > 0) {
      const ports = listed.map((port) => portInfoFromBinding(port, byIdDir));
      return linuxLike ? await withLocations(ports, byPathDir, sysfsRoot) : ports;
    }
  } catch (error) {
    bindingError = error;
  }
  if (!linuxLike) {
    if (bindingError !== undefined) throw bindingError;
    return [];
  }
  const byId = await listFromById(byIdDir, sysfsRoot);
  const seen = new Set(byId.map((port) => basename(port.path)));
  const sysfsOnly = await listFromSysfs(sysfsRoot, devDir, seen);
  const ports = [...byId, ...sysfsOnly].sort((a, b) =>
    a.path < b.path ? -1 : a.path > b.path ? 1 : 0,
  );
  return withLocations(ports, byPathDir, sysfsRoot);
}

export type PortSelector =
  | { serialNumber: string }
  /** `'10c4:ea60'`, optionally `'10c4:ea60:<serial>'` (the serial may itself contain `:`). */
  | { vidPid: string }
  /** The device path, or a `/dev/serial/by-id/...` link path. */
  | { path: string }
  /** A `/dev/serial/by-id` link name (or its full path). */
  | { byId: string }
  /** A `/dev/serial/by-path` name (or its full path): the USB socket a board is plugged into. */
  | { byPath: string };

const SELECTOR_HELP =
  'use a path (/dev/ttyUSB0, COM3), serial:<serial number>, usb:<vid>:<pid>[:<serial>], by-id:<name in /dev/serial/by-id> or by-path:<name in /dev/serial/by-path>';

function invalidSelector(text: string, why: string): SerialError {
  return new SerialError('OPTION_INVALID', `port selector '${text}': ${why}; ${SELECTOR_HELP}`);
}

function splitVidPid(
  text: string,
  value: string,
): { vendorId: string; productId: string; serialNumber?: string } {
  const [vid, pid, ...serialParts] = value.split(':');
  const vendorId = /^(0x)?[0-9a-fA-F]{4}$/.test(vid ?? '') ? normalizeUsbId(vid) : undefined;
  const productId = /^(0x)?[0-9a-fA-F]{4}$/.test(pid ?? '') ? normalizeUsbId(pid) : undefined;
  if (vendorId === undefined || productId === undefined) {
    throw invalidSelector(text, 'expected 4-digit hex vendor and product IDs, e.g. usb:10c4:ea60');
  }
  const serialNumber = serialParts.join(':');
  if (serialParts.length > 0 && serialNumber === '') {
    throw invalidSelector(text, 'empty serial number after the product ID');
  }
  return serialNumber === '' ? { vendorId, productId } : { vendorId, productId, serialNumber };
}

/**
 * CLI/inventory syntax: `/dev/ttyUSB0` or `COM3` (or `path:<path>`), `serial:ABC123`,
 * `usb:10c4:ea60[:<serial>]`, `by-id:usb-Silicon_Labs_...` (a bare `usb-...-if00...` by-id name
 * also works), `by-path:pci-0000:00:14.0-usb-0:2.1:1.0-port0`. Throws `OPTION_INVALID` naming
 * the accepted forms.
 */
export function parsePortSelector(text: string): PortSelector {
  const trimmed = text.trim();
  if (trimmed === '') throw invalidSelector(text, 'empty');
  const colon = trimmed.indexOf(':');
  const prefix = colon > 0 ? trimmed.slice(0, colon).toLowerCase() : '';
  const value = colon > 0 ? trimmed.slice(colon + 1).trim() : '';
  switch (prefix) {
    case 'serial':
      if (value === '') throw invalidSelector(text, 'empty serial number');
      return { serialNumber: value };
    case 'usb': {
      const { vendorId, productId, serialNumber } = splitVidPid(text, value);
      const vidPid = `${vendorId}:${productId}`;
      return { vidPid: serialNumber === undefined ? vidPid : `${vidPid}:${serialNumber}` };
    }
    case 'by-id':
      if (value === '') throw invalidSelector(text, 'empty by-id name');
      return { byId: value };
    case 'by-path':
      if (value === '') throw invalidSelector(text, 'empty by-path name');
      return { byPath: value };
    case 'path':
      if (value === '') throw invalidSelector(text, 'empty path');
      return { path: value };
    default:
      break;
  }
  if (trimmed.startsWith('/') || trimmed.startsWith('\\\\') || /^COM\d+$/i.test(trimmed)) {
    return { path: trimmed };
  }
  if (BY_ID_NAME.test(trimmed)) return { byId: trimmed };
  throw invalidSelector(text, colon > 0 ? `unknown prefix '${prefix}:'` : 'not a path');
}

/** The selector in {@link parsePortSelector}'s syntax. */
export function formatPortSelector(selector: PortSelector): string {
  if ('serialNumber' in selector) return `serial:${selector.serialNumber}`;
  if ('vidPid' in selector) return `usb:${selector.vidPid}`;
  if ('byId' in selector) return `by-id:${selector.byId}`;
  if ('byPath' in selector) return `by-path:${selector.byPath}`;
  return selector.path;
}

const sameSerial = (a: string | undefined, b: string): boolean =>
  a !== undefined && a.toLowerCase() === b.toLowerCase();

/**
 * The ports a selector picks. Serial numbers compare case-insensitively (macOS reports them
 * raw, udev sanitized, and hex digits vary in case between tools).
 */
export function matchPorts(ports: readonly PortInfo[], selector: PortSelector): PortInfo[] {
  if ('serialNumber' in selector) {
    return ports.filter((port) => sameSerial(port.serialNumber, selector.serialNumber));
  }
  if ('vidPid' in selector) {
    const want = splitVidPid(formatPortSelector(selector), selector.vidPid);
    return ports.filter(
      (port) =>
        port.vendorId === want.vendorId &&
        port.productId === want.productId &&
        (want.serialNumber === undefined || sameSerial(port.serialNumber, want.serialNumber)),
    );
  }
  if ('byId' in selector) {
    const { byId } = selector;
    return ports.filter(
      (port) =>
        port.byIdPath !== undefined &&
        (byId.includes('/') ? port.byIdPath === byId : basename(port.byIdPath) === byId),
    );
  }
  if ('byPath' in selector) {
    const want = byPathKey(basename(selector.byPath));
    const full = selector.byPath.includes('/');
    return ports.filter(
      (port) =>
        port.byPathPath !== undefined &&
        byPathKey(basename(port.byPathPath)) === want &&
        (!full || byPathKey(dirname(port.byPathPath)) === byPathKey(dirname(selector.byPath))),
    );
  }
  const byPath = (port: PortInfo): boolean =>
    port.byPathPath !== undefined && byPathKey(port.byPathPath) === byPathKey(selector.path);
  return ports.filter(
    (port) => port.path === selector.path || port.byIdPath === selector.path || byPath(port),
  );
}

/**
 * Serial numbers that many devices share: CP210x clones report `0001`, other bridges all zeros,
 * counterfeit FT232R chips `A50285BI`. Never a board's identity.
 */
export function isGenericSerialNumber(serialNumber: string): boolean {
  return /^0*1?$/.test(serialNumber.trim()) || /^A50285BI$/i.test(serialNumber.trim());
}

/**
 * What finds this board again, among `ports` (the ports listed with it), and after a reset or
 * a replug: its USB serial number, unless it has none, a generic one or one another listed port
 * shares; else its USB location (`by-path:`), when known; else its path.
 */
export function portIdentity(port: PortInfo, ports: readonly PortInfo[] = [port]): PortSelector {
  const serial = port.serialNumber;
  if (
    serial !== undefined &&
    !isGenericSerialNumber(serial) &&
    !ports.some((other) => other.path !== port.path && sameSerial(other.serialNumber, serial))
  )
    return { serialNumber: serial };
  if (port.byPathPath !== undefined) return { byPath: basename(port.byPathPath) };
  return { path: port.path };
}

/** Most useful first (USB ports), capped, so an error message stays readable. */
export function describePorts(ports: readonly PortInfo[], limit = 20): string {
  if (ports.length === 0) return 'no serial ports';
  const usbFirst = [...ports].sort(
    (a, b) => Number(a.vendorId === undefined) - Number(b.vendorId === undefined),
  );
  const shown = usbFirst.slice(0, limit).map((port) => {
    const details = [
      port.vendorId === undefined ? undefined : `${port.vendorId}:${port.productId ?? '????'}`,
      port.serialNumber === undefined ? undefined : `serial ${port.serialNumber}`,
      [port.manufacturer, port.product].filter((part) => part !== undefined).join(' ') || undefined,
      port.kind === 'unknown' ? undefined : port.kind,
      port.byIdPath === undefined ? undefined : `by-id ${basename(port.byIdPath)}`,
      'byPath' in portIdentity(port, ports) && port.byPathPath !== undefined
        ? `by-path ${basename(port.byPathPath)}`
        : undefined,
    ].filter((part) => part !== undefined);
    return details.length === 0 ? port.path : `${port.path} (${details.join(', ')})`;
  });
  const more = ports.length - shown.length;
  return more > 0 ? `${shown.join('; ')}; and ${more} more` : shown.join('; ');
}

/** Settles with `promise`, or rejects at the abort. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return promise;
  return new Promise<T>((resolve, reject) => {
    if (signal.aborted) {
      reject(abortReason(signal));
      return;
    }
    const onAbort = (): void => reject(abortReason(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/** How long the one listing of a look-once {@link findPort} may take. */
const LOOK_ONCE_BUDGET_MS = 2000;

export interface FindPortOptions {
  /** Default: {@link listPorts} with its defaults. */
  lister?: PortLister;
  /** Default 10 000. 0 looks once. */
  timeoutMs?: number;
  /** Default 250. */
  pollMs?: number;
  signal?: AbortSignal;
}

/**
 * Polls until exactly one port matches, e.g. a USB-Serial-JTAG board coming back under a new
 * path with the same serial number after a reset. None by the deadline rejects `PORT_NOT_FOUND`
 * listing what was seen; several on two polls in a row (or at the deadline) reject
 * `PORT_NOT_FOUND` asking for a more specific selector. A failing lister counts as "none yet".
 */
export async function findPort(
  selector: PortSelector,
  options: FindPortOptions = {},
): Promise<PortInfo> {
  const lister = options.lister ?? { list: () => listPorts() };
  const timeoutMs = options.timeoutMs ?? 10_000;
  const pollMs = options.pollMs ?? 250;
  const { signal } = options;
  if (!Number.isFinite(timeoutMs) || timeoutMs < 0) {
    throw new SerialError(
      'OPTION_INVALID',
      `findPort timeoutMs must be finite and >= 0, got ${timeoutMs}`,
    );
  }
  if (!Number.isFinite(pollMs) || pollMs <= 0) {
    throw new SerialError(
      'OPTION_INVALID',
      `findPort pollMs must be finite and > 0, got ${pollMs}`,
    );
  }
  const wanted = formatPortSelector(selector);
  const started = Date.now();
  const deadline = started + timeoutMs;
  let seen: PortInfo[] = [];
  let listError: unknown;
  let ambiguousPolls = 0;
  for (;;) {
    signal?.throwIfAborted();
    try {
      // A hung lister must not outlive the deadline by more than one poll; a look-once find
      // (`timeoutMs: 0`) gives its one listing LOOK_ONCE_BUDGET_MS, so that a slow one (udevadm,
      // sysfs on a loaded host) is not taken for none.
      const budget = Math.max(
        deadline - Date.now(),
        timeoutMs === 0 ? LOOK_ONCE_BUDGET_MS : pollMs,
      );
      seen = await abortable(withTimeout(lister.list(), budget, 'port lister'), signal);
      listError = undefined;
    } catch (error) {
      if (signal?.aborted) throw abortReason(signal);
      listError = error;
      seen = [];
    }
    const matches = matchPorts(seen, selector);
    const [only] = matches;
    if (matches.length === 1 && only !== undefined) return only;
    ambiguousPolls = matches.length > 1 ? ambiguousPolls + 1 : 0;
    const remaining = deadline - Date.now();
    if (ambiguousPolls >= 2 || (ambiguousPolls > 0 && remaining <= 0)) {
      const identities = [
        ...new Set(matches.map((port) => formatPortSelector(portIdentity(port, seen)))),
      ];
      const which = identities.length === matches.length ? `: one of ${identities.join(', ')}` : '';
      throw new SerialError(
        'PORT_NOT_FOUND',
        `${matches.length} serial ports match ${wanted}: ${describePorts(matches)}; use a more specific selector (serial:<serial number>, by-path:<USB location> where serial numbers are missing or shared, or by-id:<name> when one device has several interfaces)${which}`,
      );
    }
    if (remaining <= 0) {
      const failed =
        listError === undefined
          ? ''
          : ` (listing failed: ${listError instanceof Error ? listError.message : String(listError)})`;
      throw new SerialError(
        'PORT_NOT_FOUND',
        `no serial port matches ${wanted} after ${Date.now() - started} ms${failed}; seen: ${describePorts(seen)}`,
        listError === undefined ? {} : { cause: listError },
      );
    }
    await abortableWait(Math.min(pollMs, remaining), signal);
  }
}
