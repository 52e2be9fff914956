import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { escapeToolName, parseToolName, toolNameFor, unescapeToolName } from './names.js';

// What Anthropic's API and Cursor accept, written out here rather than imported.
const CLIENT_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const MAC = 'f4:12:fa:8b:10:21';

const mac = fc
  .uint8Array({ minLength: 6, maxLength: 6 })
  .map((bytes) => [...bytes].map((b) => b.toString(16).padStart(2, '0')).join(':'));
/** Board-like names (`self.a_b.c`), and any text at all. */
const boardName = fc
  .array(fc.stringMatching(/^[a-z_]{1,12}$/), { minLength: 1, maxLength: 5 })
  .map((parts) => `self.${parts.join('.')}`);
const anyName = fc.oneof(
  boardName,
  fc.string({ unit: 'grapheme-composite', maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.stringMatching(/^[.\-_a-z]{0,30}$/),
);

describe('toolNameFor / parseToolName', () => {
  it('writes board names readably, one board and several', () => {
    expect(toolNameFor(MAC, 'self.audio_speaker.set_volume', false)).toBe(
      'self-audio_speaker-set_volume',
    );
    expect(toolNameFor(MAC, 'self.audio_speaker.set_volume', true)).toBe(
      'f412fa8b1021__self-audio_speaker-set_volume',
    );
    expect(toolNameFor(MAC, 'self.get_device_status', true)).toBe(
      'f412fa8b1021__self-get_device_status',
    );
  });

  it('escapes the escape: dashes, dots before escapes, and anything else', () => {
    expect(escapeToolName('a-b')).toBe('a--2d-b');
    expect(escapeToolName('a..b')).toBe('a--2e--b');
    expect(escapeToolName('a.')).toBe('a-');
    expect(escapeToolName('a"b')).toBe('a--22-b');
    expect(escapeToolName('灯.开')).toBe('--706f---2e---5f00-');
    expect(escapeToolName('😀')).toBe('--1f600-');
    expect(unescapeToolName('--1f600-')).toBe('😀');
    // Other spellings of the same text are no names at all.
    expect(unescapeToolName('--41-')).toBeUndefined(); // 'A' stands for itself
    expect(unescapeToolName('a--2e-b')).toBeUndefined(); // '.' before 'b' is '-'
    expect(unescapeToolName('--02d-')).toBeUndefined(); // leading zero
    expect(unescapeToolName('--2D-')).toBeUndefined(); // uppercase hex
    expect(unescapeToolName('a--')).toBeUndefined();
    expect(unescapeToolName('a b')).toBeUndefined();
  });

  it('cuts and hashes a name over 64 characters, or an empty one', () => {
    const long = `self.${'x'.repeat(80)}`;
    const name = toolNameFor(MAC, long, true);
    expect(name).toHaveLength(64);
    expect(name).toMatch(/^f412fa8b1021__self-x+---h[0-9a-f]{16}$/);
    expect(parseToolName(name, true)).toBeUndefined();
    expect(toolNameFor(MAC, `${long}y`, true)).not.toBe(name);
    expect(toolNameFor(MAC, '', false)).toMatch(/^---h[0-9a-f]{16}$/);
  });

  it('is reversible: parseToolName undoes toolNameFor whenever the name is not hashed', () => {
    fc.assert(
      fc.property(mac, anyName, fc.boolean(), (deviceId, tool, many) => {
        const name = toolNameFor(deviceId, tool, many);
        expect(name).toMatch(CLIENT_NAME);
        const parsed = parseToolName(name, many);
        if (name.includes('---h')) expect(parsed).toBeUndefined();
        else expect(parsed).toEqual(many ? { deviceId, tool } : { tool });
      }),
      { numRuns: 2000 },
    );
  });

  it('board-like names are never hashed and keep their letters', () => {
    fc.assert(
      fc.property(mac, boardName, (deviceId, tool) => {
        fc.pre(tool.length <= 50);
        const name = toolNameFor(deviceId, tool, true);
        expect(name).not.toContain('---h');
        expect(name.slice(14).replaceAll('-', '.')).toBe(tool);
      }),
    );
  });

  it('never gives two tools one name', () => {
    fc.assert(
      fc.property(
        fc.tuple(mac, anyName),
        fc.tuple(mac, anyName),
        fc.boolean(),
        ([deviceA, toolA], [deviceB, toolB], many) => {
          fc.pre(many ? deviceA !== deviceB || toolA !== toolB : toolA !== toolB);
          expect(toolNameFor(deviceA, toolA, many)).not.toBe(toolNameFor(deviceB, toolB, many));
        },
      ),
      { numRuns: 2000 },
    );
    // Names that differ only where the escape works hardest.
    const tricky = ['a.b', 'a-b', 'a_b', 'a..b', 'a.-b', 'a-.b', 'a--2e-b', 'a.', 'a-', '.a', '-a'];
    const names = tricky.map((t) => toolNameFor(MAC, t, false));
    expect(new Set(names).size).toBe(tricky.length);
  });

  it('refuses names it never writes', () => {
    expect(parseToolName('self-lamp-turn_on', true)).toBeUndefined(); // no MAC
    expect(parseToolName('F412FA8B1021__self-lamp', true)).toBeUndefined(); // uppercase MAC
    // Without `many` the same text is a plain name (the MAC is not read).
    expect(parseToolName('f412fa8b1021__self-lamp', false)).toEqual({
      tool: 'f412fa8b1021__self.lamp',
    });
    expect(parseToolName('f412fa8b1021__self-lamp', true)).toEqual({
      deviceId: MAC,
      tool: 'self.lamp',
    });
    expect(parseToolName('', false)).toBeUndefined();
  });
});
