/**
 * esptool's resets and the BOOT click as line steps (data: `runLineSteps` plays them), which
 * reset a port gets into download mode, and esptool's custom reset strings. Each sequence starts
 * and ends with both lines released, so the chip is never left in reset or with GPIO0 held low.
 */
import { SerialError } from '../errors.js';
import {
  type LinePlatform,
  type LineState,
  type LineStep,
  lineWriteOrder,
  MAX_LINE_WAIT_MS,
  SAFE_LINES,
} from '../line-steps.js';
import type { PortKind } from '../port-info.js';

const set = (dtr: boolean, rts: boolean): LineStep =>
  Object.freeze({ set: Object.freeze({ dtr, rts }) });
const wait = (waitMs: number): LineStep => Object.freeze({ waitMs });
const freezeSteps = (steps: LineStep[]): readonly LineStep[] => Object.freeze(steps);

/**
 * esptool's reset strategies. Each sequence starts from {@link SAFE_LINES} (what
 * `openSafely` leaves) and ends there, so the chip is never left in reset or with
 * GPIO0 held low. The `D`/`R` steps of esptool's one-line-at-a-time sequences keep the
 * other line as the previous step left it.
 */
export const RESET_SEQUENCES: Readonly<{
  classic: readonly LineStep[];
  tight: readonly LineStep[];
  usbJtag: readonly LineStep[];
  hard: readonly LineStep[];
  hardUsb: readonly LineStep[];
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
  /**
   * esptool HardReset with `uses_usb` (what the ESP32-C5 asks for on its USB-Serial-JTAG, the
   * chip table's `hardResetUsesUsb`): RTS held 200 ms, then 200 ms more after its release before
   * anything else touches the lines, "to be able to handle further DTR/RTS transitions".
   */
  hardUsb: freezeSteps([
    set(false, true), // EN low (reset), GPIO0 high
    wait(200),
    set(false, false), // EN high: the app boots
    wait(200),
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
