/**
 * Reading replicas: what parseReplica refuses (each refusal names its field) and what
 * replicaFromTools writes (pages equal to the firmware's, the corpus's among them).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { formatReplica, parseReplica, ReplicaError, type ReplicaFile } from './replica-file.js';
import { replicaFromTools } from './replica-from-tools.js';

const corpusDir = join(
  resolve(dirname(fileURLToPath(import.meta.url)), '../../../..'),
  'fixtures/corpus/mcp',
);

function refusal(run: () => unknown): ReplicaError {
  try {
    run();
  } catch (error) {
    if (error instanceof ReplicaError) return error;
    throw error;
  }
  throw new Error('expected a ReplicaError');
}

/** 40 tools with Chinese descriptions, the last 6 user-only: several pages either walk. */
export function chineseToolsFile(): string {
  const tools = Array.from({ length: 40 }, (_, i) => ({
    name: `self.舵机${i}.move`,
    description:
      `把第 ${i} 号舵机转到目标角度，缓慢而平稳地移动。角度以度为单位，速度越大越快。用于机械臂、机器人的手臂和腿部的动作。`.repeat(
        3,
      ),
    user_only: i >= 34,
    properties: [
      { name: 'angle', type: 'integer', min: 0, max: 180 },
      { name: 'speed', type: 'integer', default: 50, min: 1, max: 100 },
      { name: '说明', type: 'string', default: '无' },
      { name: 'hold', type: 'boolean', default: false },
    ],
  }));
  return JSON.stringify({ board: { variant: 'arm-cn', firmwareVersion: '2.0.1' }, tools });
}

const SMALL = JSON.stringify({
  tools: [
    {
      name: 'self.lamp.set',
      description: 'Turns the lamp on or off',
      properties: [{ name: 'on', type: 'boolean' }],
    },
    {
      name: 'self.speaker.set_volume',
      description: 'Sets the volume',
      properties: [{ name: 'volume', type: 'integer', min: 0, max: 100 }],
    },
    { name: 'self.system.info', description: 'System info', user_only: true },
  ],
});

/** A replica file's JSON, edited freely: the tests write what a bad file holds. */
// biome-ignore lint/suspicious/noExplicitAny: the edits reach any depth of an untyped file
type Loose = any;

function edited(edit: (file: Loose) => void): string {
  const file = JSON.parse(formatReplica(replicaFromTools(SMALL))) as Loose;
  edit(file);
  return JSON.stringify(file);
}

describe('replicaFromTools', () => {
  it('fills the board defaults and pages both walks', () => {
    const replica = replicaFromTools(SMALL);
    expect(replica.board).toEqual({
      variant: 'replica',
      firmwareVersion: '1.0.0',
      chip: 'esp32s3',
      flashSizeMb: 16,
    });
    expect(replica.pages?.plain).toEqual([
      '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"self.lamp.set","description":"Turns the lamp on or off","inputSchema":{"type":"object","properties":{"on":{"type":"boolean"}},"required":["on"]}},{"name":"self.speaker.set_volume","description":"Sets the volume","inputSchema":{"type":"object","properties":{"volume":{"type":"integer","minimum":0,"maximum":100}},"required":["volume"]}}]}}',
    ]);
    expect(replica.pages?.withUserTools).toHaveLength(1);
    expect(replica.pages?.withUserTools[0]).toContain('"self.system.info"');
    expect(replica.pages?.withUserTools[0]?.startsWith('{"jsonrpc":"2.0","id":2,')).toBe(true);
  });

  it('pages 40 tools with Chinese descriptions and user-only tools into several pages, and the file reads back', () => {
    const replica = replicaFromTools(chineseToolsFile(), 'arm.json');
    expect(replica.pages?.plain.length).toBeGreaterThan(2);
    expect(replica.pages?.withUserTools.length).toBeGreaterThan(replica.pages?.plain.length ?? 0);
    const text = formatReplica(replica);
    expect(text.endsWith('}\n')).toBe(true);
    const back = parseReplica(text, 'arm.json');
    expect(back.pages).toEqual(replica.pages);
    expect(formatReplica(back)).toBe(text);
    // Every tool is on exactly one page of the walk with user tools, in order.
    const listed = back.pages?.withUserTools.flatMap((p) =>
      (JSON.parse(p).result.tools as { name: string }[]).map((t) => t.name),
    );
    expect(listed).toEqual(back.tools.map((t) => t.name));
  });

  it('names the field of a bad tool', () => {
    const bad = JSON.parse(SMALL);
    bad.tools[1].properties[0].min = 'zero';
    const error = refusal(() => replicaFromTools(JSON.stringify(bad)));
    expect(error.code).toBe('REPLICA_INVALID');
    expect(error.field).toBe('tools[1].properties[0].min');
  });

  it("ends a walk with the firmware's error where a tool fits no page", () => {
    const big = { tools: [{ name: 'self.big', description: 'x'.repeat(9000) }] };
    const replica = replicaFromTools(JSON.stringify(big));
    expect(replica.pages?.plain).toEqual([
      '{"jsonrpc":"2.0","id":1,"error":{"message":"Failed to add tool self.big because of payload size limit"}}',
    ]);
  });
});

interface CorpusCase {
  name: string;
  tools: unknown[];
  exchanges?: { request: string; replies: string[] }[];
}

interface ListExchange {
  readonly cursor: string;
  readonly withUserTools: boolean;
  readonly reply: string;
}

/** A case's tools/list exchanges with one reply each, requests as the firmware reads them. */
function listExchanges(c: CorpusCase): ListExchange[] {
  const out: ListExchange[] = [];
  for (const { request, replies } of c.exchanges ?? []) {
    let r: { method?: unknown; params?: { cursor?: unknown; withUserTools?: unknown } };
    try {
      r = JSON.parse(request);
    } catch {
      continue; // the corpus's deliberately broken requests
    }
    if (r.method !== 'tools/list' || replies.length !== 1) continue;
    const cursor = typeof r.params?.cursor === 'string' ? r.params.cursor : '';
    out.push({
      cursor,
      withUserTools: r.params?.withUserTools === true,
      reply: replies[0] as string,
    });
  }
  return out;
}

/** The cursor each page of a walk is asked with: '' first, then the previous page's nextCursor. */
function pageCursors(pages: readonly string[]): string[] {
  return pages.map((_, i) =>
    i === 0 ? '' : (/"nextCursor":"([^"]*)"\}\}$/.exec(pages[i - 1] as string)?.[1] ?? '\u0000'),
  );
}

const ID = /^\{"jsonrpc":"2\.0","id":-?\d+,/;

describe('replicaFromTools against the corpus', () => {
  const cases = readdirSync(corpusDir)
    .filter((f) => f.endsWith('.json'))
    .map((f) => JSON.parse(readFileSync(join(corpusDir, f), 'utf8')) as CorpusCase)
    .filter((c) => listExchanges(c).length > 0);

  it('finds the corpus tools/list cases', () => {
    expect(cases.map((c) => c.name)).toEqual(
      expect.arrayContaining([
        'list-paging',
        'list-small',
        'list-user-only',
        'list-oversize',
        'list-only-user-tools',
      ]),
    );
  });

  for (const c of cases) {
    it(`${c.name}: every page of both walks the case asked for equals the firmware's reply byte for byte`, () => {
      const replica = replicaFromTools(JSON.stringify({ tools: c.tools }));
      const recordedWalks: Record<'plain' | 'withUserTools', string[]> = {
        plain: [],
        withUserTools: [],
      };
      let compared = 0;
      for (const walk of ['plain', 'withUserTools'] as const) {
        const pages = replica.pages?.[walk] ?? [];
        const cursors = pageCursors(pages);
        for (const exchange of listExchanges(c)) {
          if (exchange.withUserTools !== (walk === 'withUserTools')) continue;
          const index = cursors.indexOf(exchange.cursor);
          if (index === -1) continue; // a cursor no walk from the start asks with
          const id = ID.exec(exchange.reply)?.[0] ?? '';
          expect((pages[index] as string).replace(ID, id)).toBe(exchange.reply);
          compared++;
          if (index === recordedWalks[walk].length) recordedWalks[walk].push(exchange.reply);
        }
        if (recordedWalks[walk].length !== pages.length) recordedWalks[walk] = [];
      }
      expect(compared).toBeGreaterThan(0);
      // A whole walk the case recorded, as a replica's pages, passes the load check.
      const recordedReplica: ReplicaFile = { ...replica, pages: recordedWalks };
      expect(() => parseReplica(formatReplica(recordedReplica))).not.toThrow();
    });
  }
});

describe('parseReplica refusals', () => {
  it('a wrong schema version', () => {
    const error = refusal(() =>
      parseReplica(
        edited((f) => {
          f.schemaVersion = 2;
        }),
        'r.json',
      ),
    );
    expect(error.code).toBe('REPLICA_SCHEMA_VERSION');
    expect(error.field).toBe('schemaVersion');
    expect(error.message).toContain('r.json');
  });

  it('a missing field, by its path', () => {
    let error = refusal(() =>
      parseReplica(
        edited((f) => {
          delete f.board.firmwareVersion;
        }),
      ),
    );
    expect([error.code, error.field]).toEqual(['REPLICA_INVALID', 'board.firmwareVersion']);
    error = refusal(() =>
      parseReplica(
        edited((f) => {
          delete f.tools[1].properties[0].max;
        }),
      ),
    );
    expect([error.code, error.field]).toEqual(['REPLICA_INVALID', 'tools[1].properties[0].max']);
    error = refusal(() =>
      parseReplica(
        edited((f) => {
          delete f.tools[0].description;
        }),
      ),
    );
    expect([error.code, error.field]).toEqual(['REPLICA_INVALID', 'tools[0].description']);
    error = refusal(() =>
      parseReplica(
        edited((f) => {
          f.calls = [{ tool: 'self.lamp.set', arguments: {}, reply: 'x' }];
        }),
      ),
    );
    expect([error.code, error.field]).toEqual(['REPLICA_INVALID', 'calls[0].delayMs']);
  });

  it('secrets, naming the field', () => {
    let error = refusal(() =>
      parseReplica(
        edited((f) => {
          f.board.token = 'abc';
        }),
      ),
    );
    expect([error.code, error.field]).toEqual(['REPLICA_SECRET', 'board.token']);
    error = refusal(() =>
      parseReplica(
        edited((f) => {
          f.wifi = { ssid: 'rig', password: 'pw' };
        }),
      ),
    );
    expect([error.code, error.field]).toEqual(['REPLICA_SECRET', 'wifi.password']);
    error = refusal(() =>
      parseReplica(
        edited((f) => {
          f.activation_key = 'k';
        }),
      ),
    );
    expect([error.code, error.field]).toEqual(['REPLICA_SECRET', 'activation_key']);
    error = refusal(() =>
      parseReplica(
        edited((f) => {
          f.calls = [
            {
              tool: 'self.lamp.set',
              arguments: { on: true, Authorization: 'Bearer x' },
              reply: 'r',
              delayMs: 0,
            },
          ];
        }),
      ),
    );
    expect([error.code, error.field]).toEqual([
      'REPLICA_SECRET',
      'calls[0].arguments.Authorization',
    ]);
    error = refusal(() =>
      parseReplica(
        edited((f) => {
          f.hello = '{"type":"hello","token":"t"}';
        }),
      ),
    );
    expect([error.code, error.field]).toEqual(['REPLICA_SECRET', 'hello.token']);
    const reply = `{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":${JSON.stringify('{"wifi":{"ssid":"rig","passwd":"x"}}')}}],"isError":false}}`;
    error = refusal(() =>
      parseReplica(
        edited((f) => {
          f.calls = [{ tool: 'self.lamp.set', arguments: { on: true }, reply, delayMs: 0 }];
        }),
      ),
    );
    expect([error.code, error.field]).toEqual([
      'REPLICA_SECRET',
      'calls[0].reply.result.content[0].text.wifi.passwd',
    ]);
  });

  it('a tool property named password is a schema, not a secret', () => {
    const file = {
      tools: [
        {
          name: 'self.wifi.join',
          description: 'Joins',
          properties: [{ name: 'password', type: 'string' }],
        },
      ],
    };
    const replica = replicaFromTools(JSON.stringify(file));
    expect(parseReplica(formatReplica(replica)).tools[0]?.properties?.[0]?.name).toBe('password');
  });

  it('pages that differ, naming the first differing page and the byte where they part', () => {
    const replica = replicaFromTools(chineseToolsFile());
    const pages = replica.pages as { plain: string[]; withUserTools: string[] };
    const second = pages.withUserTools[1] as string;
    const at = second.indexOf('"description":"') + 15;
    const changed = {
      ...replica,
      pages: {
        ...pages,
        withUserTools: [
          pages.withUserTools[0] as string,
          `${second.slice(0, at)}X${second.slice(at + 1)}`,
          ...pages.withUserTools.slice(2),
        ],
      },
    };
    const error = refusal(() => parseReplica(formatReplica(changed)));
    expect([error.code, error.field]).toEqual(['REPLICA_PAGES_DIFFER', 'pages.withUserTools[1]']);
    expect(error.message).toContain(`byte ${Buffer.byteLength(second.slice(0, at))}`);
    expect(error.message).toContain('different tool set');
    // A tool set that differs from the recording: one description changed.
    const other = JSON.parse(formatReplica(replica));
    other.tools[0].description = 'changed';
    expect(refusal(() => parseReplica(JSON.stringify(other))).field).toBe('pages.plain[0]');
    // A page missing.
    const short = { ...replica, pages: { ...pages, plain: pages.plain.slice(0, -1) } };
    expect(refusal(() => parseReplica(formatReplica(short))).field).toBe(
      `pages.plain[${pages.plain.length - 1}]`,
    );
  });

  it("an initialize reply that is not the board's", () => {
    const reply = (name: string) =>
      `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"${name}","version":"1.0.0"}}}`;
    expect(() =>
      parseReplica(
        edited((f) => {
          f.initialize = reply('replica');
        }),
      ),
    ).not.toThrow();
    const error = refusal(() =>
      parseReplica(
        edited((f) => {
          f.initialize = reply('otto-robot');
        }),
      ),
    );
    expect([error.code, error.field]).toEqual(['REPLICA_INVALID', 'initialize']);
    expect(error.message).toContain('board.variant is "replica"');
  });

  it('a user-only tool listed before another tool', () => {
    const error = refusal(() =>
      parseReplica(
        edited((f) => {
          f.tools.push({ name: 'self.late', description: 'late', user_only: false });
          delete f.pages;
        }),
      ),
    );
    expect([error.code, error.field]).toEqual(['REPLICA_INVALID', 'tools[3].user_only']);
  });
});
