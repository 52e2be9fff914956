// Adversarial inputs for the server, as fast-check arbitraries: everything a device or an HTTP
// client can send, built as TEXT by concatenation from @xiaozhi-mcp/fuzz-kit's generic texts
// (deep nesting, huge strings, wrong types), so invalid JSON is as easy to make as valid JSON.
import {
  capped,
  fragment,
  hugeString,
  objectText,
  repeatedToken,
  small,
} from '@xiaozhi-mcp/fuzz-kit';
import fc from 'fast-check';

/**
 * Replaced, as each case runs, by the id of a request the server really sent on that
 * connection (a reply "to a request the server actually sent", with whatever shape around it).
 */
export const REAL_ID = '«id»';

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
