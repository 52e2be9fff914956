import { describe, expect, it } from 'vitest';
import { BoardConsole, type ConsoleLine } from './console.js';

const bytes = (text: string) => Buffer.byteLength(text);

function lines(console: BoardConsole): ConsoleLine[] {
  const seen: ConsoleLine[] = [];
  console.on('line', (line) => seen.push(line));
  return seen;
}

describe('BoardConsole line bound', () => {
  it('cuts a 1 MB log line at 1,024 bytes with a marker naming what was dropped', () => {
    const console = new BoardConsole();
    const seen = lines(console);
    console.log('E', 'WS', `Missing message type, data: ${'x'.repeat(1024 * 1024)}`);
    const line = seen[0]?.text ?? '';
    expect(line).toMatch(
      /^E \(\d+\) WS: Missing message type, data: x+…\[truncated: \d+ more bytes\]$/,
    );
    const kept = line.slice(0, line.indexOf('…'));
    expect(bytes(kept)).toBe(1024);
    const dropped = Number(/(\d+) more bytes/.exec(line)?.[1]);
    const prefix = /^E \(\d+\) WS: Missing message type, data: /.exec(line)?.[0] ?? '';
    expect(bytes(kept) + dropped).toBe(bytes(prefix) + 1024 * 1024);
    expect(seen[0]?.level).toBe('E');
    expect(seen[0]?.tag).toBe('WS');
  });

  it('cuts raw lines too, never inside a UTF-8 character', () => {
    const console = new BoardConsole();
    const seen = lines(console);
    console.raw('语'.repeat(400_000));
    const line = seen[0]?.text ?? '';
    const kept = line.slice(0, line.indexOf('…'));
    expect(kept).toBe('语'.repeat(341));
    expect(line.endsWith(`…[truncated: ${400_000 * 3 - 341 * 3} more bytes]`)).toBe(true);
    console.raw(`a${'😀'.repeat(1000)}`);
    const emoji = seen[1]?.text ?? '';
    expect(emoji.slice(0, emoji.indexOf('…'))).toBe(`a${'😀'.repeat(255)}`);
  });

  it('leaves lines of up to 1,024 bytes as they are', () => {
    const console = new BoardConsole();
    const seen = lines(console);
    console.raw('y'.repeat(1024));
    console.raw('é'.repeat(512));
    expect(seen.map((line) => line.text)).toEqual(['y'.repeat(1024), 'é'.repeat(512)]);
  });

  it('keeps its history bounded in bytes as well as in lines', () => {
    const console = new BoardConsole({ historyLimit: 2000, historyBytesLimit: 64 * 1024 });
    for (let i = 0; i < 1000; i++) console.raw(`${i} ${'z'.repeat(5000)}`);
    const total = console.history.reduce((sum, line) => sum + bytes(line.text), 0);
    expect(total).toBeLessThanOrEqual(64 * 1024);
    expect(console.history.at(-1)?.text.startsWith('999 ')).toBe(true);
    const small = new BoardConsole({ historyLimit: 3 });
    for (const text of ['a', 'b', 'c', 'd']) small.raw(text);
    expect(small.history.map((line) => line.text)).toEqual(['b', 'c', 'd']);
  });

  it('holds at most 512 KiB of history by default, however long the lines', () => {
    const console = new BoardConsole();
    for (let i = 0; i < 2500; i++) console.raw('w'.repeat(100_000));
    const total = console.history.reduce((sum, line) => sum + bytes(line.text), 0);
    expect(total).toBeLessThanOrEqual(512 * 1024);
  });
});
