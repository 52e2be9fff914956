import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type CJsonNode,
  cString,
  fromJsonValue,
  fromJsonValueShallow,
  getItem,
  parseCJson,
  printCJson,
  printCJsonNode,
  printCJsonNumber,
  toCInt,
  toJsonValue,
} from './cjson.js';

describe('parseCJson', () => {
  it('looks keys up case-insensitively and takes the first duplicate', () => {
    const root = parseCJson('{"JSONRPC":"2.0","Id":1,"id":2}');
    expect(getItem(root, 'jsonrpc')).toEqual({ kind: 'string', value: '2.0' });
    expect(getItem(root, 'id')).toEqual({ kind: 'number', value: 1 });
  });

  it('folds ASCII letters only, as tolower() in the C locale does', () => {
    const root = parseCJson('{"ÄBC":1}');
    expect(getItem(root, 'äbc')).toBeUndefined();
    expect(getItem(root, 'Äbc')).toEqual({ kind: 'number', value: 1 });
  });

  it('sees strings and keys as C strings, ending at an embedded NUL', () => {
    const root = parseCJson('{"method\\u0000x":"initialize\\u0000junk"}');
    const method = getItem(root, 'method');
    expect(method?.kind === 'string' && cString(method.value)).toBe('initialize');
  });

  it('ignores text after the first value and treats control bytes as whitespace', () => {
    expect(toJsonValue(parseCJson('\u0001 {"a":1} trailing') ?? { kind: 'null' })).toEqual({
      a: 1,
    });
  });

  it('takes the strtod prefix of a number run and fails on what follows', () => {
    expect(parseCJson('012')).toEqual({ kind: 'number', value: 12 });
    expect(parseCJson('[1.2.3]')).toBeUndefined();
    expect(parseCJson('-')).toBeUndefined();
    expect(parseCJson('1e999')).toEqual({ kind: 'number', value: Number.POSITIVE_INFINITY });
  });

  it('reads plain integers as strtod does, up to the 64-character number buffer', () => {
    expect(parseCJson('[-0,7,-12]')).toEqual({
      kind: 'array',
      items: [-0, 7, -12].map((value) => ({ kind: 'number', value })),
    });
    // A run that goes on with number characters is not a plain integer: strtod's prefix, then a failure.
    expect(parseCJson('[12-3]')).toBeUndefined();
    expect(parseCJson('[12e]')).toBeUndefined();
    expect(parseCJson('12e')).toEqual({ kind: 'number', value: 12 });
    // Only the first 64 characters of a run are copied: the 65th starts the next token.
    expect(parseCJson(`[${'1'.repeat(63)}]`)).toEqual({
      kind: 'array',
      items: [{ kind: 'number', value: Number('1'.repeat(63)) }],
    });
    expect(parseCJson(`[${'1'.repeat(64)}]`)).toEqual({
      kind: 'array',
      items: [{ kind: 'number', value: Number('1'.repeat(64)) }],
    });
    expect(parseCJson(`[${'1'.repeat(65)}]`)).toBeUndefined();
  });

  it('rejects what cJSON rejects', () => {
    for (const bad of [
      '',
      '{',
      '{"a"}',
      '{"a":1,}',
      '[1,]',
      '"\\x"',
      '"\\udc00"',
      '"\\ud800x"',
      'nul',
      "{'a':1}",
    ]) {
      expect(parseCJson(bad), bad).toBeUndefined();
    }
    expect(parseCJson(`${'['.repeat(1001)}${']'.repeat(1001)}`)).toBeUndefined();
    expect(parseCJson(`${'['.repeat(1000)}${']'.repeat(1000)}`)).toBeDefined();
  });

  it('decodes surrogate pairs', () => {
    expect(parseCJson('"\\ud83d\\ude00"')).toEqual({ kind: 'string', value: '😀' });
  });

  it('agrees with JSON.parse on any JSON text without duplicate keys', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        const text = JSON.stringify(value);
        const node = parseCJson(text);
        expect(node).toBeDefined();
        expect(toJsonValue(node ?? { kind: 'null' })).toEqual(JSON.parse(text));
      }),
    );
  });
});

describe('toCInt', () => {
  it('truncates toward zero and saturates at the int32 bounds', () => {
    expect(toCInt(18.9)).toBe(18);
    expect(toCInt(-7.9)).toBe(-7);
    expect(toCInt(3e10)).toBe(2147483647);
    expect(toCInt(-3e10)).toBe(-2147483648);
    expect(toCInt(2147483647)).toBe(2147483647);
    expect(Object.is(toCInt(-0.5), 0)).toBe(true);
  });
});

describe('printCJson', () => {
  it('prints integers with %d and other numbers with %1.15g, else %1.17g', () => {
    expect(printCJsonNumber(42)).toBe('42');
    expect(printCJsonNumber(-0)).toBe('0');
    expect(printCJsonNumber(0.5)).toBe('0.5');
    expect(printCJsonNumber(1e12)).toBe('1000000000000');
    expect(printCJsonNumber(1e20)).toBe('1e+20');
    expect(printCJsonNumber(1.5e-7)).toBe('1.5e-07');
    expect(printCJsonNumber(0.1 + 0.2)).toBe('0.30000000000000004');
    expect(printCJsonNumber(Number.NaN)).toBe('null');
  });

  it('round-trips every finite number it prints', () => {
    fc.assert(
      fc.property(fc.double({ noNaN: true, noDefaultInfinity: true }), (value) => {
        expect(Number(printCJsonNumber(value))).toBe(value === 0 ? 0 : value);
      }),
    );
  });

  it('prints compact JSON with keys in insertion order and C-string text', () => {
    expect(printCJson({ power: true, name: 'a"b\n', list: [1, null] })).toBe(
      '{"power":true,"name":"a\\"b\\n","list":[1,null]}',
    );
    expect(printCJson('cut\u0000here')).toBe('"cut"');
  });
});

// Hostile depth: cJSON's reader stops at CJSON_NESTING_LIMIT (1000); everything
// else here walks trees of any depth without recursion.

const nestedArrays = (depth: number, inner = '') =>
  `${'['.repeat(depth)}${inner}${']'.repeat(depth)}`;

function deepArray(depth: number): unknown {
  let value: unknown = 1;
  for (let i = 0; i < depth; i++) value = [value];
  return value;
}

describe('cJSON trees of any depth', () => {
  it.each([5_000, 100_000])('fails to parse a document nested %i deep, as cJSON does', (depth) => {
    expect(parseCJson(nestedArrays(depth))).toBeUndefined();
    expect(parseCJson(`${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`)).toBeUndefined();
    expect(parseCJson(`{"jsonrpc":"2.0","params":${nestedArrays(depth)}}`)).toBeUndefined();
  });

  it.each([5_000, 100_000])('converts and prints values nested %i deep', (depth) => {
    const value = deepArray(depth);
    const text = nestedArrays(depth, '1');
    expect(printCJson(value)).toBe(text);
    const node = fromJsonValue(value);
    expect(printCJsonNode(node)).toBe(text);
    let back = toJsonValue(node);
    let levels = 0;
    for (; Array.isArray(back); levels++) back = back[0] as typeof back;
    expect([levels, back]).toEqual([depth, 1]);
  });

  it('converts objects nested 5000 deep both ways', () => {
    const text = `${'{"k":'.repeat(5_000)}null${'}'.repeat(5_000)}`;
    const node = fromJsonValue(JSON.parse(text));
    expect(printCJsonNode(node)).toBe(text);
    expect(printCJson(toJsonValue(node))).toBe(text);
  });

  it('refuses a cycle with TypeError, as JSON.stringify does', () => {
    const cycle: unknown[] = [1];
    cycle.push([cycle]);
    expect(() => printCJson(cycle)).toThrow(TypeError);
    expect(() => fromJsonValue(cycle)).toThrow(TypeError);
    // A value shared by two members is no cycle.
    const shared = { a: 1 };
    expect(printCJson([shared, { shared }])).toBe('[{"a":1},{"shared":{"a":1}}]');
  });

  it('reads a "__proto__" key as data, as JSON.parse does', () => {
    const value = toJsonValue(parseCJson('{"__proto__":{"polluted":true},"a":1}') as CJsonNode);
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect((value as Record<string, unknown>).polluted).toBeUndefined();
    expect(Object.keys(value as object)).toEqual(['__proto__', 'a']);
    expect(value).toEqual(JSON.parse('{"__proto__":{"polluted":true},"a":1}'));
  });

  it('keeps the first key position and the last duplicate value, as JSON.parse does', () => {
    const text = '{"a":1,"b":2,"a":[3]}';
    const value = toJsonValue(parseCJson(text) as CJsonNode);
    expect(Object.keys(value as object)).toEqual(Object.keys(JSON.parse(text)));
    expect(value).toEqual(JSON.parse(text));
  });

  it('converts any JSON value both ways and prints it as its nodes print', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (raw) => {
        const value = JSON.parse(JSON.stringify(raw));
        const node = fromJsonValue(value);
        expect(toJsonValue(node)).toEqual(value);
        expect(printCJsonNode(node)).toBe(printCJson(value));
      }),
      { seed: 42, numRuns: 200 },
    );
  });

  it('never throws while parsing any text, however deep or broken', () => {
    const unit = fc.oneof(
      fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
      fc.constantFrom('[', ']', '{', '}', '"', '\\', ':', ',', '\\u', 'd800', '1e', 'null', ' '),
    );
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ unit, maxLength: 80 }),
          fc
            .tuple(fc.integer({ min: 990, max: 20_000 }), fc.constantFrom('[', '{"a":', '[{"b":'))
            .map(([depth, open]) => open.repeat(depth)),
        ),
        (text) => {
          const node = parseCJson(text);
          if (node !== undefined) printCJsonNode(node);
        },
      ),
      { seed: 42, numRuns: 1000 },
    );
  });
});

describe('fromJsonValueShallow', () => {
  it('converts one level: members keep their kind and scalars, containers come out empty', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100_000; i++) deep = [deep];
    expect(fromJsonValueShallow({ a: 1, b: 'x', c: deep, d: { e: 1 }, f: null })).toEqual({
      kind: 'object',
      entries: [
        ['a', { kind: 'number', value: 1 }],
        ['b', { kind: 'string', value: 'x' }],
        ['c', { kind: 'array', items: [] }],
        ['d', { kind: 'object', entries: [] }],
        ['f', { kind: 'null' }],
      ],
    });
    expect(fromJsonValueShallow(deep)).toEqual({
      kind: 'array',
      items: [{ kind: 'array', items: [] }],
    });
    expect(fromJsonValueShallow('s')).toEqual({ kind: 'string', value: 's' });
  });
});
