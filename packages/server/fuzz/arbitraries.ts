// Adversarial inputs for the server, as fast-check arbitraries. Everything a device or an HTTP
// client can send is built as TEXT (JSON or not) by concatenation, never by stringifying an
// object: a 100,000-deep payload is `[`.repeat(n), which costs nothing to build, and invalid
// JSON (unescaped quotes, the firmware's own reply shapes) is as easy to make as valid JSON.
import fc from 'fast-check';

/**
 * Replaced, as each case runs, by the id of a request the server really sent on that
 * connection (a reply "to a request the server actually sent", with whatever shape around it).
 */
export const REAL_ID = '«id»';

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
const small = (maxBytes: number) =>
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

/** Ids a reply may carry: the real one (as a number, or as a string), foreign ones, none. */
export function replyId(maxBytes: number): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 6, arbitrary: fc.constant(REAL_ID) },
    { weight: 1, arbitrary: fc.constant(`"${REAL_ID}"`) },
    { weight: 1, arbitrary: fc.constant(`${REAL_ID}.5`) },
    { weight: 2, arbitrary: fc.integer({ min: -3, max: 1_000_000 }).map(String) },
    { weight: 1, arbitrary: fc.constantFrom('null', '"1"', '2147483648', '1e400', '-0', '[]') },
    { weight: 1, arbitrary: small(maxBytes) },
  );
}

const toolText = (maxBytes: number) =>
  fc.oneof(
    {
      weight: 3,
      arbitrary: fc
        .tuple(fc.string({ minLength: 1, maxLength: 20 }), fc.boolean())
        .map(
          ([name, user]) =>
            `{"name":${JSON.stringify(name)},"description":"d","inputSchema":{"type":"object","properties":{}}${user ? ',"annotations":{"audience":["user"]}' : ''}}`,
        ),
    },
    {
      weight: 2,
      arbitrary: objectText([
        ['name', small(maxBytes)],
        ['description', small(maxBytes)],
        ['inputSchema', small(maxBytes)],
        ['annotations', small(maxBytes)],
      ]),
    },
    { weight: 1, arbitrary: small(maxBytes) },
  );

/** `result` values: the shapes the server expects (initialize, a tools page, a call result), bent. */
export function resultText(maxBytes: number): fc.Arbitrary<string> {
  return fc.oneof(
    {
      weight: 2,
      arbitrary: fc
        .tuple(small(maxBytes), small(maxBytes))
        .map(
          ([name, version]) =>
            `{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":${name},"version":${version}}}`,
        ),
    },
    {
      weight: 1,
      arbitrary: fc.constant(
        '{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"fuzz","version":"1.0.0"}}',
      ),
    },
    {
      weight: 3,
      arbitrary: fc
        .tuple(
          fc.array(toolText(maxBytes), { maxLength: 6 }),
          fc.option(small(maxBytes), { nil: undefined }),
        )
        .map(
          ([tools, cursor]) =>
            `{"tools":[${tools.join(',')}]${cursor === undefined ? '' : `,"nextCursor":${cursor}`}}`,
        ),
    },
    {
      weight: 1,
      // A page whose nextCursor is unescaped (the firmware's shape), possibly many times over.
      arbitrary: fc
        .tuple(fc.string({ unit: 'binary', maxLength: 30 }), fc.integer({ min: 1, max: 4 }))
        .map(([cursor, times]) => `{"tools":[]${`,"nextCursor":"${cursor}"`.repeat(times)}}`),
    },
    {
      weight: 2,
      arbitrary: objectText([
        ['content', small(maxBytes)],
        ['isError', small(maxBytes)],
      ]),
    },
    { weight: 3, arbitrary: fragment(maxBytes) },
  );
}

/** A JSON-RPC payload as a device might send it: replies (valid, bent, firmware-shaped), requests. */
export function payloadText(maxBytes: number): fc.Arbitrary<string> {
  const id = replyId(maxBytes);
  return fc.oneof(
    {
      weight: 4,
      arbitrary: objectText([
        ['jsonrpc', fc.oneof({ weight: 8, arbitrary: fc.constant('"2.0"') }, small(maxBytes))],
        ['id', id],
        ['result', resultText(maxBytes)],
      ]),
    },
    {
      weight: 2,
      arbitrary: objectText([
        ['jsonrpc', fc.oneof({ weight: 8, arbitrary: fc.constant('"2.0"') }, small(maxBytes))],
        ['id', id],
        [
          'error',
          fc.oneof(
            objectText([
              ['code', small(maxBytes)],
              ['message', small(maxBytes)],
              ['data', small(maxBytes)],
            ]),
            fragment(maxBytes),
          ),
        ],
      ]),
    },
    // The firmware's concatenated shapes, which the reader recovers with regular expressions.
    {
      weight: 2,
      arbitrary: fc
        .tuple(fc.oneof(fc.constant(REAL_ID), fc.nat().map(String)), resultText(maxBytes))
        .map(([i, result]) => `{"jsonrpc":"2.0","id":${i},"result":${result}}`),
    },
    {
      weight: 2,
      arbitrary: fc
        .tuple(
          fc.oneof(fc.constant(REAL_ID), fc.nat().map(String)),
          fc.oneof(
            fc.string({ unit: 'binary', maxLength: 60 }),
            hugeString(maxBytes),
            repeatedToken(maxBytes),
          ),
          fc.option(fc.integer({ min: -32768, max: 32767 }), { nil: undefined }),
        )
        .map(([i, message, code]) =>
          code === undefined
            ? `{"jsonrpc":"2.0","id":${i},"error":{"message":"${message}"}}`
            : `{"jsonrpc":"2.0","id":${i},"error":{"code":${code},"message":"${message}"}}`,
        ),
    },
    {
      weight: 1,
      // The unescaped-cursor recovery's worst case: many `],"nextCursor":"` and no closing `"}`.
      arbitrary: fc
        .tuple(fc.constant(REAL_ID), repeatedToken(maxBytes))
        .map(([i, body]) => `{"jsonrpc":"2.0","id":${i},"result":{"tools":[${body}}`),
    },
    {
      weight: 1,
      // Requests and notifications from the device, which the server never expects.
      arbitrary: objectText([
        ['jsonrpc', fc.constant('"2.0"')],
        ['id', id],
        [
          'method',
          fc.oneof(fc.constantFrom('"initialize"', '"tools/list"', '"ping"'), small(maxBytes)),
        ],
        ['params', small(maxBytes)],
      ]),
    },
    { weight: 2, arbitrary: fragment(maxBytes) },
  );
}

const TRANSPORT_TYPES = [
  '"hello"',
  '"listen"',
  '"abort"',
  '"goodbye"',
  '"mcp"',
  '"iot"',
  '"custom"',
  '"tts"',
  '"stt"',
  '"llm"',
  '"system"',
  '"alert"',
  '""',
  '"MCP"',
  '"unknown"',
  '"__proto__"',
  '"constructor"',
];

/** A text frame a device might send after its hello. */
export function deviceFrameText(maxBytes: number): fc.Arbitrary<string> {
  const payload = payloadText(maxBytes);
  const session = fc.oneof(
    { weight: 4, arbitrary: fc.constant('s') },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 20 }) },
  );
  return capped(
    fc.oneof(
      {
        // The device's own envelope shape, cut apart without a full parse.
        weight: 5,
        arbitrary: fc
          .tuple(session, payload)
          .map(([s, p]) => `{"session_id":"${s}","type":"mcp","payload":${p}}`),
      },
      {
        // Any other envelope: parsed as JSON.
        weight: 4,
        arbitrary: objectText(
          [
            ['type', fc.oneof({ weight: 6, arbitrary: fc.constant('"mcp"') }, small(maxBytes))],
            ['session_id', small(maxBytes)],
            ['payload', payload],
          ],
          0.9,
        ),
      },
      {
        weight: 3,
        arbitrary: objectText([
          ['session_id', small(maxBytes)],
          [
            'type',
            fc.oneof(
              { weight: 6, arbitrary: fc.constantFrom(...TRANSPORT_TYPES) },
              small(maxBytes),
            ),
          ],
          ['state', fc.oneof(fc.constantFrom('"start"', '"stop"', '"detect"'), small(maxBytes))],
          ['mode', fc.oneof(fc.constantFrom('"auto"', '"manual"', '"realtime"'), small(maxBytes))],
          ['reason', small(maxBytes)],
          ['text', small(maxBytes)],
          ['payload', small(maxBytes)],
          ['features', small(maxBytes)],
          ['__proto__', small(maxBytes)],
        ]),
      },
      { weight: 2, arbitrary: fragment(maxBytes) },
    ),
    maxBytes,
  );
}

/** A valid device hello (docs/protocol.md §4). */
export const DEVICE_HELLO =
  '{"type":"hello","version":1,"features":{"mcp":true},"transport":"websocket","audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}';

/** The first frame of a connection: mostly a valid hello, sometimes anything. */
export function helloText(maxBytes: number): fc.Arbitrary<string> {
  return capped(
    fc.oneof(
      { weight: 3, arbitrary: fc.constant(DEVICE_HELLO) },
      {
        weight: 2,
        arbitrary: objectText([
          ['type', fc.oneof({ weight: 6, arbitrary: fc.constant('"hello"') }, small(maxBytes))],
          ['version', small(maxBytes)],
          ['features', fc.oneof(fc.constant('{"mcp":true}'), small(maxBytes))],
          [
            'transport',
            fc.oneof({ weight: 4, arbitrary: fc.constant('"websocket"') }, small(maxBytes)),
          ],
          ['audio_params', small(maxBytes)],
        ]),
      },
      { weight: 1, arbitrary: fragment(maxBytes) },
    ),
    maxBytes,
  );
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

// --- HTTP -----------------------------------------------------------------------------------------

/** A header value Node's client will send as is: latin-1, no CR or LF. */
function headerSafe(text: string): string {
  let out = '';
  for (const char of text) {
    const code = char.codePointAt(0) ?? 0x3f;
    out +=
      code === 9 || (code >= 0x20 && code <= 0x7e) || (code >= 0x80 && code <= 0xff) ? char : '?';
  }
  return out;
}

/** Header values: plausible, empty, hostile, huge (Node answers 431 over 16 KiB). */
export const headerValue: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 60 }).map(headerSafe) },
  { weight: 1, arbitrary: fc.constantFrom('', ' ', '\t', '\u00ff', 'null', '{"a":1}') },
  {
    weight: 1,
    arbitrary: fc.constantFrom(1000, 4096, 8000, 16_000, 20_000, 70_000).map((n) => 'a'.repeat(n)),
  },
);

export const MAC_POOL = [
  'fa:22:00:00:10:01',
  'fa:22:00:00:10:02',
  'fa:22:00:00:10:03',
  'FA:22:00:00:10:04',
];

/** A Device-Id header: our pool, the control board's (a takeover attempt), or garbage. */
export function deviceIdHeader(controlMac: string): fc.Arbitrary<string | undefined> {
  return fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...MAC_POOL) },
    { weight: 2, arbitrary: fc.constant(controlMac) },
    { weight: 1, arbitrary: fc.constant(controlMac.toUpperCase()) },
    {
      weight: 2,
      arbitrary: fc
        .array(fc.integer({ min: 0, max: 255 }), { minLength: 6, maxLength: 6 })
        .map((b) => b.map((x) => x.toString(16).padStart(2, '0')).join(':')),
    },
    { weight: 1, arbitrary: fc.constant(undefined) },
    { weight: 2, arbitrary: headerValue },
  );
}

/** A path segment: words of the API, ids, malformed `%` escapes, long, unicode. */
export function pathSegment(controlMac: string): fc.Arbitrary<string> {
  return fc.oneof(
    {
      weight: 4,
      arbitrary: fc.constantFrom(
        'devices',
        'ota-checks',
        'tools',
        'call',
        'forget',
        '',
        '.',
        '..',
        controlMac,
        encodeURIComponent(controlMac),
        ...MAC_POOL,
      ),
    },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        '%',
        '%%',
        '%zz',
        '%E0%A4%A',
        '%C0%AF',
        '%ED%A0%80',
        '%FF',
        '%00',
        '%2F',
        '%2e%2e',
        'a%',
        '%u0041',
      ),
    },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 20 }).map(encodeURIComponent) },
    {
      weight: 1,
      arbitrary: fc
        .string({ unit: 'binary', maxLength: 20 })
        .map((s) => headerSafe(s).replace(/[\s?#/]/g, '_')),
    },
    { weight: 1, arbitrary: fc.constantFrom(100, 2000, 9000).map((n) => 'x'.repeat(n)) },
  );
}

/** A request body: a JSON value text, deep, huge (over the limits too), or not JSON at all. */
export function bodyText(maxBytes: number): fc.Arbitrary<string | undefined> {
  return fc.oneof(
    { weight: 1, arbitrary: fc.constant(undefined) },
    { weight: 4, arbitrary: fragment(maxBytes) },
    {
      weight: 1,
      arbitrary: fc
        .constantFrom(256 * 1024, 256 * 1024 + 1, 300_000, 1024 * 1024 + 1, 2 * 1024 * 1024)
        .map((n) => `"${'b'.repeat(n - 2)}"`),
    },
  );
}
