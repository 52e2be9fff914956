/**
 * Replicas (docs/hil.md §1.1, §4): `hil run` writes `<board>/replica.json` for a board that
 * reached a session, and that replica passes `hil run` again, as a board without port (hil runs
 * it itself) and as a `virtual:<name>` board with a serial port, with the recorded run's check
 * results and tool list; a bad replica is refused when the inventory is read (exit 2).
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { hil } from './hil-main.test-helper.js';
import { DEFAULT_VIRTUAL_RIG, InventoryError, loadInventory } from './inventory.js';
import type { BoardReport, ComparisonFinding, RunReport } from './model.js';

/**
 * The rig steps a board without port does not take, all of them on its serial port: nothing to
 * open, no chip to identify, flash or provision, no reset to pulse, no console to watch boot on.
 */
const HARDWARE_STEPS = ['open', 'identify', 'flash', 'provision', 'reset', 'boot'];

const dir = mkdtempSync(join(tmpdir(), 'hil-replica-'));
const recorded = join(dir, 'recorded');
const replicaPath = join(recorded, 'otto-robot', 'replica.json');

function reportOf(out: string): RunReport {
  return JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
}

function ottoOf(report: RunReport): BoardReport {
  const board = report.boards.find((b) => b.name === 'otto-robot');
  if (board === undefined) throw new Error('no otto-robot in the report');
  return board;
}

const checksOf = (board: BoardReport) => board.checks.map((c) => `${c.id} ${c.status}`);
const stepsOf = (board: BoardReport) => board.steps.map((s) => `${s.step} ${s.status}`);

/** The default rig's otto-robot, as the replica's inventory entry repeats what it expects. */
const otto = DEFAULT_VIRTUAL_RIG.boards.find((b) => b.name === 'otto-robot');

function inventory(name: string, board: Record<string, unknown>): string {
  const path = join(dir, `${name}.json`);
  writeFileSync(
    path,
    JSON.stringify({
      wifi: DEFAULT_VIRTUAL_RIG.wifi,
      latency: DEFAULT_VIRTUAL_RIG.latency,
      boards: [{ name: 'otto-robot', expectedTools: otto?.expectedTools, ...board }],
    }),
  );
  return path;
}

/** A copy of the recorded replica, changed by `change`, in a file of its own. */
function badReplica(name: string, change: (replica: Record<string, unknown>) => void): string {
  const replica = JSON.parse(readFileSync(replicaPath, 'utf8')) as Record<string, unknown>;
  change(replica);
  const path = join(dir, `${name}.replica.json`);
  writeFileSync(path, JSON.stringify(replica, null, 2));
  return path;
}

describe('a replica recorded by hil run', () => {
  let recordedReport: RunReport;

  beforeAll(async () => {
    // Both boards: otto-robot over WebSocket, bread-compact-wifi over MQTT.
    const run = await hil('run', '--out', recorded);
    expect(run.code, run.output).toBe(0);
    recordedReport = reportOf(recorded);
  }, 120_000);

  it('is written beside the transcript, named in the report, with the board identity the transcript notes', () => {
    const board = ottoOf(recordedReport);
    expect(board.replica).toBe('otto-robot/replica.json');
    const replica = JSON.parse(readFileSync(replicaPath, 'utf8')) as {
      board: Record<string, unknown>;
      tools: { name: string }[];
    };
    expect(replica.board).toMatchObject({
      variant: 'otto-robot',
      firmwareVersion: '2.4.2',
      chip: 'esp32s3',
      flashSizeMb: 16,
      mac: board.mac,
    });
    expect(replica.tools.map((t) => t.name)).toEqual(board.tools?.map((t) => t.name));
    const notes = readFileSync(join(recorded, 'otto-robot', 'transcript.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((line) => line.event === 'board');
    expect(notes).toHaveLength(1);
    expect(notes[0]).toMatchObject({
      variant: 'otto-robot',
      firmwareVersion: '2.4.2',
      chip: 'esp32s3',
      flashSizeMb: 16,
      mac: board.mac,
    });
    // No secret of the rig: its Wi-Fi password never enters the transcript or the replica.
    const password = DEFAULT_VIRTUAL_RIG.wifi?.password ?? 'virtual-rig';
    expect(readFileSync(replicaPath, 'utf8')).not.toContain(password);
  });

  it('passes hil run as a board without port, with the recorded check results and tool list', async () => {
    const out = join(dir, 'network');
    const run = await hil(
      'run',
      '--config',
      inventory('network', { virtual: { replica: replicaPath } }),
      '--out',
      out,
    );
    const board = ottoOf(reportOf(out));
    const base = ottoOf(recordedReport);
    expect(board.kind).toBe('network');
    expect(board.mac).toBe(base.mac);
    // The replica's run writes a replica of its own.
    expect(existsSync(join(out, 'otto-robot', 'replica.json'))).toBe(true);

    const compare = await hil('compare', recorded, out, '--format', 'json');
    const comparison = JSON.parse(compare.stdout) as {
      boards: { board: string; findings: ComparisonFinding[]; notes: string[] }[];
    };
    const ottoComparison = comparison.boards.find((b) => b.board === 'otto-robot');
    expect(ottoComparison?.notes.filter((n) => n.startsWith('tool lists'))).toEqual([]);
    expect(ottoComparison?.findings.filter((f) => f.subject === 'tool')).toEqual([]);
    expect(ottoComparison?.findings.filter((f) => f.subject === 'pages')).toEqual([]);
    // Every check, the same status: hil judges the replica as it judged the board.
    expect(checksOf(board)).toEqual(checksOf(base));
    // The rig steps, but the serial port's, which a board without port skips.
    expect(board.steps.filter((s) => HARDWARE_STEPS.includes(s.step)).map((s) => s.status)).toEqual(
      HARDWARE_STEPS.filter((step) => step !== 'identify').map(() => 'skipped'),
    );
    const rest = (b: BoardReport) =>
      stepsOf(b).filter((s) => !HARDWARE_STEPS.includes(s.split(' ')[0] ?? ''));
    expect(rest(board)).toEqual(rest(base));
    expect(run.code, run.output).toBe(0);
  }, 120_000);

  it('of a board over MQTT passes hil run as a board without port on MQTT, audio uplink included', async () => {
    const bread = DEFAULT_VIRTUAL_RIG.boards.find((b) => b.name === 'bread-compact-wifi');
    const config = join(dir, 'bread.json');
    writeFileSync(
      config,
      JSON.stringify({
        latency: DEFAULT_VIRTUAL_RIG.latency,
        boards: [
          {
            name: 'bread-compact-wifi',
            session: 'mqtt',
            expectedTools: bread?.expectedTools,
            virtual: { replica: join(recorded, 'bread-compact-wifi', 'replica.json') },
          },
        ],
      }),
    );
    const out = join(dir, 'bread');
    const run = await hil('run', '--config', config, '--out', out);
    const board = reportOf(out).boards[0];
    const base = recordedReport.boards.find((b) => b.name === 'bread-compact-wifi');
    expect(board?.transport).toBe('mqtt');
    expect(board?.mac).toBe(base?.mac);
    // hil has a hand on the replica it runs: the audio suite's click opens its UDP session.
    expect(board?.checks.find((c) => c.id === 'audio.uplink')?.status).toBe('passed');
    expect(board && checksOf(board)).toEqual(base && checksOf(base));
    expect(run.code, run.output).toBe(0);
  }, 120_000);

  it('passes hil run as a virtual:<name> board with a serial port, with the recorded check results', async () => {
    const out = join(dir, 'serial');
    const run = await hil(
      'run',
      '--config',
      inventory('serial', {
        port: 'virtual:otto-replica',
        session: 'boot-click',
        virtual: { replica: replicaPath, via: 'rfc2217' },
      }),
      '--out',
      out,
    );
    const board = ottoOf(reportOf(out));
    const base = ottoOf(recordedReport);
    expect(board.kind).toBe('virtual');
    expect(board.mac).toBe(base.mac);
    // Flashed with the replica's version, which initialize.version holds it to.
    expect(board.image?.version).toBe('2.4.2');
    expect(board.firmwareVersion).toBe('2.4.2');

    const compare = await hil('compare', recorded, out, '--format', 'json');
    const comparison = JSON.parse(compare.stdout) as {
      boards: { board: string; findings: ComparisonFinding[] }[];
    };
    const findings = comparison.boards.find((b) => b.board === 'otto-robot')?.findings ?? [];
    expect(findings.filter((f) => f.subject === 'tool')).toEqual([]);
    expect(findings.filter((f) => f.subject === 'pages')).toEqual([]);
    // Every check, the same status; and a serial board takes every step the recorded one took.
    expect(checksOf(board)).toEqual(checksOf(base));
    expect(stepsOf(board)).toEqual(stepsOf(base));
    expect(run.code, run.output).toBe(0);
  }, 120_000);

  it("is refused (exit 2) when the inventory's variant or chip is not the replica's", async () => {
    const variant = await hil(
      'run',
      '--config',
      inventory('variant', { variant: 'bread-compact-wifi', virtual: { replica: replicaPath } }),
      '--out',
      join(dir, 'variant-out'),
    );
    expect(variant.code).toBe(2);
    expect(variant.stderr).toContain('boards[0].variant "bread-compact-wifi"');
    const chip = await hil(
      'run',
      '--config',
      inventory('chip', { chip: 'esp32c3', virtual: { replica: replicaPath } }),
      '--out',
      join(dir, 'chip-out'),
    );
    expect(chip.code).toBe(2);
    expect(chip.stderr).toContain('boards[0].chip "esp32c3"');
  });

  it.each([
    [
      'another schema version',
      (replica: Record<string, unknown>) => {
        replica.schemaVersion = 2;
      },
      'schemaVersion',
    ],
    [
      'pages that do not match its tools',
      (replica: Record<string, unknown>) => {
        const pages = replica.pages as { plain: string[] };
        pages.plain = [...pages.plain].reverse();
      },
      'pages.plain',
    ],
    [
      'a secret',
      (replica: Record<string, unknown>) => {
        (replica.board as Record<string, unknown>).token = 'secret-token-1234';
      },
      'token',
    ],
  ])(
    'with %s is refused when the inventory is read (exit 2), naming the file and the field',
    async (what, change, field) => {
      const file = badReplica(what.replace(/\W+/g, '-'), change);
      const out = join(dir, `${what.replace(/\W+/g, '-')}-out`);
      const run = await hil(
        'run',
        '--config',
        inventory('bad', { virtual: { replica: file } }),
        '--out',
        out,
      );
      expect(run.code, run.output).toBe(2);
      expect(run.stderr).toContain('boards[0].virtual.replica');
      expect(run.stderr).toContain(file);
      expect(run.stderr).toContain(field);
      // Refused before any board was touched: no report.
      expect(existsSync(join(out, 'report.json'))).toBe(false);
    },
  );

  it('is read with the inventory: its identity fills in the board, one MAC per board, a missing file named', () => {
    const twice = join(dir, 'twice.json');
    const boards: Record<string, unknown>[] = [
      { name: 'far', virtual: { replica: replicaPath } },
      { name: 'near', port: 'virtual:near', virtual: { replica: replicaPath } },
    ];
    writeFileSync(twice, JSON.stringify({ boards }));
    expect(() => loadInventory(twice)).toThrow(
      expect.objectContaining({
        name: 'InventoryError',
        field: 'boards[1].deviceId',
        message: expect.stringContaining('give one of them its own deviceId'),
      }),
    );
    boards[1] = { ...boards[1], deviceId: 'f4:12:fa:00:00:02' };
    writeFileSync(twice, JSON.stringify({ boards }));
    const rig = loadInventory(twice);
    const mac = ottoOf(recordedReport).mac;
    expect(rig.boards.map((b) => [b.variant, b.chip, b.deviceId])).toEqual([
      ['otto-robot', 'esp32s3', mac],
      ['otto-robot', 'esp32s3', 'f4:12:fa:00:00:02'],
    ]);
    const missing = join(dir, 'missing.json');
    writeFileSync(
      missing,
      JSON.stringify({ boards: [{ name: 'x', virtual: { replica: 'nope.json' } }] }),
    );
    expect(() => loadInventory(missing)).toThrow(
      new InventoryError(
        `${missing}: boards[0].virtual.replica ${join(dir, 'nope.json')}: no such file`,
        'boards[0].virtual.replica',
      ),
    );
  });

  it("that cannot be built is said, and the verdict stays the checks' own", async () => {
    // The session opens, but initialize has no serverInfo: no tools/list walk to rebuild from.
    const out = join(dir, 'no-walk');
    const run = await hil(
      'run',
      '--config',
      inventory('no-walk', {
        port: 'virtual:no-walk',
        variant: 'otto-robot',
        session: 'boot-click',
        virtual: { preset: 'otto-robot', faults: { initializeWithout: ['serverInfo'] } },
      }),
      '--out',
      out,
    );
    expect(run.output).toMatch(/\[otto-robot\] no replica\.json: /);
    const report = reportOf(out);
    const board = ottoOf(report);
    // A check failed (exit 1), as without replicas: not a rig failure.
    expect(run.code).toBe(1);
    expect(report.exitCode).toBe(1);
    expect(board.status).toBe('failed');
    expect(board.failure).toBeUndefined();
    expect(board.checks.find((c) => c.id === 'session.initialize')?.status).toBe('failed');
    expect(board.replica).toBeUndefined();
    expect(existsSync(join(out, 'otto-robot', 'replica.json'))).toBe(false);
  });

  it('is not written for a board that never reached a session', async () => {
    const out = join(dir, 'panicky');
    const run = await hil(
      'run',
      '--config',
      inventory('panicky', {
        port: 'virtual:panicky',
        variant: 'otto-robot',
        virtual: { preset: 'otto-robot', faults: { panicAtBoot: true } },
      }),
      '--out',
      out,
    );
    expect(run.code, run.output).toBe(1);
    const board = ottoOf(reportOf(out));
    expect(board.failure?.step).toBe('boot');
    expect(board.replica).toBeUndefined();
    expect(existsSync(join(out, 'otto-robot', 'replica.json'))).toBe(false);
    expect(existsSync(join(out, 'otto-robot', 'transcript.jsonl'))).toBe(true);
  });
});
