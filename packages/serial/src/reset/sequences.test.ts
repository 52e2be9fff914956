import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SerialError } from '../errors.js';
import type { LineState, LineStep } from '../line-steps.js';
import { pinEffect, SAFE_LINES } from '../line-steps.js';
import { BOOT_CLICK, parseResetSequence, RESET_SEQUENCES } from './sequences.js';

const set = (dtr: boolean, rts: boolean): LineStep => ({ set: { dtr, rts } });
const wait = (waitMs: number): LineStep => ({ waitMs });

describe('RESET_SEQUENCES', () => {
  it('classic is esptool ClassicReset, both lines in every step', () => {
    expect(RESET_SEQUENCES.classic).toEqual([
      set(false, false),
      set(false, true),
      wait(100),
      set(true, true),
      set(true, false),
      wait(50),
      set(false, false),
    ]);
    expect(RESET_SEQUENCES.classic).toEqual(parseResetSequence('D0|R1|W0.1|D1|R0|W0.05|D0'));
  });

  it('tight is esptool UnixTightReset: both lines change in one set() per step', () => {
    expect(RESET_SEQUENCES.tight).toEqual([
      set(false, false),
      set(true, true),
      set(false, true),
      wait(100),
      set(true, false),
      wait(50),
      set(false, false),
    ]);
    expect(RESET_SEQUENCES.tight).toEqual(
      parseResetSequence('U0,0|U1,1|U0,1|W0.1|U1,0|W0.05|U0,0'),
    );
  });

  it('usbJtag is esptool USBJTAGSerialReset', () => {
    expect(RESET_SEQUENCES.usbJtag).toEqual([
      set(false, false),
      set(false, false),
      wait(100),
      set(true, false),
      set(true, false),
      wait(100),
      set(true, true),
      set(false, true),
      set(false, true),
      wait(100),
      set(false, false),
      set(false, false),
    ]);
    expect(RESET_SEQUENCES.usbJtag).toEqual(
      parseResetSequence('R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|W0.1|R0|D0'),
    );
  });

  it('hard is an RTS pulse with GPIO0 high', () => {
    expect(RESET_SEQUENCES.hard).toEqual([set(false, true), wait(100), set(false, false)]);
    const states = RESET_SEQUENCES.hard.flatMap((step) => ('set' in step ? [step.set] : []));
    expect(states.map(pinEffect)).toEqual([
      { en: 'low', gpio0: 'high' },
      { en: 'high', gpio0: 'high' },
    ]);
  });

  it('hardUsb is esptool HardReset(uses_usb=True): 200 ms in reset, 200 ms after', () => {
    // esptool v4.12 reset.py:156-162: _setRTS(True); sleep(0.2); _setRTS(False); sleep(0.2)
    expect(RESET_SEQUENCES.hardUsb).toEqual([
      set(false, true),
      wait(200),
      set(false, false),
      wait(200),
    ]);
  });

  it('download-mode sequences hold EN low, then release it with GPIO0 low', () => {
    for (const name of ['classic', 'tight'] as const) {
      const effects = RESET_SEQUENCES[name].flatMap((step) =>
        'set' in step ? [pinEffect(step.set)] : [],
      );
      const reset = effects.findIndex((effect) => effect.en === 'low');
      const download = effects.findIndex((effect) => effect.gpio0 === 'low');
      expect(reset, name).toBeGreaterThanOrEqual(0);
      expect(download, name).toBeGreaterThan(reset);
      expect(effects[download]?.en, name).toBe('high');
    }
  });

  it('every sequence ends with both lines released and is frozen', () => {
    for (const [name, steps] of Object.entries(RESET_SEQUENCES)) {
      // A pause may follow the last line change (hardUsb's), nothing else.
      const last = steps.findLast((step) => 'set' in step);
      expect(last, name).toEqual({ set: SAFE_LINES });
      expect(steps.slice(steps.indexOf(last as LineStep) + 1).every((s) => 'waitMs' in s)).toBe(
        true,
      );
      expect(Object.isFrozen(steps), name).toBe(true);
      for (const step of steps) expect(Object.isFrozen(step), name).toBe(true);
    }
  });

  it('BOOT_CLICK pulls GPIO0 low with EN high for ~100 ms, then releases both', () => {
    expect(BOOT_CLICK).toEqual([set(true, false), wait(100), set(false, false)]);
    const first = BOOT_CLICK[0];
    expect(first && 'set' in first ? pinEffect(first.set) : undefined).toEqual({
      en: 'high',
      gpio0: 'low',
    });
  });
});

describe('parseResetSequence', () => {
  it('keeps the other line in D and R steps', () => {
    expect(parseResetSequence('D1|R1|D0|R0')).toEqual([
      set(true, false),
      set(true, true),
      set(false, true),
      set(false, false),
    ]);
  });

  it('starts from a given state', () => {
    expect(parseResetSequence('R0', { dtr: true, rts: true })).toEqual([set(true, false)]);
  });

  it('converts W seconds to milliseconds, tolerating spaces and lowercase', () => {
    expect(parseResetSequence(' d1 | w0.25 | u 0, 1 |W0')).toEqual([
      set(true, false),
      wait(250),
      set(false, true),
      wait(0),
    ]);
  });

  it.each([
    ['', 'empty'],
    ['D0||R1', "step ''"],
    ['X1', "'X1'"],
    ['D2', 'expected 0 or 1'],
    ['R', 'expected 0 or 1'],
    ['W', 'W<seconds>'],
    ['W-1', 'W<seconds>'],
    ['Wabc', 'W<seconds>'],
    ['W11', 'W<seconds>'],
    ['U1', 'U<dtr>,<rts>'],
    ['U1,0,1', 'U<dtr>,<rts>'],
  ])('rejects %j', (text, fragment) => {
    let caught: unknown;
    try {
      parseResetSequence(text);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(SerialError);
    expect((caught as SerialError).code).toBe('OPTION_INVALID');
    expect((caught as SerialError).message).toContain(fragment);
  });

  it('one set step per D/R/U token, the untouched line carried over', () => {
    const token = fc.oneof(
      fc.record({ kind: fc.constantFrom('D', 'R'), level: fc.boolean() }),
      fc.record({ kind: fc.constant('U'), dtr: fc.boolean(), rts: fc.boolean() }),
      fc.record({ kind: fc.constant('W'), ms: fc.integer({ min: 0, max: 2000 }) }),
    );
    fc.assert(
      fc.property(fc.array(token, { minLength: 1, maxLength: 20 }), (tokens) => {
        const text = tokens
          .map((t) => {
            if ('ms' in t) return `W${t.ms / 1000}`;
            if ('dtr' in t) return `U${Number(t.dtr)},${Number(t.rts)}`;
            return `${t.kind}${Number(t.level)}`;
          })
          .join('|');
        const steps = parseResetSequence(text);
        expect(steps).toHaveLength(tokens.length);
        let state: LineState = { ...SAFE_LINES };
        tokens.forEach((t, index) => {
          if ('ms' in t) {
            expect(steps[index]).toEqual({ waitMs: t.ms });
            return;
          }
          if ('dtr' in t) state = { dtr: t.dtr, rts: t.rts };
          else if (t.kind === 'D') state = { dtr: t.level, rts: state.rts };
          else state = { dtr: state.dtr, rts: t.level };
          expect(steps[index]).toEqual({ set: state });
        });
      }),
    );
  });
});
