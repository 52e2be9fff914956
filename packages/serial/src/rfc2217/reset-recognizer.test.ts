import { describe, expect, it } from 'vitest';
import {
  DOWNLOAD_TRIGGERS,
  INITIAL_RECOGNIZER_STATE,
  type LineCommand,
  playFinished,
  type RecognizerAction,
  ResetRecognizer,
  recognizeLineCommand,
} from './reset-recognizer.js';

/**
 * A client's line commands in esptool's custom reset notation (`esptool/reset.py` CustomReset):
 * `D0`/`D1` one SET-CONTROL for DTR, `R0`/`R1` one for RTS; `W...` waits (nothing reaches the
 * server); `P` (ours) is the server reporting that its local play ended.
 */
type Token = LineCommand | 'played';
function tokens(text: string): Token[] {
  const out: Token[] = [];
  for (const token of text.split('|')) {
    if (token.startsWith('W')) continue;
    if (token === 'P') out.push('played');
    else if (/^[DR][01]$/.test(token))
      out.push({ line: token[0] === 'D' ? 'dtr' : 'rts', on: token[1] === '1' });
    else throw new Error(`bad token ${token}`);
  }
  return out;
}

/** The actions the recognizer answers each line command with (a `P` answers nothing). */
function run(text: string): { actions: RecognizerAction[]; phase: string } {
  const recognizer = new ResetRecognizer();
  const actions: RecognizerAction[] = [];
  for (const token of tokens(text)) {
    if (token === 'played') recognizer.played();
    else actions.push(recognizer.command(token));
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

describe('ResetRecognizer: client sequences, one SET-CONTROL at a time', () => {
  const table: { name: string; sequence: string; actions: RecognizerAction[]; phase?: string }[] = [
    {
      // esptool ClassicReset as its CustomReset string; the play ends while GPIO0 is held.
      name: 'ClassicReset D0|R1|W0.1|D1|R0|W0.05|D0, played before the final D0',
      sequence: 'D0|R1|W0.1|D1|R0|P|W0.05|D0',
      actions: [fwd(0, 0), fwd(0, 1), play('classic'), absorb, absorb],
    },
    {
      name: 'ClassicReset, played after the client finished',
      sequence: 'D0|R1|W0.1|D1|R0|W0.05|D0|P',
      actions: [fwd(0, 0), fwd(0, 1), play('classic'), absorb, absorb],
    },
    {
      // What esptool really sends: its _setRTS repeats DTR (a usbser.sys work-around).
      name: "ClassicReset through esptool's _setRTS (DTR repeated after each RTS)",
      sequence: 'D0|R1|D0|W0.1|D1|R0|D1|P|W0.05|D0',
      actions: [fwd(0, 0), fwd(0, 1), fwd(0, 1), play('classic'), absorb, absorb, absorb],
    },
    {
      // esptool on Linux opens an rfc2217:// port with pyserial's defaults (DTR, RTS on).
      name: "ClassicReset after pyserial's default open (DTR_ON, then RTS_ON)",
      sequence: 'D1|R1|D0|R1|W0.1|D1|R0|P|W0.05|D0',
      actions: [fwd(1, 0), fwd(1, 1), play('usb-jtag'), absorb, absorb, absorb, absorb],
    },
    {
      name: 'USBJTAGSerialReset R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|W0.1|R0|D0',
      sequence: 'R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|P|W0.1|R0|D0',
      actions: [
        fwd(0, 0),
        fwd(0, 0),
        fwd(1, 0),
        fwd(1, 0),
        fwd(1, 1),
        play('usb-jtag'),
        absorb,
        absorb,
        // The client's intent was released by R0: its last D0 passes, as it changes nothing.
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
      // UnixTightReset (0,0) (1,1) (0,1) W (1,0) W (0,0), each step as DTR then RTS.
      name: 'UnixTightReset one line at a time, DTR first',
      sequence: 'D0|R0|D1|R1|D0|R1|W0.1|D1|R0|P|W0.05|D0|R0',
      actions: [
        fwd(0, 0),
        fwd(0, 0),
        fwd(1, 0),
        fwd(1, 1),
        play('usb-jtag'),
        absorb,
        absorb,
        absorb,
        absorb,
        fwd(0, 0),
      ],
    },
    {
      name: 'UnixTightReset one line at a time, RTS first',
      sequence: 'R0|D0|R1|D1|R1|D0|W0.1|R0|D1|W0.05|P|R0|D0',
      actions: [
        fwd(0, 0),
        fwd(0, 0),
        fwd(0, 1),
        play('classic'),
        absorb,
        absorb,
        absorb,
        absorb,
        absorb,
        absorb,
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
      sequence: 'R1|D1|P|D0|D1|D0|R1|D1|R0|D0|R0',
      actions: [
        fwd(0, 1),
        play('classic'),
        ...Array<RecognizerAction>(7).fill(absorb),
        // Released by the D0 before it: the sequence is over.
        fwd(0, 0),
      ],
      phase: 'pass',
    },
    {
      name: 'garbage: a client that never releases keeps being absorbed',
      sequence: 'R1|D1|P|R0|R1|R0',
      actions: [fwd(0, 1), play('classic'), absorb, absorb, absorb],
      phase: 'absorbing',
    },
    {
      name: 'garbage: a client still holding reset when the play ends',
      sequence: 'R1|D1|D0|P|R0|R1',
      actions: [fwd(0, 1), play('classic'), absorb, absorb, fwd(0, 1)],
      phase: 'pass',
    },
  ];

  for (const row of table)
    it(row.name, () => {
      const result = run(row.sequence);
      expect(result.actions).toEqual(row.actions);
      expect(result.phase).toBe(row.phase ?? 'pass');
    });
});

describe('recognizeLineCommand (pure)', () => {
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

  it('the triggers are the two transitions of esptool download resets, as literals', () => {
    expect(
      DOWNLOAD_TRIGGERS.map((rule) => [
        [Number(rule.from.dtr), Number(rule.from.rts)],
        [Number(rule.to.dtr), Number(rule.to.rts)],
        rule.because,
      ]),
    ).toEqual([
      [[0, 1], [1, 1], 'classic'],
      [[1, 1], [0, 1], 'usb-jtag'],
    ]);
  });

  it('playFinished outside a play changes nothing', () => {
    expect(playFinished(INITIAL_RECOGNIZER_STATE)).toBe(INITIAL_RECOGNIZER_STATE);
  });
});

describe('ResetRecognizer on a USB-Serial-JTAG port (holdReset)', () => {
  /** As `run`, with RTS alone held back: the local port resets at once on it. */
  function runHeld(text: string): { actions: RecognizerAction[]; phase: string } {
    const recognizer = new ResetRecognizer({ holdReset: true });
    const actions: RecognizerAction[] = [];
    for (const token of tokens(text)) {
      if (token === 'played') recognizer.played();
      else actions.push(recognizer.command(token));
    }
    return { actions, phase: recognizer.state.phase };
  }
  const hard: RecognizerAction = { kind: 'play', sequence: 'hard' };

  it("holds ClassicReset's R1 (never forwarded), then plays the download reset at D1", () => {
    // What Python esptool sends to every rfc2217:// port: without the hold, R1 would reset the
    // chip with no download strap latched, and it would boot its app.
    expect(runHeld('D0|R1|W0.1|D1|R0|P|W0.05|D0')).toEqual({
      actions: [fwd(0, 0), absorb, play('classic'), absorb, absorb],
      phase: 'pass',
    });
  });

  it('holds HardReset R1|W0.1|R0 and plays it at R0', () => {
    expect(runHeld('R1|W0.1|R0|P')).toEqual({ actions: [absorb, hard], phase: 'pass' });
  });

  it('leaves USBJTAGSerialReset, a BOOT click, and RTS with DTR already on as they were', () => {
    expect(runHeld('R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|P|W0.1|R0|D0').actions).toEqual(
      run('R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|P|W0.1|R0|D0').actions,
    );
    expect(runHeld('D1|W0.1|D0').actions).toEqual([fwd(1, 0), fwd(0, 0, 'boot-click')]);
    expect(runHeld('D1|R1').actions).toEqual([fwd(1, 0), fwd(1, 1)]);
  });

  it('without holdReset, R1 alone is forwarded at once (a bridge board: EN low is a reset)', () => {
    expect(run('R1|W0.1|R0').actions).toEqual([fwd(0, 1), fwd(0, 0, 'hard')]);
  });
});
