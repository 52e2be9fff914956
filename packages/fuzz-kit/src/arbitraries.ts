// Adversarial inputs as fast-check arbitraries, the generic half every package's fuzz/ builds
// its own messages from. Everything is built as TEXT (JSON or not) by concatenation, never by
// stringifying an object: a 100,000-deep payload is `[`.repeat(n), which costs nothing to build,
// and invalid JSON (unescaped quotes, the firmware's own reply shapes) is as easy to make as
// valid JSON. The tokens and frame heads are the xiaozhi envelope's and JSON-RPC's
// (docs/protocol.md §1, §2).
import fc from 'fast-check';

/** Depths a parser or a recursive reader is likely to break at (cJSON stops at 1000). */
const DEPTHS = [2, 64, 999, 1000, 1001, 5000, 10_000, 20_000, 100_000];

/** Openers and closers of nesting shapes. */
const NESTINGS: Record<string, readonly [string, string]> = {
  array: ['[', ']'],
  object: ['{"a":', '}'],
  mixed: ['[{"a":', '}]'],
  params: ['{"params":', '}'],
  payload: ['{"type":"mcp","payload":', '}'],
};

/** Texts that repeated many times make a backtracking regular expression go super-linear. */
const REPEATED_TOKENS = [
  '],"nextCursor":"',
  '"}',
  '\\',
  '\\"',
  '"',
  '[',
  '{"jsonrpc":"2.0","id":1,"result":',
  '{"session_id":"',
  '","type":"mcp","payload":',
  '"error":{"message":"',
  ' ',
  'a',
  '\u0000',
];

/** Sizes around the limits that matter: the firmware's 64 KiB frame, our 128 KiB frame limit. */
const SIZES = [1000, 4095, 4096, 16_384, 65_534, 65_535, 65_536, 100_000, 131_000, 131_072];

/**
 * Only texts of at most `maxBytes` (a frame limit): a text made of several huge members would
 * be slow for its size alone, not for its shape, and the slow-input check is about shape.
 */
export function capped(text: fc.Arbitrary<string>, maxBytes: number): fc.Arbitrary<string> {
  return text.filter((t) => t.length <= maxBytes && Buffer.byteLength(t) <= maxBytes);
}

/** Scalars and small values, valid JSON or deliberately not. */
export const scalarText: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 2 }).map((v) => JSON.stringify(v) ?? 'null') },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      '1',
      '0',
      '-1',
      '1.9',
      '-0',
      '1e400',
      '-1e400',
      '2147483647',
      '2147483648',
      '-2147483649',
      '9007199254740993',
      '1E2',
      '0.1e-400',
      'NaN',
      'Infinity',
      'true',
      'false',
      'null',
      '""',
      '"2.0"',
      '[]',
      '{}',
      '[null]',
      '{"":""}',
      '"\\ud800"',
      '"\\u0000"',
      '01',
      '+1',
      '.5',
      "'x'",
    ),
  },
  {
    weight: 2,
    arbitrary: fc.string({ unit: 'binary', maxLength: 40 }).map((s) => JSON.stringify(s)),
  },
  // Unescaped: raw quotes, backslashes and control characters inside the quotes.
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }).map((s) => `"${s}"`) },
  {
    weight: 1,
    arbitrary: fc
      .string({ unit: fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)) })
      .map((s) => `"${s}"`),
  },
);

/** `[[[...]]]`, `{"a":{"a":...}}` and friends, closed or not, up to 100,000 deep, within `maxBytes`. */
export function deepNesting(maxBytes: number): fc.Arbitrary<string> {
  return fc
    .record({
      depth: fc.oneof(fc.constantFrom(...DEPTHS), fc.integer({ min: 1, max: 100_000 })),
      shape: fc.constantFrom(...Object.keys(NESTINGS)),
      closed: fc.boolean(),
      leaf: fc.constantFrom('1', 'null', '"x"', '[]', '{}', ''),
    })
    .map(({ depth, shape, closed, leaf }) => {
      const [open, close] = NESTINGS[shape] ?? ['[', ']'];
      const fit = Math.floor(
        (maxBytes - leaf.length) / (open.length + (closed ? close.length : 0)),
      );
      const d = Math.max(1, Math.min(depth, fit));
      return open.repeat(d) + leaf + (closed ? close.repeat(d) : '');
    });
}

/** A JSON string of `size` bytes or so, of plain letters, escapes or multi-byte characters. */
export function hugeString(maxBytes: number): fc.Arbitrary<string> {
  return fc
    .record({
      size: fc.oneof(fc.constantFrom(...SIZES), fc.integer({ min: 1, max: maxBytes })),
      unit: fc.constantFrom('x', '\\u0000', '\\"', '\\\\', 'é', '😀', '\\ud83d'),
      quoted: fc.boolean(),
    })
    .map(({ size, unit, quoted }) => {
      const n = Math.max(1, Math.floor(Math.min(size, maxBytes - 2) / Buffer.byteLength(unit)));
      const body = unit.repeat(n);
      return quoted ? `"${body}"` : body;
    });
}

/** One token repeated to fill a size: what makes backtracking recovery patterns quadratic. */
export function repeatedToken(maxBytes: number): fc.Arbitrary<string> {
  return fc
    .record({
      token: fc.constantFrom(...REPEATED_TOKENS),
      size: fc.oneof(fc.constantFrom(...SIZES), fc.integer({ min: 1, max: maxBytes })),
    })
    .map(({ token, size }) =>
      token.repeat(Math.max(1, Math.floor(Math.min(size, maxBytes) / Buffer.byteLength(token)))),
    );
}

/** Any value text: mostly small, sometimes deep, huge, or a repeated token. */
export function fragment(maxBytes: number): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 10, arbitrary: scalarText },
    { weight: 2, arbitrary: deepNesting(maxBytes) },
    { weight: 2, arbitrary: hugeString(maxBytes) },
    { weight: 1, arbitrary: repeatedToken(maxBytes) },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 200 }) },
  );
}

/** A small value, for fields that are not the one under attack. */
export const small = (maxBytes: number) =>
  fc.oneof({ weight: 4, arbitrary: scalarText }, { weight: 1, arbitrary: fragment(maxBytes) });

type Member = readonly [key: string, value: string];

/**
 * An object text of these members: each present or not, in any order, sometimes a duplicate,
 * sometimes under another letter case (cJSON looks keys up case-insensitively) or another key.
 * Rolls are plain integers (no chained arbitraries): this runs for most cases of a fuzz run.
 */
export function objectText(
  members: readonly (readonly [key: string, value: fc.Arbitrary<string>])[],
  presence = 0.85,
): fc.Arbitrary<string> {
  const one = members.map(([key, value]) =>
    fc
      .tuple(fc.integer({ min: 0, max: 99 }), fc.integer({ min: 0, max: 15 }), value)
      .map(([roll, keyRoll, text]) => {
        const variants = [key, key.toUpperCase(), `${key} `, '', '__proto__'];
        return {
          present: roll < presence * 100,
          twice: roll >= 97,
          key: variants[keyRoll < 12 ? 0 : keyRoll - 11] ?? key,
          text,
        };
      }),
  );
  return fc.tuple(fc.tuple(...one), fc.nat()).map(([list, order]) => {
    const kept: Member[] = [];
    for (const m of list) {
      if (!m.present) continue;
      kept.push([m.key, m.text]);
      if (m.twice) kept.push([m.key, m.text]);
    }
    // An odd `order` shuffles (deterministically from it); shrinking goes to 0, the given order.
    for (let i = kept.length - 1, seed = order; order % 2 === 1 && i > 0; i--) {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
      const j = seed % (i + 1);
      [kept[i], kept[j]] = [kept[j] as Member, kept[i] as Member];
    }
    return `{${kept.map(([k, v]) => `${JSON.stringify(k)}:${v === '' ? '""' : v}`).join(',')}}`;
  });
}

/** UTF-8 that is not: overlong forms, lone surrogates, truncated sequences, stray continuations. */
const BAD_UTF8: readonly (readonly number[])[] = [
  [0xff],
  [0xfe, 0xff],
  [0xc0, 0x80],
  [0xc1, 0xbf],
  [0xed, 0xa0, 0x80],
  [0xed, 0xbf, 0xbf],
  [0xe2, 0x82],
  [0xf0, 0x9f, 0x98],
  [0x80],
  [0xf4, 0x90, 0x80, 0x80],
  [0xf8, 0x88, 0x80, 0x80, 0x80],
];

/** A text frame's bytes with invalid UTF-8 somewhere inside an otherwise plausible frame. */
export const badUtf8: fc.Arbitrary<Uint8Array> = fc
  .tuple(
    fc.constantFrom('{"type":"mcp","payload":"', '{"session_id":"', '{"type":"', ''),
    fc.constantFrom(...BAD_UTF8),
    fc.constantFrom('"}', '', '"}}'),
  )
  .map(([head, bad, tail]) =>
    Buffer.concat([Buffer.from(head), Buffer.from(bad), Buffer.from(tail)]),
  );

/** Binary frame contents: audio-sized and not, random bytes. */
export function binaryBytes(maxBytes: number): fc.Arbitrary<Uint8Array> {
  return fc.oneof(
    { weight: 4, arbitrary: fc.uint8Array({ maxLength: 300 }) },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom(0, 1, 16, 4096, 65_536, maxBytes)
        .map((n) => new Uint8Array(Math.min(n, maxBytes))),
    },
  );
}

/**
 * Cut points for {@link splitAtCuts}: fractions of a stream's length, so that one case splits
 * streams of any size (a reader must not care where TCP happens to cut).
 */
export const cutFractions: fc.Arbitrary<number[]> = fc.array(
  fc.double({ min: 0, max: 1, noNaN: true }),
  { maxLength: 6 },
);

/** Splits `bytes` at the given fractions of its length: the writes a stream arrives in. */
export function splitAtCuts<T extends Uint8Array>(bytes: T, cuts: readonly number[]): T[] {
  const at = [...new Set(cuts.map((c) => Math.floor(c * bytes.length)))]
    .filter((n) => n > 0 && n < bytes.length)
    .sort((a, b) => a - b);
  const out: T[] = [];
  let from = 0;
  for (const n of [...at, bytes.length]) {
    out.push(bytes.subarray(from, n) as T);
    from = n;
  }
  return out;
}
