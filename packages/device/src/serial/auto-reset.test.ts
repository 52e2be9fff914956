import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  type AutoResetBoard,
  AutoResetCircuit,
  autoResetPins,
  BUTTON_DEBOUNCE_MS,
} from './auto-reset.js';

function fakeBoard(initial = 'idle') {
  const calls: string[] = [];
  const board: AutoResetBoard & { state: string } = {
    state: initial,
    reset: (reason, options) => {
      calls.push(`reset ${reason}${options.download === true ? ' download' : ''}`);
      board.state = options.download === true ? 'download' : 'starting';
    },
    powerOff: () => {
      calls.push('off');
      board.state = 'off';
    },
    click: () => calls.push('click'),
  };
  return { board, calls };
}

function clock() {
  let t = 0;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

afterEach(() => {
  vi.useRealTimers();
});

const D = (dtr: 0 | 1, rts: 0 | 1) => ({ dtr: dtr === 1, rts: rts === 1 });

describe('auto-reset circuit (USB-UART bridge)', () => {
  it('maps lines to EN and GPIO0', () => {
    expect(autoResetPins(D(0, 0))).toEqual({ enLow: false, gpio0Low: false });
    expect(autoResetPins(D(0, 1))).toEqual({ enLow: true, gpio0Low: false });
    expect(autoResetPins(D(1, 0))).toEqual({ enLow: false, gpio0Low: true });
    expect(autoResetPins(D(1, 1))).toEqual({ enLow: false, gpio0Low: false });
  });

  it("enters download mode on esptool's classic reset, without a click", () => {
    const { board, calls } = fakeBoard();
    const t = clock();
    const circuit = new AutoResetCircuit(board, { now: t.now, enRiseMs: 0 });
    // D0|R1|W100|D1|R0|W50|D0
    expect(circuit.setLines(D(0, 1))).toEqual([{ kind: 'hold' }]);
    t.advance(100);
    expect(circuit.setLines(D(1, 0))).toEqual([{ kind: 'reset', download: true }]);
    t.advance(50);
    expect(circuit.setLines(D(0, 0))).toEqual([
      { kind: 'ignored', reason: 'GPIO0 was low as the chip started' },
    ]);
    expect(calls).toEqual(['off', 'reset POWERON download']);
  });

  it('boots normally after an RTS pulse with DTR released (hard reset)', () => {
    const { board, calls } = fakeBoard('download');
    const circuit = new AutoResetCircuit(board, { enRiseMs: 0 });
    circuit.setLines(D(0, 1));
    circuit.setLines(D(0, 0));
    expect(calls).toEqual(['off', 'reset POWERON']);
  });

  it('clicks BOOT on a short DTR pulse while the firmware runs', () => {
    const { board, calls } = fakeBoard('idle');
    const t = clock();
    const circuit = new AutoResetCircuit(board, { now: t.now, enRiseMs: 0 });
    expect(circuit.setLines(D(1, 0))).toEqual([]);
    t.advance(80);
    expect(circuit.setLines(D(0, 0))).toEqual([{ kind: 'click', pressedMs: 80 }]);
    expect(calls).toEqual(['click']);
  });

  it('ignores a long press, a pulse in download mode, and a press cut by a reset', () => {
    const { board, calls } = fakeBoard('idle');
    const t = clock();
    const circuit = new AutoResetCircuit(board, { now: t.now, clickMaxMs: 500, enRiseMs: 0 });
    circuit.setLines(D(1, 0));
    t.advance(900);
    expect(circuit.setLines(D(0, 0))).toEqual([
      { kind: 'ignored', reason: 'a long press (900 ms)' },
    ]);
    board.state = 'download';
    circuit.setLines(D(1, 0));
    expect(circuit.setLines(D(0, 0))).toEqual([
      { kind: 'ignored', reason: 'the chip is download' },
    ]);
    board.state = 'idle';
    circuit.setLines(D(1, 0));
    circuit.setLines(D(0, 1)); // reset held mid-press
    circuit.setLines(D(0, 0));
    expect(calls).toEqual(['off', 'reset POWERON']);
  });

  it("ignores a GPIO0 pulse shorter than the button driver's debounce (a line glitch)", () => {
    const { board, calls } = fakeBoard('idle');
    const t = clock();
    const circuit = new AutoResetCircuit(board, { now: t.now, enRiseMs: 0 });
    expect(BUTTON_DEBOUNCE_MS).toBe(10);
    circuit.setLines(D(1, 0));
    expect(circuit.setLines(D(1, 1))).toEqual([
      { kind: 'ignored', reason: 'a glitch (0 ms, under the 10 ms debounce)' },
    ]);
    circuit.setLines(D(1, 0));
    t.advance(10);
    expect(circuit.setLines(D(0, 0))).toEqual([{ kind: 'click', pressedMs: 10 }]);
    expect(calls).toEqual(['click']);
  });

  it('starts the chip after the EN RC delay, sampling GPIO0 then (esptool.py classic: D1 before R0)', () => {
    vi.useFakeTimers();
    const { board, calls } = fakeBoard();
    const events: string[] = [];
    const circuit = new AutoResetCircuit(board, {
      enRiseMs: 5,
      onEvent: (e) =>
        events.push(e.kind === 'reset' ? `reset${e.download ? ' download' : ''}` : e.kind),
    });
    circuit.setLines(D(0, 1));
    vi.advanceTimersByTime(20);
    // Both asserted releases EN; GPIO0 goes low before EN has risen, so the ROM sees BOOT low.
    expect(circuit.setLines(D(1, 1))).toEqual([]);
    expect(circuit.setLines(D(1, 0))).toEqual([]);
    vi.advanceTimersByTime(4);
    expect(calls).toEqual(['off']);
    vi.advanceTimersByTime(1);
    expect(calls).toEqual(['off', 'reset POWERON download']);
    circuit.setLines(D(0, 0));
    expect(calls).toEqual(['off', 'reset POWERON download']);
    expect(events).toEqual(['hold', 'reset download', 'ignored']);
  });

  it('does not start the chip when EN is pulled low again within the RC delay', () => {
    vi.useFakeTimers();
    const { board, calls } = fakeBoard();
    const circuit = new AutoResetCircuit(board, { enRiseMs: 5 });
    circuit.setLines(D(0, 1));
    circuit.setLines(D(1, 1));
    circuit.setLines(D(0, 1));
    vi.advanceTimersByTime(20);
    expect(calls).toEqual(['off']);
    circuit.setLines(D(0, 0));
    vi.advanceTimersByTime(5);
    expect(calls).toEqual(['off', 'reset POWERON']);
    circuit.dispose();
  });

  it('passes through both-asserted without touching the chip (how ports often open)', () => {
    const { board, calls } = fakeBoard('idle');
    const circuit = new AutoResetCircuit(board, { enRiseMs: 0 });
    expect(circuit.setLines(D(1, 1))).toEqual([]);
    expect(circuit.setLines(D(0, 0))).toEqual([]);
    expect(calls).toEqual([]);
  });

  it('lets the chip run when the port closes with RTS asserted', () => {
    const { board, calls } = fakeBoard('idle');
    const circuit = new AutoResetCircuit(board, { enRiseMs: 0 });
    circuit.setLines(D(0, 1));
    expect(circuit.release()).toEqual([{ kind: 'reset', download: false }]);
    expect(calls).toEqual(['off', 'reset POWERON']);
    expect(circuit.pins).toEqual({ enLow: false, gpio0Low: false });
  });
});

describe('USB-Serial-JTAG (native USB)', () => {
  it("enters download mode on esptool's USBJTAGSerialReset", () => {
    const { board, calls } = fakeBoard('idle');
    const circuit = new AutoResetCircuit(board, { usbJtag: true });
    // R0 D0 W D1 R0 W R1 D0 R1 W R0 D0, each a set() with both lines.
    const steps = [D(0, 0), D(1, 0), D(1, 0), D(1, 1), D(0, 1), D(0, 1), D(0, 0), D(0, 0)];
    const events = steps.flatMap((s) => circuit.setLines(s));
    expect(events).toEqual([{ kind: 'hold' }, { kind: 'reset', download: true }]);
    expect(calls).toEqual(['off', 'reset EXT_SYS_RST download']);
  });

  it('resets into the app on an RTS pulse, and ignores DTR pulses (no BOOT click)', () => {
    const { board, calls } = fakeBoard('idle');
    const circuit = new AutoResetCircuit(board, { usbJtag: true });
    circuit.setLines(D(1, 0));
    circuit.setLines(D(0, 0));
    expect(calls).toEqual([]);
    circuit.setLines(D(0, 1));
    circuit.setLines(D(0, 0));
    expect(calls).toEqual(['off', 'reset EXT_SYS_RST']);
  });

  it('keeps the download strap through (1, 1) but drops it through (0, 0) on the way to reset', () => {
    // esptool USBJTAGSerialReset: "Calls inverted to go through (1,1) instead of (0,0)".
    const through11 = fakeBoard('idle');
    const circuit = new AutoResetCircuit(through11.board, { usbJtag: true });
    for (const lines of [D(1, 0), D(1, 1), D(0, 1), D(0, 0)]) circuit.setLines(lines);
    expect(through11.calls).toEqual(['off', 'reset EXT_SYS_RST download']);

    const through00 = fakeBoard('idle');
    const other = new AutoResetCircuit(through00.board, { usbJtag: true });
    for (const lines of [D(1, 0), D(0, 0), D(0, 1), D(0, 0)]) other.setLines(lines);
    expect(through00.calls).toEqual(['off', 'reset EXT_SYS_RST']);
  });
});
