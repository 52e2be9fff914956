/**
 * Which of a remote client's DTR/RTS changes an RFC 2217 server plays as they come, and which
 * it recognises as esptool's reset into download mode and plays itself. Pure: no timers, no
 * I/O; the decisions are data ({@link DOWNLOAD_TRIGGERS}) and a state in, a state and an action
 * out.
 *
 * Why: through RFC 2217 each line change is a SET-CONTROL of its own, at least one network
 * round trip after the last (pyserial waits for each answer; with `?ign_set_control` it sleeps
 * 100 ms per change instead, `serial/rfc2217.py` `rfc2217_set_control`), while esptool's reset
 * needs GPIO0 low within a few milliseconds after EN rises (`esptool/reset.py` ClassicReset:
 * the ROM samples GPIO0 as EN's RC delay ends). Played at network pace the chip boots its app.
 * So the server recognises the sequence by its first telling change and plays the local port's
 * own download reset with the right timing, swallowing the rest of the client's sequence, as
 * ESP-IDF's `esp_rfc2217_server` does (`esp_port_manager.py`, which plays UnixTightReset, or
 * ClassicReset on Windows, when DTR is asserted and ignores the changes that follow).
 *
 * Unlike `esp_rfc2217_server`, which replays a download reset on every DTR assertion (a BOOT
 * click or pyserial's default open included) and a hard reset on every RTS release, this tracks
 * what the client means its lines to be (its intent) and acts only on the two transitions that
 * only a download reset makes; everything else reaches the local port as it came.
 *
 * Line states are as the client sends them, `true` = asserted; see line-steps.ts for what they do to
 * the chip (RTS alone holds EN low, DTR alone pulls GPIO0 low).
 */
import { type LineState, SAFE_LINES } from '../line-steps.js';

/** One SET-CONTROL line command of the client: DTR or RTS, on (asserted) or off. */
export interface LineCommand {
  readonly line: 'dtr' | 'rts';
  readonly on: boolean;
}

/** Why a download reset was recognised: the transition that gave it away. */
export type DownloadTrigger = 'classic' | 'usb-jtag';

/** What the server does with one line command. */
export type RecognizerAction =
  /**
   * Set the local lines to `lines` now. `recognised` names a sequence that passed through with
   * its natural timing, for the log: `hard` (an RTS pulse without DTR: esptool HardReset),
   * `boot-click` (a DTR pulse without RTS: a BOOT click).
   */
  | {
      readonly kind: 'forward';
      readonly lines: LineState;
      readonly recognised?: 'hard' | 'boot-click';
    }
  /**
   * Play the local port's own reset into download mode now; the client's line commands are
   * absorbed until it is played and the client's intent is released again.
   */
  | { readonly kind: 'play'; readonly sequence: 'download'; readonly because: DownloadTrigger }
  /**
   * Play esptool's HardReset on the local port now: an RTS pulse held back on a USB-Serial-JTAG
   * port (see {@link RecognizerOptions.holdReset}) turned out to be a hard reset.
   */
  | { readonly kind: 'play'; readonly sequence: 'hard' }
  /** Nothing reaches the local port (inside a recognised sequence). */
  | { readonly kind: 'absorb' };

/**
 * `pass`: line commands reach the local port. `playing`: a download reset plays locally.
 * `absorbing`: played, but the client is still inside its sequence.
 */
export type RecognizerPhase = 'pass' | 'holding' | 'playing' | 'absorbing';

export interface RecognizerOptions {
  /**
   * Hold back RTS asserted alone (a reset) until the next change says which reset it starts.
   * For a local USB-Serial-JTAG port: there RTS alone resets at once and the download strap is
   * latched only by a DTR-asserted state before the reset (reset/sequences.ts, usbJtag), so a client's
   * ClassicReset forwarded as it comes (`R1`, then `D1`) would reset the chip without the strap
   * and the local USB-JTAG play could not undo it; Espressif's Python esptool sends ClassicReset
   * to every `rfc2217://` port (`esptool/loader.py`, `_construct_reset_strategy_sequence`), not
   * knowing what is behind it. Held, `D1` next plays the download reset, `R0` next a hard reset.
   */
  readonly holdReset?: boolean;
}

export interface RecognizerState {
  /** The lines as the client means them, whatever reached the local port. */
  readonly intent: LineState;
  readonly phase: RecognizerPhase;
  /** RTS was asserted with DTR released, and DTR has not been asserted since. */
  readonly rtsPulse: boolean;
  /** DTR was asserted with RTS released, and RTS has not been asserted since. */
  readonly dtrPulse: boolean;
}

/** A client that just connected: nothing asserted (what the server leaves between clients). */
export const INITIAL_RECOGNIZER_STATE: RecognizerState = Object.freeze({
  intent: Object.freeze({ ...SAFE_LINES }),
  phase: 'pass',
  rtsPulse: false,
  dtrPulse: false,
});

/** A transition of the client's intent that only a reset into download mode makes. */
export interface DownloadTriggerRule {
  readonly from: LineState;
  readonly to: LineState;
  readonly because: DownloadTrigger;
  /** Where the sequence comes from. */
  readonly source: string;
}

const lines = (dtr: boolean, rts: boolean): LineState => Object.freeze({ dtr, rts });

/**
 * The transitions that start a download reset. Everything else the client does passes through.
 */
export const DOWNLOAD_TRIGGERS: readonly DownloadTriggerRule[] = Object.freeze([
  Object.freeze({
    // DTR asserted while the client holds the chip in reset (RTS alone): esptool ClassicReset
    // `D0|R1|W0.1|D1|R0|W0.05|D0` (`esptool/reset.py`), whose `D1` lets EN start rising with
    // GPIO0 still high and whose `R0` then pulls GPIO0 low. A client playing UnixTightReset one
    // line at a time with RTS first ((0,0) -> (1,1) as R1, D1) gets here too.
    from: lines(false, true),
    to: lines(true, true),
    because: 'classic',
    source: 'esptool reset.py ClassicReset (D1 after R1)',
  }),
  Object.freeze({
    // Reset while the strap request is set: esptool USBJTAGSerialReset
    // `R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|W0.1|R0|D0` goes from (1,0) to (0,1) through (1,1)
    // ("calls inverted to go through (1,1) instead of (0,0)", `esptool/reset.py`), so DTR is
    // released while RTS is held. UnixTightReset one line at a time with DTR first, and
    // ClassicReset from pyserial's default open (both lines asserted, `serial/rfc2217.py`
    // `open`), start the same way.
    from: lines(true, true),
    to: lines(false, true),
    because: 'usb-jtag',
    source: 'esptool reset.py USBJTAGSerialReset (D0 after R1)',
  }),
]);

const same = (a: LineState, b: LineState): boolean => a.dtr === b.dtr && a.rts === b.rts;
const released = (state: LineState): boolean => !state.dtr && !state.rts;

/**
 * One line command: the next state and what to do. The client's intent always follows its
 * commands; the phase decides whether they reach the local port:
 *
 * - `pass`: a {@link DOWNLOAD_TRIGGERS} transition plays the download reset (phase `playing`);
 *   anything else is forwarded, a command that changes nothing too (esptool's `_setRTS`
 *   repeats DTR on purpose, for usbser.sys on Windows). A hard reset (esptool HardReset: `R1`,
 *   a wait, `R0`) passes with EN low for as long as the client holds it, and a BOOT click
 *   (`D1`, a wait, `D0`) with GPIO0 low as long; each is named when its line is released.
 * - `holding` (only with {@link RecognizerOptions.holdReset}): RTS asserted alone, not yet
 *   forwarded; `D1` next is a download trigger, `R0` next plays a hard reset.
 * - `playing`: absorbed until {@link playFinished}.
 * - `absorbing`: absorbed until the intent is released (0,0) again, which ends the client's
 *   sequence: ClassicReset, UnixTightReset and USBJTAGSerialReset all end there, as the local
 *   reset does, so the local port and the client agree again.
 */
export function recognizeLineCommand(
  state: RecognizerState,
  command: LineCommand,
  options: RecognizerOptions = {},
): { readonly state: RecognizerState; readonly action: RecognizerAction } {
  const from = state.intent;
  const intent = command.line === 'dtr' ? lines(command.on, from.rts) : lines(from.dtr, command.on);
  const changed = !same(from, intent);
  // Pulses are followed whatever the phase, so that the log names them only when they passed.
  let rtsPulse = state.rtsPulse;
  let dtrPulse = state.dtrPulse;
  let recognised: 'hard' | 'boot-click' | undefined;
  if (changed && command.line === 'rts') {
    if (command.on) {
      rtsPulse = !intent.dtr;
      dtrPulse = false;
    } else {
      if (rtsPulse) recognised = 'hard';
      rtsPulse = false;
    }
  }
  if (changed && command.line === 'dtr') {
    if (command.on) {
      dtrPulse = !intent.rts;
      rtsPulse = false;
    } else {
      if (dtrPulse) recognised = 'boot-click';
      dtrPulse = false;
    }
  }
  const next = (phase: RecognizerPhase): RecognizerState =>
    Object.freeze({ intent, phase, rtsPulse, dtrPulse });

  if (state.phase === 'playing') return { state: next('playing'), action: { kind: 'absorb' } };
  if (state.phase === 'absorbing')
    return {
      state: next(released(intent) ? 'pass' : 'absorbing'),
      action: { kind: 'absorb' },
    };
  const trigger = changed
    ? DOWNLOAD_TRIGGERS.find((rule) => same(rule.from, from) && same(rule.to, intent))
    : undefined;
  if (state.phase === 'holding' && trigger === undefined) {
    // The held RTS pulse ends without DTR: a hard reset, played here with its timing.
    if (released(intent))
      return {
        state: Object.freeze({ intent, phase: 'playing', rtsPulse: false, dtrPulse: false }),
        action: { kind: 'play', sequence: 'hard' },
      };
    return { state: next('holding'), action: { kind: 'absorb' } };
  }
  if (
    options.holdReset === true &&
    state.phase === 'pass' &&
    changed &&
    released(from) &&
    same(intent, lines(false, true))
  )
    return { state: next('holding'), action: { kind: 'absorb' } };
  if (trigger !== undefined)
    return {
      state: Object.freeze({ intent, phase: 'playing', rtsPulse: false, dtrPulse: false }),
      action: { kind: 'play', sequence: 'download', because: trigger.because },
    };
  return {
    state: next('pass'),
    action: {
      kind: 'forward',
      lines: intent,
      ...(recognised === undefined ? {} : { recognised }),
    },
  };
}

/**
 * The local download reset has been played (or failed): the client's commands pass again once
 * its intent is released; until then they are absorbed.
 */
export function playFinished(state: RecognizerState): RecognizerState {
  if (state.phase !== 'playing') return state;
  return Object.freeze({ ...state, phase: released(state.intent) ? 'pass' : 'absorbing' });
}

/** {@link recognizeLineCommand} with its state kept: one per client connection. */
export class ResetRecognizer {
  #state: RecognizerState = INITIAL_RECOGNIZER_STATE;
  readonly #options: RecognizerOptions;

  constructor(options: RecognizerOptions = {}) {
    this.#options = options;
  }

  get state(): RecognizerState {
    return this.#state;
  }

  command(command: LineCommand): RecognizerAction {
    const { state, action } = recognizeLineCommand(this.#state, command, this.#options);
    this.#state = state;
    return action;
  }

  /** See {@link playFinished}. */
  played(): void {
    this.#state = playFinished(this.#state);
  }
}
