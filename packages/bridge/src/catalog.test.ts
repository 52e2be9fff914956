import { describe, expect, it } from 'vitest';
import {
  type BoardTools,
  boardsFingerprint,
  buildCatalog,
  decodeCursor,
  encodeCursor,
  pageOf,
} from './catalog.js';

const SCHEMA = { type: 'object', properties: {} };

function board(deviceId: string, names: string[], userOnly: string[] = []): BoardTools {
  return {
    deviceId,
    board: 'bread-compact-wifi',
    tools: [
      ...names.map((name) => ({
        name,
        description: `does ${name}`,
        inputSchema: SCHEMA,
        userOnly: false,
      })),
      ...userOnly.map((name) => ({ name, description: name, inputSchema: SCHEMA, userOnly: true })),
    ],
  };
}

describe('buildCatalog', () => {
  it('orders boards by id, keeps schemas, leaves user-only tools out unless asked', () => {
    const boards = [
      board('f4:12:fa:00:00:02', ['self.b']),
      board('f4:12:fa:00:00:01', ['self.a'], ['self.reboot']),
    ];
    const catalog = buildCatalog(boards, { generation: 3, many: true, withUserTools: false });
    expect(catalog.tools.map((t) => t.name)).toEqual([
      'f412fa000001__self-a',
      'f412fa000002__self-b',
    ]);
    expect(catalog.tools[0]).toMatchObject({
      deviceId: 'f4:12:fa:00:00:01',
      tool: 'self.a',
      description: '[bread-compact-wifi f4:12:fa:00:00:01] does self.a',
      inputSchema: SCHEMA,
    });
    expect(catalog.byName.get('f412fa000002__self-b')?.tool).toBe('self.b');
    // Pinned to one board (not many): the board's names; user-only tools when asked.
    const one = buildCatalog([boards[1] as BoardTools], {
      generation: 1,
      many: false,
      withUserTools: true,
    });
    expect(one.tools.map((t) => t.name)).toEqual(['self-a', 'self-reboot']);
    expect(one.tools[0]?.description).toBe('does self.a');
  });

  it('serves a name once: a second tool under a taken name is set aside', () => {
    const catalog = buildCatalog(
      [board('f4:12:fa:00:00:01', ['self.a']), board('f4:12:fa:00:00:02', ['self.a'])],
      { generation: 1, many: false, withUserTools: false },
    );
    expect(catalog.tools.map((t) => t.deviceId)).toEqual(['f4:12:fa:00:00:01']);
    expect(catalog.collisions.map((t) => t.deviceId)).toEqual(['f4:12:fa:00:00:02']);
  });

  it('tells a changed tool set by its fingerprint, whatever the order of boards', () => {
    const a = board('f4:12:fa:00:00:01', ['self.a']);
    const b = board('f4:12:fa:00:00:02', ['self.b']);
    expect(boardsFingerprint([a, b])).toBe(boardsFingerprint([b, a]));
    expect(boardsFingerprint([a, b])).not.toBe(boardsFingerprint([a]));
    expect(boardsFingerprint([a])).not.toBe(
      boardsFingerprint([board('f4:12:fa:00:00:01', ['self.a', 'self.c'])]),
    );
  });
});

describe('pages and cursors', () => {
  const names = Array.from({ length: 7 }, (_, i) => `self.t${i}`);
  const catalog = buildCatalog([board('f4:12:fa:00:00:01', names)], {
    generation: 5,
    many: false,
    withUserTools: false,
  });

  it('cuts pages of pageSize with a cursor to the next one, none after the last', () => {
    const first = pageOf(catalog, 0, 3);
    expect(first.tools.map((t) => t.tool)).toEqual(['self.t0', 'self.t1', 'self.t2']);
    expect(first.nextCursor).toBe(encodeCursor(5, 3));
    expect(decodeCursor(first.nextCursor as string, catalog)).toEqual({ offset: 3 });
    const last = pageOf(catalog, 6, 3);
    expect(last.tools.map((t) => t.tool)).toEqual(['self.t6']);
    expect(last).not.toHaveProperty('nextCursor');
  });

  it('writes a cursor as base64url of the generation and the offset', () => {
    // {"g":5,"o":3}, base64url-encoded by hand.
    expect(encodeCursor(5, 3)).toBe('eyJnIjo1LCJvIjozfQ');
  });

  it('refuses cursors it never wrote, stale ones and ones past the end', () => {
    const bad = [
      '',
      'self.t3',
      'eyJnIjo1LCJvIjozfQ==', // padded: not how we write it
      Buffer.from('{"o":3,"g":5}').toString('base64url'),
      Buffer.from('{"g":5,"o":3,"x":1}').toString('base64url'),
      Buffer.from('{"g":5,"o":"3"}').toString('base64url'),
      encodeCursor(5, 0),
      encodeCursor(5, 7),
      encodeCursor(5, -1),
    ];
    for (const cursor of bad)
      expect(decodeCursor(cursor, catalog), cursor).toEqual({
        error: expect.stringMatching(/^unknown cursor/),
      });
    expect(decodeCursor(encodeCursor(4, 3), catalog)).toEqual({
      error: expect.stringMatching(/^stale cursor/),
    });
  });
});
