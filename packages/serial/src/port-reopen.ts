/**
 * Opening a port again after it went away: a board on native USB re-enumerates under a new path
 * on every chip reset (USB takes 1–3 s to bring it back), a cable glitch drops it for a moment.
 * The device is looked for by its identity and opened, within one budget for both: a port that
 * just came back may refuse opens for a moment (EBUSY while ModemManager probes it, EACCES until
 * udev sets its mode, ENOENT before its node exists) or vanish again before it opened (a board
 * that resets twice). `monitor`, `port serve` and hil's console all follow a board this way.
 */
import type { SerialPortStream } from '@serialport/stream';
import { SerialError } from './errors.js';
import type { PortInfo } from './port-info.js';
import { openSafely } from './port-open.js';
import type { ResolvedPort } from './port-provider.js';

export interface ReopenOptions {
  readonly baudRate: number;
  /** One budget for finding the device and opening it (USB re-enumeration takes 1–3 s). */
  readonly withinMs: number;
  /**
   * Where the port was last: opened first, and looked for again only when it is gone there. A
   * port at a path that is not there is not waited for (a native-USB board comes back elsewhere).
   */
  readonly path?: string;
  readonly signal?: AbortSignal;
  /** Each time the device is found (again), before it is opened. */
  readonly onFound?: (path: string) => void;
}

export interface ReopenedPort {
  readonly stream: SerialPortStream;
  /** Where it opened. */
  readonly path: string;
  /** How many times the device was looked for by its identity (0: it opened where it was). */
  readonly refinds: number;
  /** What the last look found, when it was looked for. */
  readonly info?: PortInfo;
}

/**
 * Opens `port`'s device, at `path` if it is there, else wherever it is found again by its
 * identity (`ResolvedPort.refind`), retrying within `withinMs`: a busy or not yet permitted port
 * is retried (`openSafely`), a port that vanished before it opened is looked for again. Rejects
 * as the last attempt failed: `PORT_NOT_FOUND` when the device did not come back, `PORT_BUSY`
 * when it came back but could not be opened (the message names the path and what it said).
 */
export async function reopenPort(
  port: ResolvedPort,
  options: ReopenOptions,
): Promise<ReopenedPort> {
  const { withinMs, signal } = options;
  if (!Number.isFinite(withinMs) || withinMs < 0)
    throw new SerialError('OPTION_INVALID', `reopenPort withinMs must be >= 0, got ${withinMs}`);
  // A timer rather than a clock says when the budget is spent, so fake timers drive it in tests.
  let expired = false;
  const deadline = setTimeout(() => (expired = true), withinMs);
  const started = performance.now();
  const remaining = () => Math.max(0, withinMs - (performance.now() - started));
  let path = options.path;
  let justFound = false;
  let refinds = 0;
  let info: PortInfo | undefined;
  try {
    for (;;) {
      if (path === undefined) {
        const found = await port.refind(remaining(), signal);
        refinds++;
        path = found.path;
        info = found.info;
        justFound = true;
        options.onFound?.(path);
      }
      try {
        const stream = await openSafely(path, {
          baudRate: options.baudRate,
          binding: port.binding,
          retryMs: remaining(),
          // Where it was last, a missing node means it went elsewhere: look for it at once.
          justFound,
          ...(signal === undefined ? {} : { signal }),
        });
        return { stream, path, refinds, ...(info === undefined ? {} : { info }) };
      } catch (error) {
        // The clock too: a device listed but never openable fails without yielding to timers.
        if (
          expired ||
          remaining() === 0 ||
          signal?.aborted === true ||
          !(error instanceof SerialError) ||
          error.code !== 'PORT_NOT_FOUND'
        )
          throw error;
        path = undefined; // gone (again) before it opened: look for it again
      }
    }
  } finally {
    clearTimeout(deadline);
  }
}
