/**
 * DTR/RTS as data, and how a host plays it. On the usual auto-reset circuit (two cross-coupled
 * transistors between a USB-UART bridge and the chip) "asserted" drives the bridge pin low, so:
 *
 * - EN (chip enable) is low, the chip held in reset, only with RTS asserted and DTR released;
 * - GPIO0 (BOOT strap) is low only with DTR asserted and RTS released;
 * - both released or both asserted: EN high and GPIO0 high, the chip runs undisturbed.
 *
 * `serialport`'s `set()` writes every line (a missing one takes its default, asserted), so every
 * step here names both lines and becomes exactly one `set()` (docs/hil.md §6, serial facts that bite).
 * Where the host's `set()` writes the two lines one after the other (Windows), a step that changes
 * both is played as two, through a state chosen so that no ordering resets the chip or drops the
 * download strap by accident ({@link planLineSteps}). The steps themselves (esptool's resets, the
 * BOOT click) are in `reset/sequences.ts`.
 */
import { SerialError } from './errors.js';
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
  /** The lines as last written, when known (a port opened by `openSafely` starts released). */
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
 * per port, the lines it last wrote (what `openSafely` leaves is known). Each `set()` that
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

/**
 * Releases both lines ({@link SAFE_LINES}) in one `set()` through {@link lineSetterFor}, so that
 * later setters of the port know where its lines are: what a freshly opened port gets.
 */
export function releaseLines(port: CallbackSetPort | PromiseSetPort): Promise<void> {
  return lineSetterFor(port).set(SAFE_LINES);
}
