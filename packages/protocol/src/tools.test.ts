import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ProtocolError } from './errors.js';
import { byteLength, defineTool, Prop, ToolRegistry } from './tools.js';

describe('tool serialisation', () => {
  it('matches the firmware byte for byte: key order, ranges, defaults, required', () => {
    const tool = defineTool({
      name: 'self.display.show_text',
      description: 'Shows a short text on the screen.',
      properties: [
        Prop.string('text'),
        Prop.integer('seconds', { default: 5, min: 1, max: 60 }),
        Prop.boolean('bold', { default: false }),
      ],
    });
    expect(tool.json).toBe(
      '{"name":"self.display.show_text","description":"Shows a short text on the screen.","inputSchema":{"type":"object","properties":{"text":{"type":"string"},"seconds":{"type":"integer","default":5,"minimum":1,"maximum":60},"bold":{"type":"boolean","default":false}},"required":["text"]}}',
    );
  });

  it('omits required when every property has a default, and adds the audience for user-only tools', () => {
    const tool = defineTool({
      name: 'self.upgrade_firmware',
      description: 'Upgrades.',
      properties: [Prop.string('url', { default: 'The URL "to" use' })],
      userOnly: true,
    });
    expect(tool.json).toBe(
      '{"name":"self.upgrade_firmware","description":"Upgrades.","inputSchema":{"type":"object","properties":{"url":{"type":"string","default":"The URL \\"to\\" use"}}},"annotations":{"audience":["user"]}}',
    );
  });

  it('counts bytes, not characters', () => {
    const tool = defineTool({ name: 'self.say', description: '你好' });
    expect(tool.jsonBytes).toBe(tool.json.length + 4);
    expect(byteLength('é')).toBe(2);
  });

  it.each([
    [{ name: '', description: 'd' }, 'name'],
    [
      {
        name: 'a',
        description: 'd',
        properties: [Prop.integer('v', { default: 0, min: 1, max: 5 })],
      },
      'properties[0].default',
    ],
    [
      {
        name: 'a',
        description: 'd',
        properties: [{ name: 'v', type: 'integer', minimum: 1 } as const],
      },
      'properties[0].minimum',
    ],
    [
      { name: 'a', description: 'd', properties: [Prop.integer('v', { min: 5, max: 1 })] },
      'properties[0].minimum',
    ],
    [
      { name: 'a', description: 'd', properties: [Prop.integer('v', { default: 1.5 })] },
      'properties[0].default',
    ],
    [
      { name: 'a', description: 'd', properties: [Prop.string('v'), Prop.boolean('v')] },
      'properties[1].name',
    ],
    [
      { name: 'a', description: 'd', properties: [{ name: 'v', type: 'number' } as never] },
      'properties[0].type',
    ],
  ])('refuses a definition the firmware would not accept (%#)', (definition, field) => {
    try {
      defineTool(definition);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(ProtocolError);
      expect((error as ProtocolError).code).toBe('INVALID_TOOL');
      expect((error as ProtocolError).field).toBe(field);
    }
  });
});

describe('ToolRegistry', () => {
  it('keeps registration order and rejects duplicate names', () => {
    const registry = new ToolRegistry<string>();
    registry.add({ name: 'b', description: '' }, 'first');
    registry.add({ name: 'a', description: '' }, 'second');
    expect(registry.tools.map((t) => t.name)).toEqual(['b', 'a']);
    expect(registry.find('a')?.handler).toBe('second');
    expect(registry.find('A')).toBeUndefined();
    expect(() => registry.add({ name: 'a', description: '' }, 'third')).toThrow(
      expect.objectContaining({ code: 'DUPLICATE_TOOL' }),
    );
  });
});

describe('defineTool under hostile definitions', () => {
  it('refuses what is no definition with INVALID_TOOL, never another error', () => {
    let deep: unknown = 'integer';
    for (let i = 0; i < 100_000; i++) deep = [deep];
    for (const definition of [
      null,
      7,
      { name: 'a', description: '', properties: 'x' },
      { name: 'a', description: '', properties: [null] },
      { name: 'a', description: '', properties: [{ name: 'p', type: deep }] },
      { name: 'a', description: '', properties: [{ name: 'p', type: 10n }] },
    ]) {
      expect(() => defineTool(definition as never), String(definition)).toThrow(ProtocolError);
    }
  });

  it('throws nothing but ProtocolError for any definition', () => {
    const anyValue = fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.constant(undefined));
    const propertyArb = fc.oneof(
      anyValue,
      fc.record(
        {
          name: fc.oneof(fc.string(), anyValue),
          type: fc.oneof(fc.constantFrom('boolean', 'integer', 'string'), anyValue),
          default: anyValue,
          minimum: fc.oneof(fc.integer(), anyValue),
          maximum: fc.oneof(fc.integer(), anyValue),
        },
        { requiredKeys: [] },
      ),
    );
    fc.assert(
      fc.property(
        fc.oneof(
          anyValue,
          fc.record(
            {
              name: fc.oneof(fc.string(), anyValue),
              description: fc.oneof(fc.string(), anyValue),
              properties: fc.oneof(fc.array(propertyArb, { maxLength: 4 }), anyValue),
              userOnly: anyValue,
            },
            { requiredKeys: [] },
          ),
        ),
        (definition) => {
          try {
            defineTool(definition as never);
          } catch (error) {
            expect(error).toBeInstanceOf(ProtocolError);
          }
        },
      ),
      { seed: 42, numRuns: 1000 },
    );
  });
});
