/**
 * Two `hil run`s on one board another host shares (`rfc2217://`, a virtual board behind our
 * RFC 2217 server, as `xiaozhi-mcp port serve` shares one): with `--lock-wait` the second waits
 * for the first, as on a local board, then qualifies the board itself; without it, it fails at
 * `open` naming the run that holds it (exit 3).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VirtualBus } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { Rfc2217Server } from '@xiaozhi-mcp/serial';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { main } from '../cli.js';
import type { RunReport } from '../model.js';

let dir: string;
let previousLockDir: string | undefined;
const cleanups: (() => Promise<void> | void)[] = [];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'hil-lock-wait-remote-'));
  // The host's board locks, in a directory of this test's own.
  previousLockDir = process.env.XIAOZHI_LOCK_DIR;
  process.env.XIAOZHI_LOCK_DIR = join(dir, 'locks');
  await mkdir(join(dir, 'locks'));
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  if (previousLockDir === undefined) delete process.env.XIAOZHI_LOCK_DIR;
  else process.env.XIAOZHI_LOCK_DIR = previousLockDir;
  await rm(dir, { recursive: true, force: true });
});

/** A virtual board shared over RFC 2217 on 127.0.0.1: its URL. */
async function sharedBoard(): Promise<string> {
  const bus = new VirtualBus(FAST_TIMING);
  const local = bus.plug({ preset: 'bread-compact-wifi' }, 'virtual:shared');
  const server = await Rfc2217Server.start({ port: local, host: '127.0.0.1', listenPort: 0 });
  cleanups.push(async () => {
    await server.close();
    bus.close();
  });
  return server.url;
}

/** A `hil run` in this process on the shared board, its output kept. */
function run(name: string, config: string, firmware: string, lockWait: string) {
  const output = { stdout: '', stderr: '' };
  const out = join(dir, name);
  const code = main(
    [
      'run',
      '--config',
      config,
      '--out',
      out,
      '--firmware',
      firmware,
      '--provision',
      '--suite',
      'initialize',
      '--reporter',
      'json',
      '--lock-wait',
      lockWait,
    ],
    {
      stdout: (text) => {
        output.stdout += text;
      },
      stderr: (text) => {
        output.stderr += text;
      },
    },
  );
  // A run the test gave up on still ends before its files are removed.
  cleanups.push(() => code.then(() => {}));
  const report = (): RunReport =>
    JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
  return { code, output, report };
}

describe('two hil runs on one rfc2217:// board', () => {
  it('--lock-wait: the second waits for the first, then qualifies the board', {
    timeout: 180_000,
  }, async () => {
    const url = await sharedBoard();
    const config = join(dir, 'hil.config.json');
    await writeFile(
      config,
      JSON.stringify({
        wifi: { ssid: 'lab' },
        boards: [{ name: 'shared', port: url, chip: 'esp32s3', variant: 'bread-compact-wifi' }],
      }),
    );
    const firmware = join(dir, 'merged.bin');
    await writeFile(
      firmware,
      buildVirtualFirmware({ chip: 'esp32s3', version: '2.4.2', board: 'bread-compact-wifi' })
        .merged,
    );
    const first = run('first', config, firmware, '60');
    await until(() => /^\[shared\] open ✓/m.test(first.output.stdout), {
      what: 'the first run to open',
      timeoutMs: 60_000,
      seen: () => first.output,
    });

    // Without a wait: refused at once, naming the run that holds the board.
    const refused = run('refused', config, firmware, '0');
    expect(await refused.code).toBe(3);
    const lost = refused.report().boards[0];
    expect(lost).toMatchObject({ status: 'rig-failed', failure: { step: 'open' } });
    expect(lost?.failure?.reason).toMatch(
      new RegExp(`^${url} is in use by another run \\(pid ${process.pid}, this process`),
    );

    // With one: in line for the board (its ticket in the host's lock) until the first is done.
    const second = run('second', config, firmware, '60');
    const tickets = () =>
      readdirSync(join(dir, 'locks'))
        .filter((d) => d.startsWith('xiaozhi-lock-rfc2217'))
        .flatMap((d) => readdirSync(join(dir, 'locks', d)))
        .filter((f) => f.startsWith('t.')).length;
    await until(() => tickets() === 2 || /^\[shared\] open ✓/m.test(second.output.stdout), {
      what: "the second run's ticket",
      timeoutMs: 60_000,
      seen: () => second.output,
    });
    expect(second.output.stdout).not.toMatch(/^\[shared\] open ✓/m);
    expect(await first.code).toBe(0);
    expect(await second.code).toBe(0);
    const [board] = second.report().boards;
    expect(board?.status).toBe('passed');
    expect(board?.steps.find((s) => s.step === 'open')?.status).toBe('passed');
  });
});
