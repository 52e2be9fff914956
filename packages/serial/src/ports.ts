/**
 * Listing the host's serial ports. `SerialPort.list()` asks `udevadm` on Linux, which containers
 * and minimal hosts lack (docs/hil.md §6), so listing falls back to what udev left in
 * `/dev/serial/by-id` and to sysfs; each port gets its USB location (`/dev/serial/by-path`),
 * udev's link or the name built from sysfs the way udev builds it.
 */
import { readdir, readFile, realpath, stat } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, relative, sep } from 'node:path';
import {
  normalizeUsbId,
  type PortInfo,
  type PortInfoLike,
  parseByIdName,
  portInfo,
  portInfoFromBinding,
  portPathIdentity,
  udevSanitize,
} from './port-info.js';
import { byPathKey } from './port-selector.js';
import { withTimeout } from './wait.js';

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
  /**
   * The host, for the spelling of the paths listed (macOS `/dev/cu.*`, Windows `COM3`:
   * {@link portPathIdentity}). Default `process.platform`.
   */
  platform?: NodeJS.Platform;
}

/** Bounds `udevadm info -e` (via the binding), which is quick when it works at all. */
const BINDING_LIST_TIMEOUT_MS = 10_000;
/** sysfs levels walked up from a tty to its USB device (tty → interface → device is 2–3). */
const SYSFS_MAX_DEPTH = 8;

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

/**
 * Serial ports with their USB descriptors. Asks the binding first; when it fails or finds
 * nothing (Linux without `udevadm`), reads `/dev/serial/by-id` and sysfs instead. Off Linux,
 * with no directories given, a failing binding's error is rethrown. Each path is spelled as
 * users name the port and as it opens: macOS's `/dev/cu.*` where bindings-cpp lists
 * `/dev/tty.*`, Windows' bare `COM3` ({@link portPathIdentity}).
 */
export async function listPorts(options: ListPortsOptions = {}): Promise<PortInfo[]> {
  const platform = options.platform ?? process.platform;
  const ports = await listHostPorts(options, platform);
  return ports.map((port) => {
    const path = portPathIdentity(port.path, platform);
    return path === port.path ? port : { ...port, path };
  });
}

async function listHostPorts(
  options: ListPortsOptions,
  platform: NodeJS.Platform,
): Promise<PortInfo[]> {
  const byIdDir = options.byIdDir ?? '/dev/serial/by-id';
  const byPathDir = options.byPathDir ?? '/dev/serial/by-path';
  const sysfsRoot = options.sysfsRoot ?? '/sys';
  const devDir = options.devDir ?? '/dev';
  // udev's directories and sysfs: Linux, or wherever a test puts them.
  const linuxLike =
    platform === 'linux' ||
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
