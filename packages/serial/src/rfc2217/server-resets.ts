/**
 * How the client's DTR/RTS reach a server that plays esptool's resets itself instead of passing
 * line changes: Espressif's `esp_rfc2217_server` (`esp_port_manager.py`, `EspPortManager`). Its
 * rules, read from v4.12:
 *
 * - `DTR off`: clears its download-mode flag and sets the port's DTR off;
 * - `DTR on` outside download mode: sets the flag and plays esptool's reset into download mode
 *   on its own port (UnixTightReset, ClassicReset on Windows, or the configured custom one);
 * - `RTS off` outside download mode: plays esptool's HardReset (RTS on, 100 ms, RTS off);
 * - any other DTR/RTS change (`RTS on` always, all of them in download mode) is dropped;
 * - none of these is answered (pyserial's `?ign_set_control` exists for that); flow control,
 *   break and purge go to pyserial's `PortManager`, which answers them.
 *
 * A client that sends its lines as they change resets the board at every open (the release
 * after open is an `RTS off`) and turns a BOOT click into a download reset. So the caller's line
 * states (`set()` as `runLineSteps` plays esptool's sequences) are mapped to the few commands
 * that mean a reset there, in a form a plain `PortManager` (pyserial's `rfc2217_server.py`,
 * which passes every change, and like esp_rfc2217_server asserts both lines when a client
 * connects) plays as the same reset:
 *
 * - a download reset (DTR asserted: ClassicReset's `D1`, UnixTightReset's first step,
 *   USBJTAGSerialReset's `D1`): `DTR off`, `RTS on`, 100 ms, `DTR on`, `RTS off`: esptool
 *   ClassicReset's `D0|R1|W0.1|D1|R0` (`esptool/reset.py`), then a wait for the server's own
 *   reset to be over ({@link SERVER_RESET_PLAY_MS}). esp_rfc2217_server: the `DTR off` clears a
 *   download mode left by an earlier attempt, `DTR on` plays its reset, the rest is dropped; a
 *   plain server: ClassicReset. The caller's sequence is then absorbed until it releases both
 *   lines. Its final `D0` is not sent: esp_rfc2217_server would set DTR off while its reset
 *   still runs; the next reset's `DTR off` sends it.
 * - a hard reset (RTS asserted alone, then released): `DTR off`, `RTS on`, then at the release
 *   `RTS off`: esp_rfc2217_server plays HardReset (its download mode cleared by the `DTR off`,
 *   its DTR off so that RTS reaches EN); a plain server holds EN low for as long as the caller
 *   does.
 * - anything else (a release after open, a BOOT click's `D1` is a download reset here: callers
 *   refuse a BOOT click on such a port) sends nothing.
 *
 * Pure: a state and the caller's wanted lines in, a state and the commands to send out.
 */
import { type LineState, SAFE_LINES } from '../line-steps.js';

/** One step on the wire: a SET-CONTROL line command, or a wait. */
export type ServerResetStep =
  | { readonly line: 'dtr' | 'rts'; readonly on: boolean }
  | { readonly waitMs: number };

/**
 * `pass`: nothing under way. `reset`: RTS asserted alone sent (EN low on a plain server).
 * `download`: a download reset sent; the caller's sequence is absorbed until it releases.
 */
export type ServerResetPhase = 'pass' | 'reset' | 'download';

export interface ServerResetState {
  /** The lines as the caller means them. */
  readonly intent: LineState;
  readonly phase: ServerResetPhase;
}

/**
 * A connection just made: nothing asked yet, and nothing to send for a release (the server
 * leaves the chip running as a client connects).
 */
export const INITIAL_SERVER_RESET_STATE: ServerResetState = Object.freeze({
  intent: Object.freeze({ ...SAFE_LINES }),
  phase: 'pass',
});

/** esptool ClassicReset's time in reset before `D1` (`reset.py`: `time.sleep(0.1)`). */
export const SERVER_RESET_HOLD_MS = 100;

/**
 * How long the server's own reset into download mode may take after `DTR on`, waited for before
 * the caller goes on to sync: esp_rfc2217_server plays UnixTightReset (or ClassicReset): 100 ms
 * in reset, then GPIO0 low for the reset delay, DEFAULT_RESET_DELAY 0.05 s, or 0.55 s with its
 * `--r0` (`esp_port_manager.py`, `esptool/reset.py`). A SYNC sent sooner reaches a chip still in
 * reset and is lost; esptool itself, through pyserial's `?ign_set_control` pauses (100 ms per
 * line change), syncs about that late.
 */
export const SERVER_RESET_PLAY_MS = 100 + 550;

const DTR_OFF: ServerResetStep = Object.freeze({ line: 'dtr', on: false });
const DTR_ON: ServerResetStep = Object.freeze({ line: 'dtr', on: true });
const RTS_OFF: ServerResetStep = Object.freeze({ line: 'rts', on: false });
const RTS_ON: ServerResetStep = Object.freeze({ line: 'rts', on: true });

/** What to send for the caller's next line state (see the module's comment). */
export function planServerReset(
  state: ServerResetState,
  want: LineState,
): { readonly state: ServerResetState; readonly steps: readonly ServerResetStep[] } {
  const from = state.intent;
  const intent = Object.freeze({ dtr: want.dtr, rts: want.rts });
  const released = !intent.dtr && !intent.rts;
  const next = (phase: ServerResetPhase) => Object.freeze({ intent, phase });
  const dtrAsserted = intent.dtr && !from.dtr;
  switch (state.phase) {
    case 'download':
      return { state: next(released ? 'pass' : 'download'), steps: [] };
    case 'reset':
      // ClassicReset's D1: the chip is already in reset (on a plain server).
      if (dtrAsserted)
        return {
          state: next('download'),
          steps: [DTR_ON, RTS_OFF, { waitMs: SERVER_RESET_PLAY_MS }],
        };
      if (!intent.rts) return { state: next('pass'), steps: [RTS_OFF] };
      return { state: next('reset'), steps: [] };
    case 'pass':
      if (dtrAsserted)
        return {
          state: next('download'),
          steps: [
            DTR_OFF,
            RTS_ON,
            { waitMs: SERVER_RESET_HOLD_MS },
            DTR_ON,
            RTS_OFF,
            { waitMs: SERVER_RESET_PLAY_MS },
          ],
        };
      if (intent.rts && !from.rts && !intent.dtr)
        return { state: next('reset'), steps: [DTR_OFF, RTS_ON] };
      return { state: next('pass'), steps: [] };
  }
}
