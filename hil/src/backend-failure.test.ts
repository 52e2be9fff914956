/**
 * A rig whose backend cannot start (its --listen port taken) still leaves a report saying so:
 * every selected board a rig failure, exit 3, the reports written, and `hil merge` of them
 * says the rig failed.
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hil } from './hil-main.test-helper.js';
import type { RunReport } from './model.js';

/** Another program on the port the rig is told to listen on. */
let squatter: Server;
let busyPort: number;
beforeAll(async () => {
  squatter = createServer();
  await new Promise<void>((resolve) => squatter.listen(0, '127.0.0.1', resolve));
  const address = squatter.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  busyPort = address.port;
});
afterAll(() => new Promise<void>((resolve) => squatter.close(() => resolve())));

describe('a rig whose backend cannot start', () => {
  it('reports every selected board as a rig failure, exits 3, and hil merge says the rig failed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-backend-'));
    const config = join(dir, 'hil.config.json');
    writeFileSync(
      config,
      JSON.stringify({
        boards: [
          { name: 'desk', port: 'virtual:desk', variant: 'bread-compact-wifi' },
          { name: 'robot', port: 'virtual:robot', variant: 'otto-robot' },
          { name: 'far', variant: 'bread-compact-wifi' },
          { name: 'spare', port: 'virtual:spare', variant: 'otto-robot' },
        ],
      }),
    );
    const out = join(dir, 'out');
    const result = await hil(
      'run',
      '--config',
      config,
      '--out',
      out,
      '--listen',
      `127.0.0.1:${busyPort}`,
      '--board',
      'desk,robot,far',
    );
    expect(result.code).toBe(3);
    const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    expect(report.exitCode).toBe(3);
    expect(report.summary.rigFailures).toBe(3);
    // The root cause is the backend, before any board's own step.
    expect(report.summary.rootCause).toMatchObject({
      step: 'backend',
      reason: expect.stringContaining('the backend could not start'),
    });
    // The boards asked for, none other, each failed where the rig stopped: nothing was touched.
    expect(report.boards.map((b) => [b.name, b.kind, b.status])).toEqual([
      ['desk', 'virtual', 'rig-failed'],
      ['robot', 'virtual', 'rig-failed'],
      ['far', 'network', 'rig-failed'],
    ]);
    for (const board of report.boards) {
      expect(board.failure?.reason).toMatch(
        new RegExp(`^the backend could not start: cannot listen on 127\\.0\\.0\\.1:${busyPort}`),
      );
      expect(board.steps).toEqual([
        expect.objectContaining({ step: board.failure?.step, status: 'failed' }),
      ]);
      expect(board.checks).toEqual([]);
    }
    const junit = readFileSync(join(out, 'junit.xml'), 'utf8');
    expect(junit.match(/<error /g)).toHaveLength(3);
    expect(existsSync(join(out, 'report.html'))).toBe(true);
    expect(result.stdout).toMatch(/Exit code 3/);
    expect(result.stdout).toMatch(/the backend could not start/);

    const merged = join(dir, 'merged');
    const merge = await hil('merge', out, '--out', merged);
    expect(merge.stderr).toBe('');
    expect(merge.code).toBe(3);
    const qualification = JSON.parse(
      readFileSync(join(merged, 'report.json'), 'utf8'),
    ) as RunReport;
    expect(qualification.qualification?.entries.map((e) => [e.board, e.status])).toEqual([
      ['desk', 'rig-failed'],
      ['robot', 'rig-failed'],
      ['far', 'rig-failed'],
    ]);
    expect(merge.stdout).toMatch(/rig failed/);
  });
});
