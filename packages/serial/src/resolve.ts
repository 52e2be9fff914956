/**
 * Where a board's serial port comes from. A real port is found by its selector (path,
 * `serial:`, `usb:`, `by-id:`, `by-path:`) through the native binding, and locked by the
 * device's identity (its serial number, USB location or device node: {@link portIdentity}), so
 * that two selectors of one board exclude each other, whichever command (`flash`, `provision`,
 * `monitor`, `hil run`) resolves it; the lock is held until `dispose()`. Any other kind of board
 * (virtual boards today) comes from a {@link PortProvider} that whoever composes the commands
 * registers, so this package never imports what it serves. A port on another host,
 * `rfc2217://host:port`, is built in: real hardware behind an RFC 2217 server, reached from
 * either CLI and from `hil` alike. All give a binding and a path; everything after (flashing,
 * console, lines) is the same code.
 */
import { realpath, stat } from 'node:fs/promises';
import { SerialError } from './errors.js';
import { BoardLockError, lockBoard, uucpLockDir, uucpLockHolder } from './lock.js';
import { type PortInfo, portPathIdentity } from './port-info.js';
import type { PortProvider, ProviderRequest, ResolvedPort } from './port-provider.js';
import {
  describePorts,
  findPort,
  formatPortSelector,
  matchPorts,
  type PortSelector,
  parsePortSelector,
  portIdentity,
} from './port-selector.js';
import { listPorts } from './ports.js';
import {
  Rfc2217Binding,
  type Rfc2217BindingOptions,
  type Rfc2217Event,
  type Rfc2217Probe,
  rfc2217Reachable,
} from './rfc2217/client.js';
import { formatRfc2217Url, isRfc2217Url, parseRfc2217Url } from './rfc2217/url.js';
import { abortableWait } from './wait.js';
import type { SerialBinding } from './web-serial.js';

export interface ResolvePortOptions {
  readonly providers?: readonly PortProvider[];
  readonly request?: ProviderRequest;
  /** Real ports only; default {@link listPorts}. */
  readonly lister?: () => Promise<PortInfo[]>;
  /** How long to look for a real port (it may be enumerating). Default 3000 ms. */
  readonly findTimeoutMs?: number;
  /**
   * Real and `rfc2217://` ports: how long to wait for a board another process holds (its lock
   * here, or the RFC 2217 server serving another client). Default 0: refuse at once.
   */
  readonly lockWaitMs?: number;
  /**
   * Real and `rfc2217://` ports: where the board locks live. Default the host's, shared by all its users
   * (`lockBoard`'s default: `XIAOZHI_LOCK_DIR`, else `/run/lock/xiaozhi-mcp` or the like); ports
   * from a `lister` of the caller's own are not necessarily the host's devices, and are locked
   * only when `lockDir` is given.
   */
  readonly lockDir?: string;
  /**
   * Real ports, when locked: where other programs' UUCP lock files (`LCK..<device>`, minicom's
   * and picocom's) are read. Default the host's (`/var/lock`, `/run/lock`, `/var/spool/lock`);
   * undefined reads none.
   */
  readonly uucpLockDir?: string | undefined;
  /** Real and `rfc2217://` ports: stops looking for the port and waiting for it. */
  readonly signal?: AbortSignal;
  /**
   * The command that lists the attached ports, as the user types it in the program that asks
   * (`xiaozhi-mcp ports`, `hil boards`): a missing port's error suggests it. Unset, it names none.
   */
  readonly listCommand?: string;
  /**
   * Real ports: the host, whose spellings of one port's path (macOS `/dev/cu.*` and
   * `/dev/tty.*`, Windows `COM3` and `\\.\COM3`) match one listing entry, lock one key and
   * resolve to the one path that opens ({@link portPathIdentity}). Default `process.platform`.
   */
  readonly platform?: NodeJS.Platform;
  /**
   * `rfc2217://` ports: the binding's timeouts and reconnect window (see
   * {@link Rfc2217BindingOptions}), and how long connecting and reading the server's signature may
   * take (default 5000 ms). Lost and reconnected connections are told through `request.notify`.
   */
  readonly rfc2217?: Omit<Rfc2217BindingOptions, 'onEvent'> & { readonly probeTimeoutMs?: number };
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** The native binding, loaded on demand so that commands on provided boards never load it. */
export async function nativeBinding(): Promise<SerialBinding> {
  const { autoDetect } = await import('@serialport/bindings-cpp');
  return autoDetect() as unknown as SerialBinding;
}

/**
 * The key a board is locked by: its identity, with a device path made canonical (links
 * resolved, then one spelling per port: {@link portPathIdentity}).
 */
async function lockKey(identity: PortSelector, platform: NodeJS.Platform): Promise<string> {
  if ('serialNumber' in identity) return `serial:${identity.serialNumber.toLowerCase()}`;
  if (!('path' in identity)) return formatPortSelector(identity);
  const path = portPathIdentity(await realpath(identity.path).catch(() => identity.path), platform);
  return `path:${platform === 'win32' ? path.toUpperCase() : path}`;
}

/** A port by its selector; a path that exists but no listing knows is used as it is. */
async function findReal(
  selector: PortSelector,
  list: () => Promise<PortInfo[]>,
  options: ResolvePortOptions,
): Promise<PortInfo> {
  const { signal } = options;
  const platform = options.platform ?? process.platform;
  const lister = { list };
  const timeoutMs = options.findTimeoutMs ?? 3000;
  const onSignal = signal === undefined ? {} : { signal };
  // A port no listing knows (a pty, a serial header), by the path that opens it.
  const unlisted = (path: string): PortInfo => ({
    path: portPathIdentity(path, platform),
    kind: 'unknown',
  });
  if ('path' in selector && (await exists(selector.path))) {
    // A device node that is there: no need to wait for a listing to show it. A link to a
    // listed port (a symlink of the user's) is that port.
    const listed = await list().catch(() => []);
    const real = await realpath(selector.path).catch(() => selector.path);
    const [known] = [
      ...matchPorts(listed, selector, platform),
      ...matchPorts(listed, { path: real }, platform),
    ];
    return known ?? unlisted(selector.path);
  }
  try {
    return await findPort(selector, { lister, timeoutMs, platform, ...onSignal });
  } catch (error) {
    // A tty no listing knows that appeared meanwhile.
    if ('path' in selector && (await exists(selector.path))) return unlisted(selector.path);
    if (error instanceof SerialError && /^no serial port/.test(error.message)) {
      const list = options.listCommand;
      throw new SerialError(
        'PORT_NOT_FOUND',
        `${error.message}; check the cable${list === undefined ? '' : `, or run \`${list}\` to see what is attached`}`,
        { cause: error },
      );
    }
    throw error;
  }
}

async function resolveReal(
  selectorText: string,
  options: ResolvePortOptions,
): Promise<ResolvedPort> {
  const selector = parsePortSelector(selectorText);
  const platform = options.platform ?? process.platform;
  // Every listed path in the one spelling that matches, locks and opens (a lister of the
  // caller's own may give macOS's /dev/tty.* as bindings-cpp does).
  const base = async (): Promise<PortInfo[]> =>
    (await (options.lister ?? (() => listPorts({ platform })))()).map((port) => ({
      ...port,
      path: portPathIdentity(port.path, platform),
    }));
  let listed: PortInfo[] = [];
  const list = async (): Promise<PortInfo[]> => {
    listed = await base();
    return listed;
  };
  const info = await findReal(selector, list, options);
  // Two selectors of one board (serial:X and /dev/ttyUSB0, a path and a link to it, macOS's
  // cu and tty nodes) lock the same key: the board's identity among the ports listed with it.
  const identity = portIdentity(info, listed, platform);
  const key = await lockKey(identity, platform);
  let release: () => void = () => {};
  const label = key === `path:${info.path}` ? info.path : `${info.path} (${key})`;
  if (options.lister === undefined || options.lockDir !== undefined) {
    try {
      release = await lockBoard(key, {
        label,
        waitMs: options.lockWaitMs ?? 0,
        ...(options.lockDir === undefined ? {} : { dir: options.lockDir }),
        ...(options.signal === undefined ? {} : { signal: options.signal }),
      });
    } catch (error) {
      if (!(error instanceof BoardLockError)) throw error;
      throw new SerialError(error.reason === 'held' ? 'PORT_BUSY' : 'LOCK_FAILED', error.message, {
        cause: error,
      });
    }
    // A terminal program's UUCP lock (minicom, picocom): the port is in use by it.
    const uucp = uucpLockHolder(
      info.path,
      'uucpLockDir' in options ? options.uucpLockDir : uucpLockDir(),
    );
    if (uucp !== undefined) {
      release();
      throw new SerialError(
        'PORT_BUSY',
        `${label} is in use by ${uucp.command ?? 'another program'} (pid ${uucp.pid}, by its UUCP lock ${uucp.file}); close it first, or remove the lock file if that process does not use the port`,
      );
    }
  }
  let binding: SerialBinding;
  try {
    binding = await nativeBinding();
  } catch (error) {
    release();
    throw error;
  }
  const lister = { list: base };
  // A serial number that is generic or was shared may still be unique when looking again.
  const again: PortSelector | undefined = !('path' in identity)
    ? identity
    : info.serialNumber === undefined
      ? undefined
      : { serialNumber: info.serialNumber };
  return {
    binding,
    path: info.path,
    info,
    label: info.path,
    present: (path) => exists(path),
    refind: async (timeoutMs, signal) => {
      if (again === undefined)
        throw new SerialError(
          'PORT_NOT_FOUND',
          `${info.path} went away and has no USB serial number or USB location to find it again by`,
        );
      const found = await findPort(again, {
        lister,
        timeoutMs,
        platform,
        ...(signal === undefined ? {} : { signal }),
      });
      return { path: found.path, info: found };
    },
    dispose: release,
  };
}

/** A line for the user about an RFC 2217 port's connection, if the event deserves one. */
function rfc2217Note(event: Rfc2217Event): string | undefined {
  if (event.kind === 'lost')
    return `${event.url}: the connection was lost (${event.reason}); reconnecting for up to ${event.reconnectMs / 1000} s\n`;
  if (event.kind === 'reconnected')
    return `${event.url}: reconnected; baud rate and lines set again\n`;
  return undefined;
}

/** How often a busy RFC 2217 server is asked again while a run waits for its board. */
const BUSY_POLL_MS = 500;

/**
 * The host's lock of a port another host shares, keyed by its URL: runs on this host wait for
 * each other here (woken at the release, told who holds it), and hold it across the moments
 * their connection is closed and made again (between flashing and the console), which the
 * server's one-client rule alone would let a waiting run take. A lock directory this host
 * cannot use is no reason to refuse: the server still lets one client in at a time.
 */
async function lockRemote(path: string, options: ResolvePortOptions): Promise<() => void> {
  try {
    return await lockBoard(`rfc2217:${path}`, {
      label: path,
      waitMs: options.lockWaitMs ?? 0,
      ...(options.lockDir === undefined ? {} : { dir: options.lockDir }),
      ...(options.signal === undefined ? {} : { signal: options.signal }),
    });
  } catch (error) {
    if (!(error instanceof BoardLockError)) throw error;
    if (error.reason === 'unusable') return () => {};
    throw new SerialError('PORT_BUSY', error.message, { cause: error });
  }
}

/**
 * A port on an RFC 2217 server: locked on this host by its URL, then connected to (so a wrong
 * address fails here, and the server's signature gives the kind of port it shares), on the
 * connection the command's first open then takes over (one per command). A server serving
 * another client (`PORT_BUSY`) is asked again until `lockWaitMs` is over, as a local board's
 * lock is waited for. `linePlatform: 'win32'` (see {@link ResolvedPort.linePlatform}).
 */
async function resolveRfc2217(
  selector: string,
  options: ResolvePortOptions,
): Promise<ResolvedPort> {
  const path = formatRfc2217Url(parseRfc2217Url(selector));
  const { signal } = options;
  signal?.throwIfAborted();
  const started = performance.now();
  const waitMs = options.lockWaitMs ?? 0;
  const release = await lockRemote(path, options);
  const { probeTimeoutMs, ...bindingOptions } = options.rfc2217 ?? {};
  const notify = options.request?.notify;
  const binding = new Rfc2217Binding({
    ...bindingOptions,
    onEvent: (event) => {
      const note = rfc2217Note(event);
      if (note !== undefined) notify?.('stderr', note);
    },
  });
  let probe: Rfc2217Probe;
  try {
    for (let asked = 1; ; asked++) {
      try {
        probe = await binding.connect(
          path,
          probeTimeoutMs === undefined ? {} : { timeoutMs: probeTimeoutMs },
        );
        break;
      } catch (error) {
        const left = waitMs - (performance.now() - started);
        if (!(error instanceof SerialError && error.code === 'PORT_BUSY')) throw error;
        if (left <= 0)
          throw waitMs === 0
            ? error
            : new SerialError(
                'PORT_BUSY',
                `${error.message} (still after waiting ${Math.round(waitMs / 100) / 10} s, asked ${asked} times)`,
                { cause: error },
              );
        await abortableWait(Math.min(BUSY_POLL_MS, left), signal);
      }
    }
  } catch (error) {
    release();
    throw error;
  }
  const info: PortInfo = { path, kind: probe.kind };
  return {
    binding,
    path,
    info,
    label: path,
    linePlatform: 'win32',
    ...(probe.lineControl === 'resets' ? { lineControl: 'resets' as const } : {}),
    // A live connection is proof enough; otherwise one TCP connect, which touches no line.
    present: async (at) => binding.isConnected(at) || (await rfc2217Reachable(at)),
    refind: async (timeoutMs, signal) => {
      const started = performance.now();
      for (;;) {
        signal?.throwIfAborted();
        const left = timeoutMs - (performance.now() - started);
        if (left <= 0) break;
        if (await rfc2217Reachable(path, Math.min(2000, left))) return { path, info };
        await abortableWait(Math.min(250, Math.max(0, left)), signal);
      }
      throw new SerialError(
        'PORT_NOT_FOUND',
        `${path} did not accept a connection within ${timeoutMs / 1000} s`,
      );
    },
    // A connection no open took over (the command failed before opening) is closed.
    dispose: () => {
      binding.release();
      release();
    },
  };
}

/** The provider whose prefix starts `selector`, if any. */
export function providerFor(
  selector: string,
  providers: readonly PortProvider[] = [],
): PortProvider | undefined {
  const text = selector.trim().toLowerCase();
  return providers.find((p) => text.startsWith(p.prefix));
}

/**
 * A port for `selector`: a port on an RFC 2217 server for `rfc2217://host:port`, a provider's
 * board when its prefix matches, else a real port ({@link parsePortSelector}). Throws
 * `OPTION_INVALID` for a bad selector, `PORT_NOT_FOUND`, `PORT_BUSY`.
 */
export function resolvePort(
  selector: string,
  options: ResolvePortOptions = {},
): Promise<ResolvedPort> {
  if (isRfc2217Url(selector)) return resolveRfc2217(selector, options);
  const provider = providerFor(selector, options.providers);
  return provider === undefined
    ? resolveReal(selector, options)
    : provider.resolve(selector.trim(), options.request ?? {});
}

/** USB serial ports worth offering: what a board shows up as. */
export function isBoardPort(port: PortInfo): boolean {
  return port.kind !== 'unknown' || port.vendorId !== undefined;
}

/**
 * The selector to use: `given` when there is one, else the only board there is (attached USB
 * ports and provided boards). None or several is an error that lists them.
 */
export async function chooseSelector(
  given: string | undefined,
  options: { providers?: readonly PortProvider[]; lister?: () => Promise<PortInfo[]> } = {},
): Promise<string> {
  if (given !== undefined) {
    if (given.trim() === '') throw new SerialError('OPTION_INVALID', '--port is empty');
    return given;
  }
  const real = (await (options.lister ?? (() => listPorts()))().catch(() => [])).filter(
    isBoardPort,
  );
  const listings = (options.providers ?? []).map((p) => p.listing());
  const provided = listings.flatMap((l) => l.boards);
  const [only, ...rest] = [...real.map((p) => p.path), ...provided.map((b) => b.port)];
  if (only !== undefined && rest.length === 0) return only;
  if (only === undefined) {
    const none = listings.map((l) => ` and ${l.none}`).join('');
    const hints = listings.map((l) => `, or ${l.selectorHint}`).join('');
    throw new SerialError(
      'PORT_NOT_FOUND',
      `no board attached${none}; plug a board in, or name one with --port (a path, serial:<sn>${hints})`,
    );
  }
  const listed = [
    ...(real.length > 0 ? [describePorts(real)] : []),
    ...provided.map((b) => b.summary),
  ].join('; ');
  throw new SerialError(
    'OPTION_INVALID',
    `${real.length + provided.length} boards attached: ${listed}; choose one with --port`,
  );
}
