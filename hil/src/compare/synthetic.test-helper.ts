/**
 * Synthetic reports for the tests of `hil compare` and `hil merge`: one board whose latency
 * samples are drawn, seeded, from a log-normal distribution (what call latencies look like: a
 * floor and a right tail). A test helper: the build leaves it out.
 */
import type { BoardReport, CheckResult, RunReport, ToolSummary } from '../model.js';
import { latencyOf, reportOf } from '../reporters/fixture.test-helper.js';
import { seededRandom } from './stats.js';

/** `count` log-normal samples with the given median and log-sd, rounded to 0.01 ms as hil keeps them. */
export function lognormalSamples(
  count: number,
  medianMs: number,
  sigma: number,
  seed: number,
): number[] {
  const random = seededRandom(seed);
  const out: number[] = [];
  for (let i = 0; i < count; i++) {
    // Box-Muller.
    const u = 1 - random();
    const v = random();
    const z = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
    out.push(Math.round(medianMs * Math.exp(sigma * z) * 100) / 100);
  }
  return out;
}

export function check(id: string, status: CheckResult['status'] = 'passed'): CheckResult {
  const suite = id.split('.')[0] as CheckResult['suite'];
  return {
    id,
    suite,
    description: `the ${id} check`,
    severity: 'major',
    status,
    message: status === 'failed' ? `expected the ${id} behaviour, got something else` : '',
    durationMs: 1,
    retries: 0,
  };
}

export const TOOLS: readonly ToolSummary[] = [
  {
    name: 'self.get_device_status',
    description: 'Provides the real-time information of the device',
    inputSchema: { type: 'object', properties: {} },
    userOnly: false,
  },
  {
    name: 'self.audio_speaker.set_volume',
    description: 'Set the volume of the audio speaker',
    inputSchema: {
      type: 'object',
      properties: { volume: { type: 'integer', minimum: 0, maximum: 100 } },
      required: ['volume'],
    },
    userOnly: false,
  },
  {
    name: 'self.reboot',
    description: 'Reboot the device',
    inputSchema: { type: 'object', properties: {} },
    userOnly: true,
  },
];

export interface SyntheticBoard {
  readonly name?: string;
  readonly medianMs?: number;
  readonly sigma?: number;
  readonly samples?: number;
  readonly seed?: number;
  readonly checks?: CheckResult[];
  readonly tools?: ToolSummary[];
  readonly status?: BoardReport['status'];
  readonly bootMs?: number;
  readonly freeHeap?: string;
  readonly imageBytes?: number;
  readonly version?: string;
}

export function syntheticBoard(options: SyntheticBoard = {}): BoardReport {
  const name = options.name ?? 'bread-compact-wifi';
  const checks = options.checks ?? [
    check('initialize.reply-shape'),
    check('tools-list.walk'),
    check('latency.calls'),
  ];
  const status =
    options.status ?? (checks.some((c) => c.status === 'failed') ? 'failed' : 'passed');
  return {
    name,
    kind: 'virtual',
    port: `virtual:${name}`,
    chip: 'esp32s3',
    variant: name,
    firmwareVersion: options.version ?? '2.4.2',
    expectedVersion: options.version ?? '2.4.2',
    status,
    ...(status === 'rig-failed'
      ? { failure: { step: 'session' as const, reason: 'no session within 30000 ms' } }
      : {}),
    steps: [
      { step: 'flash', status: 'passed', durationMs: 3100 },
      { step: 'boot', status: 'passed', durationMs: options.bootMs ?? 1200 },
    ],
    checks,
    latency: [
      latencyOf(
        'tools/call self.get_device_status',
        lognormalSamples(
          options.samples ?? 50,
          options.medianMs ?? 40,
          options.sigma ?? 0.15,
          options.seed ?? 1,
        ),
      ),
    ],
    tools: [...(options.tools ?? TOOLS)],
    pages: {
      plain: [{ tools: 2, bytes: 1800 }],
      withUserTools: [{ tools: 3, bytes: 2400 }],
    },
    otaRequest: {
      application: { version: options.version ?? '2.4.2' },
      minimum_free_heap_size: options.freeHeap ?? '98304',
    },
    image: {
      file: 'virtual firmware built by hil',
      sha256: '0'.repeat(64),
      bytes: options.imageBytes ?? 2_000_000,
      version: options.version ?? '2.4.2',
    },
    consoleLog: `${name}/console.log`,
    transcript: `${name}/transcript.jsonl`,
    startedAt: '2025-01-01T00:00:00.000Z',
    durationMs: 5000,
  };
}

export function syntheticReport(boards: BoardReport[]): RunReport {
  return reportOf(boards, {
    startedAt: '2025-01-01T00:00:00.000Z',
    durationMs: 6000,
    rig: 'virtual',
    server: { ota: 'http://127.0.0.1:1/xiaozhi/ota/', websocket: 'ws://127.0.0.1:1/xiaozhi/v1/' },
    suites: ['initialize', 'tools-list', 'latency'],
  });
}
