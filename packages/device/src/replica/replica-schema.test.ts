/**
 * replica.schema.json against the replicas this package writes and reads: the schema accepts
 * them, rejects a bad one, and requires what parseReplica requires. The checker below knows
 * the schema keywords the file uses (draft-07's type, const, enum, required, properties,
 * additionalProperties, items, minLength, minimum, pattern) and nothing else.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHIPS } from '@xiaozhi-mcp/firmware';
import { describe, expect, it } from 'vitest';
import {
  formatReplica,
  parseReplica,
  REPLICA_ERROR_CODES,
  ReplicaError,
  type ReplicaFile,
} from './replica-file.js';
import { replicaFromTools } from './replica-from-tools.js';

type Schema = {
  type?: string | string[];
  const?: unknown;
  enum?: unknown[];
  required?: string[];
  properties?: Record<string, Schema>;
  additionalProperties?: boolean | Schema;
  items?: Schema;
  minLength?: number;
  minimum?: number;
  pattern?: string;
  $id?: string;
};

const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const schema = JSON.parse(readFileSync(join(packageDir, 'replica.schema.json'), 'utf8')) as Schema;

function typeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (Number.isInteger(value)) return 'integer';
  return typeof value;
}

/** The schema's complaints about `value`, each as `path: what`. */
function violations(s: Schema, value: unknown, path = ''): string[] {
  const out: string[] = [];
  if (s.type !== undefined) {
    const types = Array.isArray(s.type) ? s.type : [s.type];
    const t = typeOf(value);
    if (!types.includes(t) && !(t === 'integer' && types.includes('number')))
      return [`${path}: not ${types}`];
  }
  if ('const' in s && value !== s.const) out.push(`${path}: not ${String(s.const)}`);
  if (s.enum !== undefined && !s.enum.includes(value)) out.push(`${path}: not one of the enum`);
  if (typeof value === 'string') {
    if (s.minLength !== undefined && value.length < s.minLength) out.push(`${path}: too short`);
    if (s.pattern !== undefined && !new RegExp(s.pattern).test(value)) out.push(`${path}: pattern`);
  }
  if (typeof value === 'number' && s.minimum !== undefined && value < s.minimum)
    out.push(`${path}: below minimum`);
  if (Array.isArray(value) && s.items !== undefined) {
    for (const [i, item] of value.entries())
      out.push(...violations(s.items, item, `${path}[${i}]`));
  }
  if (typeOf(value) === 'object') {
    const record = value as Record<string, unknown>;
    for (const key of s.required ?? []) if (!(key in record)) out.push(`${path}.${key}: required`);
    for (const [key, child] of Object.entries(record)) {
      const known = s.properties?.[key];
      if (known !== undefined) out.push(...violations(known, child, `${path}.${key}`));
      else if (s.additionalProperties === false) out.push(`${path}.${key}: not allowed`);
      else if (typeof s.additionalProperties === 'object')
        out.push(...violations(s.additionalProperties, child, `${path}.${key}`));
    }
  }
  return out;
}

function examples(): {
  small: ReplicaFile;
  recorded: ReplicaFile;
  bare: ReplicaFile;
  withoutPages: ReplicaFile;
} {
  const small = replicaFromTools(
    JSON.stringify({
      board: {
        variant: 'bread-compact-wifi',
        name: 'desk',
        firmwareVersion: '2.4.2',
        mac: 'f4:12:fa:00:00:09',
        transport: 'mqtt',
        protocolVersion: 3,
      },
      tools: [
        {
          name: 'self.lamp.set',
          description: 'Lamp',
          properties: [{ name: 'on', type: 'boolean' }],
        },
        {
          name: 'self.volume',
          description: 'Volume',
          properties: [
            { name: 'v', type: 'integer', default: 5, min: 0, max: 10 },
            { name: 'say', type: 'string', default: 'hi' },
          ],
        },
        { name: 'self.system.info', description: 'Info', user_only: true },
      ],
      defaults: { 'self.lamp.set': { text: 'off', isError: false } },
    }),
  );
  const recorded: ReplicaFile = {
    $schema: './replica.schema.json',
    ...small,
    hello: '{"type":"hello","version":1,"features":{"mcp":true},"transport":"websocket"}',
    initialize:
      '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"bread-compact-wifi","version":"2.4.2"}}}',
    calls: [
      {
        tool: 'self.volume',
        arguments: { v: 3 },
        reply:
          '{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"true"}],"isError":false}}',
        delayMs: 12,
      },
    ],
  };
  const bare = replicaFromTools('[{"name":"self.ping","description":"Ping"}]');
  const { pages: _pages, ...withoutPages } = bare;
  return { small, recorded, bare, withoutPages };
}

describe('replica.schema.json', () => {
  it('is version 1 with an $id', () => {
    expect(schema.$id).toMatch(/replica/);
    expect(schema.properties?.schemaVersion?.const).toBe(1);
  });

  it('accepts the replicas this package writes, as parseReplica does', () => {
    for (const [name, replica] of Object.entries(examples())) {
      const value = JSON.parse(formatReplica(replica));
      expect({ name, problems: violations(schema, value) }).toEqual({ name, problems: [] });
      expect(() => parseReplica(formatReplica(replica), name)).not.toThrow();
    }
  });

  it('rejects a bad replica, as parseReplica does', () => {
    const bad = JSON.parse(formatReplica(examples().small));
    bad.board.flashSizeMb = 3;
    bad.tools[0].colour = 'red';
    expect(violations(schema, bad)).toEqual([
      '.board.flashSizeMb: not one of the enum',
      '.tools[0].colour: not allowed',
    ]);
    expect(() => parseReplica(JSON.stringify(bad))).toThrow(ReplicaError);
    expect(violations(schema, { ...bad, schemaVersion: 2 })).toContain('.schemaVersion: not 1');
  });

  it('requires what parseReplica requires, field by field', () => {
    const full = JSON.parse(formatReplica(examples().recorded));
    const required: string[] = [];
    const walk = (s: Schema, path: string[]) => {
      for (const key of s.required ?? []) required.push([...path, key].join('.'));
      for (const [key, child] of Object.entries(s.properties ?? {})) {
        if (child.type === 'object') walk(child, [...path, key]);
        if (child.items?.type === 'object') walk(child.items, [...path, `${key}.0`]);
      }
    };
    walk(schema, []);
    expect(required).toEqual(
      expect.arrayContaining([
        'schemaVersion',
        'board.chip',
        'tools.0.description',
        'calls.0.delayMs',
      ]),
    );
    for (const field of required) {
      const copy = JSON.parse(JSON.stringify(full));
      const keys = field.split('.');
      let at = copy;
      for (const key of keys.slice(0, -1)) at = at[key];
      delete at[keys.at(-1) as string];
      const error = (() => {
        try {
          parseReplica(JSON.stringify(copy));
        } catch (e) {
          return e as ReplicaError;
        }
        return undefined;
      })();
      expect({ field, refused: error instanceof ReplicaError }).toEqual({ field, refused: true });
      if (field !== 'schemaVersion') expect(error?.field.replace(/\[(\d+)\]/g, '.$1')).toBe(field);
    }
  });

  it("lists the firmware package's chips", () => {
    expect(schema.properties?.board?.properties?.chip?.enum).toEqual(CHIPS.map((c) => c.name));
  });
});

describe('the package', () => {
  it('ships the schema and documents every replica error code in its README table', () => {
    const pkg = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8'));
    expect(pkg.files).toContain('replica.schema.json');
    expect(pkg.exports['./replica.schema.json']).toBe('./replica.schema.json');
    const readme = readFileSync(join(packageDir, 'README.md'), 'utf8');
    for (const code of REPLICA_ERROR_CODES) expect(readme).toContain(`| \`${code}\` |`);
  });
});
