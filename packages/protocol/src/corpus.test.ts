/**
 * Replays every golden case recorded from the firmware's own MCP server
 * (fixtures/corpus/mcp) through {@link McpRequestLoop}, the request loop the device's
 * `McpServer` runs on; replies must match byte for byte, in order. The case list is read from the folder, and the expected list below makes
 * a missing or unread case fail.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { McpRequestLoop } from './mcp-server.js';
import { fixtureToolReturn, parseToolSet, type ToolSetEntry } from './tool-set.js';
import { ToolRegistry } from './tools.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const corpusDir = join(repoRoot, 'fixtures/corpus/mcp');

interface SequentialCase {
  name: string;
  board: { name: string; version: string };
  mode: 'sequential';
  tools: unknown[];
  exchanges: { request: string; replies: string[] }[];
}
interface BurstCase {
  name: string;
  board: { name: string; version: string };
  mode: 'burst';
  tools: unknown[];
  requests: string[];
  replies: string[];
}
type CorpusCase = SequentialCase | BurstCase;

const caseFiles = readdirSync(corpusDir)
  .filter((f) => f.endsWith('.json'))
  .sort();

function serverFor(c: CorpusCase) {
  const registry = new ToolRegistry<ToolSetEntry>();
  for (const entry of parseToolSet(c.tools)) registry.add(entry.tool, entry);
  const sent: string[] = [];
  const server = new McpRequestLoop({
    profile: 'firmware',
    tools: registry,
    board: c.board,
    runTool: (entry, values) => fixtureToolReturn(entry, values),
    send: (payload) => sent.push(payload),
  });
  return { server, sent };
}

describe('golden corpus (fixtures/corpus/mcp)', () => {
  it('has every case this suite knows, and this suite knows every case', () => {
    expect(caseFiles).toEqual([
      'burst-ordering.json',
      'call-errors.json',
      'call-results.json',
      'initialize.json',
      'jsonrpc-drops.json',
      'list-only-user-tools.json',
      'list-oversize.json',
      'list-paging.json',
      'list-small.json',
      'list-user-only.json',
      'unescaped-errors.json',
    ]);
  });

  it('is an up-to-date copy of ../shared/corpus when that exists', (context) => {
    if (!existsSync(resolve(repoRoot, '../shared/corpus'))) context.skip();
    const check = spawnSync(
      process.execPath,
      [join(repoRoot, 'scripts/sync-corpus.mjs'), '--check'],
      {
        encoding: 'utf8',
      },
    );
    expect(check.stderr).toBe('');
    expect(check.status).toBe(0);
  });

  const replayed = new Set<string>();

  for (const file of caseFiles) {
    const c = JSON.parse(readFileSync(join(corpusDir, file), 'utf8')) as CorpusCase;

    it(`${c.name}: replies match byte for byte`, async () => {
      const { server, sent } = serverFor(c);
      let exchanges = 0;
      if (c.mode === 'sequential') {
        // Each request is fully handled (all its replies sent) before the next arrives.
        for (const exchange of c.exchanges) {
          sent.length = 0;
          server.receive(exchange.request);
          await server.idle();
          expect(sent, `reply to ${exchange.request}`).toEqual(exchange.replies);
          exchanges++;
        }
        expect(exchanges).toBe(c.exchanges.length);
      } else {
        // Every request arrives before the main loop runs once.
        for (const request of c.requests) server.receive(request);
        await server.idle();
        expect(sent).toEqual(c.replies);
        expect(c.replies.length).toBeGreaterThan(0);
      }
      replayed.add(file);
    });
  }

  it('replayed every case file', () => {
    expect([...replayed].sort()).toEqual(caseFiles);
  });
});
