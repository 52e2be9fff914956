/**
 * DTR/RTS as data: esptool's reset sequences, a BOOT click, and a port opener that leaves the
 * chip alone. On the usual auto-reset circuit (two cross-coupled transistors between a USB-UART
 * bridge and the chip) "asserted" drives the bridge pin low, so:
 *
 * - EN (chip enable) is low, the chip held in reset, only with RTS asserted and DTR released;
 * - GPIO0 (BOOT strap) is low only with DTR asserted and RTS released;
 * - both released or both asserted: EN high and GPIO0 high, the chip runs undisturbed.
 *
 * `serialport`'s `set()` writes every line (a missing one takes its default, asserted), so every
 * step here names both lines and becomes exactly one `set()` (docs/hil.md §6, serial facts that bite).
 * Where the host's `set()` writes the two lines one after the other (Windows), a step that changes
 * both is played as two, through a state chosen so that no ordering resets the chip or drops the
 * download strap by accident ({@link planLineSteps}).
 */
import type { BindingInterface } from '@serialport/bindings-cpp';
import { SerialPortStream } from '@serialport/stream';
import { SerialError } from './errors.js';
import type { PortKind } from './ports.js';
import { abortableWait } from './wait.js';

/** `true` = asserted (the bridge pin driven low). */
export interface LineState {
  dtr: boolean;
  rts: boolean;
}

export type LineStep = { set: LineState } | { waitMs: number };

export interface LineSetter {
  set(state: LineState): Promise<void>;
  /** The host whose `set()` writes these lines (see {@link lineWriteOrder}); default `process.platform`. */
  readonly platform?: LinePlatform;
  /** The lines as last written, when known (a port opened by {@link openSafely} starts released). */
  readonly lines?: LineState | undefined;
}

/** A host OS, as `process.platform` names it. */
export type LinePlatform = NodeJS.Platform;

/** Longest single wait a sequence may hold; esptool's own waits are 50–100 ms. */
export const MAX_LINE_WAIT_MS = 10_000;

/** Both released: EN high, GPIO0 high; neither reset nor download mode. */
export const SAFE_LINES: Readonly<LineState> = Object.freeze({ dtr: false, rts: false });

/** What a line state does to the chip on the usual auto-reset circuit. */
export function pinEffect(state: LineState): { en: 'low' | 'high'; gpio0: 'low' | 'high' } {
  return {
    en: state.rts && !state.dtr ? 'low' : 'high',
    gpio0: state.dtr && !state.rts ? 'low' : 'high',
  };
}

const set = (dtr: boolean, rts: boolean): LineStep =>
  Object.freeze({ set: Object.freeze({ dtr, rts }) });
const wait = (waitMs: number): LineStep => Object.freeze({ waitMs });
const freezeSteps = (steps: LineStep[]): readonly LineStep[] => Object.freeze(steps);

/**
 * esptool's reset strategies. Each sequence starts from {@link SAFE_LINES} (what
 * {@link openSafely} leaves) and ends there, so the chip is never left in reset or with
 * GPIO0 held low. The `D`/`R` steps of esptool's one-line-at-a-time sequences keep the
 * other line as the previous step left it.
 */
export const RESET_SEQUENCES: Readonly<{
  classic: readonly LineStep[];
  tight: readonly LineStep[];
  usbJtag: readonly LineStep[];
  hard: readonly LineStep[];
}> = Object.freeze({
  /**
   * esptool ClassicReset, `D0|R1|W0.1|D1|R0|W0.05|D0`: into the ROM download mode. The
   * `{dtr: true, rts: true}` step between reset and release lets EN start rising through its
   * RC delay while GPIO0 is still high; the next step pulls GPIO0 low before EN gets there.
   */
  classic: freezeSteps([
    set(false, false), // D0: EN high, GPIO0 high
    set(false, true), // R1: EN low (reset)
    wait(100),
    set(true, true), // D1: EN rising (RC), GPIO0 high
    set(true, false), // R0: EN high, GPIO0 low: the ROM samples BOOT low, download mode
    wait(50),
    set(false, false), // D0: GPIO0 released
  ]),
  /**
   * esptool UnixTightReset: both lines change in one `set()` per step, so there is no
   * intermediate state between `D` and `R` for a slow host to stretch. Unix only: a Windows
   * `set()` writes RTS, then DTR, so there {@link planLineSteps} plays each two-line step as two
   * one-line steps, and {@link defaultResetSequence} picks `classic`, as esptool does.
   */
  tight: freezeSteps([
    set(false, false), // EN high, GPIO0 high
    set(true, true), // EN high, GPIO0 high: pins unchanged, kept as esptool has it
    set(false, true), // EN low (reset), GPIO0 high
    wait(100),
    set(true, false), // EN high, GPIO0 low: download mode
    wait(50),
    set(false, false), // GPIO0 released
  ]),
  /**
   * esptool USBJTAGSerialReset, `R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|W0.1|R0|D0`: for the
   * USB-Serial-JTAG peripheral, which reads the CDC line state itself (no transistors): DTR
   * asserted sets the BOOT strap, RTS asserted with DTR released resets. esptool goes from
   * (DTR, RTS) = (1, 0) to (0, 1) through (1, 1), not (0, 0), so the strap is still set when
   * reset begins.
   * The chip re-enumerates afterwards: find its port again by serial number.
   */
  usbJtag: freezeSteps([
    set(false, false), // R0
    set(false, false), // D0: idle
    wait(100),
    set(true, false), // D1: BOOT strap set (GPIO0 low)
    set(true, false), // R0
    wait(100),
    set(true, true), // R1: through (1, 1)
    set(false, true), // D0: reset
    set(false, true), // R1: repeated as esptool does (Windows propagates DTR on RTS writes)
    wait(100),
    set(false, false), // R0: out of reset, download mode
    set(false, false), // D0
  ]),
  /** esptool HardReset: an RTS pulse with GPIO0 high, so the chip reboots into its app. */
  hard: freezeSteps([
    set(false, true), // EN low (reset), GPIO0 high
    wait(100),
    set(false, false), // EN high: the app boots
  ]),
});

export type ResetSequenceName = keyof typeof RESET_SEQUENCES;

/**
 * The reset into download mode esptool picks for a port (`esptool/loader.py`,
 * `_construct_reset_strategy_sequence`): USBJTAGSerialReset on the chip's USB-Serial-JTAG,
 * else UnixTightReset on every host but Windows (`os.name != "nt"`), and ClassicReset on
 * Windows, whose `set()` cannot change both lines at once ({@link lineWriteOrder}).
 */
export function defaultResetSequence(
  kind: PortKind,
  platform: LinePlatform = process.platform,
): ResetSequenceName {
  if (kind === 'usb-serial-jtag') return 'usbJtag';
  return lineWriteOrder(platform) === 'atomic' ? 'tight' : 'classic';
}

/**
 * A BOOT click (docs/protocol.md §9): GPIO0 low for ~100 ms with EN high, then both released.
 * Only for boards whose BOOT button is GPIO0 behind a USB-UART bridge's auto-reset transistors;
 * USB-Serial-JTAG boards cannot be clicked this way.
 */
export const BOOT_CLICK: readonly LineStep[] = freezeSteps([
  set(true, false), // EN high, GPIO0 low: the button is "pressed"
  wait(100),
  set(false, false), // released
]);

/**
 * How one `set()` of `@serialport/bindings-cpp` 13 reaches the two lines. On Unix (Linux, macOS)
 * it reads the modem bits, changes DTR and RTS and writes them back with one
 * `ioctl(TIOCMSET)`: both change at once (`src/serialport_unix.cpp`, `SetBaton::Execute`). On
 * Windows it calls `EscapeCommFunction` once per line, `SETRTS`/`CLRRTS` first, then
 * `SETDTR`/`CLRDTR` (`src/serialport_win.cpp`, `SetBaton::Execute`): between the two calls the
 * chip sees the new RTS with the old DTR.
 */
export function lineWriteOrder(
  platform: LinePlatform = process.platform,
): 'atomic' | 'rts-then-dtr' {
  return platform === 'win32' ? 'rts-then-dtr' : 'atomic';
}

/**
 * Where a change of both lines passes when they can only change one at a time:
 *
 * - between reset (DTR 0, RTS 1) and download strap (1, 0), either way: through (1, 1), as
 *   esptool's ClassicReset (`D1` before `R0`) and USBJTAGSerialReset ("calls inverted to go
 *   through (1,1) instead of (0,0)", `esptool/reset.py`) do. On the auto-reset transistors (1, 1)
 *   and (0, 0) drive the pins alike, but on a USB-Serial-JTAG the CDC state (0, 0) clears the
 *   download strap, so a chip released from reset through it boots its app;
 * - between (0, 0) and (1, 1), either way: through (1, 0). The other way, (0, 1), holds EN low,
 *   a reset pulse on a running chip; (1, 0) pulls GPIO0 low with EN high for as long as one line
 *   write takes, shorter than the firmware's button debounce, and only sets the strap of a
 *   USB-Serial-JTAG, which matters only if a reset follows before both lines are released.
 *
 * Undefined when at most one line changes.
 */
export function safeIntermediate(from: LineState, to: LineState): LineState | undefined {
  if (from.dtr === to.dtr || from.rts === to.rts) return undefined;
  // Both lines flip: (0,1)<->(1,0) when they differ, (0,0)<->(1,1) when they agree.
  return from.dtr !== from.rts ? { dtr: true, rts: true } : { dtr: true, rts: false };
}

/**
 * The `set()` calls that take the lines from `from` to `to` on `platform`: one where the host
 * writes both lines at once or at most one changes; else two, through {@link safeIntermediate},
 * each changing one line, so the host's order of writes cannot matter. With `from` unknown
 * (undefined) there is nothing to plan: one call.
 */
export function planLineChange(
  from: LineState | undefined,
  to: LineState,
  platform: LinePlatform = process.platform,
): LineState[] {
  const target = { dtr: to.dtr, rts: to.rts };
  if (from === undefined || lineWriteOrder(platform) === 'atomic') return [target];
  const via = safeIntermediate(from, to);
  return via === undefined ? [target] : [via, target];
}

/**
 * Line steps as `platform`'s `set()` can play them (see {@link planLineChange}): the same steps
 * where the host writes both lines at once, each two-line step split in two on Windows. `from`
 * is the lines' state before the first step (default unknown: the first step is kept as is).
 */
export function planLineSteps(
  steps: readonly LineStep[],
  options: { platform?: LinePlatform; from?: LineState | undefined } = {},
): LineStep[] {
  const platform = options.platform ?? process.platform;
  let lines = options.from;
  const planned: LineStep[] = [];
  for (const step of steps) {
    if (!('set' in step)) {
      planned.push({ waitMs: step.waitMs });
      continue;
    }
    for (const state of planLineChange(lines, step.set, platform)) planned.push({ set: state });
    lines = { dtr: step.set.dtr, rts: step.set.rts };
  }
  return planned;
}

function invalid(message: string): SerialError {
  return new SerialError('OPTION_INVALID', message);
}

function parseLevel(token: string, value: string): boolean {
  if (value === '0') return false;
  if (value === '1') return true;
  throw invalid(`reset sequence step '${token}': expected 0 or 1 after '${token[0] ?? ''}'`);
}

/**
 * esptool's custom reset string (`--before` config `custom_reset_sequence`): `|`-separated
 * `D0`/`D1` (DTR), `R0`/`R1` (RTS), `W<seconds>` (wait) and `U<dtr>,<rts>` (both at once).
 * Each `D`/`R` step becomes one `set()` of both lines, the other kept from the previous step;
 * lines start at `initial` (default {@link SAFE_LINES}).
 */
export function parseResetSequence(text: string, initial: LineState = SAFE_LINES): LineStep[] {
  const steps: LineStep[] = [];
  let state: LineState = { dtr: initial.dtr, rts: initial.rts };
  const tokens = text.split('|').map((token) => token.trim());
  if (tokens.length === 1 && tokens[0] === '') throw invalid('reset sequence is empty');
  for (const token of tokens) {
    const command = token.slice(0, 1).toUpperCase();
    const argument = token.slice(1).trim();
    if (command === 'D') {
      state = { dtr: parseLevel(token, argument), rts: state.rts };
      steps.push({ set: { ...state } });
    } else if (command === 'R') {
      state = { dtr: state.dtr, rts: parseLevel(token, argument) };
      steps.push({ set: { ...state } });
    } else if (command === 'U') {
      const [dtr, rts, extra] = argument.split(',').map((part) => part.trim());
      if (dtr === undefined || rts === undefined || extra !== undefined) {
        throw invalid(`reset sequence step '${token}': expected U<dtr>,<rts>, e.g. U0,1`);
      }
      state = { dtr: parseLevel(token, dtr), rts: parseLevel(token, rts) };
      steps.push({ set: { ...state } });
    } else if (command === 'W') {
      // Number('') is 0, so an empty argument needs its own check.
      const seconds = argument === '' ? Number.NaN : Number(argument);
      const waitMs = Math.round(seconds * 1000);
      if (!Number.isFinite(seconds) || seconds < 0 || waitMs > MAX_LINE_WAIT_MS) {
        throw invalid(
          `reset sequence step '${token}': expected W<seconds> between 0 and ${MAX_LINE_WAIT_MS / 1000}`,
        );
      }
      steps.push({ waitMs });
    } else {
      throw invalid(
        `reset sequence step '${token}' in '${text}': expected D0/D1, R0/R1, U<dtr>,<rts> or W<seconds>`,
      );
    }
  }
  return steps;
}

/**
 * Plays steps in order: one `set()` with both lines per `set` step, planned for the setter's
 * platform ({@link planLineSteps}: on Windows a step that changes both lines becomes two). When
 * cancelled after a line changed, it sets {@link SAFE_LINES} (best effort) before rejecting
 * with the abort reason, so a cancelled reset does not leave the chip held in reset or with
 * GPIO0 low.
 */
export async function runLineSteps(
  setter: LineSetter,
  steps: readonly LineStep[],
  options: {
    signal?: AbortSignal;
    sleep?: (ms: number) => Promise<void>;
    /** Default the setter's platform, else `process.platform`. */
    platform?: LinePlatform;
  } = {},
): Promise<void> {
  const { signal } = options;
  const sleep = options.sleep ?? ((ms: number) => abortableWait(ms, signal));
  for (const step of steps) {
    if (
      'waitMs' in step &&
      (!Number.isFinite(step.waitMs) || step.waitMs < 0 || step.waitMs > MAX_LINE_WAIT_MS)
    ) {
      throw invalid(`line step wait ${step.waitMs} ms is not between 0 and ${MAX_LINE_WAIT_MS}`);
    }
  }
  const planned = planLineSteps(steps, {
    platform: options.platform ?? setter.platform ?? process.platform,
    from: setter.lines,
  });
  let touched = false;
  try {
    for (const step of planned) {
      signal?.throwIfAborted();
      if ('set' in step) {
        touched = true;
        await setter.set({ dtr: step.set.dtr, rts: step.set.rts });
      } else {
        await sleep(step.waitMs);
      }
    }
    signal?.throwIfAborted();
  } catch (error) {
    if (signal?.aborted && touched) {
      await setter.set({ ...SAFE_LINES }).catch(() => undefined);
    }
    throw error;
  }
}

type CallbackSetPort = {
  set(options: { dtr?: boolean; rts?: boolean }, callback: (error: Error | null) => void): unknown;
};
type PromiseSetPort = { set(options: { dtr?: boolean; rts?: boolean }): Promise<void> };

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/** The lines each port was last set to through {@link lineSetterFor}, while known. */
const knownLines = new WeakMap<object, LineState>();

/**
 * Adapts a `SerialPortStream` (callback `set`) or a binding port (promise `set`) to a
 * {@link LineSetter} that always writes both lines. On a host whose `set()` writes one line after
 * the other (`platform`, default `process.platform`; see {@link lineWriteOrder}), a change of
 * both lines becomes two `set()` calls through {@link safeIntermediate}; for that it remembers,
 * per port, the lines it last wrote (what {@link openSafely} leaves is known). Each `set()` that
 * neither answers nor fails within `timeoutMs` (default 2000; a wedged or vanished USB device)
 * rejects `PORT_NOT_FOUND`.
 */
export function lineSetterFor(
  port: CallbackSetPort | PromiseSetPort,
  options: { timeoutMs?: number; platform?: LinePlatform } = {},
): LineSetter {
  const timeoutMs = options.timeoutMs ?? 2000;
  const platform = options.platform ?? process.platform;
  const callSet = port.set as (
    options: { dtr: boolean; rts: boolean },
    callback: (error: Error | null) => void,
  ) => unknown;
  const write = (state: LineState): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      let settled = false;
      const finish = (error: unknown): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (error) reject(error);
        else resolve();
      };
      const timer = setTimeout(() => {
        finish(
          new SerialError(
            'PORT_NOT_FOUND',
            `set(${JSON.stringify(state)}) did not complete within ${timeoutMs} ms (unplugged or re-enumerating?)`,
          ),
        );
      }, timeoutMs);
      try {
        // A callback-style set ignores the promise path and vice versa; whichever answers first wins.
        const result = callSet.call(port, { dtr: state.dtr, rts: state.rts }, (error) =>
          finish(error),
        );
        if (isThenable(result)) {
          result.then(
            () => finish(null),
            (error: unknown) => finish(error ?? new Error('set() failed')),
          );
        }
      } catch (error) {
        finish(error);
      }
    });
  return {
    platform,
    get lines() {
      const lines = knownLines.get(port);
      return lines === undefined ? undefined : { ...lines };
    },
    async set(state) {
      for (const next of planLineChange(knownLines.get(port), state, platform)) {
        try {
          await write(next);
        } catch (error) {
          knownLines.delete(port); // half-applied, or not at all: no longer known
          throw error;
        }
        knownLines.set(port, { dtr: next.dtr, rts: next.rts });
      }
    },
  };
}

/** Why an open failed, as far as retrying goes. */
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
  if (/cannot lock|port is locked|resource temporarily unavailable/i.test(message)) return 'locked';
  // open() refused with EBUSY: another program opened it exclusively (TIOCEXCL), e.g. ModemManager
  // probing a port that just appeared.
  if (code === 'EBUSY' || /EBUSY|device or resource busy/i.test(message)) return 'busy';
  // EACCES: udev has not applied the group and mode of a node that just appeared (or the user is
  // not in its group). Windows says "Access denied" while another program has the port open.
  if (code === 'EACCES' || /EACCES|permission denied|access denied/i.test(message)) return 'denied';
  if (code === 'ENOENT' || /ENOENT|no such file|does not exist|file not found/i.test(message))
    return 'missing';
  if (/busy/i.test(message)) return 'locked';
  return 'other';
}

function describeOpenError(path: string, error: unknown, retriedMs: number): unknown {
  const message = error instanceof Error ? error.message : String(error);
  const after =
    retriedMs > 0 ? ` (still, after retrying for ${Number((retriedMs / 1000).toFixed(1))} s)` : '';
  switch (classifyOpenError(error)) {
    case 'locked':
      return new SerialError('PORT_BUSY', `${path} is in use by another process: ${message}`, {
        cause: error,
      });
    case 'busy':
      return new SerialError(
        'PORT_BUSY',
        `${path} is busy${after}: ${message}; another program has it open (on Linux, ModemManager probes new USB serial ports for a few seconds: stop it, or tag the board ID_MM_DEVICE_IGNORE in a udev rule)`,
        { cause: error },
      );
    case 'denied':
      return new SerialError(
        'PORT_BUSY',
        `${path}: permission denied${after}: ${message}; on Linux, join the port's group (dialout or uucp) or add a udev rule; on Windows, close the program that has the port open`,
        { cause: error },
      );
    case 'missing':
      return new SerialError('PORT_NOT_FOUND', `${path} does not exist${after}: ${message}`, {
        cause: error,
      });
    default:
      return error;
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
}

/** One open attempt, bounded by `timeoutMs`. */
function openOnce(
  path: string,
  binding: BindingInterface,
  options: OpenSafelyOptions,
  timeoutMs: number,
): Promise<SerialPortStream> {
  const stream = new SerialPortStream({
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
 * right after open, one `set()` of {@link SAFE_LINES}. The OS raises both lines on open; both
 * asserted keeps EN and GPIO0 high, so the moment between open and the first `set()` is harmless.
 * Each attempt is bounded by `timeoutMs` (default 5000). A port refused as busy or not permitted
 * is retried for `retryMs` (default {@link OPEN_RETRY_MS}), a missing one too when `justFound`.
 * Then a locked, busy or refused port rejects `PORT_BUSY`, a missing one `PORT_NOT_FOUND`, each
 * saying what to do; other errors pass through.
 */
export async function openSafely(
  path: string,
  options: OpenSafelyOptions,
): Promise<SerialPortStream> {
  const timeoutMs = options.timeoutMs ?? 5000;
  const retryMs = options.retryMs ?? OPEN_RETRY_MS;
  const { signal } = options;
  if (!Number.isFinite(retryMs) || retryMs < 0)
    throw invalid(`openSafely retryMs must be finite and >= 0, got ${retryMs}`);
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
  try {
    await lineSetterFor(stream).set(SAFE_LINES);
  } catch (error) {
    closeQuietly(stream);
    throw error;
  }
  return stream;
}
