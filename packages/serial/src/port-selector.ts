/**
 * Naming a board's port and finding it again. Native-USB chips (USB-Serial-JTAG) re-enumerate
 * on reset under a new path but the same serial number, so `findPort` polls a listing for a
 * selector rather than trusting a path; the listing is the caller's (`listPorts` for the host's
 * ports, a provider's own for its boards), so this module loads no native binding.
 *
 * A board's identity ({@link portIdentity}) is its USB serial number, unless it has none (CH340),
 * a generic one (CP2102 clones' `0001`) or one another attached port shares; then it is its
 * physical USB location, the `/dev/serial/by-path` name (`pci-0000:00:14.0-usb-0:2.1:1.0-port0`,
 * read from udev's link or built from sysfs the way udev builds it); then the device path.
 */
import { basename, dirname } from 'node:path';
import { SerialError } from './errors.js';
import { BY_ID_NAME, normalizeUsbId, type PortInfo, samePortPath } from './port-info.js';
import { abortableWait, abortReason, withTimeout } from './wait.js';

export interface PortLister {
  list(): Promise<PortInfo[]>;
}

/** udev's newer by-path links name the USB revision (`usbv2-0:...`) too; both mean one socket. */
export const byPathKey = (name: string): string => name.replace(/-usbv\d+-/g, '-usb-');

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
 * raw, udev sanitized, and hex digits vary in case between tools); paths as one port's
 * spellings on `platform` (macOS `/dev/cu.*` and `/dev/tty.*`, Windows `COM3` and `\\.\COM3`:
 * {@link portPathIdentity}).
 */
export function matchPorts(
  ports: readonly PortInfo[],
  selector: PortSelector,
  platform: NodeJS.Platform = process.platform,
): PortInfo[] {
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
    (port) =>
      samePortPath(port.path, selector.path, platform) ||
      port.byIdPath === selector.path ||
      byPath(port),
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
export function portIdentity(
  port: PortInfo,
  ports: readonly PortInfo[] = [port],
  platform: NodeJS.Platform = process.platform,
): PortSelector {
  const serial = port.serialNumber;
  if (
    serial !== undefined &&
    !isGenericSerialNumber(serial) &&
    !ports.some(
      (other) =>
        !samePortPath(other.path, port.path, platform) && sameSerial(other.serialNumber, serial),
    )
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
  /** Where to look: `listPorts` for the host's ports, a provider's own listing for its boards. */
  lister: PortLister;
  /** Default 10 000. 0 looks once. */
  timeoutMs?: number;
  /** Default 250. */
  pollMs?: number;
  signal?: AbortSignal;
  /** Whose path spellings are one port's ({@link matchPorts}). Default `process.platform`. */
  platform?: NodeJS.Platform;
}

/**
 * Polls until exactly one port matches, e.g. a USB-Serial-JTAG board coming back under a new
 * path with the same serial number after a reset. None by the deadline rejects `PORT_NOT_FOUND`
 * listing what was seen; several on two polls in a row (or at the deadline) reject
 * `PORT_NOT_FOUND` asking for a more specific selector. A failing lister counts as "none yet".
 */
export async function findPort(
  selector: PortSelector,
  options: FindPortOptions,
): Promise<PortInfo> {
  const { lister } = options;
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
    const matches = matchPorts(seen, selector, options.platform);
    const [only] = matches;
    if (matches.length === 1 && only !== undefined) return only;
    ambiguousPolls = matches.length > 1 ? ambiguousPolls + 1 : 0;
    const remaining = deadline - Date.now();
    if (ambiguousPolls >= 2 || (ambiguousPolls > 0 && remaining <= 0)) {
      const identities = [
        ...new Set(
          matches.map((port) => formatPortSelector(portIdentity(port, seen, options.platform))),
        ),
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
