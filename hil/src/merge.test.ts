/**
 * `hil merge` (docs/ci.md §2): rigs' reports become one qualification report listing every
 * board of every rig, with each board's verdict per build; exit 1 when a board failed, 3 when a
 * rig failed or sent nothing. The last test runs the virtual rig twice for real, as two rigs of
 * one build: `hil run --compare-to` and `hil compare` find no regression between them, and
 * `hil merge` lists both.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { check, syntheticBoard, syntheticReport } from './compare/synthetic.test-helper.js';
import { hilWithSummary } from './hil-main.test-helper.js';
import { mergeReports, parseMergeArgument, rigNameFor } from './merge.js';
import type { RunReport } from './model.js';
import { renderJson } from './reporters/json.js';

const dir = mkdtempSync(join(tmpdir(), 'hil-merge-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function saveIn(folder: string, report: RunReport): string {
  const at = join(dir, folder);
  mkdirSync(at, { recursive: true });
  writeFileSync(join(at, 'report.json'), renderJson(report));
  return at;
}

function readReport(folder: string): RunReport {
  return JSON.parse(readFileSync(join(folder, 'report.json'), 'utf8')) as RunReport;
}

describe('mergeReports', () => {
  it('names each board <rig>/<board>, keeps its results and relinks its artefacts', () => {
    const a = syntheticReport([
      syntheticBoard({ name: 'bread' }),
      syntheticBoard({ name: 'otto' }),
    ]);
    const b = syntheticReport([syntheticBoard({ name: 'bread' })]);
    const merged = mergeReports(
      [
        { rig: 'lab-1', file: join(dir, 'in', 'lab-1', 'report.json'), report: a },
        { rig: 'lab-2', file: join(dir, 'in', 'lab-2', 'report.json'), report: b },
      ],
      { outDir: join(dir, 'in', 'merged'), toolVersion: '9.9.9' },
    );
    expect(merged.boards.map((x) => x.name)).toEqual(['lab-1/bread', 'lab-1/otto', 'lab-2/bread']);
    expect(merged.boards[2]?.consoleLog).toBe('../lab-2/bread/console.log');
    expect(merged.boards[0]?.checks).toEqual(a.boards[0]?.checks);
    expect(merged.summary.boards).toBe(3);
    expect(merged.summary.passed).toBe(9);
    expect(merged.exitCode).toBe(0);
    expect(merged.tool.version).toBe('9.9.9');
    expect(merged.qualification?.builds).toEqual(['2.4.2']);
    expect(merged.qualification?.entries.map((e) => [e.rig, e.board, e.build, e.status])).toEqual([
      ['lab-1', 'bread', '2.4.2', 'passed'],
      ['lab-1', 'otto', '2.4.2', 'passed'],
      ['lab-2', 'bread', '2.4.2', 'passed'],
    ]);
  });

  it('puts builds in columns and adds the build to the name when there are several', () => {
    const merged = mergeReports(
      [
        {
          rig: 'lab',
          file: join(dir, 'x', 'report.json'),
          report: syntheticReport([syntheticBoard({ name: 'bread' })]),
        },
        {
          rig: 'lab',
          file: join(dir, 'y', 'report.json'),
          report: syntheticReport([
            syntheticBoard({
              name: 'bread',
              version: '2.4.3',
              checks: [check('tools-list.walk', 'failed')],
            }),
          ]),
        },
      ],
      { outDir: dir, toolVersion: '0' },
    );
    expect(merged.boards.map((b) => b.name)).toEqual(['lab/bread@2.4.2', 'lab/bread@2.4.3']);
    expect(merged.qualification?.builds).toEqual(['2.4.2', '2.4.3']);
    expect(merged.exitCode).toBe(1);
  });

  it('exits 3 when a rig failed, or when a rig --expect names sent nothing', () => {
    const ok = syntheticReport([syntheticBoard()]);
    const rigFailed = syntheticReport([syntheticBoard({ status: 'rig-failed' })]);
    const input = (rig: string, report: RunReport) => ({
      rig,
      file: join(dir, rig, 'report.json'),
      report,
    });
    expect(
      mergeReports([input('a', ok), input('b', rigFailed)], { outDir: dir, toolVersion: '0' })
        .exitCode,
    ).toBe(3);
    const missing = mergeReports([input('a', ok)], {
      outDir: dir,
      toolVersion: '0',
      expect: ['a', 'b'],
    });
    expect(missing.exitCode).toBe(3);
    expect(missing.qualification?.missing).toEqual(['b']);
  });

  it("spans the earliest start to the latest end, and names each rig's host", async () => {
    const at = (report: RunReport, startedAt: string, durationMs: number, hostname: string) => ({
      ...report,
      startedAt,
      durationMs,
      host: { hostname, os: 'linux 6.8.0 x64', node: 'v20.19.0' },
    });
    // lab-2 starts a minute after lab-1 and ends 80 s after that: 140 s in all, not the 60 s between the starts.
    const a = saveIn(
      'span/lab-1',
      at(syntheticReport([syntheticBoard()]), '2025-01-01T00:00:00.000Z', 100_000, 'rig-host-a'),
    );
    const b = saveIn(
      'span/lab-2',
      at(syntheticReport([syntheticBoard()]), '2025-01-01T00:01:00.000Z', 80_000, 'rig-host-b'),
    );
    const out = join(dir, 'span', 'merged');
    const { code, stdout } = await hilWithSummary(undefined, ['merge', a, b, '--out', out]);
    expect(code).toBe(0);
    const merged = readReport(out);
    expect(merged.startedAt).toBe('2025-01-01T00:00:00.000Z');
    expect(merged.durationMs).toBe(140_000);
    expect(stdout).toContain('Ran on rig-host-a (lab-1), rig-host-b (lab-2) with hil');
    expect(stdout).not.toContain('unrecorded');
    expect(readFileSync(join(out, 'report.html'), 'utf8')).toContain(
      '<dt>Duration</dt><dd>2 min 20 s</dd>',
    );
    expect(readFileSync(join(out, 'report.html'), 'utf8')).toContain(
      '<dt>Host</dt><dd>rig-host-a (lab-1), rig-host-b (lab-2)</dd>',
    );
    expect(readFileSync(join(out, 'summary.md'), 'utf8')).toContain(
      'Ran on rig-host-a (lab-1), rig-host-b (lab-2) with',
    );
    // Both rigs on one host: that host.
    const same = mergeReports(
      [
        {
          rig: 'x',
          file: join(dir, 'x', 'report.json'),
          report: at(syntheticReport([syntheticBoard()]), '2025-01-01T00:00:00.000Z', 1000, 'vm'),
        },
        {
          rig: 'y',
          file: join(dir, 'y', 'report.json'),
          report: at(syntheticReport([syntheticBoard()]), '2025-01-01T00:00:00.500Z', 1000, 'vm'),
        },
      ],
      { outDir: dir, toolVersion: '0' },
    );
    expect(same.host?.hostname).toBe('vm');
    expect(same.durationMs).toBe(1500);
  });

  it('reads rig names from RIG=PATH or from the artefact folder', () => {
    expect(parseMergeArgument('lab-1=out/report.json')).toEqual({
      rig: 'lab-1',
      path: 'out/report.json',
    });
    expect(parseMergeArgument('/tmp/a=b/report.json')).toEqual({
      rig: undefined,
      path: '/tmp/a=b/report.json',
    });
    expect(rigNameFor('artifacts/hil-reports-lab-2/report.json')).toBe('lab-2');
    expect(rigNameFor('desk/report.json')).toBe('desk');
    // The default --out folder says nothing: the host the run ran on names the rig.
    expect(rigNameFor('a/hil-reports/report.json', 'lab-host-3')).toBe('lab-host-3');
    expect(rigNameFor('a/hil-reports/report.json')).toBe('hil-reports');
  });
});

describe('hil merge', () => {
  it('writes report.json, report.html, junit.xml and summary.md with the boards × builds table', async () => {
    const a = saveIn(
      'artifacts/hil-reports-lab-1',
      syntheticReport([syntheticBoard({ name: 'bread' })]),
    );
    const b = saveIn(
      'artifacts/hil-reports-lab-2',
      syntheticReport([
        syntheticBoard({ name: 'otto', checks: [check('tools-list.walk', 'failed')] }),
      ]),
    );
    const out = join(dir, 'qualification');
    const { code, stdout } = await hilWithSummary(undefined, ['merge', a, b, '--out', out]);
    expect(code).toBe(1);
    expect(stdout).toContain('Qualification (boards × builds)');
    expect(stdout).toMatch(/lab-1 +bread +passed/);
    expect(stdout).toMatch(/lab-2 +otto +failed/);
    const merged = readReport(out);
    expect(merged.boards.map((x) => x.name)).toEqual(['lab-1/bread', 'lab-2/otto']);
    expect(merged.exitCode).toBe(1);
    expect(readFileSync(join(out, 'summary.md'), 'utf8')).toContain(
      '| `lab-2` | `otto` | otto | ❌ failed |',
    );
    expect(readFileSync(join(out, 'report.html'), 'utf8')).toContain(
      'data-testid="qualification-row" data-rig="lab-1" data-board="bread"',
    );
    expect(readFileSync(join(out, 'junit.xml'), 'utf8')).toContain('<testsuite name="lab-2/otto"');
  });

  it('exits 3 for a rig --expect names that sent no report, 2 for a path that is no report', async () => {
    const a = saveIn('only/lab-1', syntheticReport([syntheticBoard()]));
    const out = join(dir, 'q2');
    const missing = await hilWithSummary(undefined, [
      'merge',
      a,
      '--out',
      out,
      '--expect',
      'lab-1,lab-2',
    ]);
    expect(missing.code).toBe(3);
    expect(missing.stdout).toContain('rig lab-2: no report (the rig failed)');
    const none = await hilWithSummary(undefined, [
      'merge',
      '--out',
      join(dir, 'q3'),
      '--expect',
      'lab-1,lab-2',
    ]);
    expect(none.code).toBe(3);
    expect(none.stdout).toMatch(/lab-2 +\(no report\) +no report/);
    expect((await hilWithSummary(undefined, ['merge', '--out', join(dir, 'q3')])).code).toBe(2);
    const bad = await hilWithSummary(undefined, [
      'merge',
      a,
      join(dir, 'nothing-here'),
      '--out',
      out,
    ]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/nothing-here: no such file or folder/);
  });
});

describe('two real runs of the virtual rig, as two rigs of one build', () => {
  it('compare finds no regression; merge lists both rigs', { timeout: 120_000 }, async () => {
    const suites = ['--suite', 'initialize,tools-list,latency', '--reporter', 'json'];
    const first = join(dir, 'real', 'hil-reports-rig-a');
    const second = join(dir, 'real', 'hil-reports-rig-b');
    expect((await hilWithSummary(undefined, ['run', '--out', first, ...suites])).code).toBe(0);
    const run = await hilWithSummary(undefined, [
      'run',
      '--out',
      second,
      ...suites,
      '--compare-to',
      first,
    ]);
    expect(run.stdout).toContain('Comparison with the base:');
    expect(run.code).toBe(0);
    const candidate = readReport(second);
    expect(candidate.comparison?.regressions).toBe(0);
    // The reports carry what a comparison needs: the tool lists, pages, the OTA request, the image size.
    for (const board of candidate.boards) {
      expect(board.tools?.length).toBeGreaterThan(3);
      expect(board.pages?.plain.length).toBeGreaterThan(0);
      expect(board.otaRequest?.minimum_free_heap_size).toBeDefined();
      expect(board.image?.bytes).toBeGreaterThan(0);
    }
    // One build against itself is never slower. Whether it reads as the same or faster depends on
    // the machine's load between the two runs, which a test must not assert.
    for (const verdict of candidate.comparison?.boards.map((b) => b.latency[0]?.verdict) ?? [])
      expect(['same', 'faster']).toContain(verdict);
    expect(candidate.comparison?.boards).toHaveLength(2);

    expect((await hilWithSummary(undefined, ['compare', first, second])).code).toBe(0);

    const out = join(dir, 'real', 'merged');
    const merge = await hilWithSummary(undefined, [
      'merge',
      first,
      second,
      '--out',
      out,
      '--expect',
      'rig-a,rig-b',
    ]);
    expect(merge.code).toBe(0);
    const merged = readReport(out);
    expect(merged.boards.map((b) => b.name)).toEqual([
      'rig-a/bread-compact-wifi',
      'rig-a/otto-robot',
      'rig-b/bread-compact-wifi',
      'rig-b/otto-robot',
    ]);
    expect(merged.qualification?.sources.map((s) => s.rig)).toEqual(['rig-a', 'rig-b']);
  });
});
