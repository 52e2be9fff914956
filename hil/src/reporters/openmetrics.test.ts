import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { main } from '../cli.js';
import type { RunReport } from '../model.js';
import { fixtureReport, mqttReport, reportOf } from './fixture.test-helper.js';
import { escapeLabelValue, renderOpenMetrics } from './openmetrics.js';

const SAMPLE =
  /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*\})? (-?[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?|NaN|[+-]Inf)$/;
const DESCRIPTOR = /^# (TYPE|HELP|UNIT) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$/;

describe('renderOpenMetrics', () => {
  const text = renderOpenMetrics(fixtureReport());
  const lines = text.split('\n');

  it('follows the exposition grammar and ends with # EOF', () => {
    expect(text.endsWith('\n# EOF\n')).toBe(true);
    expect(lines.at(-1)).toBe('');
    for (const line of lines.slice(0, -2)) {
      expect(SAMPLE.test(line) || DESCRIPTOR.test(line), line).toBe(true);
    }
  });

  it('describes each family once, before its samples, and never interleaves families', () => {
    const families: string[] = [];
    let current = '';
    for (const line of lines) {
      const descriptor = DESCRIPTOR.exec(line);
      if (descriptor?.[1] === 'TYPE') {
        const name = descriptor[2] ?? '';
        expect(families).not.toContain(name);
        families.push(name);
        current = name;
        continue;
      }
      const sample = SAMPLE.exec(line);
      if (sample !== null) expect(sample[1]?.startsWith(current), line).toBe(true);
    }
    expect(families).toEqual([
      'hil_latency_ms',
      'hil_ping_ms',
      'hil_check_status',
      'hil_board_up',
      'hil_board',
      'hil_run_duration_seconds',
      'hil_run_exit_code',
    ]);
    expect(text).toContain('# TYPE hil_latency_ms summary\n# HELP hil_latency_ms ');
    expect(text).toContain(
      '# TYPE hil_run_duration_seconds gauge\n# UNIT hil_run_duration_seconds seconds\n',
    );
  });

  it('has latency quantiles, sum and count per board and method', () => {
    const m = 'board="bread-compact-wifi",method="tools/call self.get_device_status"';
    expect(text).toContain(
      [
        `hil_latency_ms{${m},quantile="0.5"} 4.4`,
        `hil_latency_ms{${m},quantile="0.9"} 5.31`,
        `hil_latency_ms{${m},quantile="0.99"} 20.04`,
        `hil_latency_ms_sum{${m}} 244.19`,
        `hil_latency_ms_count{${m}} 50`,
      ].join('\n'),
    );
    expect(text).toContain('hil_latency_ms_count{board="robot",method="tools/list"} 20\n');
  });

  it('has the ping round trip per board', () => {
    expect(text).toContain(
      'hil_ping_ms{board="robot",quantile="0.5"} 28.5\nhil_ping_ms{board="robot",quantile="0.99"} 96.2\n',
    );
    expect(text).not.toContain('hil_ping_ms{board="vanished"');
  });

  it('has check status: 1 for passed and known deviations, 0 for failed, skipped absent', () => {
    expect(text).toContain(
      'hil_check_status{board="robot",suite="tools-list",check="tools-list.page-budget",severity="major"} 0\n',
    );
    expect(text).toContain(
      'hil_check_status{board="bread-compact-wifi",suite="tools-call",check="tools-call.error-code",severity="minor"} 1\n',
    );
    expect(text).not.toContain('check="initialize.vision"');
    expect(lines.filter((l) => l.startsWith('hil_check_status{'))).toHaveLength(15);
  });

  it('has board up, board info, run duration and exit code', () => {
    expect(text).toContain(
      'hil_board_up{board="bread-compact-wifi"} 1\nhil_board_up{board="robot"} 1\nhil_board_up{board="vanished"} 0\n',
    );
    expect(text).toContain(
      'hil_board_info{board="robot",kind="serial",variant="otto-robot",chip="ESP32-S3",firmware_version="1.8.2"} 1\n',
    );
    expect(text).toContain('hil_run_duration_seconds 51.25\n');
    expect(text).toContain('hil_run_exit_code 3\n');
  });

  it('escapes label values', () => {
    expect(escapeLabelValue('a\\b"c\nd')).toBe('a\\\\b\\"c\\nd');
    const report = fixtureReport();
    const board = report.boards[2];
    if (board === undefined) throw new Error('fixture');
    const odd = renderOpenMetrics(reportOf([{ ...board, name: 'lab "A"\\desk\n2' }]));
    expect(odd).toContain('hil_board_up{board="lab \\"A\\"\\\\desk\\n2"} 0\n');
    for (const line of odd.split('\n').filter((l) => l !== '' && !l.startsWith('#'))) {
      expect(SAMPLE.test(line), line).toBe(true);
    }
  });

  it('leaves out a figure that was not measured, never writing NaN', () => {
    const report = fixtureReport();
    const board = report.boards[0];
    const stats = board?.latency[0];
    if (board === undefined || stats === undefined) throw new Error('fixture');
    // A report from an older hil, read back from JSON: NaN became null.
    const older = {
      ...stats,
      p99Ms: null,
      pingP99Ms: null,
      valuesMs: [],
    } as unknown as typeof stats;
    board.latency.splice(0, 1, older);
    const out = renderOpenMetrics(reportOf([board]));
    expect(out).not.toMatch(/ (NaN|null|undefined)$/m);
    expect(out).toContain('quantile="0.5"} 4.4\n');
    expect(out).not.toContain('quantile="0.99"}');
    // No sum without the samples.
    expect(out).not.toContain('hil_latency_ms_sum');
  });

  it('has no ping series for a board over MQTT, where the server has no ping', () => {
    const out = renderOpenMetrics(mqttReport());
    expect(out).toContain('hil_latency_ms_count{board="mqtt-board"');
    expect(out).not.toContain('hil_ping_ms{');
    expect(out).not.toContain('NaN');
  });
});

/**
 * The strict parser of the Prometheus client: Debian's python3-prometheus-client, under the
 * system's /usr/bin/python3 (an interpreter on PATH such as pyenv's does not see Debian's
 * packages). Why it is missing, if it is.
 */
const PYTHON = '/usr/bin/python3';
function missingParser(): string | undefined {
  const probe = spawnSync(
    PYTHON,
    ['-c', 'from prometheus_client.openmetrics.parser import text_string_to_metric_families'],
    { encoding: 'utf8' },
  );
  if (probe.error !== undefined) return `no ${PYTHON} (${probe.error.message})`;
  if (probe.status !== 0)
    return `${PYTHON} has no prometheus_client (${probe.stderr.trim().split('\n').at(-1) ?? ''}); install Debian's python3-prometheus-client`;
  return undefined;
}

const PARSE = `
import json, math, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        out.append({"family": family.name, "name": s.name, "labels": s.labels,
                    "value": "NaN" if math.isnan(s.value) else s.value})
print(json.dumps(out))
`;

const skipped = missingParser();

describe.skipIf(skipped !== undefined)(
  `metrics.txt of a real run with a board over MQTT${skipped === undefined ? '' : ` (skipped: ${skipped})`}`,
  () => {
    it('parses with the strict OpenMetrics parser, every value a number, no ping series for the MQTT board', async () => {
      const out = mkdtempSync(join(tmpdir(), 'hil-metrics-'));
      let output = '';
      const write = (text: string) => {
        output += text;
      };
      // The default virtual rig's bread-compact-wifi board runs over MQTT.
      const code = await main(
        ['run', '--board', 'bread-compact-wifi', '--suite', 'latency', '--out', out],
        { stdout: write, stderr: write },
      );
      expect(code, output).toBe(0);
      const text = readFileSync(join(out, 'metrics.txt'), 'utf8');
      const parsed = spawnSync(PYTHON, ['-c', PARSE], { input: text, encoding: 'utf8' });
      expect(parsed.stderr, text).toBe('');
      expect(parsed.status).toBe(0);
      const samples = JSON.parse(parsed.stdout) as {
        family: string;
        labels: Record<string, string>;
        value: number | 'NaN';
      }[];
      expect(samples.filter((s) => s.value === 'NaN')).toEqual([]);
      const board = samples.filter((s) => s.labels.board === 'bread-compact-wifi');
      expect(board.map((s) => s.family)).toContain('hil_latency_ms');
      expect(board.filter((s) => s.family === 'hil_ping_ms')).toEqual([]);

      const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
      const [run] = report.boards;
      expect(run?.transport).toBe('mqtt');
      expect(run?.latency[0]).not.toHaveProperty('pingP50Ms');
      expect(run?.latency[0]).not.toHaveProperty('pingP99Ms');
    }, 60_000);
  },
);
