/**
 * The whole `RunReport` as pretty JSON. Keys come in a fixed order (the outcome first, the bulky
 * samples last) whatever order the rig built the objects in, so reports diff cleanly between runs.
 */
import { headline, type RunReport } from '../model.js';

/** The order of known keys per object; keys not listed follow, sorted. */
interface Shape {
  readonly keys: readonly string[];
  /** Shapes of nested objects (or of the elements of nested arrays), by key. */
  readonly nested?: Readonly<Record<string, Shape>>;
}

const CHECK: Shape = {
  keys: [
    'id',
    'suite',
    'description',
    'severity',
    'status',
    'message',
    'expected',
    'actual',
    'durationMs',
    'retries',
    'deviation',
    'skippedAfter',
    'data',
  ],
  nested: { deviation: { keys: ['reason', 'fixed'] } },
};

const IMAGE: Shape = {
  keys: ['file', 'sha256', 'bytes', 'kind', 'project', 'version', 'board', 'chip'],
};

const BOARD: Shape = {
  keys: [
    'name',
    'kind',
    'status',
    'failure',
    'port',
    'chip',
    'mac',
    'variant',
    'transport',
    'firmwareVersion',
    'expectedVersion',
    'upgradedVersion',
    'image',
    'startedAt',
    'durationMs',
    'consoleLog',
    'transcript',
    'replica',
    'steps',
    'checks',
    'latency',
  ],
  nested: {
    failure: { keys: ['step', 'reason'] },
    image: IMAGE,
    steps: { keys: ['step', 'status', 'durationMs', 'message', 'check', 'flaky'] },
    checks: CHECK,
    latency: {
      keys: [
        'method',
        'samples',
        'minMs',
        'p50Ms',
        'p90Ms',
        'p99Ms',
        'maxMs',
        'pingP50Ms',
        'pingP99Ms',
        'valuesMs',
      ],
    },
  },
};

const REPORT: Shape = {
  keys: [
    'tool',
    'startedAt',
    'durationMs',
    'exitCode',
    'headline',
    'interrupted',
    'summary',
    'rig',
    'host',
    'server',
    'firmware',
    'otaImage',
    'suites',
    'boards',
  ],
  nested: {
    tool: { keys: ['name', 'version'] },
    host: { keys: ['hostname', 'os', 'node'] },
    otaImage: IMAGE,
    headline: { keys: ['text', 'tone'] },
    summary: {
      keys: [
        'rootCause',
        'boards',
        'passed',
        'failed',
        'knownDeviations',
        'fixedDeviations',
        'skipped',
        'rigFailures',
        'interrupted',
      ],
      nested: {
        rootCause: {
          keys: [
            'board',
            'check',
            'step',
            'rig',
            'reason',
            'at',
            'skipped',
            'stoppedAnsweringAt',
            'laterFailures',
          ],
        },
      },
    },
    server: { keys: ['ota', 'websocket', 'mqtt'] },
    firmware: IMAGE,
    boards: BOARD,
  },
};

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function ordered(value: unknown, shape: Shape | undefined): unknown {
  if (Array.isArray(value)) return value.map((item) => ordered(item, shape));
  if (!isRecord(value)) return value;
  const known = shape?.keys ?? [];
  const rest = Object.keys(value)
    .filter((k) => !known.includes(k))
    .sort();
  const out: Record<string, unknown> = {};
  for (const key of [...known, ...rest]) {
    if (key in value) out[key] = ordered(value[key], shape?.nested?.[key]);
  }
  return out;
}

/** Arrays of numbers (latency samples) on one line instead of one line per value. */
const NUMBER_ARRAY = /\[\n(?:\s*-?\d[\d.eE+-]*,?\n)+\s*\]/g;

export function renderJson(report: RunReport): string {
  // The verdict every other report leads with, for whoever reads the JSON.
  const text = JSON.stringify(ordered({ ...report, headline: headline(report) }, REPORT), null, 2);
  // A JSON string never spans lines, so a line holding only a number is an array element.
  const compact = text.replace(
    NUMBER_ARRAY,
    (match) => `[${match.slice(1, -1).trim().split(/,?\s+/).join(', ')}]`,
  );
  return `${compact}\n`;
}
