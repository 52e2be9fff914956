import { describe, expect, it } from 'vitest';
import {
  ABSORB_WINDOW_MS,
  ARM_HOLD_MS,
  DOWNLOAD_TRIGGERS,
  INITIAL_RECOGNIZER_STATE,
  type LineCommand,
  playFinished,
  type RecognizerAction,
  type RecognizerOptions,
  ResetRecognizer,
  recognizeDeadline,
  recognizeLineCommand,
} from './reset-recognizer.js';

/**
 * A client's line commands in esptool's custom reset notation (`esptool/reset.py` CustomReset):
 * `D0`/`D1` one SET-CONTROL for DTR, `R0`/`R1` one for RTS; `W<seconds>` a wait (time passes:
 * the server's deadline timer fires during it); `P` (ours) is the server reporting that its
 * local play ended.
 */
type Token = LineCommand | 'played' | { readonly waitMs: number };
function tokens(text: string): Token[] {
  const out: Token[] = [];
  for (const token of text.split('|')) {
    if (token.startsWith('W')) out.push({ waitMs: Math.round(Number(token.slice(1)) * 1000) });
    else if (token === 'P') out.push('played');
    else if (/^[DR][01]$/.test(token))
      out.push({ line: token[0] === 'D' ? 'dtr' : 'rts', on: token[1] === '1' });
    else throw new Error(`bad token ${token}`);
  }
  return out;
}

/**
 * The actions the recognizer answers each line command with, and those its deadline gives as
 * time passes in a wait (a `P` answers nothing). The clock is the test's own count.
 */
function run(
  text: string,
  options: RecognizerOptions = {},
): { actions: RecognizerAction[]; phase: string } {
  const recognizer = new ResetRecognizer(options);
  const actions: RecognizerAction[] = [];
  let now = 0;
  for (const token of tokens(text)) {
    if (token === 'played') recognizer.played(now);
    else if ('waitMs' in token) {
      now += token.waitMs;
      const due = recognizer.tick(now);
      if (due !== undefined) actions.push(due);
    } else actions.push(...recognizer.command(token, now));
  }
  return { actions, phase: recognizer.state.phase };
}

const fwd = (dtr: 0 | 1, rts: 0 | 1, recognised?: 'hard' | 'boot-click'): RecognizerAction => ({
  kind: 'forward',
  lines: { dtr: dtr === 1, rts: rts === 1 },
  ...(recognised === undefined ? {} : { recognised }),
});
const play = (because: 'classic' | 'usb-jtag'): RecognizerAction => ({
  kind: 'play',
  sequence: 'download',
  because,
});
const absorb: RecognizerAction = { kind: 'absorb' };

describe('ResetRecognizer on a USB-UART bridge: client sequences, one SET-CONTROL at a time', () => {
  const table: { name: string; sequence: string; actions: RecognizerAction[]; phase?: string }[] = [
    {
      // esptool ClassicReset as its CustomReset string: D1 is held until R0 makes it a
      // download reset; the play ends while GPIO0 is held.
      name: 'ClassicReset D0|R1|W0.1|D1|R0|W0.05|D0, played before the final D0',
      sequence: 'D0|R1|W0.1|D1|R0|P|W0.05|D0',
      actions: [fwd(0, 0), fwd(0, 1), absorb, play('classic'), absorb],
    },
    {
      name: 'ClassicReset, played after the client finished',
      sequence: 'D0|R1|W0.1|D1|R0|W0.05|D0|P',
      actions: [fwd(0, 0), fwd(0, 1), absorb, play('classic'), absorb],
    },
    {
      // What esptool really sends: its _setRTS repeats DTR (a usbser.sys work-around).
      name: "ClassicReset through esptool's _setRTS (DTR repeated after each RTS)",
      sequence: 'D0|R1|D0|W0.1|D1|R0|D1|P|W0.05|D0',
      actions: [fwd(0, 0), fwd(0, 1), fwd(0, 1), absorb, play('classic'), absorb, absorb],
    },
    {
      // esptool on Linux opens an rfc2217:// port with pyserial's defaults (DTR, RTS on); its
      // D0 then starts the reset, as it would through a bridge.
      name: "ClassicReset after pyserial's default open (DTR_ON, then RTS_ON)",
      sequence: 'D1|R1|D0|R1|W0.1|D1|R0|P|W0.05|D0',
      actions: [fwd(1, 0), fwd(1, 1), fwd(0, 1), fwd(0, 1), absorb, play('classic'), absorb],
    },
    {
      // The usual hard reset right after pyserial's default open: the app boots, as through a
      // plain bridge (USBJTAGSerialReset's order means nothing on a bridge).
      name: "pyserial's default open, then dtr=False; rts=True; sleep(0.1); rts=False",
      sequence: 'D1|R1|D0|R1|W0.1|R0',
      actions: [fwd(1, 0), fwd(1, 1), fwd(0, 1), fwd(0, 1), fwd(0, 0, 'hard')],
    },
    {
      name: 'both lines toggled together, DTR first, and back: plain changes',
      sequence: 'D1|R1|W0.5|D0|R0',
      actions: [fwd(1, 0), fwd(1, 1), fwd(0, 1), fwd(0, 0, 'hard')],
    },
    {
      // A server asserting RTS, then DTR, as a client connects (pyserial's rfc2217_server.py,
      // esp_rfc2217_server): no R0 follows, so the chip boots its app once the hold ends.
      name: 'RTS then DTR asserted and left so: held, then forwarded as a bridge would',
      sequence: 'R1|D1|W1.5',
      actions: [fwd(0, 1), absorb, fwd(1, 1)],
    },
    {
      // ... and a hard reset through esp_rfc2217_server while it is held: DTR taken back keeps
      // the chip in reset, the RTS release boots it.
      name: 'RTS then DTR, then DTR taken back within the hold, then a hard reset',
      sequence: 'R1|D1|W0.2|D0|R1|D0|W0.1|R0|D0',
      actions: [fwd(0, 1), absorb, fwd(0, 1), fwd(0, 1), fwd(0, 1), fwd(0, 0, 'hard'), fwd(0, 0)],
    },
    {
      name: 'USBJTAGSerialReset on a bridge is a plain sequence (a hard reset at its end)',
      sequence: 'R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|W0.1|R0|D0',
      actions: [
        fwd(0, 0),
        fwd(0, 0),
        fwd(1, 0),
        fwd(1, 0),
        fwd(1, 1),
        fwd(0, 1),
        fwd(0, 1),
        fwd(0, 0, 'hard'),
        fwd(0, 0),
      ],
    },
    {
      name: 'HardReset R1|W0.1|R0: passes with its own timing, named hard',
      sequence: 'R1|W0.1|R0',
      actions: [fwd(0, 1), fwd(0, 0, 'hard')],
    },
    {
      name: "HardReset through esptool's _setRTS",
      sequence: 'R1|D0|W0.1|R0|D0',
      actions: [fwd(0, 1), fwd(0, 1), fwd(0, 0, 'hard'), fwd(0, 0)],
    },
    {
      name: 'a BOOT click D1|W0.1|D0 passes, named boot-click',
      sequence: 'D1|W0.1|D0',
      actions: [fwd(1, 0), fwd(0, 0, 'boot-click')],
    },
    {
      // UnixTightReset (0,0) (1,1) (0,1) W (1,0) W (0,0), each step as DTR then RTS: its
      // U1,0 after U0,1 is ClassicReset's D1, R0.
      name: 'UnixTightReset one line at a time, DTR first',
      sequence: 'D0|R0|D1|R1|D0|R1|W0.1|D1|R0|P|W0.05|D0|R0',
      actions: [
        fwd(0, 0),
        fwd(0, 0),
        fwd(1, 0),
        fwd(1, 1),
        fwd(0, 1),
        fwd(0, 1),
        absorb,
        play('classic'),
        absorb,
        fwd(0, 0),
      ],
    },
    {
      // RTS first, U1,0 after U0,1 releases EN before GPIO0 goes low: through a bridge the
      // chip boots its app, and so it does here.
      name: 'UnixTightReset one line at a time, RTS first: EN released first, the app boots',
      sequence: 'R0|D0|R1|D1|R1|D0|W0.1|R0|D1|W0.05|R0|D0',
      actions: [
        fwd(0, 0),
        fwd(0, 0),
        fwd(0, 1),
        absorb,
        absorb,
        fwd(0, 1),
        fwd(0, 0, 'hard'),
        fwd(1, 0),
        fwd(1, 0),
        fwd(0, 0, 'boot-click'),
      ],
    },
    {
      name: "pyserial's default open: DTR_ON, then RTS_ON, both passed",
      sequence: 'D1|R1',
      actions: [fwd(1, 0), fwd(1, 1)],
    },
    {
      name: 'released again RTS first after the default open: no reset, nothing named',
      sequence: 'D1|R1|R0|D0',
      actions: [fwd(1, 0), fwd(1, 1), fwd(1, 0), fwd(0, 0)],
    },
    {
      name: 'garbage: repeats and pulses in odd orders',
      sequence: 'R1|R1|D0|R0|R0|D1|D1|D0|R1|R0|R0',
      actions: [
        fwd(0, 1),
        fwd(0, 1),
        fwd(0, 1),
        fwd(0, 0, 'hard'),
        fwd(0, 0),
        fwd(1, 0),
        fwd(1, 0),
        fwd(0, 0, 'boot-click'),
        fwd(0, 1),
        fwd(0, 0, 'hard'),
        fwd(0, 0),
      ],
    },
    {
      // A trigger inside the recognised sequence is part of it, not a second reset.
      name: 'garbage: a trigger while absorbing plays nothing more',
      sequence: 'R1|D1|R0|P|R1|D0|D1|R0|D0|R0',
      actions: [
        fwd(0, 1),
        absorb,
        play('classic'),
        ...Array<RecognizerAction>(5).fill(absorb),
        // Released by the D0 before it: the sequence is over.
        fwd(0, 0),
      ],
    },
    {
      name: 'garbage: a client that never releases is absorbed within the window only',
      sequence: 'R1|D1|R0|P|R1|R0|W0.7|R1|W0.1|R0',
      actions: [fwd(0, 1), absorb, play('classic'), absorb, absorb, fwd(1, 1), fwd(1, 0)],
    },
    {
      name: 'garbage: a client still holding reset when the play ends',
      sequence: 'R1|D1|R0|R1|D0|P|R0|R1',
      actions: [fwd(0, 1), absorb, play('classic'), absorb, absorb, absorb, fwd(0, 1)],
    },
  ];

  for (const row of table)
    it(row.name, () => {
      const result = run(row.sequence);
      expect(result.actions).toEqual(row.actions);
      expect(result.phase).toBe(row.phase ?? 'pass');
    });

  it('after a download reset, a hard reset reaches the chip once the window is over, though the client never released both lines', () => {
    // pyserial's default open (both on), a ClassicReset left without its final D0 (as a
    // client that kept DTR asserted), then HardReset: R1 (no change), wait, R0.
    const { actions } = run(`D1|R1|D0|W0.1|D1|R0|P|W${ABSORB_WINDOW_MS / 1000}|D1|R1|D0|W0.1|R0`);
    expect(actions.slice(-4)).toEqual([fwd(1, 0), fwd(1, 1), fwd(0, 1), fwd(0, 0, 'hard')]);
  });
});

describe('recognizeLineCommand and recognizeDeadline (pure)', () => {
  it('starts released and passing, and never changes the state it is given', () => {
    expect(INITIAL_RECOGNIZER_STATE).toEqual({
      intent: { dtr: false, rts: false },
      phase: 'pass',
      rtsPulse: false,
      dtrPulse: false,
    });
    const before = JSON.stringify(INITIAL_RECOGNIZER_STATE);
    const { state, action } = recognizeLineCommand(INITIAL_RECOGNIZER_STATE, {
      line: 'rts',
      on: true,
    });
    expect(JSON.stringify(INITIAL_RECOGNIZER_STATE)).toBe(before);
    expect(state.intent).toEqual({ dtr: false, rts: true });
    expect(action).toEqual({ kind: 'forward', lines: { dtr: false, rts: true } });
  });

  it('the triggers are the transitions of esptool download resets, per kind of port, as literals', () => {
    const pair = (s: { dtr: boolean; rts: boolean } | undefined) =>
      s === undefined ? undefined : [Number(s.dtr), Number(s.rts)];
    expect(
      DOWNLOAD_TRIGGERS.map((rule) => [
        rule.ports,
        pair(rule.from),
        pair(rule.to),
        pair(rule.confirmedBy),
        rule.because,
      ]),
    ).toEqual([
      ['bridge', [0, 1], [1, 1], [1, 0], 'classic'],
      ['usb-serial-jtag', [0, 1], [1, 1], undefined, 'classic'],
      ['usb-serial-jtag', [1, 1], [0, 1], undefined, 'usb-jtag'],
    ]);
  });

  it('the bounds come from esptool reset sequences: 100 ms in reset, then 550 ms of reset delay', () => {
    // esptool/reset.py ClassicReset: `time.sleep(0.1)`, then `time.sleep(self.reset_delay)`;
    // DEFAULT_RESET_DELAY = 0.05, and loader.py adds 0.5 on alternate attempts.
    expect(ABSORB_WINDOW_MS).toBe(650);
    // Ten times pyserial's pause after a SET-CONTROL with ?ign_set_control (rfc2217.py: 0.1 s).
    expect(ARM_HOLD_MS).toBe(1000);
  });

  it('a held DTR is forwarded at its deadline, not before; an absorbing window ends at its own', () => {
    let state = INITIAL_RECOGNIZER_STATE;
    state = recognizeLineCommand(state, { line: 'rts', on: true }, {}, 0).state;
    const armed = recognizeLineCommand(state, { line: 'dtr', on: true }, {}, 10);
    expect(armed.action).toEqual(absorb);
    expect(armed.state).toMatchObject({ phase: 'arming', until: 10 + ARM_HOLD_MS });
    expect(recognizeDeadline(armed.state, 10 + ARM_HOLD_MS - 1)).toEqual({ state: armed.state });
    expect(recognizeDeadline(armed.state, 10 + ARM_HOLD_MS)).toEqual({
      state: { intent: { dtr: true, rts: true }, phase: 'pass', rtsPulse: false, dtrPulse: false },
      action: fwd(1, 1),
    });
    const played = recognizeLineCommand(armed.state, { line: 'rts', on: false }, {}, 20);
    expect(played.action).toEqual(play('classic'));
    const absorbing = playFinished(played.state, 500);
    expect(absorbing).toMatchObject({ phase: 'absorbing', until: 500 + ABSORB_WINDOW_MS });
    expect(recognizeDeadline(absorbing, 500 + ABSORB_WINDOW_MS)).toEqual({
      state: { intent: { dtr: true, rts: false }, phase: 'pass', rtsPulse: false, dtrPulse: false },
    });
  });

  it('playFinished outside a play changes nothing', () => {
    expect(playFinished(INITIAL_RECOGNIZER_STATE, 0)).toBe(INITIAL_RECOGNIZER_STATE);
  });
});

describe('ResetRecognizer on a USB-Serial-JTAG port', () => {
  const jtag = (text: string) => run(text, { usbSerialJtag: true });
  const hard: RecognizerAction = { kind: 'play', sequence: 'hard' };

  it("holds ClassicReset's R1 (never forwarded), then plays the download reset at D1", () => {
    // What Python esptool sends to every rfc2217:// port: without the hold, R1 would reset the
    // chip with no download strap latched, and it would boot its app.
    expect(jtag('D0|R1|W0.1|D1|R0|P|W0.05|D0')).toEqual({
      actions: [fwd(0, 0), absorb, play('classic'), absorb, absorb],
      phase: 'pass',
    });
  });

  it('holds HardReset R1|W0.1|R0 and plays it at R0', () => {
    expect(jtag('R1|W0.1|R0|P')).toEqual({ actions: [absorb, hard], phase: 'pass' });
  });

  it('plays USBJTAGSerialReset R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|W0.1|R0|D0 at its D0 after R1', () => {
    expect(jtag('R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|P|W0.1|R0|D0')).toEqual({
      actions: [
        fwd(0, 0),
        fwd(0, 0),
        fwd(1, 0),
        fwd(1, 0),
        fwd(1, 1),
        play('usb-jtag'),
        absorb,
        // The client's intent was released by R0: its last D0 passes, as it changes nothing.
        absorb,
        fwd(0, 0),
      ],
      phase: 'pass',
    });
  });

  it('leaves a BOOT click and RTS with DTR already on as they were', () => {
    expect(jtag('D1|W0.1|D0').actions).toEqual([fwd(1, 0), fwd(0, 0, 'boot-click')]);
    expect(jtag('D1|R1').actions).toEqual([fwd(1, 0), fwd(1, 1)]);
  });

  it('on a bridge, R1 alone is forwarded at once (EN low is a reset there)', () => {
    expect(run('R1|W0.1|R0').actions).toEqual([fwd(0, 1), fwd(0, 0, 'hard')]);
  });
});
