/**
 * Opening a port without disturbing the chip (`hupcl` off, both lines released right after
 * open), retrying a port that just appeared and is still busy or not yet permitted, saying why
 * an open failed (busy and who holds it, permission denied and the fix, missing), and closing it
 * again when a command is done with it. Every open of a port goes through here: the commands',
 * the rig's and the flasher's (`NodeWebSerialPort.open`).
 */
import type { BindingInterface } from '@serialport/bindings-cpp';
import { SerialPortStream } from '@serialport/stream';
import { SerialError } from './errors.js';
import { releaseLines } from './line-steps.js';
import { describeHolders, portHolders } from './port-holders.js';
import { abortableWait } from './wait.js';

/** Why an open failed, as far as retrying and reporting go. */
type OpenFailure = 'busy' | 'denied' | 'missing' | 'locked' | 'other';

/**
 * Reads bindings-cpp's open errors, which carry their cause as text only: Unix
 * `Error: <strerror>, cannot open <path>` from `open()` and `Error <strerror> Cannot lock port`
 * from `flock()` (`src/serialport_unix.cpp`), Windows `Opening <path>: Access denied` /
 * `File not found` (`src/serialport_win.cpp`, `ErrorCodeToString`); an errno `code`, where a
 * binding sets one, counts too.
 */
function classifyOpenError(error: unknown): OpenFailure {
  const message = error instanceof Error ? error.message : String(error);
  const code = (error as { code?: unknown } | null)?.code;
  // flock() refused: another serialport user holds the port (`lock: true`); waiting will not help.
  if (/cannot lock|port is locked|resource temporarily unavailable|in use/i.test(message))
    return 'locked';
  // open() refused with EBUSY: another program opened it exclusively (TIOCEXCL), e.g. ModemManager
  // probing a port that just appeared. Windows words a port another program has open "Access
  // denied" (esptool's loader.py reads "Access is denied" the same way: another task uses it).
  if (code === 'EBUSY' || /EBUSY|device or resource busy|access (is )?denied/i.test(message))
    return 'busy';
  // EACCES: udev has not applied the group and mode of a node that just appeared, or the user is
  // not in its group.
  if (
    code === 'EACCES' ||
    code === 'EPERM' ||
    /EACCES|EPERM|permission denied|operation not permitted/i.test(message)
  )
    return 'denied';
  if (code === 'ENOENT' || /ENOENT|no such file|does not exist|not found/i.test(message))
    return 'missing';
  if (/busy/i.test(message)) return 'locked';
  return 'other';
}

/** `; held by ModemManager (pid 812)` where the OS can tell who holds the port. */
function heldBy(path: string): string {
  const holders = portHolders(path);
  return holders.length === 0 ? '' : `; it is held by ${describeHolders(holders)}`;
}

function describeOpenError(path: string, error: unknown, retriedMs: number): unknown {
  const message = error instanceof Error ? error.message : String(error);
  const after =
    retriedMs > 0 ? ` (still, after retrying for ${Number((retriedMs / 1000).toFixed(1))} s)` : '';
  switch (classifyOpenError(error)) {
    case 'locked':
      return new SerialError(
        'PORT_BUSY',
        `${path} is in use by another process: ${message}${heldBy(path)}; close it (a monitor, another flash) and try again`,
        { cause: error },
      );
    case 'busy':
      return new SerialError(
        'PORT_BUSY',
        `${path} is busy${after}: ${message}${heldBy(path)}; another program has it open: close it (on Linux, ModemManager probes new USB serial ports for a few seconds: stop it, or tag the board ID_MM_DEVICE_IGNORE in a udev rule)`,
        { cause: error },
      );
    case 'denied':
      return new SerialError(
        'PORT_DENIED',
        `${path}: permission denied${after}: ${message}; this user may not open the port: on Linux, join its group (dialout on Debian and Ubuntu, uucp on Arch and Fedora: sudo usermod -aG dialout $USER, then log in again) or add a udev rule giving the board's port to the user (MODE="0660", GROUP= or TAG+="uaccess")`,
        { cause: error },
      );
    case 'missing':
      return new SerialError(
        'PORT_NOT_FOUND',
        `${path} does not exist${after}: ${message}; list the ports again: USB boards can come back under another path`,
        { cause: error },
      );
    default:
      // A TypeError is a caller's mistake (an invalid option), not the port's.
      if (error instanceof SerialError || error instanceof TypeError) return error;
      return new SerialError(
        'PORT_OPEN_FAILED',
        `${path} could not be opened: ${message}; check the cable and that the port is the board's`,
        { cause: error },
      );
  }
}

function closeQuietly(stream: SerialPortStream): void {
  if (stream.isOpen) stream.close(() => undefined);
}

/**
 * Closes a port a command is done with: its listeners go, one error listener stays (a late
 * error on a closing port must not crash the process), and a close that never calls back is
 * given up after 2 s. Resolves either way.
 */
export function closeStream(stream: SerialPortStream): Promise<void> {
  stream.removeAllListeners('data');
  stream.removeAllListeners('close');
  stream.removeAllListeners('error');
  stream.on('error', () => {});
  if (!stream.isOpen) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, 2000);
    stream.close(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}

/** How long {@link openSafely} keeps retrying a busy or not-yet-permitted port by default. */
export const OPEN_RETRY_MS = 3000;
/** The first pause between open attempts; it doubles up to {@link OPEN_RETRY_MAX_PAUSE_MS}. */
const OPEN_RETRY_FIRST_PAUSE_MS = 50;
const OPEN_RETRY_MAX_PAUSE_MS = 500;

export interface OpenSafelyOptions {
  baudRate: number;
  binding?: BindingInterface;
  /** Bound on each open attempt. Default 5000. */
  timeoutMs?: number;
  /**
   * How long an open refused as busy (EBUSY) or not permitted (EACCES, Windows "Access
   * denied") is retried, and a missing port too when `justFound`: a port that just appeared is
   * probed by ModemManager, and udev sets its permissions a moment later. Default
   * {@link OPEN_RETRY_MS}; 0 tries once. A port locked by another serialport user is not retried.
   */
  retryMs?: number;
  /** The path was just found (again): ENOENT is retried too, its node may not exist yet. */
  justFound?: boolean;
  /** Stops the retries (rejects with the abort reason). */
  signal?: AbortSignal;
  /** Stream settings besides the rate (a Web Serial open's, for the flasher's port). */
  settings?: {
    readonly dataBits?: 7 | 8;
    readonly stopBits?: 1 | 2;
    readonly parity?: 'none' | 'even' | 'odd';
    readonly rtscts?: boolean;
    readonly highWaterMark?: number;
  };
  /**
   * Release DTR and RTS right after open (one `set()`). Default true; a caller that tracks the
   * lines itself releases them through its own setter.
   */
  releaseLines?: boolean;
}

/** One open attempt, bounded by `timeoutMs`. */
function openOnce(
  path: string,
  binding: BindingInterface,
  options: OpenSafelyOptions,
  timeoutMs: number,
): Promise<SerialPortStream> {
  const stream = new SerialPortStream({
    ...options.settings,
    binding,
    path,
    baudRate: options.baudRate,
    hupcl: false,
    autoOpen: false,
  });
  return new Promise<SerialPortStream>((resolve, reject) => {
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      reject(new SerialError('PORT_BUSY', `${path} did not open within ${timeoutMs} ms`));
    }, timeoutMs);
    stream.open((error) => {
      clearTimeout(timer);
      if (timedOut) {
        // Too late: the caller already gave up, so do not leak the handle.
        if (!error) closeQuietly(stream);
        return;
      }
      if (error) reject(error);
      else resolve(stream);
    });
  });
}

/**
 * Opens a port without disturbing the chip: `hupcl: false` (closing does not drop DTR) and,
 * right after open, one `set()` of `SAFE_LINES`. The OS raises both lines on open; both
 * asserted keeps EN and GPIO0 high, so the moment between open and the first `set()` is harmless.
 * Each attempt is bounded by `timeoutMs` (default 5000). A port refused as busy or not permitted
 * is retried for `retryMs` (default {@link OPEN_RETRY_MS}), a missing one too when `justFound`.
 * Then a locked or busy port rejects `PORT_BUSY` (naming who holds it, where the OS can tell),
 * a refused one `PORT_DENIED`, a missing one `PORT_NOT_FOUND`, any other failure of the binding
 * `PORT_OPEN_FAILED`, each saying what to do; a `SerialError` of the binding (an rfc2217:// port's)
 * passes through.
 */
export async function openSafely(
  path: string,
  options: OpenSafelyOptions,
): Promise<SerialPortStream> {
  const timeoutMs = options.timeoutMs ?? 5000;
  const retryMs = options.retryMs ?? OPEN_RETRY_MS;
  const { signal } = options;
  if (!Number.isFinite(retryMs) || retryMs < 0)
    throw new SerialError(
      'OPTION_INVALID',
      `openSafely retryMs must be finite and >= 0, got ${retryMs}`,
    );
  // Loaded on demand so that importing this module never loads the native addon.
  const binding: BindingInterface =
    options.binding ?? (await import('@serialport/bindings-cpp')).autoDetect();
  // A timer rather than a clock, so that fake timers drive the retries in tests.
  let expired = retryMs === 0;
  const deadline = retryMs === 0 ? undefined : setTimeout(() => (expired = true), retryMs);
  let pause = OPEN_RETRY_FIRST_PAUSE_MS;
  let stream: SerialPortStream;
  try {
    for (;;) {
      signal?.throwIfAborted();
      try {
        stream = await openOnce(path, binding, options, timeoutMs);
        break;
      } catch (error) {
        if (error instanceof SerialError) throw error; // the attempt timed out
        const failure = classifyOpenError(error);
        const retryable =
          failure === 'busy' ||
          failure === 'denied' ||
          (failure === 'missing' && options.justFound === true);
        if (!retryable || expired) throw describeOpenError(path, error, expired ? retryMs : 0);
        await abortableWait(pause, signal);
        pause = Math.min(pause * 2, OPEN_RETRY_MAX_PAUSE_MS);
      }
    }
  } finally {
    clearTimeout(deadline);
  }
  if (options.releaseLines === false) return stream;
  try {
    await releaseLines(stream);
  } catch (error) {
    closeQuietly(stream);
    throw error;
  }
  return stream;
}
