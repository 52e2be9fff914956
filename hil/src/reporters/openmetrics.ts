/**
 * OpenMetrics text exposition (what Prometheus' textfile collector and Pushgateway ingest), so
 * latency and pass/fail per board can be graphed across runs.
 */
import type { RunReport } from '../model.js';

/** Label values: backslash, double quote and line feed are escaped (OpenMetrics 1.0). */
export function escapeLabelValue(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

function labels(values: Readonly<Record<string, string>>): string {
  const pairs = Object.entries(values).map(
    ([name, value]) => `${name}="${escapeLabelValue(value)}"`,
  );
  return pairs.length === 0 ? '' : `{${pairs.join(',')}}`;
}

/** Numbers as OpenMetrics spells them (`NaN`, `+Inf`), without float noise such as 0.30000000000000004. */
function number(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (value === Number.POSITIVE_INFINITY) return '+Inf';
  if (value === Number.NEGATIVE_INFINITY) return '-Inf';
  return String(Number.parseFloat(value.toPrecision(12)));
}

interface Family {
  readonly name: string;
  readonly type: 'gauge' | 'summary' | 'info';
  readonly help: string;
  readonly unit?: string;
  readonly samples: string[];
}

function sample(
  name: string,
  labelValues: Readonly<Record<string, string>>,
  value: number,
): string {
  return `${name}${labels(labelValues)} ${number(value)}`;
}

export function renderOpenMetrics(report: RunReport): string {
  const latency: Family = {
    name: 'hil_latency_ms',
    type: 'summary',
    help: 'Round trip of a JSON-RPC call to the board after warm-up, in milliseconds.',
    samples: [],
  };
  const ping: Family = {
    name: 'hil_ping_ms',
    type: 'summary',
    help: 'WebSocket ping round trip on the same connection, in milliseconds.',
    samples: [],
  };
  const checks: Family = {
    name: 'hil_check_status',
    type: 'gauge',
    help: 'Whether a check passed (1, also for a known deviation) or failed (0); skipped checks are absent.',
    samples: [],
  };
  const up: Family = {
    name: 'hil_board_up',
    type: 'gauge',
    help: 'Whether the rig got the board through its steps (0: rig failure).',
    samples: [],
  };
  const info: Family = {
    name: 'hil_board',
    type: 'info',
    help: 'What each board is and runs.',
    samples: [],
  };

  for (const board of report.boards) {
    for (const stats of board.latency) {
      const base = { board: board.name, method: stats.method };
      // A figure that was not measured is left out, never written as NaN (a report from an
      // older hil may hold NaN, or null once through JSON).
      for (const [quantile, ms] of [
        ['0.5', stats.p50Ms],
        ['0.9', stats.p90Ms],
        ['0.99', stats.p99Ms],
      ] as const) {
        if (Number.isFinite(ms))
          latency.samples.push(sample('hil_latency_ms', { ...base, quantile }, ms));
      }
      if (stats.valuesMs.length === stats.samples && stats.valuesMs.every(Number.isFinite)) {
        latency.samples.push(
          sample(
            'hil_latency_ms_sum',
            base,
            stats.valuesMs.reduce((a, b) => a + b, 0),
          ),
        );
      }
      latency.samples.push(sample('hil_latency_ms_count', base, stats.samples));
    }
    // One ping series per board: it is measured on the board's one connection, so the first
    // latency series stands for all (a second one would repeat the label set). A board over
    // MQTT has none: the server has no ping there.
    const first = board.latency[0];
    for (const [quantile, ms] of [
      ['0.5', first?.pingP50Ms],
      ['0.99', first?.pingP99Ms],
    ] as const) {
      if (ms !== undefined && Number.isFinite(ms))
        ping.samples.push(sample('hil_ping_ms', { board: board.name, quantile }, ms));
    }
    for (const check of board.checks) {
      if (check.status === 'skipped') continue;
      const ok = check.status === 'passed' || check.status === 'known-deviation';
      checks.samples.push(
        sample(
          'hil_check_status',
          { board: board.name, suite: check.suite, check: check.id, severity: check.severity },
          ok ? 1 : 0,
        ),
      );
    }
    up.samples.push(
      sample('hil_board_up', { board: board.name }, board.status === 'rig-failed' ? 0 : 1),
    );
    const identity: Record<string, string> = { board: board.name, kind: board.kind };
    if (board.variant !== undefined) identity.variant = board.variant;
    if (board.chip !== undefined) identity.chip = board.chip;
    if (board.firmwareVersion !== undefined) identity.firmware_version = board.firmwareVersion;
    info.samples.push(sample('hil_board_info', identity, 1));
  }

  const families: Family[] = [
    latency,
    ping,
    checks,
    up,
    info,
    {
      name: 'hil_run_duration_seconds',
      type: 'gauge',
      unit: 'seconds',
      help: 'Wall time of the whole run.',
      samples: [sample('hil_run_duration_seconds', {}, report.durationMs / 1000)],
    },
    {
      name: 'hil_run_exit_code',
      type: 'gauge',
      help: 'Exit code of the run: 0 passed, 1 a check failed, 2 bad usage or config, 3 the rig failed.',
      samples: [sample('hil_run_exit_code', {}, report.exitCode)],
    },
  ];

  const lines: string[] = [];
  for (const family of families) {
    lines.push(`# TYPE ${family.name} ${family.type}`);
    if (family.unit !== undefined) lines.push(`# UNIT ${family.name} ${family.unit}`);
    lines.push(`# HELP ${family.name} ${family.help}`);
    lines.push(...family.samples);
  }
  lines.push('# EOF');
  return `${lines.join('\n')}\n`;
}
