import { describe, expect, it } from 'vitest';
import { fixtureReport, reportOf } from './fixture.test-helper.js';
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

  it('writes NaN for a percentile that could not be measured', () => {
    const report = fixtureReport();
    const board = report.boards[0];
    const stats = board?.latency[0];
    if (board === undefined || stats === undefined) throw new Error('fixture');
    board.latency.splice(0, 1, { ...stats, p99Ms: Number.NaN, valuesMs: [] });
    const out = renderOpenMetrics(reportOf([board]));
    expect(out).toContain('quantile="0.99"} NaN\n');
    // No sum without the samples.
    expect(out).not.toContain('hil_latency_ms_sum');
  });
});
