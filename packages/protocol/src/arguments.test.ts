import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { validateArgumentValues, validateToolCall } from './arguments.js';
import { fromJsonValue, toCInt } from './cjson.js';
import { defineTool, Prop, type Property, ToolRegistry } from './tools.js';

const volume = defineTool({
  name: 'self.speaker.set_volume',
  description: 'Sets the volume.',
  properties: [Prop.integer('volume', { min: 0, max: 100 })],
});
const registry = new ToolRegistry();
registry.add(volume, undefined);

const call = (params: unknown) =>
  validateToolCall(registry, params === undefined ? undefined : fromJsonValue(params));

describe('validateToolCall: the firmware order', () => {
  it.each([
    [undefined, 'Missing params'],
    [[1], 'Missing params'],
    [{ arguments: {} }, 'Missing name'],
    [{ name: 7 }, 'Missing name'],
    [{ name: 'self.speaker.set_volume', arguments: null }, 'Invalid arguments'],
    [{ name: 'nope', arguments: [1] }, 'Invalid arguments'],
    [{ name: 'nope' }, 'Unknown tool: nope'],
    [{ name: 'self.speaker.set_volume' }, 'Missing valid argument: volume'],
    [
      { name: 'self.speaker.set_volume', arguments: { volume: '5' } },
      'Missing valid argument: volume',
    ],
    [{ name: 'self.speaker.set_volume', arguments: { volume: -0.5 } }, undefined],
    [
      { name: 'self.speaker.set_volume', arguments: { volume: -1 } },
      'Value is below minimum allowed: 0',
    ],
    [
      { name: 'self.speaker.set_volume', arguments: { volume: 1e12 } },
      'Value exceeds maximum allowed: 100',
    ],
    [{ name: 'self.speaker.set_volume', arguments: { VOLUME: 7 } }, undefined],
  ])('%j → %s', (params, message) => {
    const outcome = call(params);
    expect(outcome.ok ? undefined : outcome.message).toBe(message);
  });

  it('checks properties in declaration order: a range error before a later missing property', () => {
    const tool = defineTool({
      name: 't',
      description: '',
      properties: [Prop.integer('a', { min: 0, max: 1 }), Prop.string('b')],
    });
    expect(validateArgumentValues(tool, { a: 5 })).toEqual({
      ok: false,
      message: 'Value exceeds maximum allowed: 1',
    });
    expect(validateArgumentValues(tool, { a: 1 })).toEqual({
      ok: false,
      message: 'Missing valid argument: b',
    });
  });
});

// An independent statement of docs/protocol.md §3.3 for one property, to check the validator against.
function expected(
  property: Property,
  value: unknown,
): { ok: true; value: unknown } | { ok: false; message: string } {
  const typed =
    (property.type === 'boolean' && typeof value === 'boolean') ||
    (property.type === 'string' && typeof value === 'string') ||
    (property.type === 'integer' && typeof value === 'number');
  if (!typed) {
    return property.default === undefined
      ? { ok: false, message: `Missing valid argument: ${property.name}` }
      : { ok: true, value: property.default };
  }
  if (property.type !== 'integer') return { ok: true, value };
  const int = toCInt(value as number);
  if (property.minimum !== undefined && int < property.minimum) {
    return { ok: false, message: `Value is below minimum allowed: ${property.minimum}` };
  }
  if (property.maximum !== undefined && int > property.maximum) {
    return { ok: false, message: `Value exceeds maximum allowed: ${property.maximum}` };
  }
  return { ok: true, value: int };
}

const int32 = fc.integer({ min: -2147483648, max: 2147483647 });
const propertyArb: fc.Arbitrary<Property> = fc
  .oneof(
    fc.record({
      type: fc.constant('boolean' as const),
      default: fc.option(fc.boolean(), { nil: undefined }),
    }),
    fc.record({
      type: fc.constant('string' as const),
      default: fc.option(fc.string(), { nil: undefined }),
    }),
    fc
      .tuple(
        int32,
        int32,
        fc.option(fc.double({ min: 0, max: 1, noNaN: true }), { nil: undefined }),
        fc.boolean(),
      )
      .map(([a, b, at, ranged]) => {
        const [min, max] = a <= b ? [a, b] : [b, a];
        const fallback = at === undefined ? undefined : Math.floor(min + (max - min) * at);
        return ranged
          ? { type: 'integer' as const, minimum: min, maximum: max, default: fallback }
          : { type: 'integer' as const, default: fallback };
      }),
  )
  .map((p) => Object.fromEntries(Object.entries(p).filter(([, v]) => v !== undefined)) as Property);
const valueArb = fc.oneof(
  fc.boolean(),
  fc.string(),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constant(null),
  fc.constant(undefined),
  fc.array(fc.integer(), { maxLength: 2 }),
);

describe('argument validation (property-based)', () => {
  it('agrees with the firmware rules for any schema and any arguments, first failure winning', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(propertyArb, valueArb), { minLength: 1, maxLength: 5 }),
        (pairs) => {
          const properties = pairs.map(([p], i) => ({ ...p, name: `p${i}` }) as Property);
          const tool = defineTool({ name: 't', description: '', properties });
          const args = Object.fromEntries(
            pairs.flatMap(([, v], i) => (v === undefined ? [] : [[`p${i}`, v]])),
          );
          const outcome = validateArgumentValues(tool, args);
          const values = new Map<string, unknown>();
          let want: { ok: true } | { ok: false; message: string } = { ok: true };
          for (const [i, property] of properties.entries()) {
            const one = expected(property, args[`p${i}`]);
            if (!one.ok) {
              want = one;
              break;
            }
            values.set(property.name, one.value);
          }
          if (want.ok) expect(outcome).toEqual({ ok: true, values });
          else expect(outcome).toEqual(want);
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe('argument validation under hostile values', () => {
  it.each([5_000, 100_000])('checks arguments with a member nested %i deep', (depth) => {
    let deep: unknown = 1;
    for (let i = 0; i < depth; i++) deep = [deep];
    expect(validateArgumentValues(volume, { volume: 5, extra: deep })).toMatchObject({ ok: true });
    expect(validateArgumentValues(volume, deep)).toEqual({
      ok: false,
      message: 'Missing valid argument: volume',
    });
    expect(validateArgumentValues(volume, { volume: deep })).toMatchObject({ ok: false });
  });

  it('answers any value with an outcome, never an exception', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 4 }), (args) => {
        expect(typeof validateArgumentValues(volume, args).ok).toBe('boolean');
        expect(typeof validateToolCall(registry, fromJsonValue(args)).ok).toBe('boolean');
      }),
      { seed: 42, numRuns: 1000 },
    );
  });
});
