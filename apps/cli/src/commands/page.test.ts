import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { runCli } from '../io.test-helper.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');
const corpus = (name: string) => join(repoRoot, 'fixtures/corpus/mcp', name);
const bin = join(repoRoot, 'apps/cli/bin/xiaozhi-mcp.js');

interface Exchange {
  request: string;
  replies: string[];
}

/** Every tools/list exchange of a corpus case, as page arguments and the expected reply. */
function listExchanges(file: string) {
  const c = JSON.parse(readFileSync(corpus(file), 'utf8')) as { exchanges: Exchange[] };
  return c.exchanges
    .map((e) => ({ request: JSON.parse(e.request), reply: e.replies[0] }))
    .filter((e) => e.request.method === 'tools/list' && e.reply !== undefined);
}

describe('xiaozhi-mcp page', () => {
  for (const file of [
    'list-paging.json',
    'list-small.json',
    'list-user-only.json',
    'list-oversize.json',
  ]) {
    it(`reproduces every ${file} page byte for byte`, async () => {
      const exchanges = listExchanges(file);
      expect(exchanges.length).toBeGreaterThan(0);
      for (const { request, reply } of exchanges) {
        const args = ['page', '--tools', corpus(file), '--id', String(request.id)];
        if (typeof request.params?.cursor === 'string' && request.params.cursor !== '') {
          args.push('--cursor', request.params.cursor);
        }
        if (request.params?.withUserTools === true) args.push('--with-user-tools');
        const out = await runCli(...args);
        expect(out.stdout).toBe(`${reply}\n`);
        expect(out.code).toBe(reply?.includes('"error"') ? 1 : 0);
      }
    });
  }

  it('prints only the result text without --id', async () => {
    const out = await runCli('page', '--tools', corpus('list-small.json'));
    expect(out.code).toBe(0);
    expect(out.stdout.startsWith('{"tools":[{"name":"self.lamp.get_state"')).toBe(true);
    expect(out.stderr).toBe('');
  });

  it('reports pages as JSON', async () => {
    const out = await runCli('page', '--tools', corpus('list-paging.json'), '--json');
    const report = JSON.parse(out.stdout);
    expect(report).toMatchObject({ ok: true, nextCursor: 'self.arm.joint12.move' });
    expect(report.tools).toHaveLength(12);
    expect(report.budgetBytes).toBeLessThanOrEqual(8000);
    const error = await runCli(
      'page',
      '--tools',
      corpus('list-small.json'),
      '--cursor',
      'nope',
      '--json',
    );
    expect(JSON.parse(error.stdout)).toEqual({
      ok: false,
      error: 'Failed to add tool  because of payload size limit',
      tool: '',
    });
    expect(error.code).toBe(1);
  });

  it('fails with one line and exit 2 on bad input, naming the problem', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'xz-page-'));
    writeFileSync(join(dir, 'broken.json'), '{"tools": [');
    writeFileSync(
      join(dir, 'bad.json'),
      JSON.stringify([
        { name: 'a', description: 'd', properties: [{ name: 'v', type: 'integer', min: 1 }] },
      ]),
    );
    const cases: [string[], RegExp][] = [
      [['page', '--tools', join(dir, 'missing.json')], /cannot read .*missing\.json: no such file/],
      [['page', '--tools', join(dir, 'broken.json')], /broken\.json is not valid JSON/],
      [
        ['page', '--tools', join(dir, 'bad.json')],
        /tools\[0\]: .*minimum and maximum must be given together/,
      ],
      [['page'], /required option '--tools <file>'/],
      [['page', '--tools', corpus('list-small.json'), '--id', 'x'], /--id must be an integer/],
    ];
    for (const [argv, reason] of cases) {
      const out = await runCli(...argv);
      expect(out.code, argv.join(' ')).toBe(2);
      expect(out.stderr.trim().split('\n')).toHaveLength(1);
      expect(out.stderr).toMatch(reason);
      expect(out.stdout).toBe('');
    }
  });

  it('works as an installed binary', () => {
    const reply = listExchanges('list-paging.json')[1];
    const stdout = execFileSync(
      bin,
      [
        'page',
        '--tools',
        corpus('list-paging.json'),
        '--cursor',
        'self.arm.joint12.move',
        '--id',
        '10',
      ],
      {
        encoding: 'utf8',
      },
    );
    expect(stdout).toBe(`${reply?.reply}\n`);
    const failed = spawnSync(
      bin,
      ['page', '--tools', corpus('list-oversize.json'), '--cursor', 'self.big.tool'],
      { encoding: 'utf8' },
    );
    expect(failed.status).toBe(1);
    expect(failed.stderr).toBe(
      'xiaozhi-mcp: the firmware answers this page with an error: Failed to add tool self.big.tool because of payload size limit\n',
    );
  });
});
