/**
 * No headline contradicts the exit code (docs/hil.md §5): every reporter leads with the one
 * headline the model gives (`headline()`), which names the reason for a non-zero exit and never
 * reads "all ... passed" beside one. Table-driven: each case through each reporter, then the
 * files `hil merge` writes for a rig that sent no report.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { main } from './cli.js';
import { mergeReports } from './merge.js';
import { type ExitCode, headline, type RunReport } from './model.js';
import { renderConsoleSummary } from './reporters/console.js';
import {
  elements,
  failingReport,
  fixtureReport,
  interruptedReport,
  panicReport,
  parseXml,
  passingReport,
} from './reporters/fixture.test-helper.js';
import { renderGithubSummary } from './reporters/github.js';
import { renderHtml } from './reporters/html.js';
import { renderJson } from './reporters/json.js';
import { renderJunit } from './reporters/junit.js';
import { renderOpenMetrics } from './reporters/openmetrics.js';

const dir = mkdtempSync(join(tmpdir(), 'hil-headlines-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Two rigs that passed, and a third that `--expect` names but that sent nothing: exit 3. */
function mergedWithMissingRig(): RunReport {
  return mergeReports(
    [
      { rig: 'lab-1', file: join(dir, 'lab-1', 'report.json'), report: passingReport() },
      { rig: 'lab-2', file: join(dir, 'lab-2', 'report.json'), report: passingReport() },
    ],
    { outDir: join(dir, 'merged'), expect: ['lab-1', 'lab-2', 'lab-3'], toolVersion: '0.1.0' },
  );
}

interface Case {
  readonly name: string;
  readonly report: () => RunReport;
  readonly exit: ExitCode;
  /** How the headline must begin: the reason for the exit code. */
  readonly reason: RegExp;
}

const CASES: readonly Case[] = [
  { name: 'pass', report: passingReport, exit: 0, reason: /^all 7 checks passed/ },
  { name: 'check failure', report: failingReport, exit: 1, reason: /^2 checks failed; / },
  {
    name: 'panic at boot (0 checks)',
    report: panicReport,
    exit: 1,
    reason: /^panicky failed at boot: expected no panic, got one: assert failed/,
  },
  {
    name: 'rig failure',
    report: fixtureReport,
    exit: 3,
    reason: /^rig failed: vanished at session; 2 checks failed; /,
  },
  {
    name: 'interrupted',
    report: interruptedReport,
    exit: 130,
    reason: /^interrupted \(Ctrl-C\): 1 board cut short \(robot at suites\); /,
  },
  {
    name: 'merge with a missing rig',
    report: mergedWithMissingRig,
    exit: 3,
    reason: /^rig failed: no report from rig lab-3; /,
  },
];

/** What a reporter says of a run: its headline(s), exit code and tone, as a reader sees them. */
interface Verdict {
  /** The headlines it shows (a title and a banner may both carry one); none for OpenMetrics. */
  readonly headlines: readonly string[];
  readonly exitCode: number;
  /** Whether it reads as a pass (a green tick, an `ok` banner, no failure or error counted). */
  readonly readsAsPass: boolean;
  /** The whole output, to search for a contradicting "all ... passed". */
  readonly text: string;
}

function only(text: string, pattern: RegExp): string {
  const match = pattern.exec(text);
  if (match?.[1] === undefined) throw new Error(`no ${pattern} in:\n${text}`);
  return match[1];
}

const REPORTERS: Readonly<Record<string, (report: RunReport) => Verdict>> = {
  console: (report) => {
    const text = renderConsoleSummary(report);
    return {
      headlines: [only(text, /^Result: (.*)$/m)],
      exitCode: Number(only(text, /^Exit code (\d+): /m)),
      readsAsPass: !/^(Failures \(|Root cause: |Interrupted: )/m.test(text),
      text,
    };
  },
  html: (report) => {
    const text = renderHtml(report);
    return {
      headlines: [
        only(text, /<title>hil: exit \d+, (.*)<\/title>/),
        only(text, /<p class="result" data-testid="headline">(.*)<\/p>/),
      ].map((h) => h.replace(/&#39;/g, "'").replace(/&amp;/g, '&')),
      exitCode: Number(only(text, /data-testid="run-summary" data-exit-code="(\d+)"/)),
      readsAsPass: only(text, /<header class="summary (\w+)"/) === 'ok',
      text,
    };
  },
  'github summary': (report) => {
    const text = renderGithubSummary(report);
    const first = only(text, /^(## .*)$/m);
    return {
      headlines: [only(first, /^## \S+ hil: (.*)$/).replace(/\\(.)/g, '$1')],
      exitCode: Number(only(text, /^Exit code \*\*(\d+)\*\*/m)),
      readsAsPass: first.startsWith('## ✅'),
      text,
    };
  },
  junit: (report) => {
    const text = renderJunit(report);
    const root = parseXml(text);
    const property = (name: string) =>
      elements(root, 'property')
        .filter((p) => p.attributes.name === name)
        .map((p) => p.attributes.value ?? '');
    const codes = [...new Set(property('run.exitCode'))];
    expect(codes).toHaveLength(1);
    const failing = Number(root.attributes.failures ?? 0) + Number(root.attributes.errors ?? 0) > 0;
    return {
      headlines: [...new Set(property('run.headline'))],
      exitCode: Number(codes[0]),
      // Ctrl-C's boards are skipped, not failed: a pass only without failures, errors or them.
      readsAsPass: !failing && !report.boards.some((b) => b.status === 'interrupted'),
      text,
    };
  },
  json: (report) => {
    const text = renderJson(report);
    const parsed = JSON.parse(text) as {
      exitCode: number;
      headline: { text: string; tone: string };
    };
    return {
      headlines: [parsed.headline.text],
      exitCode: parsed.exitCode,
      readsAsPass: parsed.headline.tone === 'passed',
      text,
    };
  },
  openmetrics: (report) => {
    const text = renderOpenMetrics(report);
    const exitCode = Number(only(text, /^hil_run_exit_code (\d+)$/m));
    return { headlines: [], exitCode, readsAsPass: exitCode === 0, text };
  },
};

/** A headline of a run that did not pass reads this way nowhere. */
const ALL_PASSED = /\ball \d+ checks? passed\b/;

describe('headline()', () => {
  it.each(CASES.map((c) => [c.name, c] as const))(
    '%s: leads with the reason for its exit code',
    (_, c) => {
      const report = c.report();
      expect(report.exitCode).toBe(c.exit);
      const { text, tone } = headline(report);
      expect(text).toMatch(c.reason);
      expect(tone).toBe(c.exit === 0 ? 'passed' : c.exit === 130 ? 'interrupted' : 'failed');
      if (c.exit !== 0) expect(text).not.toMatch(ALL_PASSED);
    },
  );
});

describe('the root cause', () => {
  it("is the run's first failure, as the report's times place it", () => {
    // The vanished board failed its session 36.8 s in; the robot's first check failed at 40.1 s.
    expect(fixtureReport().summary.rootCause).toMatchObject({
      board: 'vanished',
      step: 'session',
      reason: 'port /dev/ttyUSB1 vanished while waiting for the hello',
      at: '2025-11-21T20:00:36.752Z',
    });
    expect(failingReport().summary.rootCause).toMatchObject({
      board: 'robot',
      check: 'tools-list.page-budget',
      laterFailures: 1,
      skipped: 0,
    });
    expect(panicReport().summary.rootCause).toMatchObject({ board: 'panicky', step: 'boot' });
    // Ctrl-C is no failure; a merge whose boards all passed blames the rig that sent nothing.
    expect(interruptedReport().summary.rootCause).toBeUndefined();
    expect(mergedWithMissingRig().summary.rootCause).toMatchObject({ rig: 'lab-3' });
    expect(passingReport().summary.rootCause).toBeUndefined();
  });
});

describe.each(Object.entries(REPORTERS))('the %s reporter', (_, render) => {
  it.each(CASES.map((c) => [c.name, c] as const))(
    '%s: its headline is the model headline and agrees with the exit code',
    (_, c) => {
      const report = c.report();
      const verdict = render(report);
      expect(verdict.exitCode).toBe(c.exit);
      for (const shown of verdict.headlines) expect(shown).toBe(headline(report).text);
      expect(verdict.readsAsPass).toBe(c.exit === 0);
      if (c.exit !== 0) {
        for (const shown of verdict.headlines) expect(shown).toMatch(c.reason);
        expect(verdict.text).not.toMatch(ALL_PASSED);
      }
    },
  );
});

describe('hil merge with a rig that sent no report', () => {
  it('leads every file it writes with the rig failure, never "all passed", and exits 3', async () => {
    const inputs = ['lab-1', 'lab-2'].map((rig) => {
      const folder = join(dir, 'cli', rig);
      mkdirSync(folder, { recursive: true });
      writeFileSync(join(folder, 'report.json'), renderJson(passingReport()));
      return `${rig}=${folder}`;
    });
    const out = join(dir, 'cli', 'merged');
    let stdout = '';
    const saved = process.env.GITHUB_STEP_SUMMARY;
    delete process.env.GITHUB_STEP_SUMMARY;
    let code: number;
    try {
      code = await main(['merge', ...inputs, '--expect', 'lab-1,lab-2,lab-3', '--out', out], {
        stdout: (text) => {
          stdout += text;
        },
        stderr: (text) => {
          stdout += text;
        },
      });
    } finally {
      if (saved !== undefined) process.env.GITHUB_STEP_SUMMARY = saved;
    }
    expect(code, stdout).toBe(3);
    const reason = /^rig failed: no report from rig lab-3; 14 checks passed/;
    const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport & {
      headline: { text: string };
    };
    expect(report.exitCode).toBe(3);
    expect(report.headline.text).toMatch(reason);
    expect(report.summary.rootCause).toMatchObject({ rig: 'lab-3' });
    expect(only(stdout, /^Result: (.*)$/m)).toMatch(reason);
    const summary = readFileSync(join(out, 'summary.md'), 'utf8');
    expect(only(summary, /^## ❌ hil: (.*)$/m).replace(/\\(.)/g, '$1')).toMatch(reason);
    const html = readFileSync(join(out, 'report.html'), 'utf8');
    expect(only(html, /<p class="result" data-testid="headline">(.*)<\/p>/)).toMatch(reason);
    const junit = parseXml(readFileSync(join(out, 'junit.xml'), 'utf8'));
    expect(Number(junit.attributes.errors)).toBe(1);
    expect(elements(junit, 'testsuite').find((s) => s.attributes.name === 'lab-3')).toBeDefined();
    for (const text of [stdout, summary, html, JSON.stringify(report)])
      expect(text).not.toMatch(ALL_PASSED);
  });
});
