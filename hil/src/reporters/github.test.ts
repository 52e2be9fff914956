import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { markdownText } from './escape.js';
import { fixtureReport, mqttReport, passingReport, reportOf } from './fixture.test-helper.js';
import { renderGithubSummary, writeGithubSummary } from './github.js';

/** The rows of the Markdown table that starts with `header`. */
function tableAfter(markdown: string, header: string): string[] {
  const lines = markdown.split('\n');
  const start = lines.indexOf(header);
  if (start < 0) throw new Error(`no table ${header}`);
  const rows: string[] = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    rows.push(line);
  }
  return rows;
}

/** Splits a table row on unescaped pipes. */
function cells(row: string): string[] {
  return row
    .slice(2, -2)
    .split(/(?<!\\) \| /)
    .map((c) => c.trim());
}

describe('renderGithubSummary', () => {
  const markdown = renderGithubSummary(fixtureReport());

  it('opens with the result and an emoji per board', () => {
    expect(
      markdown.startsWith(
        '## ❌ hil: rig failed: vanished at session; 2 checks failed; 10 checks passed, 1 skipped, 3 known deviations, 1 deviation fixed (update the baseline)\n\n**Root cause:** vanished at session: port /dev/ttyUSB1 vanished while waiting for the hello\n',
      ),
    ).toBe(true);
    expect(markdown).toContain('\n✅ bread-compact-wifi · ❌ robot · 💥 vanished\n');
    expect(markdown).toContain(
      'Exit code **3**: the rig failed (board missing, port lost, backend could not start).',
    );
    expect(renderGithubSummary(passingReport()).startsWith('## ✅ hil: all 7 checks passed')).toBe(
      true,
    );
  });

  it('has a table of boards', () => {
    const header =
      '|  | Board | Status | Variant | Chip | Firmware | Passed | Failed | Known deviations | Skipped | Time |';
    expect(markdown).toContain(
      `${header}\n| --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n`,
    );
    expect(tableAfter(markdown, header)).toEqual([
      '| ✅ | `bread-compact-wifi` | passed | bread-compact-wifi | ESP32-S3 | 1.8.2 | 7 | 0 | 2 | 1 | 14.4 s |',
      '| ❌ | `robot` | failed | otto-robot | ESP32-S3 | 1.8.2 | 3 | 2 | 1 | 0 | 49.5 s |',
      '| 💥 | `vanished` | rig failed at session | esp-box | ESP32 | – | 0 | 0 | 0 | 0 | 35.6 s |',
    ]);
  });

  it('lists failures with their messages, rig failures first', () => {
    expect(markdown).toContain('### Failures');
    expect(tableAfter(markdown, '| Board | Check | Severity | Message |')).toEqual([
      '| `vanished` | `rig.session` | rig | port /dev/ttyUSB1 vanished while waiting for the hello |',
      '| `robot` | `tools-list.page-budget` | major | page 2 is over the budget: expected ≤ 8000 bytes by the firmware rule, got 8123 |',
      '| `robot` | `tools-call.concurrent` | major | reply for id 7 answered id 8 (failed on all 3 attempts) |',
    ]);
  });

  it('lists known deviations and the ones that disappeared', () => {
    const rows = tableAfter(markdown, '| Board | Check | Baseline reason | What came back |');
    expect(rows).toHaveLength(3);
    // Markup in what the board sent is escaped, not rendered.
    expect(cells(rows[1] ?? '')[3]).toBe(
      'the reply is not valid JSON: expected a JSON string with \\\\" escaped, got {"message":"Unknown tool: say "hi" \\<now\\> \\& later"}',
    );
    expect(markdown).toContain(
      '### Deviations that disappeared\n\n> [!NOTE]\n> These checks pass now: remove them from the baseline file so it stays honest.\n\n- `bread-compact-wifi` `robustness.ping`: firmware has no ping\n',
    );
    expect(markdown).toContain(
      '- `bread-compact-wifi` `tools-call.volume-round-trip` passed after 1 retry\n',
    );
  });

  it('has a latency table', () => {
    expect(
      tableAfter(
        markdown,
        '| Board | Method | Samples | min | p50 | p90 | p99 | max | ping p50 | ping p99 |',
      ),
    ).toEqual([
      '| `bread-compact-wifi` | `tools/call self.get_device_status` | 50 | 3.07 ms | 4.40 ms | 5.31 ms | 20.0 ms | 20.0 ms | 0.42 ms | 1.90 ms |',
      '| `robot` | `tools/call self.get_device_status` | 50 | 35.4 ms | 45.1 ms | 52.0 ms | 158 ms | 158 ms | 28.5 ms | 96.2 ms |',
      '| `robot` | `tools/list` | 20 | 66.1 ms | 76.3 ms | 84.4 ms | 252 ms | 252 ms | 28.5 ms | 96.2 ms |',
    ]);
  });

  it('says the ping is n/a over MQTT, where the server has no ping', () => {
    expect(
      tableAfter(
        renderGithubSummary(mqttReport()),
        '| Board | Method | Samples | min | p50 | p90 | p99 | max | ping p50 | ping p99 |',
      ),
    ).toEqual([
      '| `mqtt-board` | `tools/call self.get_device_status` | 50 | 3.07 ms | 4.40 ms | 5.31 ms | 20.0 ms | 20.0 ms | n/a over MQTT | n/a over MQTT |',
    ]);
  });

  it('keeps a table row intact when a message holds pipes and line breaks', () => {
    const report = fixtureReport();
    const check = report.boards[1]?.checks[1];
    const board = report.boards[1];
    if (board === undefined || check === undefined) throw new Error('fixture');
    check.message = 'a | b\nc';
    const rows = tableAfter(
      renderGithubSummary(reportOf([board])),
      '| Board | Check | Severity | Message |',
    );
    expect(rows[0]).toBe(
      '| `robot` | `tools-list.page-budget` | major | a \\| b<br>c: expected ≤ 8000 bytes by the firmware rule, got 8123 |',
    );
    expect(cells(rows[0] ?? '')).toHaveLength(4);
  });

  it('omits sections with nothing to say', () => {
    const report = passingReport();
    const board = report.boards[0];
    if (board === undefined) throw new Error('fixture');
    board.checks.splice(
      0,
      board.checks.length,
      ...board.checks.filter(
        (c) => c.status === 'passed' && c.retries === 0 && c.deviation === undefined,
      ),
    );
    const text = renderGithubSummary(reportOf([board]));
    expect(text).not.toContain('### Failures');
    expect(text).not.toContain('### Known deviations');
    expect(text).not.toContain('### Deviations that disappeared');
    expect(text).toContain('### Latency');
  });
});

describe('markdownText', () => {
  it('escapes what would format or break a table', () => {
    expect(markdownText('*a* _b_ `c` [d](e) <f> | & \\')).toBe(
      '\\*a\\* \\_b\\_ \\`c\\` \\[d\\](e) \\<f\\> \\| \\& \\\\',
    );
  });
});

describe('writeGithubSummary', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  it('does nothing when GITHUB_STEP_SUMMARY is unset or empty', async () => {
    expect(await writeGithubSummary(fixtureReport(), {})).toBeUndefined();
    expect(await writeGithubSummary(fixtureReport(), { GITHUB_STEP_SUMMARY: '' })).toBeUndefined();
  });

  it('appends to the file it names', async () => {
    dir = await mkdtemp(join(tmpdir(), 'hil-github-'));
    const path = join(dir, 'summary.md');
    await writeFile(path, '# earlier step\n');
    expect(await writeGithubSummary(fixtureReport(), { GITHUB_STEP_SUMMARY: path })).toBe(path);
    const text = await readFile(path, 'utf8');
    expect(text).toBe(`# earlier step\n${renderGithubSummary(fixtureReport())}`);
  });
});
