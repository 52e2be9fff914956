import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ProtocolError } from './errors.js';
import { fixtureToolReturn, parseToolSet } from './tool-set.js';

function caught(fn: () => unknown): ProtocolError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ProtocolError);
    return error as ProtocolError;
  }
  throw new Error('expected a ProtocolError, nothing was thrown');
}

describe('parseToolSet', () => {
  it('reads a corpus tool set', () => {
    const [entry] = parseToolSet([
      {
        name: 'self.volume',
        description: 'Set volume',
        properties: [{ name: 'volume', type: 'integer', min: 0, max: 100 }],
        returns: { kind: 'json', value: '{"ok":true}' },
      },
    ]);
    expect(entry?.tool.name).toBe('self.volume');
    expect(entry && fixtureToolReturn(entry, new Map())).toEqual({ json: { ok: true } });
  });

  // Tool sets are files a person passes to `xiaozhi-mcp page --tools`.
  it('refuses a json return that is not JSON with INVALID_TOOL naming it', () => {
    const error = caught(() =>
      parseToolSet([{ name: 'a', description: '', returns: { kind: 'json', value: '{' } }]),
    );
    expect([error.code, error.field]).toEqual(['INVALID_TOOL', 'tools[0].returns.value']);
  });

  it('refuses a type or kind JSON cannot print with INVALID_TOOL, not a RangeError', () => {
    let deep: unknown = 'x';
    for (let i = 0; i < 100_000; i++) deep = [deep];
    const type = caught(() =>
      parseToolSet([{ name: 'a', description: '', properties: [{ name: 'p', type: deep }] }]),
    );
    expect(type.code).toBe('INVALID_TOOL');
    const kind = caught(() =>
      parseToolSet([{ name: 'a', description: '', returns: { kind: deep } }]),
    );
    expect(kind.field).toBe('tools[0].returns.kind');
  });

  it('throws nothing but ProtocolError for any value', () => {
    const anyValue = fc.jsonValue({ maxDepth: 2 });
    const toolArb = fc.oneof(
      anyValue,
      fc.record(
        {
          name: fc.oneof(fc.constantFrom('a', 'b'), anyValue),
          description: fc.oneof(fc.constant(''), anyValue),
          properties: fc.oneof(
            fc.array(
              fc.record(
                {
                  name: fc.oneof(fc.constantFrom('p', 'q'), anyValue),
                  type: fc.oneof(fc.constantFrom('boolean', 'integer', 'string'), anyValue),
                  default: anyValue,
                  min: anyValue,
                  max: anyValue,
                },
                { requiredKeys: [] },
              ),
              { maxLength: 3 },
            ),
            anyValue,
          ),
          returns: fc.oneof(
            fc.record(
              {
                kind: fc.oneof(
                  fc.constantFrom('bool', 'int', 'string', 'json', 'throw', 'image'),
                  anyValue,
                ),
                value: fc.oneof(fc.constantFrom('{"a":1}', '{', 'x'), anyValue),
                mime: anyValue,
              },
              { requiredKeys: [] },
            ),
            anyValue,
          ),
        },
        { requiredKeys: [] },
      ),
    );
    fc.assert(
      fc.property(
        fc.oneof(
          fc.array(toolArb, { maxLength: 3 }),
          fc.record({ tools: fc.array(toolArb) }),
          anyValue,
        ),
        (input) => {
          try {
            parseToolSet(input);
          } catch (error) {
            expect(error).toBeInstanceOf(ProtocolError);
          }
        },
      ),
      { seed: 42, numRuns: 300 },
    );
  });
});
