import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { fixtureReport } from './fixture.test-helper.js';
import {
  REPORTER_NAMES,
  REPORTERS,
  renderGithubSummary,
  renderJson,
  writeReports,
} from './index.js';

describe('writeReports', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  it('writes the file reports into a new output directory and returns their paths', async () => {
    dir = await mkdtemp(join(tmpdir(), 'hil-reports-'));
    const outDir = join(dir, 'out', 'run-1');
    const report = fixtureReport();
    const written = await writeReports(report, { outDir, reporters: [...REPORTER_NAMES], env: {} });
    expect(written).toEqual({
      junit: join(outDir, 'junit.xml'),
      json: join(outDir, 'report.json'),
      html: join(outDir, 'report.html'),
      openmetrics: join(outDir, 'metrics.txt'),
    });
    expect(await readFile(join(outDir, 'report.json'), 'utf8')).toBe(renderJson(report));
    expect(await readFile(join(outDir, 'metrics.txt'), 'utf8')).toMatch(/# EOF\n$/);
    expect((await readFile(join(outDir, 'junit.xml'), 'utf8')).startsWith('<?xml')).toBe(true);
    expect(
      (await readFile(join(outDir, 'report.html'), 'utf8')).startsWith('<!doctype html>'),
    ).toBe(true);
  });

  it('writes only the reporters asked for, and the GitHub summary when the env names a file', async () => {
    dir = await mkdtemp(join(tmpdir(), 'hil-reports-'));
    const summary = join(dir, 'step-summary.md');
    const report = fixtureReport();
    const written = await writeReports(report, {
      outDir: dir,
      reporters: ['console', 'json', 'github', 'json'],
      env: { GITHUB_STEP_SUMMARY: summary },
    });
    expect(written).toEqual({ json: join(dir, 'report.json'), github: summary });
    expect(await readFile(summary, 'utf8')).toBe(renderGithubSummary(report));
  });
});

describe('REPORTERS', () => {
  it('names every reporter and the file it writes', () => {
    expect(Object.keys(REPORTERS)).toEqual([...REPORTER_NAMES]);
    expect(Object.fromEntries(REPORTER_NAMES.map((n) => [n, REPORTERS[n].file]))).toEqual({
      console: undefined,
      junit: 'junit.xml',
      json: 'report.json',
      html: 'report.html',
      openmetrics: 'metrics.txt',
      github: undefined,
    });
    expect(REPORTERS.console.render(fixtureReport())).toContain('Exit code 3');
  });
});
