/**
 * `hil compare` on synthetic reports (docs/ci.md §1): a candidate whose calls are 20 % slower
 * fails (exit 1), two draws of the same distribution do not, and every other kind of difference
 * (checks, tools, pages, boot, image, heap) lands where it should, in every report format.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { hilWithSummary } from '../hil-main.test-helper.js';
import { parseInventory, SCHEMA_PATH } from '../inventory.js';
import type { RunReport } from '../model.js';
import { latencyOf } from '../reporters/fixture.test-helper.js';
import { renderGithubSummary } from '../reporters/github.js';
import { renderHtml } from '../reporters/html.js';
import { renderJson } from '../reporters/json.js';
import { renderJunit } from '../reporters/junit.js';
import { attachComparison } from './commands.js';
import { compareLatency, compareReports } from './compare.js';
import { renderComparisonText } from './render.js';
import { DEFAULT_COMPARE_THRESHOLDS } from './rules.js';
import {
  check,
  lognormalSamples,
  syntheticBoard,
  syntheticReport,
  TOOLS,
} from './synthetic.test-helper.js';

const dir = mkdtempSync(join(tmpdir(), 'hil-compare-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let files = 0;
function save(report: RunReport): string {
  const path = join(dir, `report-${++files}.json`);
  writeFileSync(path, renderJson(report));
  return path;
}

const METHOD = 'tools/call self.get_device_status';

describe('hil compare: latency on the raw samples', () => {
  it('exits 1 for a candidate whose calls are 20% slower (50 samples each)', async () => {
    const base = save(syntheticReport([syntheticBoard({ seed: 11 })]));
    const candidate = save(syntheticReport([syntheticBoard({ seed: 12, medianMs: 48 })]));
    const { code, stdout } = await hilWithSummary(undefined, ['compare', base, candidate]);
    expect(code).toBe(1);
    expect(stdout).toContain(`✗ regression  ${METHOD} slower: median`);
    expect(stdout).toContain('Exit code 1: a regression against the base');

    const json = await hilWithSummary(undefined, ['compare', base, candidate, '--format', 'json']);
    const comparison = JSON.parse(json.stdout);
    const latency = comparison.boards[0].latency[0];
    expect(latency.verdict).toBe('slower');
    expect(latency.ratio).toBeGreaterThan(1.1);
    expect(latency.pSlower).toBeLessThan(1e-6);
  });

  it('exits 0 for two runs of the same build: 40 pairs of draws from one distribution, none flagged', () => {
    const flagged: string[] = [];
    let smallest = 1;
    for (let pair = 0; pair < 40; pair++) {
      const base = syntheticReport([syntheticBoard({ seed: 1000 + pair })]);
      const candidate = syntheticReport([syntheticBoard({ seed: 2000 + pair })]);
      const comparison = compareReports(base, candidate, { baseLabel: 'a', candidateLabel: 'b' });
      const latency = comparison.boards[0]?.latency[0];
      smallest = Math.min(smallest, latency?.pSlower ?? 1, latency?.pFaster ?? 1);
      if (comparison.exitCode !== 0)
        flagged.push(
          `pair ${pair}: ${comparison.boards[0]?.findings.map((f) => f.text).join('; ')}`,
        );
    }
    expect(flagged).toEqual([]);
    // Noise does reach small p-values now and then: the effect-size floor is what keeps it quiet.
    expect(smallest).toBeLessThan(0.2);
  });

  it('exits 0 through the command for two draws of the same build', async () => {
    const base = save(syntheticReport([syntheticBoard({ seed: 21 })]));
    const candidate = save(syntheticReport([syntheticBoard({ seed: 22 })]));
    const { code, stdout } = await hilWithSummary(undefined, ['compare', base, candidate]);
    expect(stdout).toContain('no significant change');
    expect(code).toBe(0);
  });

  it('needs both: significance and the minimum effect', () => {
    const t = DEFAULT_COMPARE_THRESHOLDS;
    const base = latencyOf(METHOD, lognormalSamples(400, 40, 0.05, 5));
    // 3 % slower with 400 samples: significant, but under the 10 % floor.
    const small = compareLatency(base, latencyOf(METHOD, lognormalSamples(400, 41.2, 0.05, 6)), t);
    expect(small.pSlower).toBeLessThan(0.01);
    expect(small.verdict).toBe('same');
    // 20 % slower in sub-millisecond calls: under the 0.5 ms floor.
    const tiny = compareLatency(
      latencyOf(METHOD, lognormalSamples(50, 0.4, 0.1, 7)),
      latencyOf(METHOD, lognormalSamples(50, 0.48, 0.1, 8)),
      t,
    );
    expect(tiny.verdict).toBe('same');
    // 20 % slower with 8 samples: listed, not judged.
    const few = compareLatency(
      latencyOf(METHOD, lognormalSamples(8, 40, 0.15, 9)),
      latencyOf(METHOD, lognormalSamples(8, 48, 0.15, 10)),
      t,
    );
    expect(few.verdict).toBe('too-few-samples');
    // Faster is an improvement, never a regression.
    const faster = compareLatency(
      latencyOf(METHOD, lognormalSamples(50, 48, 0.15, 11)),
      latencyOf(METHOD, lognormalSamples(50, 40, 0.15, 12)),
      t,
    );
    expect(faster.verdict).toBe('faster');
  });

  it("takes the inventory's thresholds (--config)", async () => {
    const inventory = join(dir, 'hil.config.json');
    writeFileSync(
      inventory,
      JSON.stringify({
        compare: { latencyMinRatio: 1.5 },
        boards: [{ name: 'a', port: 'virtual:a' }],
      }),
    );
    const base = save(syntheticReport([syntheticBoard({ seed: 11 })]));
    const candidate = save(syntheticReport([syntheticBoard({ seed: 12, medianMs: 48 })]));
    expect(
      (await hilWithSummary(undefined, ['compare', base, candidate, '--config', inventory])).code,
    ).toBe(0);
  });
});

describe('hil compare: checks, tools, pages and figures', () => {
  it('lists status changes: passed → failed is a regression, failed → passed an improvement', () => {
    const base = syntheticReport([
      syntheticBoard({
        checks: [
          check('tools-list.walk'),
          check('robustness.ping', 'known-deviation'),
          check('latency.calls'),
          check('reboot.back'),
        ],
      }),
    ]);
    const candidate = syntheticReport([
      syntheticBoard({
        checks: [
          check('tools-list.walk', 'failed'),
          check('robustness.ping'),
          check('latency.calls'),
          check('tools-list.stable'),
        ],
      }),
    ]);
    const comparison = compareReports(base, candidate, {
      baseLabel: 'base',
      candidateLabel: 'cand',
    });
    const findings = comparison.boards[0]?.findings ?? [];
    const kindOf = (id: string) => findings.filter((f) => f.id === id).map((f) => f.kind);
    expect(kindOf('check tools-list.walk')).toEqual(['regression']);
    expect(kindOf('check robustness.ping')).toEqual(['improvement']);
    expect(kindOf('check tools-list.stable')).toEqual(['change']);
    expect(kindOf('check reboot.back')).toEqual(['change']);
    expect(kindOf('board')).toEqual(['change']);
    expect(comparison.exitCode).toBe(1);
    expect(comparison.regressions).toBe(1);
  });

  it('diffs the tool lists: a removed tool is a regression; added, described or reshaped ones are changes', () => {
    const [status, volume] = TOOLS;
    if (status === undefined || volume === undefined) throw new Error('fixture');
    const candidateTools = [
      { ...status, description: 'Device status as JSON' },
      {
        ...volume,
        inputSchema: {
          type: 'object',
          properties: { volume: { type: 'integer', minimum: 0, maximum: 10 } },
          required: ['volume'],
        },
      },
      {
        name: 'self.lamp.turn_on',
        description: 'Turn on the lamp',
        inputSchema: { type: 'object', properties: {} },
        userOnly: false,
      },
    ];
    const comparison = compareReports(
      syntheticReport([syntheticBoard()]),
      syntheticReport([syntheticBoard({ tools: candidateTools })]),
      { baseLabel: 'base', candidateLabel: 'cand' },
    );
    const tools = (comparison.boards[0]?.findings ?? []).filter((f) => f.subject === 'tool');
    expect(tools.map((f) => [f.kind, f.text])).toEqual([
      ['regression', 'self.reboot: removed (the base lists it)'],
      [
        'change',
        'self.get_device_status: description "Provides the real-time information of the device" → "Device status as JSON"',
      ],
      [
        'change',
        'self.audio_speaker.set_volume: volume: {"maximum":100,"minimum":0,"type":"integer"} → {"maximum":10,"minimum":0,"type":"integer"}',
      ],
      ['change', 'self.lamp.turn_on: added'],
    ]);
  });

  it('compares pages, boot time, image size and the free heap of the OTA request', () => {
    const base = syntheticReport([syntheticBoard()]);
    const candidate = syntheticReport([
      syntheticBoard({ bootMs: 4000, imageBytes: 2_300_000, freeHeap: '65536' }),
    ]);
    const board = candidate.boards[0];
    if (board === undefined) throw new Error('fixture');
    board.pages = {
      plain: [{ tools: 2, bytes: 1800 }],
      withUserTools: [
        { tools: 2, bytes: 7990 },
        { tools: 1, bytes: 400 },
      ],
    };
    const comparison = compareReports(base, candidate, {
      baseLabel: 'base',
      candidateLabel: 'cand',
    });
    const findings = comparison.boards[0]?.findings ?? [];
    expect(findings.filter((f) => f.kind === 'regression').map((f) => f.text)).toEqual([
      'boot time: 1.2 s → 4 s (+233.3%)',
      'image size: 1.91 MiB → 2.19 MiB (+15%)',
      'minimum free heap: 96 KiB → 64 KiB (-33.3%)',
    ]);
    expect(findings.find((f) => f.subject === 'pages')?.text).toBe(
      'walk with user tools: 1 page, 2.3 KiB (largest 2400 B) → 2 pages, 8.2 KiB (largest 7990 B)',
    );
    // Flash time did not move: listed among the figures, no finding.
    expect(comparison.boards[0]?.metrics.find((m) => m.metric === 'flash')?.verdict).toBe('same');
  });

  it('calls a board failure no check explains (a panic) a regression of the board', () => {
    const panicked = syntheticBoard();
    panicked.status = 'failed';
    panicked.failure = { step: 'suites', reason: 'expected no panic, got one: LoadProhibited' };
    const comparison = compareReports(
      syntheticReport([syntheticBoard()]),
      syntheticReport([panicked]),
      { baseLabel: 'base', candidateLabel: 'cand' },
    );
    expect(comparison.boards[0]?.findings.map((f) => [f.kind, f.id])).toEqual([
      ['regression', 'board'],
    ]);
    expect(comparison.exitCode).toBe(1);
  });

  it('pairs boards by name and lists the ones only one side has', () => {
    const comparison = compareReports(
      syntheticReport([syntheticBoard({ name: 'a' }), syntheticBoard({ name: 'b' })]),
      syntheticReport([syntheticBoard({ name: 'b' }), syntheticBoard({ name: 'c' })]),
      { baseLabel: 'base', candidateLabel: 'cand' },
    );
    expect(comparison.boards.map((b) => [b.board, b.findings.map((f) => f.text)])).toEqual([
      ['b', []],
      ['c', ['new board: not in the base report']],
      ['a', ['not in the candidate report (not qualified: run it with this board)']],
    ]);
    expect(comparison.exitCode).toBe(0);
  });

  it('exits 3 when the rig failed for a candidate board', async () => {
    const base = save(syntheticReport([syntheticBoard()]));
    const candidate = save(
      syntheticReport([
        syntheticBoard({ status: 'rig-failed', checks: [check('initialize.reply-shape')] }),
      ]),
    );
    const { code, stdout } = await hilWithSummary(undefined, ['compare', base, candidate]);
    expect(code).toBe(3);
    expect(stdout).toContain('note: 2 checks of the base did not run');
  });
});

describe('hil compare: bad input exits 2', () => {
  it('names what is wrong', async () => {
    const good = save(syntheticReport([syntheticBoard()]));
    const notHil = join(dir, 'other.json');
    writeFileSync(notHil, JSON.stringify({ tool: { name: 'jest' }, boards: [] }));
    const broken = join(dir, 'broken.json');
    writeFileSync(broken, '{"tool":');
    const cases: [string[], RegExp][] = [
      [['compare', good, join(dir, 'nope.json')], /nope\.json: no such file or folder/],
      [['compare', good, dir], /holds no report\.json/],
      [['compare', notHil, good], /not a hil report \(report\.json\): tool\.name is not "hil"/],
      [['compare', good, broken], /broken\.json is not JSON/],
      [
        ['compare', good, good, '--format', 'yaml'],
        /--format yaml is not a format; formats: text, markdown, json/,
      ],
      [['compare', good], /missing required argument 'candidate'/],
      [['run', '--compare-to', notHil], /not a hil report/],
    ];
    for (const [argv, message] of cases) {
      const { code, stderr } = await hilWithSummary(undefined, argv);
      expect({ argv, code }).toEqual({ argv, code: 2 });
      expect(stderr).toMatch(message);
    }
  });
});

describe('the comparison in every report format', () => {
  const base = syntheticReport([syntheticBoard({ seed: 31 })]);
  const candidate = syntheticReport([
    syntheticBoard({
      seed: 32,
      medianMs: 48,
      checks: [
        check('initialize.reply-shape'),
        check('tools-list.walk', 'failed'),
        check('latency.calls'),
      ],
    }),
  ]);
  const comparison = attachComparison(
    candidate,
    { report: base, file: 'release/report.json' },
    undefined,
  );

  it('turns the exit code of a run to 1 and counts regressions in the result line', () => {
    expect(comparison.regressions).toBe(2);
    const passing = syntheticReport([syntheticBoard({ seed: 33, medianMs: 48 })]);
    expect(passing.exitCode).toBe(0);
    attachComparison(passing, { report: base, file: 'release/report.json' }, undefined);
    expect(passing.exitCode).toBe(1);
    expect(renderGithubSummary(passing)).toContain(
      '## ❌ hil: 1 regression against the base; 3 checks passed',
    );
  });

  it('console', () => {
    const text = renderComparisonText(comparison);
    expect(text).toContain('Comparison with the base: 2 regressions, 0 improvements, 1 change');
    expect(text).toContain('  base      release/report.json');
    expect(text).toContain('✗ regression  tools-list.walk: passed → failed');
  });

  it('Markdown (the GitHub summary)', () => {
    const md = renderGithubSummary(candidate);
    expect(md).toContain(
      '### ❌ Comparison with the base: 2 regressions, 0 improvements, 1 change',
    );
    expect(md).toContain(`| \`bread-compact-wifi\` | ❌ regression | \`latency ${METHOD}\` |`);
    expect(md).toMatch(
      /\| `bread-compact-wifi` \| `tools\/call self\.get_device_status` \| 50\/50 \| [\d.]+ ms \| [\d.]+ ms \| [\d.e-]+ \| [\d.]+ \| slower \|/,
    );
  });

  it('HTML (a section)', () => {
    const html = renderHtml(candidate);
    expect(html).toContain('data-testid="comparison" data-regressions="2"');
    expect(html.match(/data-testid="comparison-finding" data-kind="regression"/g)?.length).toBe(2);
  });

  it('JUnit (a comparison testsuite, a testcase per regression)', () => {
    const xml = renderJunit(candidate);
    expect(xml).toContain('<testsuite name="comparison" tests="2" failures="2"');
    expect(xml).toContain(
      `<testcase classname="comparison.bread-compact-wifi" name="latency ${METHOD}"`,
    );
    expect(xml).toContain(
      '<testcase classname="comparison.bread-compact-wifi" name="check tools-list.walk"',
    );
    expect(xml).toMatch(/<testsuites name="hil" tests="\d+" failures="3"/);
  });

  it('writes the candidate reports with --out and appends to GITHUB_STEP_SUMMARY', async () => {
    const summary = join(dir, 'step-summary.md');
    writeFileSync(summary, '# earlier step\n');
    const out = join(dir, 'compared');
    const { code } = await hilWithSummary(summary, [
      'compare',
      save(base),
      save(syntheticReport([syntheticBoard({ seed: 34, medianMs: 48 })])),
      '--out',
      out,
    ]);
    expect(code).toBe(1);
    expect(readFileSync(summary, 'utf8')).toMatch(
      /^# earlier step\n### ❌ Comparison with the base: 1 regression/,
    );
    const written = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    expect(written.exitCode).toBe(1);
    expect(written.comparison?.regressions).toBe(1);
    expect(readFileSync(join(out, 'junit.xml'), 'utf8')).toContain('<testsuite name="comparison"');
    expect(readFileSync(join(out, 'report.html'), 'utf8')).toContain('data-testid="comparison"');
    expect(readFileSync(join(out, 'comparison.md'), 'utf8')).toContain('Comparison with the base');
  });
});

describe('thresholds in the inventory', () => {
  it('the schema lists exactly the thresholds the comparison has', () => {
    const schema = JSON.parse(readFileSync(SCHEMA_PATH, 'utf8')) as {
      properties: { compare: { properties: Record<string, unknown> } };
    };
    expect(Object.keys(schema.properties.compare.properties).sort()).toEqual(
      Object.keys(DEFAULT_COMPARE_THRESHOLDS).sort(),
    );
  });

  it('validates them', () => {
    const boards = [{ name: 'a', port: 'virtual:a' }];
    expect(
      parseInventory({ compare: { latencyPValue: 0.001, heapMinBytes: 4096 }, boards }).compare,
    ).toEqual({
      latencyPValue: 0.001,
      heapMinBytes: 4096,
    });
    expect(() => parseInventory({ compare: { latencyPValue: 2 }, boards })).toThrow(
      /compare\.latencyPValue/,
    );
    expect(() => parseInventory({ compare: { latencyRatio: 2 }, boards })).toThrow(
      /compare\.latencyRatio is not a known setting/,
    );
  });
});
