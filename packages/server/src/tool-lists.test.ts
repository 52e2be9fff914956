import { describe, expect, it } from 'vitest';
import { SharedPages, SharedValues, ToolLists, toolListKey } from './tool-lists.js';

const tool = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  description: `the ${name} tool`,
  inputSchema: { type: 'object', properties: {} },
  ...extra,
});

describe('toolListKey', () => {
  it('is the same for the same listing, and differs when the plain names or the tools do', () => {
    const all = [tool('a'), tool('b')];
    const key = toolListKey(new Set(['a', 'b']), all);
    expect(toolListKey(new Set(['a', 'b']), [tool('a'), tool('b')])).toBe(key);
    expect(toolListKey(new Set(['a']), all)).not.toBe(key);
    expect(toolListKey(new Set(['a', 'b']), [tool('a'), tool('c')])).not.toBe(key);
  });
});

describe('ToolLists', () => {
  it('gives every holder of a key the same frozen list, released with the last hold', () => {
    const lists = new ToolLists();
    const all = [tool('a')];
    const plain = new Set(['a']);
    const key = toolListKey(plain, all);
    const first = lists.hold(key, plain, all);
    const second = lists.hold(key, plain, [tool('ignored')]);
    expect(second).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
    expect(lists.size).toBe(1);
    lists.release(key);
    expect(lists.size).toBe(1);
    lists.release(key);
    expect(lists.size).toBe(0);
    lists.release(key);
    expect(lists.size).toBe(0);
  });

  it('marks user-only tools by their audience or by their absence from the plain listing', () => {
    const lists = new ToolLists();
    const all = [
      tool('plain'),
      tool('audience', { annotations: { audience: ['user'] } }),
      tool('hidden'),
      { name: 7, inputSchema: null },
    ];
    const plain = new Set(['plain', 'audience', '']);
    const tools = lists.hold(toolListKey(plain, all), plain, all);
    expect(tools.map((t) => [t.name, t.userOnly])).toEqual([
      ['plain', false],
      ['audience', true],
      ['hidden', true],
      ['', false],
    ]);
    expect(tools[3]).toMatchObject({ description: '', inputSchema: {} });
    expect(tools[0]?.raw).toBe(all[0]);
  });
});

describe('toolListKey of frozen tools', () => {
  it('is the key of the same listing unfrozen, however often it is asked for', () => {
    const frozen = [tool('a'), tool('b')].map((t) => Object.freeze(t));
    const key = toolListKey(new Set(['a', 'b']), [tool('a'), tool('b')]);
    expect(toolListKey(new Set(['a', 'b']), frozen)).toBe(key);
    expect(toolListKey(new Set(['a', 'b']), [...frozen])).toBe(key);
    expect(toolListKey(new Set(['a']), frozen)).not.toBe(key);
    expect(toolListKey(new Set(['a', 'b']), frozen.slice(0, 1))).not.toBe(key);
    expect(toolListKey(new Set(['a', 'b']), frozen)).toBe(key);
  });
});

describe('SharedPages', () => {
  it('gives every session the first copy of a page with the same text, deeply frozen', () => {
    const pages = new SharedPages();
    const text = '{"tools":[{"name":"a","inputSchema":{"type":"object"}}]}';
    const first = JSON.parse(text) as { tools: { inputSchema: object }[] };
    expect(pages.share(first, text)).toBe(first);
    expect(pages.share(JSON.parse(text), text)).toBe(first);
    expect(Object.isFrozen(first)).toBe(true);
    expect(Object.isFrozen(first.tools[0]?.inputSchema)).toBe(true);
    const other = JSON.parse('{"tools":[]}');
    expect(pages.share(other, '{"tools":[]}')).toBe(other);
  });

  it('keeps a page without its exact text, or a long one, as it came (not frozen)', () => {
    const pages = new SharedPages();
    const page = { tools: [] };
    expect(pages.share(page, undefined)).toBe(page);
    expect(Object.isFrozen(page)).toBe(false);
    const long = { tools: [] };
    expect(pages.share(long, 'x'.repeat(20_000))).toBe(long);
    expect(Object.isFrozen(long)).toBe(false);
  });

  it('keeps the most recent pages only', () => {
    const pages = new SharedPages(2);
    const a = { n: 1 };
    pages.share(a, 'a');
    pages.share({ n: 2 }, 'b');
    pages.share({ n: 3 }, 'c');
    const again = { n: 1 };
    expect(pages.share(again, 'a')).toBe(again);
  });
});

describe('SharedValues', () => {
  it('gives every holder the first copy of an equal value, deeply frozen', () => {
    const values = new SharedValues();
    const first = { serverInfo: { name: 'b', version: '1' }, capabilities: { tools: {} } };
    expect(values.share(first)).toBe(first);
    expect(
      values.share({ serverInfo: { name: 'b', version: '1' }, capabilities: { tools: {} } }),
    ).toBe(first);
    expect(Object.isFrozen(first.capabilities.tools)).toBe(true);
    const other = { serverInfo: { name: 'b', version: '2' }, capabilities: { tools: {} } };
    expect(values.share(other)).toBe(other);
  });

  it('keeps a long value as it came (not frozen), and the most recent values only', () => {
    const values = new SharedValues(2);
    const long = { text: 'x'.repeat(20_000) };
    expect(values.share(long)).toBe(long);
    expect(Object.isFrozen(long)).toBe(false);
    values.share({ n: 1 });
    values.share({ n: 2 });
    values.share({ n: 3 });
    const again = { n: 1 };
    expect(values.share(again)).toBe(again);
  });
});
