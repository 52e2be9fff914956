/**
 * Which of a remote client's DTR/RTS changes an RFC 2217 server plays as they come, and which
 * it recognises as esptool's reset into download mode and plays itself. Pure: no timers, no
 * I/O; the decisions are data ({@link DOWNLOAD_TRIGGERS}), and time comes in as an argument
 * (`nowMs`), so a state and a command in give a state and an action out.
 *
 * Why: through RFC 2217 each line change is a SET-CONTROL of its own, at least one network
 * round trip after the last (pyserial waits for each answer; with `?ign_set_control` it sleeps
 * 100 ms per change instead, `serial/rfc2217.py` `rfc2217_set_control`), while esptool's reset
 * needs GPIO0 low within a few milliseconds after EN rises (`esptool/reset.py` ClassicReset:
 * the ROM samples GPIO0 as EN's RC delay ends). Played at network pace the chip boots its app.
 * So the server recognises the sequence by its telling changes and plays the local port's own
 * download reset with the right timing, swallowing the rest of the client's sequence, as
 * ESP-IDF's `esp_rfc2217_server` does (`esp_port_manager.py`, which plays UnixTightReset, or
 * ClassicReset on Windows, when DTR is asserted and ignores the changes that follow).
 *
 * Unlike `esp_rfc2217_server`, which replays a download reset on every DTR assertion (a BOOT
 * click or pyserial's default open included) and a hard reset on every RTS release, this tracks
 * what the client means its lines to be (its intent) and acts only on the transitions that only
 * a download reset makes on the kind of port served; everything else reaches the local port as
 * it came, as a plain pass-through bridge would pass it:
 *
 * - On a USB-UART bridge, DTR asserted while the client holds the chip in reset (RTS alone)
 *   is held, not forwarded: if the client's next change releases RTS (ClassicReset's `R0`, the
 *   move that pulls GPIO0 low as EN rises) the download reset plays; if it takes DTR back, or
 *   nothing comes within {@link ARM_HOLD_MS}, what it asked for is forwarded and the chip boots
 *   its app, as through a bridge. So a server that asserts RTS then DTR as a client connects
 *   (pyserial's `rfc2217_server.py` and `esp_rfc2217_server` do) boots the app, not the ROM.
 * - USBJTAGSerialReset's order (DTR released while RTS is held, both having been on) is a
 *   download reset only on a USB-Serial-JTAG port, where the peripheral latches the strap so.
 *   On a bridge it is a plain change: pyserial opens with both lines asserted, and its usual
 *   hard reset after that (`dtr = False; rts = True; sleep; rts = False`) must boot the app.
 * - After a play the client's commands are absorbed until it releases both lines (every esptool
 *   sequence ends so) or {@link ABSORB_WINDOW_MS} passed, whichever comes first: a later hard
 *   reset always reaches the chip.
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

/**
 * How long the client's commands are absorbed after a local play, at most: the longest tail an
 * esptool reset sequence still has after the change that gives it away. ClassicReset and
 * UnixTightReset hold EN low for 100 ms, then GPIO0 low for the reset delay, 50 ms or, on
 * alternate attempts, 550 ms (`esptool/reset.py` `time.sleep(0.1)` and DEFAULT_RESET_DELAY
 * 0.05; `loader.py` adds 0.5 for slow EN circuits): 100 + 550 ms. USBJTAGSerialReset waits 3 ×
 * 100 ms in all. Counted from the play's end, when the client's answers resume: every later
 * change of an esptool sequence comes within it, and anything after it is the client's next
 * action (a hard reset after the flash), which must reach the chip.
 */
export const ABSORB_WINDOW_MS = 100 + 550;

/**
 * How long DTR asserted during a reset is held on a bridge, waiting for the RTS release that
 * makes it ClassicReset. esptool sends that release right after (`reset.py` ClassicReset:
 * `_setDTR(True)` then `_setRTS(False)`, no wait between): one round trip later through a
 * client that waits for answers, 100 ms later through pyserial with `?ign_set_control`. Ten
 * times that pause, so a loaded host does not turn a real ClassicReset into an app boot; a
 * client that meant no reset only finds its chip held in reset that much longer.
 */
export const ARM_HOLD_MS = 1000;

/** What the server does with one line command (or a deadline passing). */
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
   * absorbed until it is played and the client's intent is released again (or the window ends).
   */
  | { readonly kind: 'play'; readonly sequence: 'download'; readonly because: DownloadTrigger }
  /**
   * Play esptool's HardReset on the local port now: an RTS pulse held back on a USB-Serial-JTAG
   * port (see {@link RecognizerOptions.usbSerialJtag}) turned out to be a hard reset.
   */
  | { readonly kind: 'play'; readonly sequence: 'hard' }
  /** Nothing reaches the local port (held, or inside a recognised sequence). */
  | { readonly kind: 'absorb' };

/**
 * `pass`: line commands reach the local port. `holding`: RTS asserted alone, held on a
 * USB-Serial-JTAG port. `arming`: DTR asserted during a reset, held on a bridge. `playing`: a
 * download reset plays locally. `absorbing`: played, but the client is still inside its sequence.
 */
export type RecognizerPhase = 'pass' | 'holding' | 'arming' | 'playing' | 'absorbing';

export interface RecognizerOptions {
  /**
   * The local port is the chip's USB-Serial-JTAG. There RTS alone resets at once and the
   * download strap is latched only by a DTR-asserted state before the reset
   * (reset/sequences.ts, usbJtag), so RTS asserted alone is held back until the next change
   * says which reset it starts: a client's ClassicReset forwarded as it comes (`R1`, then
   * `D1`) would reset the chip without the strap, and Espressif's Python esptool sends
   * ClassicReset to every `rfc2217://` port (`esptool/loader.py`,
   * `_construct_reset_strategy_sequence`), not knowing what is behind it. Held, `D1` next plays
   * the download reset, `R0` next a hard reset. And USBJTAGSerialReset's order is recognised.
   */
  readonly usbSerialJtag?: boolean;
}

export interface RecognizerState {
  /** The lines as the client means them, whatever reached the local port. */
  readonly intent: LineState;
  readonly phase: RecognizerPhase;
  /** RTS was asserted with DTR released, and DTR has not been asserted since. */
  readonly rtsPulse: boolean;
  /** DTR was asserted with RTS released, and RTS has not been asserted since. */
  readonly dtrPulse: boolean;
  /** When `arming` gives up or `absorbing` ends (the caller's clock, ms). */
  readonly until?: number;
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
  /** The local ports it is a download reset on: a USB-UART bridge (or unknown), or a USB-Serial-JTAG. */
  readonly ports: 'bridge' | 'usb-serial-jtag';
  /**
   * Played only once the client's next change goes here (held until then, {@link ARM_HOLD_MS}
   * at most); undefined: played at once.
   */
  readonly confirmedBy?: LineState;
  readonly because: DownloadTrigger;
  /** Where the sequence comes from. */
  readonly source: string;
}

const lines = (dtr: boolean, rts: boolean): LineState => Object.freeze({ dtr, rts });

/**
 * The transitions that start a download reset, per kind of local port. Everything else the
 * client does passes through.
 */
export const DOWNLOAD_TRIGGERS: readonly DownloadTriggerRule[] = Object.freeze([
  Object.freeze({
    // DTR asserted while the client holds the chip in reset (RTS alone), then RTS released:
    // esptool ClassicReset `D0|R1|W0.1|D1|R0|W0.05|D0` (`esptool/reset.py`), whose `D1` lets EN
    // start rising with GPIO0 still high and whose `R0` then pulls GPIO0 low. A client playing
    // UnixTightReset one line at a time gets here too: `U1,0` after `U0,1` is `D1`, `R0`.
    from: lines(false, true),
    to: lines(true, true),
    ports: 'bridge',
    confirmedBy: lines(true, false),
    because: 'classic',
    source: 'esptool reset.py ClassicReset (D1 after R1, then R0)',
  }),
  Object.freeze({
    // The same on a USB-Serial-JTAG, where RTS alone was held back (the chip is not in reset):
    // `D1` is enough.
    from: lines(false, true),
    to: lines(true, true),
    ports: 'usb-serial-jtag',
    because: 'classic',
    source: 'esptool reset.py ClassicReset (D1 after R1)',
  }),
  Object.freeze({
    // Reset while the strap request is set: esptool USBJTAGSerialReset
    // `R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|W0.1|R0|D0` goes from (1,0) to (0,1) through (1,1)
    // ("calls inverted to go through (1,1) instead of (0,0)", `esptool/reset.py`), so DTR is
    // released while RTS is held.
    from: lines(true, true),
    to: lines(false, true),
    ports: 'usb-serial-jtag',
    because: 'usb-jtag',
    source: 'esptool reset.py USBJTAGSerialReset (D0 after R1)',
  }),
]);

const same = (a: LineState, b: LineState): boolean => a.dtr === b.dtr && a.rts === b.rts;
const released = (state: LineState): boolean => !state.dtr && !state.rts;

/**
 * One line command at `nowMs`: the next state and what to do. Give it a state whose deadline
 * has not passed ({@link recognizeDeadline} first). The client's intent always follows its
 * commands; the phase decides whether they reach the local port:
 *
 * - `pass`: a {@link DOWNLOAD_TRIGGERS} transition for this port plays the download reset
 *   (phase `playing`), or, with a `confirmedBy`, holds it (`arming`); anything else is forwarded, a
 *   command that changes nothing too (esptool's `_setRTS` repeats DTR on purpose, for
 *   usbser.sys on Windows). A hard reset (esptool HardReset: `R1`, a wait, `R0`) passes with
 *   EN low for as long as the client holds it, and a BOOT click (`D1`, a wait, `D0`) with
 *   GPIO0 low as long; each is named when its line is released.
 * - `arming`: the rule's `confirmedBy` next plays the download reset; DTR taken back forwards that
 *   (the chip still in reset); a repeat changes nothing.
 * - `holding` (USB-Serial-JTAG only): RTS asserted alone, not yet forwarded; `D1` next is a
 *   download trigger, `R0` next plays a hard reset.
 * - `playing`: absorbed until {@link playFinished}.
 * - `absorbing`: absorbed until the intent is released (0,0) again, which ends the client's
 *   sequence (ClassicReset, UnixTightReset and USBJTAGSerialReset all end there, as the local
 *   reset does, so the local port and the client agree again), or until its deadline.
 */
export function recognizeLineCommand(
  state: RecognizerState,
  command: LineCommand,
  options: RecognizerOptions = {},
  nowMs = 0,
): { readonly state: RecognizerState; readonly action: RecognizerAction } {
  const ports = options.usbSerialJtag === true ? 'usb-serial-jtag' : 'bridge';
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
      // RTS now asserted alone: EN goes low, a reset pulse starts (pyserial's default open
      // asserts both lines; its hard reset then releases DTR first).
      if (intent.rts) rtsPulse = true;
    }
  }
  const next = (phase: RecognizerPhase, until?: number): RecognizerState =>
    Object.freeze({ intent, phase, rtsPulse, dtrPulse, ...(until === undefined ? {} : { until }) });
  const playing = (because: DownloadTrigger) => ({
    state: Object.freeze({ intent, phase: 'playing' as const, rtsPulse: false, dtrPulse: false }),
    action: { kind: 'play' as const, sequence: 'download' as const, because },
  });
  const forward = (phase: RecognizerPhase = 'pass') => ({
    state: next(phase),
    action: {
      kind: 'forward' as const,
      lines: intent,
      ...(recognised === undefined ? {} : { recognised }),
    },
  });

  if (state.phase === 'playing') return { state: next('playing'), action: { kind: 'absorb' } };
  if (state.phase === 'absorbing')
    return released(intent)
      ? { state: next('pass'), action: { kind: 'absorb' } }
      : { state: next('absorbing', state.until), action: { kind: 'absorb' } };
  if (state.phase === 'arming') {
    const rule = DOWNLOAD_TRIGGERS.find(
      (r) => r.ports === ports && r.confirmedBy !== undefined && same(r.to, from),
    );
    if (!changed) return { state: next('arming', state.until), action: { kind: 'absorb' } };
    if (rule?.confirmedBy !== undefined && same(rule.confirmedBy, intent))
      return playing(rule.because);
    // DTR taken back while RTS still holds the chip in reset: as a bridge would have it, the
    // chip never left reset (its reset pulse goes on).
    return forward();
  }
  const trigger = changed
    ? DOWNLOAD_TRIGGERS.find(
        (rule) => rule.ports === ports && same(rule.from, from) && same(rule.to, intent),
      )
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
    ports === 'usb-serial-jtag' &&
    state.phase === 'pass' &&
    changed &&
    released(from) &&
    same(intent, lines(false, true))
  )
    return { state: next('holding'), action: { kind: 'absorb' } };
  if (trigger?.confirmedBy !== undefined)
    return { state: next('arming', nowMs + ARM_HOLD_MS), action: { kind: 'absorb' } };
  if (trigger !== undefined) return playing(trigger.because);
  return forward();
}

/**
 * The state at `nowMs`, a deadline that passed applied: DTR held while `arming` is forwarded
 * as the client left it (no `R0` came: as through a bridge, the chip boots its app), and
 * `absorbing` ends. The action is what the local port must be told, if anything.
 */
export function recognizeDeadline(
  state: RecognizerState,
  nowMs: number,
): { readonly state: RecognizerState; readonly action?: RecognizerAction } {
  if (state.until === undefined || nowMs < state.until) return { state };
  const { intent, rtsPulse, dtrPulse } = state;
  const passing = Object.freeze({ intent, phase: 'pass' as const, rtsPulse, dtrPulse });
  if (state.phase === 'arming')
    return { state: passing, action: { kind: 'forward', lines: intent } };
  return { state: passing };
}

/**
 * The local download reset has been played (or failed) at `nowMs`: the client's commands pass
 * again once its intent is released, or {@link ABSORB_WINDOW_MS} later; until then they are
 * absorbed.
 */
export function playFinished(state: RecognizerState, nowMs = 0): RecognizerState {
  if (state.phase !== 'playing') return state;
  if (released(state.intent)) return Object.freeze({ ...state, phase: 'pass' });
  return Object.freeze({ ...state, phase: 'absorbing', until: nowMs + ABSORB_WINDOW_MS });
}

/**
 * {@link recognizeLineCommand} with its state kept: one per client connection. Times are the
 * caller's clock in ms (the server's `performance.now()`, a test's own count).
 */
export class ResetRecognizer {
  #state: RecognizerState = INITIAL_RECOGNIZER_STATE;
  readonly #options: RecognizerOptions;

  constructor(options: RecognizerOptions = {}) {
    this.#options = options;
  }

  get state(): RecognizerState {
    return this.#state;
  }

  /** When {@link tick} has something to do, if ever. */
  get deadline(): number | undefined {
    return this.#state.until;
  }

  /** What to do for one command: a deadline that passed first (see {@link tick}), then it. */
  command(command: LineCommand, nowMs: number): RecognizerAction[] {
    const actions: RecognizerAction[] = [];
    const due = this.tick(nowMs);
    if (due !== undefined) actions.push(due);
    const { state, action } = recognizeLineCommand(this.#state, command, this.#options, nowMs);
    this.#state = state;
    actions.push(action);
    return actions;
  }

  /** A deadline that passed by `nowMs`: what the local port must be told, if anything. */
  tick(nowMs: number): RecognizerAction | undefined {
    const { state, action } = recognizeDeadline(this.#state, nowMs);
    this.#state = state;
    return action;
  }

  /** See {@link playFinished}. */
  played(nowMs: number): void {
    this.#state = playFinished(this.#state, nowMs);
  }
}
