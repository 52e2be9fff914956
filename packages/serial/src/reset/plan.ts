/**
 * Which resets a connect attempt plays: esptool's reset strategies per kind of port and host,
 * cycled over the attempts with the reset delay alternating (`esptool/loader.py`
 * `_construct_reset_strategy_sequence` and `connect`, `esptool/reset.py`). The flasher plays
 * them, and `port serve` plays the local port's own for a client's download reset.
 */
import type { LineStep } from '../line-steps.js';
import type { PortKind } from '../port-info.js';
import { RESET_SEQUENCES } from './sequences.js';
import { isUsbJtagSerialPort } from './usb.js';

/**
 * esptool `reset.py` DEFAULT_RESET_DELAY (0.05 s), how long GPIO0 stays low after EN is
 * released; `loader.py` alternates it with `DEFAULT_RESET_DELAY + 0.5` for slow EN circuits.
 */
export const RESET_DELAYS_MS = [50, 550] as const;

/**
 * How an attempt gets the chip into download mode: esptool's reset strategies (`reset.py`
 * ClassicReset, UnixTightReset, USBJTAGSerialReset, played from {@link RESET_SEQUENCES}), or
 * `none`: nothing is reset, the board must already be in download mode (BOOT held while reset).
 */
export type ResetStrategy = 'classic' | 'tight' | 'usb-jtag' | 'none';

/** One reset of a connect attempt: a sequence and, for classic and tight, GPIO0's delay. */
export interface ResetStep {
  readonly sequence: 'classic' | 'tight' | 'usbJtag';
  readonly delayMs?: number;
}

/**
 * The resets of successive connect attempts, cycled (esptool `loader.py`
 * `_construct_reset_strategy_sequence` and `connect`): USBJTAGSerialReset alone on a
 * USB-Serial-JTAG; on a USB-UART bridge UnixTightReset then ClassicReset on every host but
 * Windows (`os.name != "nt"`), ClassicReset alone on Windows, each with the reset delay 50 ms
 * and then 550 ms. `auto` picks by the port's USB ids, or its `kind` where it has none (an
 * rfc2217:// port: the server's signature says what it shares), and the platform; an explicit
 * strategy keeps esptool's delay alternation; `none` resets nothing.
 */
export function resetPlan(
  strategy: ResetStrategy | 'auto',
  port: {
    readonly usbVendorId?: number | undefined;
    readonly usbProductId?: number | undefined;
    readonly kind?: PortKind | undefined;
  },
  platform: NodeJS.Platform = process.platform,
): readonly ResetStep[] {
  const delayed = (sequence: 'classic' | 'tight'): ResetStep[] =>
    RESET_DELAYS_MS.map((delayMs) => ({ sequence, delayMs }));
  switch (strategy) {
    case 'none':
      return [];
    case 'usb-jtag':
      return [{ sequence: 'usbJtag' }];
    case 'classic':
    case 'tight':
      return delayed(strategy);
    case 'auto':
      if (isUsbJtagSerialPort(port) || port.kind === 'usb-serial-jtag')
        return [{ sequence: 'usbJtag' }];
      return platform === 'win32'
        ? delayed('classic')
        : [...delayed('tight'), ...delayed('classic')];
  }
}

/**
 * A reset sequence with GPIO0's delay set: the wait after the step that releases EN with GPIO0
 * low (DTR asserted, RTS released) is esptool's `reset_delay`.
 */
export function resetSteps(step: ResetStep): readonly LineStep[] {
  const steps = RESET_SEQUENCES[step.sequence];
  if (step.delayMs === undefined) return steps;
  const strap = steps.findLastIndex((s) => 'set' in s && s.set.dtr && !s.set.rts);
  const next = steps[strap + 1];
  if (strap < 0 || next === undefined || !('waitMs' in next)) return steps;
  return steps.map((s, i) => (i === strap + 1 ? { waitMs: step.delayMs ?? next.waitMs } : s));
}

/** How messages name a reset: `tight 550 ms`, `USB-JTAG`. */
export function describeReset(step: ResetStep): string {
  const name = { classic: 'classic', tight: 'tight', usbJtag: 'USB-JTAG' }[step.sequence];
  return step.delayMs === undefined ? name : `${name} ${step.delayMs} ms`;
}
