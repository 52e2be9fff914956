// Adversarial inputs for the device SDK, as fast-check arbitraries: what a hostile backend can
// send a board. Built as TEXT by concatenation from @xiaozhi-mcp/fuzz-kit's generic texts (a
// 100,000-deep payload is `[`.repeat(n)).
import { capped, fragment, objectText, small } from '@xiaozhi-mcp/fuzz-kit';
import fc from 'fast-check';

/** Replaced, as each case runs, by a number the case chose (an id the backend uses twice). */
export const ANY_ID = '«id»';

/** A request id as a backend might write it: numbers a C int reads oddly, strings, null. */
export function requestId(maxBytes: number): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 6, arbitrary: fc.integer({ min: -5, max: 100_000 }).map(String) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        '1.9',
        '-1.9',
        '2147483647',
        '2147483648',
        '-2147483649',
        '1e400',
        '-1e400',
        '"1"',
        'null',
        '-0',
        '[]',
        '{}',
        'true',
      ),
    },
    { weight: 1, arbitrary: small(maxBytes) },
  );
}

/** A string member's value: a known name (JSON-escaped), a name a firmware reads oddly, anything. */
function nameText(names: readonly string[], maxBytes: number): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...names).map((n) => JSON.stringify(n)) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        '""',
        '"a"b"',
        '"self.no_such_tool"',
        '"\u0000"',
        '"SELF.GET_DEVICE_STATUS"',
      ),
    },
    { weight: 2, arbitrary: small(maxBytes) },
  );
}

/** `arguments` for the tools of `properties` (their names), with values of every type. */
function argumentsText(properties: readonly string[], maxBytes: number): fc.Arbitrary<string> {
  const value = fc.oneof(
    { weight: 2, arbitrary: fc.integer({ min: -5, max: 200 }).map(String) },
    { weight: 1, arbitrary: fc.constantFrom('true', 'false', '"x"', '""', '1.5', '101', '-1') },
    { weight: 2, arbitrary: small(maxBytes) },
  );
  return fc.oneof(
    {
      weight: 5,
      arbitrary: objectText(
        properties.map((p) => [p, value] as const),
        0.6,
      ),
    },
    { weight: 1, arbitrary: small(maxBytes) },
  );
}

export interface RequestVocabulary {
  /** Tool names to call and to use as cursors. */
  readonly tools: readonly string[];
  /** Their property names. */
  readonly properties: readonly string[];
}

const METHODS = [
  '"initialize"',
  '"tools/list"',
  '"tools/call"',
  '"notifications/initialized"',
  '"notifications/cancelled"',
  '"ping"',
  '"resources/list"',
  '"Tools/List"',
  '"tools/list "',
  '""',
];

/** A JSON-RPC request as a backend might send a device: every method, every field bent. */
export function mcpRequestText(
  vocabulary: RequestVocabulary,
  maxBytes: number,
): fc.Arbitrary<string> {
  const params = fc.oneof(
    {
      weight: 6,
      arbitrary: objectText(
        [
          ['cursor', nameText(vocabulary.tools, maxBytes)],
          ['withUserTools', fc.oneof(fc.constantFrom('true', 'false'), small(maxBytes))],
          ['name', nameText(vocabulary.tools, maxBytes)],
          ['arguments', argumentsText(vocabulary.properties, maxBytes)],
          ['protocolVersion', small(maxBytes)],
          [
            'capabilities',
            fc.oneof(
              objectText([
                [
                  'vision',
                  objectText([
                    ['url', fc.oneof(fc.constant('"http://127.0.0.1:9/vision"'), small(maxBytes))],
                    ['token', small(maxBytes)],
                  ]),
                ],
              ]),
              small(maxBytes),
            ),
          ],
          ['clientInfo', small(maxBytes)],
        ],
        0.5,
      ),
    },
    { weight: 2, arbitrary: fragment(maxBytes) },
  );
  return capped(
    fc.oneof(
      {
        weight: 8,
        arbitrary: objectText([
          ['jsonrpc', fc.oneof({ weight: 8, arbitrary: fc.constant('"2.0"') }, small(maxBytes))],
          [
            'method',
            fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...METHODS) }, small(maxBytes)),
          ],
          ['id', fc.oneof({ weight: 1, arbitrary: fc.constant(ANY_ID) }, requestId(maxBytes))],
          ['params', params],
        ]),
      },
      {
        // Replies sent to the device, which it must drop.
        weight: 1,
        arbitrary: objectText([
          ['jsonrpc', fc.constant('"2.0"')],
          ['id', requestId(maxBytes)],
          ['result', small(maxBytes)],
          ['error', small(maxBytes)],
        ]),
      },
      { weight: 2, arbitrary: fragment(maxBytes) },
    ),
    maxBytes,
  );
}

const BACKEND_TYPES = [
  '"mcp"',
  '"tts"',
  '"stt"',
  '"llm"',
  '"system"',
  '"alert"',
  '"hello"',
  '"goodbye"',
  '"custom"',
  '"iot"',
  '""',
  '"MCP"',
];

/** A text frame a hostile backend might send a board after the hello (docs/protocol.md §6). */
export function backendFrameText(
  vocabulary: RequestVocabulary,
  maxBytes: number,
): fc.Arbitrary<string> {
  return capped(
    fc.oneof(
      {
        weight: 5,
        arbitrary: fc
          .tuple(
            fc.oneof(fc.constant('"s"'), small(maxBytes)),
            mcpRequestText(vocabulary, maxBytes),
          )
          .map(
            ([session, payload]) => `{"session_id":${session},"type":"mcp","payload":${payload}}`,
          ),
      },
      {
        weight: 4,
        arbitrary: objectText(
          [
            [
              'type',
              fc.oneof(
                { weight: 6, arbitrary: fc.constantFrom(...BACKEND_TYPES) },
                small(maxBytes),
              ),
            ],
            ['session_id', small(maxBytes)],
            [
              'state',
              fc.oneof(fc.constantFrom('"start"', '"stop"', '"sentence_start"'), small(maxBytes)),
            ],
            ['text', small(maxBytes)],
            ['emotion', small(maxBytes)],
            [
              'command',
              fc.oneof(
                { weight: 1, arbitrary: fc.constant('"reboot"') },
                { weight: 6, arbitrary: small(maxBytes) },
              ),
            ],
            ['status', small(maxBytes)],
            ['message', small(maxBytes)],
            ['payload', small(maxBytes)],
            ['transport', small(maxBytes)],
          ],
          0.6,
        ),
      },
      { weight: 2, arbitrary: fragment(maxBytes) },
    ),
    maxBytes,
  );
}
