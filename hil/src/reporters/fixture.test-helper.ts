/**
 * A realistic run for the reporter tests: a virtual board that passed with known deviations, a
 * robot board that failed a tools-list check, and a board that vanished at `session` (exit 3).
 * Built fresh on every call because reports are mutable. A test helper: the build leaves it out.
 */
import { percentile } from '@xiaozhi-mcp/protocol';
import {
  type BoardReport,
  type CheckResult,
  DEFAULT_SUITES,
  exitCodeFor,
  type LatencyStats,
  type RunReport,
  summarize,
} from '../model.js';

/** Deterministic samples around `baseMs` with a slow tail, rounded to 0.01 ms. */
function samples(count: number, baseMs: number, spreadMs: number, seed: number): number[] {
  let state = seed;
  const values: number[] = [];
  for (let i = 0; i < count; i++) {
    state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
    const u = state / 2_147_483_648;
    // Every 17th call is slow, like a Wi-Fi retransmission.
    const tail = i % 17 === 16 ? spreadMs * 6 : 0;
    values.push(Math.round((baseMs + u * spreadMs + tail) * 100) / 100);
  }
  return values;
}

/** Samples as the report keeps them: their percentiles, beside the given ping round trip. */
export function latencyOf(
  method: string,
  valuesMs: number[],
  pingP50Ms = 1,
  pingP99Ms = 2,
): LatencyStats {
  const sorted = [...valuesMs].sort((a, b) => a - b);
  return {
    method,
    samples: valuesMs.length,
    minMs: sorted[0] ?? Number.NaN,
    p50Ms: percentile(sorted, 0.5),
    p90Ms: percentile(sorted, 0.9),
    p99Ms: percentile(sorted, 0.99),
    maxMs: sorted[sorted.length - 1] ?? Number.NaN,
    pingP50Ms,
    pingP99Ms,
    valuesMs,
  };
}

function passed(
  id: string,
  description: string,
  message = '',
  extra: Partial<CheckResult> = {},
): CheckResult {
  const suite = DEFAULT_SUITES.find((s) => id.startsWith(`${s}.`)) ?? 'initialize';
  return {
    id,
    suite,
    description,
    severity: 'major',
    status: 'passed',
    message,
    durationMs: 12.5,
    retries: 0,
    ...extra,
  };
}

/** The firmware sends error replies without a `code`: known, listed in the baseline. */
function errorCodeDeviation(): CheckResult {
  return passed('tools-call.error-code', 'validation errors carry a JSON-RPC error code', '', {
    severity: 'minor',
    status: 'known-deviation',
    message: 'the error reply has no code',
    expected: '"code": -32602',
    actual: '{"message":"Missing valid argument: volume"}',
    deviation: { reason: 'firmware error replies carry no code (baseline)', fixed: false },
  });
}

export const VIRTUAL_BOARD = 'bread-compact-wifi';
export const ROBOT_BOARD = 'robot';
export const VANISHED_BOARD = 'vanished';

function virtualBoard(): BoardReport {
  return {
    name: VIRTUAL_BOARD,
    kind: 'virtual',
    port: 'virtual:bread-compact-wifi',
    chip: 'ESP32-S3',
    mac: '02:00:00:00:00:01',
    variant: 'bread-compact-wifi',
    transport: 'websocket',
    firmwareVersion: '1.8.2',
    expectedVersion: '1.8.2',
    status: 'passed',
    steps: [
      { step: 'open', status: 'passed', durationMs: 3 },
      { step: 'identify', status: 'passed', durationMs: 41, message: 'ESP32-S3 (revision v0.2)' },
      { step: 'flash', status: 'passed', durationMs: 4100, message: '1.0 MB at 921600 baud' },
      { step: 'provision', status: 'passed', durationMs: 620, message: 'NVS at 0x9000' },
      { step: 'reset', status: 'passed', durationMs: 105 },
      { step: 'boot', status: 'passed', durationMs: 1830, message: 'Wi-Fi up' },
      { step: 'ota-check', status: 'passed', durationMs: 240, message: 'reached our OTA endpoint' },
      { step: 'session', status: 'passed', durationMs: 180, message: 'hello received' },
      { step: 'suites', status: 'passed', durationMs: 7300 },
      { step: 'close', status: 'passed', durationMs: 4 },
    ],
    checks: [
      passed('initialize.reply-shape', 'initialize reply has the firmware shape', '', {
        severity: 'critical',
      }),
      passed(
        'initialize.server-version',
        'serverInfo.version is the flashed build',
        'reports 1.8.2',
        {
          severity: 'critical',
        },
      ),
      passed('initialize.vision', 'vision capability accepted', 'skipped by the inventory', {
        status: 'skipped',
        durationMs: 0,
      }),
      passed(
        'tools-list.page-budget',
        'every page keeps the byte budget and is maximal',
        '3 pages',
      ),
      passed('tools-list.user-only', 'user-only tools carry audience=["user"]'),
      passed(
        'tools-call.volume-round-trip',
        'set the volume, read it back, restore it',
        'volume 40 → 75 → 40',
        {
          retries: 1,
          durationMs: 310.25,
        },
      ),
      errorCodeDeviation(),
      passed('robustness.unescaped-message', 'error messages are valid JSON strings', '', {
        severity: 'minor',
        status: 'known-deviation',
        // Real firmware output: quotes, angle brackets, an ampersand and a stray BEL/ANSI colour.
        message: 'the reply is not valid JSON',
        expected: 'a JSON string with \\" escaped',
        actual: '{"message":"Unknown tool: say "hi" <now> & later"}\u0007\u001b[31m',
        deviation: { reason: 'firmware does not escape "quotes" in messages', fixed: false },
      }),
      passed('robustness.ping', 'the board answers ping', 'ping answered', {
        deviation: { reason: 'firmware has no ping', fixed: true },
      }),
      passed('latency.budget', 'latency within the budget', 'p50 4.40 ms, p99 20.04 ms', {
        severity: 'minor',
        data: { p50BudgetMs: 50, p99BudgetMs: 250 },
      }),
    ],
    latency: [latencyOf('tools/call self.get_device_status', samples(50, 3, 2.5, 7), 0.42, 1.9)],
    consoleLog: 'bread-compact-wifi/console.log',
    transcript: 'bread-compact-wifi/transcript.jsonl',
    startedAt: '2025-11-21T20:00:01.000Z',
    durationMs: 14_420,
  };
}

function robotBoard(): BoardReport {
  return {
    name: ROBOT_BOARD,
    kind: 'serial',
    port: '/dev/serial/by-id/usb-Espressif_USB_JTAG_serial_debug_unit_A0:B7:65:12:34:56-if00',
    chip: 'ESP32-S3',
    mac: 'a0:b7:65:12:34:56',
    variant: 'otto-robot',
    transport: 'mqtt',
    firmwareVersion: '1.8.2',
    expectedVersion: '1.8.2',
    status: 'failed',
    steps: [
      { step: 'open', status: 'passed', durationMs: 18 },
      { step: 'identify', status: 'passed', durationMs: 412, message: 'ESP32-S3 (revision v0.2)' },
      {
        step: 'flash',
        status: 'passed',
        durationMs: 31_800,
        message: '1.0 MB at 115200 baud (921600 failed: timeout)',
        flaky: true,
      },
      { step: 'reset', status: 'passed', durationMs: 250 },
      { step: 'boot', status: 'passed', durationMs: 3900, message: 'Wi-Fi up' },
      { step: 'ota-check', status: 'passed', durationMs: 610 },
      {
        step: 'session',
        status: 'passed',
        durationMs: 1200,
        message: 'BOOT click, hello received',
      },
      {
        step: 'suites',
        status: 'failed',
        durationMs: 11_200,
        message: '6 checks, 2 failed',
        check: 'tools-list.page-budget',
      },
      { step: 'close', status: 'passed', durationMs: 9 },
    ],
    checks: [
      passed('initialize.reply-shape', 'initialize reply has the firmware shape', '', {
        severity: 'critical',
      }),
      passed('tools-list.page-budget', 'every page keeps the byte budget and is maximal', '', {
        status: 'failed',
        message: 'page 2 is over the budget',
        expected: '≤ 8000 bytes by the firmware rule',
        actual: '8123',
        durationMs: 840,
      }),
      passed('tools-list.expected-tools', "the board's expected tools are present", '5 of 5'),
      passed('tools-call.concurrent', 'concurrent calls are matched by id', '', {
        status: 'failed',
        message: 'reply for id 7 answered id 8',
        retries: 2,
        durationMs: 2210,
      }),
      errorCodeDeviation(),
      passed('latency.budget', 'latency within the budget', 'p50 45.09 ms, p99 158.21 ms', {
        severity: 'minor',
      }),
    ],
    latency: [
      latencyOf('tools/call self.get_device_status', samples(50, 35, 20, 11), 28.5, 96.2),
      latencyOf('tools/list', samples(20, 60, 30, 3), 28.5, 96.2),
    ],
    consoleLog: 'robot/console.log',
    transcript: 'robot/transcript.jsonl',
    startedAt: '2025-11-21T20:00:01.100Z',
    durationMs: 49_480,
  };
}

function vanishedBoard(): BoardReport {
  return {
    name: VANISHED_BOARD,
    kind: 'serial',
    port: '/dev/ttyUSB1',
    chip: 'ESP32',
    mac: '24:0a:c4:00:11:22',
    variant: 'esp-box',
    status: 'rig-failed',
    failure: { step: 'session', reason: 'port /dev/ttyUSB1 vanished while waiting for the hello' },
    steps: [
      { step: 'open', status: 'passed', durationMs: 22 },
      { step: 'identify', status: 'passed', durationMs: 380 },
      { step: 'reset', status: 'passed', durationMs: 250 },
      { step: 'boot', status: 'passed', durationMs: 4200 },
      { step: 'ota-check', status: 'passed', durationMs: 700 },
      {
        step: 'session',
        status: 'failed',
        durationMs: 30_000,
        message: 'port /dev/ttyUSB1 vanished while waiting for the hello',
      },
    ],
    checks: [],
    latency: [],
    consoleLog: 'vanished/console.log',
    startedAt: '2025-11-21T20:00:01.200Z',
    durationMs: 35_560,
  };
}

/** What a report says about its run besides its boards; `reportOf` derives the rest. */
export type RunHeader = Pick<
  RunReport,
  'startedAt' | 'durationMs' | 'rig' | 'server' | 'firmware' | 'suites'
>;

/** The run of the fixture: an inventory rig that flashed one image onto every board. */
function fixtureRun(): RunHeader {
  return {
    startedAt: '2025-11-21T20:00:00.000Z',
    durationMs: 51_250,
    rig: 'inventory',
    server: {
      ota: 'http://192.168.1.20:8002/xiaozhi/ota/',
      websocket: 'ws://192.168.1.20:8000/xiaozhi/v1/',
    },
    firmware: {
      file: 'build/merged-binary.bin',
      version: '1.8.2',
      chip: 'ESP32-S3',
      sha256: '9f2c4e1b7a0d5c3e8f6b1a2d4c7e9f0b3a5d8c1e6f2b4a7d9c0e3f5a8b1d2c4e',
    },
    suites: DEFAULT_SUITES,
  };
}

/** A report over `boards`, with the summary and exit code the model derives. */
export function reportOf(boards: BoardReport[], run: RunHeader = fixtureRun()): RunReport {
  return {
    tool: { name: 'hil', version: '0.1.0' },
    ...run,
    boards,
    summary: summarize(boards),
    exitCode: exitCodeFor(boards),
    interrupted: false,
  };
}

/** The whole run: exit code 3 (a rig failure outranks the failed check). */
export function fixtureReport(): RunReport {
  return reportOf([virtualBoard(), robotBoard(), vanishedBoard()]);
}

/**
 * A board over MQTT, where the server has no ping: its latency series has no ping figures at
 * all (absent, not NaN), and its `critical` checks passed.
 */
export function mqttReport(): RunReport {
  const board = virtualBoard();
  const [stats] = board.latency;
  if (stats === undefined) throw new Error('fixture');
  const { pingP50Ms: _p50, pingP99Ms: _p99, ...calls } = stats;
  return reportOf([{ ...board, name: 'mqtt-board', transport: 'mqtt', latency: [calls] }]);
}

/** Only the robot board: two checks failed (exit 1). */
export function failingReport(): RunReport {
  return reportOf([robotBoard()]);
}

/**
 * A build that panics at boot, as a real run reports it: the boot step failed with the crash,
 * the board failed (exit 1), and no check ran.
 */
export function panicReport(): RunReport {
  const reason =
    'expected no panic, got one: assert failed: app_main main.cc:42 (backtrace 0x4037a1f3 0x4037f2a1)';
  return reportOf([
    {
      name: 'panicky',
      kind: 'virtual',
      port: 'virtual:panicky (/dev/ttyVIRT0)',
      chip: 'esp32s3',
      variant: 'bread-compact-wifi',
      status: 'failed',
      failure: { step: 'boot', reason },
      steps: [
        { step: 'open', status: 'passed', durationMs: 15 },
        { step: 'identify', status: 'passed', durationMs: 1080 },
        { step: 'flash', status: 'passed', durationMs: 125 },
        { step: 'provision', status: 'passed', durationMs: 256 },
        { step: 'reset', status: 'passed', durationMs: 101 },
        { step: 'boot', status: 'failed', durationMs: 388, message: reason },
        { step: 'close', status: 'passed', durationMs: 0.15 },
      ],
      checks: [],
      latency: [],
      startedAt: '2025-11-21T20:00:01.000Z',
      durationMs: 2000,
    },
  ]);
}

/** Ctrl-C while the robot board ran its suites: exit 130, the board `interrupted`. */
export function interruptedReport(): RunReport {
  const board = robotBoard();
  const checks = board.checks.filter((c) => c.status !== 'failed');
  const steps = board.steps.filter((s) => s.step !== 'suites' && s.step !== 'close');
  steps.push({
    step: 'suites',
    status: 'interrupted',
    durationMs: 3000,
    message: 'interrupted by Ctrl-C',
  });
  const cut: BoardReport = {
    ...board,
    status: 'interrupted',
    failure: { step: 'suites', reason: 'interrupted by Ctrl-C' },
    steps,
    checks,
  };
  return { ...reportOf([virtualBoard(), cut]), interrupted: true };
}

/** Only the virtual board: exit code 0 with known deviations. */
export function passingReport(): RunReport {
  return reportOf([virtualBoard()]);
}

// ---- Test support: a strict little XML parser (no dependency) -------------------------------

export interface XmlElement {
  readonly name: string;
  readonly attributes: Readonly<Record<string, string>>;
  readonly children: XmlElement[];
  /** The element's own text, entities decoded (child elements' text excluded). */
  text: string;
  /** Text and child elements in document order. */
  readonly nodes: (string | XmlElement)[];
}

const NAME = '[A-Za-z_:][-A-Za-z0-9_.:]*';
const ENTITY = /&(?:amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: detecting them is the point.
const FORBIDDEN = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/;

function decode(raw: string, where: string): string {
  if (raw.replace(ENTITY, '').includes('&')) throw new Error(`bare & in ${where}: ${raw}`);
  return raw.replace(ENTITY, (entity) => {
    const named: Record<string, string> = {
      '&amp;': '&',
      '&lt;': '<',
      '&gt;': '>',
      '&quot;': '"',
      '&apos;': "'",
    };
    const known = named[entity];
    if (known !== undefined) return known;
    const hex = entity.startsWith('&#x');
    return String.fromCodePoint(Number.parseInt(entity.slice(hex ? 3 : 2, -1), hex ? 16 : 10));
  });
}

/**
 * Parses a document (an optional XML declaration, then one root element), throwing on anything
 * not well formed: unbalanced or crossed tags, unquoted or duplicate attributes, `<` in values,
 * unknown entities, bare `&`, control characters, text outside the root.
 */
export function parseXml(text: string): XmlElement {
  if (FORBIDDEN.test(text)) throw new Error('a control character XML 1.0 forbids');
  const body = text.replace(/^<\?xml[^?]*\?>\s*/, '');
  const token = new RegExp(
    `<(/?)(${NAME})((?:\\s+${NAME}\\s*=\\s*(?:"[^"<]*"|'[^'<]*'))*)\\s*(/?)>|<!--[\\s\\S]*?-->|<`,
    'g',
  );
  const attribute = new RegExp(`(${NAME})\\s*=\\s*(?:"([^"<]*)"|'([^'<]*)')`, 'g');
  const stack: XmlElement[] = [];
  let root: XmlElement | undefined;
  let last = 0;
  for (const match of body.matchAll(token)) {
    const between = body.slice(last, match.index);
    last = match.index + match[0].length;
    const parent = stack[stack.length - 1];
    if (parent === undefined) {
      if (between.trim() !== '') throw new Error(`text outside the root: ${between.trim()}`);
    } else {
      const decoded = decode(between, `<${parent.name}>`);
      parent.text += decoded;
      if (decoded !== '') parent.nodes.push(decoded);
    }
    if (match[0].startsWith('<!--')) continue;
    const [, close, name, rawAttributes, selfClosing] = match;
    if (name === undefined) throw new Error(`a stray < at ${match.index}`);
    if (close === '/') {
      const open = stack.pop();
      if (open?.name !== name) throw new Error(`</${name}> closes <${open?.name ?? 'nothing'}>`);
      continue;
    }
    const attributes: Record<string, string> = {};
    for (const [, attrName, double, single] of (rawAttributes ?? '').matchAll(attribute)) {
      if (attrName === undefined) continue;
      if (attrName in attributes) throw new Error(`duplicate attribute ${attrName} on <${name}>`);
      attributes[attrName] = decode(double ?? single ?? '', `${name}@${attrName}`);
    }
    const element: XmlElement = { name, attributes, children: [], text: '', nodes: [] };
    if (parent === undefined) {
      if (root !== undefined) throw new Error('a second root element');
      root = element;
    } else {
      parent.children.push(element);
      parent.nodes.push(element);
    }
    if (selfClosing !== '/') stack.push(element);
  }
  if (body.slice(last).trim() !== '') throw new Error('text after the root');
  if (stack.length > 0) throw new Error(`<${stack[stack.length - 1]?.name}> is not closed`);
  if (root === undefined) throw new Error('no root element');
  return root;
}

/** Every element named `name` under `element` (depth first). */
export function elements(element: XmlElement, name: string): XmlElement[] {
  return element.children.flatMap((child) => [
    ...(child.name === name ? [child] : []),
    ...elements(child, name),
  ]);
}

/** All the text inside `element`, in document order. */
export function textContent(element: XmlElement): string {
  return element.nodes
    .map((node) => (typeof node === 'string' ? node : textContent(node)))
    .join('');
}
