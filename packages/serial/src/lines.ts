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
 */
import type { BindingInterface } from '@serialport/bindings-cpp';
import { SerialPortStream } from '@serialport/stream';
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
}

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
   * intermediate state between `D` and `R` for a slow host to stretch.
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
 * A BOOT click (docs/protocol.md §9): GPIO0 low for ~100 ms with EN high, then both released.
 * Only for boards whose BOOT button is GPIO0 behind a USB-UART bridge's auto-reset transistors;
 * USB-Serial-JTAG boards cannot be clicked this way.
 */
export const BOOT_CLICK: readonly LineStep[] = freezeSteps([
  set(true, false), // EN high, GPIO0 low: the button is "pressed"
  wait(100),
  set(false, false), // released
]);

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
 * Plays steps in order: one `set()` with both lines per `set` step. When cancelled after a line
 * changed, it sets {@link SAFE_LINES} (best effort) before rejecting with the abort reason, so
 * a cancelled reset does not leave the chip held in reset or with GPIO0 low.
 */
export async function runLineSteps(
  setter: LineSetter,
  steps: readonly LineStep[],
  options: { signal?: AbortSignal; sleep?: (ms: number) => Promise<void> } = {},
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
  let touched = false;
  try {
    for (const step of steps) {
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

/**
 * Adapts a `SerialPortStream` (callback `set`) or a binding port (promise `set`) to a
 * {@link LineSetter} that always writes both lines. A `set()` that neither answers nor fails
 * within `timeoutMs` (default 2000; a wedged or vanished USB device) rejects `PORT_NOT_FOUND`.
 */
export function lineSetterFor(
  port: CallbackSetPort | PromiseSetPort,
  options: { timeoutMs?: number } = {},
): LineSetter {
  const timeoutMs = options.timeoutMs ?? 2000;
  const callSet = port.set as (
    options: { dtr: boolean; rts: boolean },
    callback: (error: Error | null) => void,
  ) => unknown;
  return {
    set(state) {
      return new Promise<void>((resolve, reject) => {
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
    },
  };
}

function describeOpenError(path: string, error: unknown): unknown {
  const message = error instanceof Error ? error.message : String(error);
  if (/lock|busy|resource temporarily unavailable/i.test(message)) {
    return new SerialError('PORT_BUSY', `${path} is in use by another process: ${message}`, {
      cause: error,
    });
  }
  if (/ENOENT|no such file|does not exist/i.test(message)) {
    return new SerialError('PORT_NOT_FOUND', `${path} does not exist: ${message}`, {
      cause: error,
    });
  }
  return error;
}

function closeQuietly(stream: SerialPortStream): void {
  if (stream.isOpen) stream.close(() => undefined);
}

/**
 * Opens a port without disturbing the chip: `hupcl: false` (closing does not drop DTR) and,
 * right after open, one `set()` of {@link SAFE_LINES}. The OS raises both lines on open; both
 * asserted keeps EN and GPIO0 high, so the moment between open and the first `set()` is harmless.
 * Opening is bounded by `timeoutMs` (default 5000). A locked port rejects `PORT_BUSY`, a missing
 * one `PORT_NOT_FOUND`; other errors pass through.
 */
export async function openSafely(
  path: string,
  options: { baudRate: number; binding?: BindingInterface; timeoutMs?: number },
): Promise<SerialPortStream> {
  const timeoutMs = options.timeoutMs ?? 5000;
  // Loaded on demand so that importing this module never loads the native addon.
  const binding: BindingInterface =
    options.binding ?? (await import('@serialport/bindings-cpp')).autoDetect();
  const stream = new SerialPortStream({
    binding,
    path,
    baudRate: options.baudRate,
    hupcl: false,
    autoOpen: false,
  });
  await new Promise<void>((resolve, reject) => {
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
      if (error) reject(describeOpenError(path, error));
      else resolve();
    });
  });
  try {
    await lineSetterFor(stream).set(SAFE_LINES);
  } catch (error) {
    closeQuietly(stream);
    throw error;
  }
  return stream;
}
