/**
 * hil's checks do not share their expectations with the model they judge.
 * Here the protocol core itself is made wrong, the way a bad constant would make it: its page
 * budget is 7000 instead of 8000 (the constant and the page builder move together), and its
 * validation table says `Missing argument: <property>`. The virtual board is built from that
 * core, so it pages and answers wrongly; any check reading the core's constants or tables would
 * move with it and stay green. hil's own literals (suites/firmware-facts.ts) catch both.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CallErrorMessage, PAGE_BUDGET_BYTES } from '@xiaozhi-mcp/protocol';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from './cli.js';
import type { RunReport } from './model.js';

const { PLANTED_BUDGET } = vi.hoisted(() => ({ PLANTED_BUDGET: 7000 }));

// The core's paging module with its budget constant planted in the source, so that everything
// reading it moves together: the board's page builder, the core's walker, the constant itself.
vi.mock('../../packages/protocol/src/paging.ts', async () => {
  const { mkdtempSync, readFileSync, writeFileSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { dirname, join } = await import('node:path');
  const { fileURLToPath } = await import('node:url');
  const source = fileURLToPath(new URL('../../packages/protocol/src/paging.ts', import.meta.url));
  const text = readFileSync(source, 'utf8');
  const constant = 'export const PAGE_BUDGET_BYTES = 8000;';
  if (!text.includes(constant)) throw new Error(`paging.ts no longer says ${constant}`);
  const planted = text
    .replace(constant, `export const PAGE_BUDGET_BYTES = ${PLANTED_BUDGET};`)
    .replace(
      /from '\.\/([\w-]+)\.js'/g,
      (_, name: string) => `from '${join(dirname(source), `${name}.ts`)}'`,
    );
  const copy = join(mkdtempSync(join(tmpdir(), 'hil-planted-')), 'paging.ts');
  writeFileSync(copy, planted);
  return import(/* @vite-ignore */ copy);
});

// The core's message table is one object, read at every validation: planted in place.
type Messages = { missingArgument: (property: string) => string };
const table = CallErrorMessage as unknown as Messages;
const realMissingArgument = table.missingArgument;

beforeAll(() => {
  table.missingArgument = (property) => `Missing argument: ${property}`;
});
afterAll(() => {
  table.missingArgument = realMissingArgument;
});

describe('a wrong constant in the protocol core fails the run', () => {
  it('the core is planted: its budget and its message moved, so the board moves with them', () => {
    expect(PAGE_BUDGET_BYTES).toBe(PLANTED_BUDGET);
    expect(CallErrorMessage.missingArgument('volume')).toBe('Missing argument: volume');
  });

  it('hil run fails page-maximal and argument-errors with the firmware facts (exit 1)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-independence-'));
    const config = join(dir, 'hil.config.json');
    writeFileSync(
      config,
      JSON.stringify({
        wifi: { ssid: 'lab' },
        boards: [
          {
            name: 'otto',
            port: 'virtual:otto',
            chip: 'esp32s3',
            variant: 'otto-robot',
            session: 'boot-click',
            virtual: { preset: 'otto-robot' },
          },
        ],
      }),
    );
    const out = join(dir, 'out');
    let output = '';
    const write = (text: string) => {
      output += text;
    };
    const code = await main(
      [
        'run',
        '--config',
        config,
        '--out',
        out,
        '--reporter',
        'json',
        '--suite',
        'tools-list,tools-call',
      ],
      { stdout: write, stderr: write },
    );
    const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    const checks = report.boards[0]?.checks ?? [];
    const failed = Object.fromEntries(
      checks.filter((c) => c.status === 'failed').map((c) => [c.id, c.message]),
    );
    expect(code, output).toBe(1);
    expect(failed).toEqual({
      'tools-list.page-maximal': expect.stringMatching(
        /^expected every page but the last to be full .*plain walk page 1 \(cursor ""\) ends at \d+ bytes, yet the next page's first tool self\.otto\.\S+ \(\d+ bytes with its comma\) would have fitted/,
      ),
      'tools-call.argument-errors': expect.stringContaining(
        'volume missing: expected error "Missing valid argument: volume", got error reply "Missing argument: volume" (no code)',
      ),
    });
  });
});
