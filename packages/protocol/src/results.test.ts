import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  encodeBase64,
  encodeToolResult,
  ImageContent,
  readToolResult,
  toolResultText,
} from './results.js';

describe('encodeToolResult', () => {
  it.each([
    [true, 'true'],
    [false, 'false'],
    [-42, '-42'],
    [7.9, '7'],
    [3e10, '2147483647'],
    ['hello "world"\nsecond', 'hello \\"world\\"\\nsecond'],
    ['cut\u0000off', 'cut'],
    [{ json: { power: true } }, '{\\"power\\":true}'],
    [{ json: '{"already":"text"}' }, '{\\"already\\":\\"text\\"}'],
  ])('%j becomes one text item', (value, text) => {
    expect(encodeToolResult(value)).toBe(
      `{"content":[{"type":"text","text":"${text}"}],"isError":false}`,
    );
  });

  it('encodes base64 like the standard alphabet with padding', () => {
    const bytes = new Uint8Array([0, 1, 2, 250, 251, 252, 253]);
    expect(encodeBase64(bytes)).toBe(Buffer.from(bytes).toString('base64'));
    expect(encodeBase64(new Uint8Array([]))).toBe('');
  });
});

describe('readToolResult', () => {
  it('unwraps the firmware nested image into standard MCP image content', () => {
    const wire = JSON.parse(
      encodeToolResult(new ImageContent('image/jpeg', new Uint8Array([255, 216]))),
    );
    expect(readToolResult(wire)).toEqual({
      content: [{ type: 'image', mimeType: 'image/jpeg', data: '/9g=' }],
      isError: false,
    });
  });

  it('passes standard content through and joins text', () => {
    const result = readToolResult({
      content: [
        { type: 'text', text: 'a' },
        { type: 'image', mimeType: 'image/png', data: 'AA==' },
        { type: 'text', text: 'b' },
      ],
      isError: true,
    });
    expect(result.isError).toBe(true);
    expect(result.content[1]).toEqual({ type: 'image', mimeType: 'image/png', data: 'AA==' });
    expect(toolResultText(result)).toBe('a\nb');
  });

  it('keeps an image item whose inner text is not JSON as received', () => {
    expect(readToolResult({ content: [{ type: 'image', image: 'not json' }] }).content[0]).toEqual({
      type: 'image',
      image: 'not json',
    });
    expect(readToolResult(null)).toEqual({ content: [], isError: false });
  });
});

describe('readToolResult under hostile results', () => {
  it('reads any value without throwing', () => {
    const itemArb = fc.oneof(
      fc.jsonValue({ maxDepth: 3 }),
      fc.record(
        {
          type: fc.oneof(fc.constantFrom('text', 'image'), fc.jsonValue({ maxDepth: 1 })),
          text: fc.jsonValue({ maxDepth: 1 }),
          image: fc.oneof(
            fc.string(),
            fc.constant('{"mimeType":"image/png","data":"AA=="}'),
            fc.jsonValue({ maxDepth: 1 }),
          ),
          data: fc.jsonValue({ maxDepth: 1 }),
        },
        { requiredKeys: [] },
      ),
    );
    fc.assert(
      fc.property(
        fc.oneof(
          fc.record({
            content: fc.oneof(fc.array(itemArb), fc.jsonValue()),
            isError: fc.jsonValue(),
          }),
          fc.jsonValue({ maxDepth: 3 }),
        ),
        (value) => {
          const result = readToolResult(value);
          expect(typeof toolResultText(result)).toBe('string');
        },
      ),
      { seed: 42, numRuns: 1000 },
    );
  });

  it('reads content nested 100000 deep', () => {
    const deep = JSON.parse(
      `{"content":[{"type":"text","text":"ok","x":${'['.repeat(100_000)}${']'.repeat(100_000)}}]}`,
    );
    const inner = `{"mimeType":"image/png","data":"AA==","x":${'['.repeat(100_000)}${']'.repeat(100_000)}}`;
    expect(toolResultText(readToolResult(deep))).toBe('ok');
    expect(readToolResult({ content: [{ type: 'image', image: inner }] }).content[0]).toEqual({
      type: 'image',
      mimeType: 'image/png',
      data: 'AA==',
    });
  });
});
