/**
 * The serial console of an ESP32 running xiaozhi, as text: splitting a byte stream into
 * lines, classifying each line (IDF log, ROM bootloader, panic, backtrace), and spotting
 * the trouble a rig must not wait through (panics, boot loops). No serial I/O here: the
 * chunks come from a port or a virtual board. docs/protocol.md §9 lists the lines.
 */

export type LogLevel = 'E' | 'W' | 'I' | 'D' | 'V';

export type RomField = 'rst' | 'boot' | 'load' | 'entry' | 'banner' | 'other';

export type PanicKind =
  | 'guru'
  | 'abort'
  | 'assert'
  | 'stack-overflow'
  | 'brownout'
  | 'task-wdt'
  | 'heap-corruption'
  | 'cxx-exception';

export type ConsoleRecord =
  | { kind: 'log'; level: LogLevel; ms: number; tag: string; text: string; line: string }
  | { kind: 'rom'; field: RomField; resetReason?: string; resetCode?: number; line: string }
  | { kind: 'panic'; panic: PanicKind; reason: string; line: string }
  /** `addresses` are the PCs of the `PC:SP` pairs, what addr2line wants. */
  | { kind: 'backtrace'; addresses: string[]; corrupted: boolean; line: string }
  | { kind: 'text'; line: string };

// CSI sequences (colours, cursor moves) and two-byte escapes; IDF colours with `\x1b[0;32m`.
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching ESC is the point
const ANSI = /\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])/g;

export function stripAnsi(line: string): string {
  return line.replace(ANSI, '');
}

// ---------------------------------------------------------------------------------------
// Lines

export interface LineSplitterOptions {
  /** Longer lines are cut into pieces of this many characters (a stream with no newline must not grow forever). Default 8192. */
  maxLineLength?: number;
}

/**
 * Turns chunks of serial output into complete lines. `\r\n`, `\r` and `\n` all end a line
 * (also when `\r` and `\n` arrive in different chunks); bytes are decoded as UTF-8 across
 * chunk boundaries, invalid bytes become U+FFFD. The result does not depend on where the
 * chunks were cut.
 */
export class ConsoleLineSplitter {
  readonly #decoder = new TextDecoder('utf-8', { fatal: false });
  readonly #max: number;
  #partial = '';
  #afterCR = false;

  constructor(options: LineSplitterOptions = {}) {
    const max = options.maxLineLength ?? 8192;
    if (!Number.isInteger(max) || max < 2)
      throw new RangeError(`maxLineLength must be an integer >= 2, got ${max}`);
    this.#max = max;
  }

  /** The text of the unfinished line so far. */
  get partial(): string {
    return this.#partial;
  }

  feed(chunk: string | Uint8Array): string[] {
    // A string after bytes: the bytes of a cut character will never be completed.
    const text =
      typeof chunk === 'string'
        ? this.#decoder.decode() + chunk
        : this.#decoder.decode(chunk, { stream: true });
    return this.#push(text);
  }

  /** The end of the stream: the unfinished line, if any, as a line. */
  flush(): string[] {
    const lines = this.#push(this.#decoder.decode());
    if (this.#partial !== '') lines.push(this.#partial);
    this.#partial = '';
    this.#afterCR = false;
    return lines;
  }

  #push(input: string): string[] {
    let text = input;
    if (text === '') return []; // a cut UTF-8 sequence: keep `#afterCR` for the next chunk
    if (this.#afterCR && text.startsWith('\n')) text = text.slice(1);
    this.#afterCR = text.endsWith('\r');
    const parts = (this.#partial + text).split(/\r\n|\r|\n/);
    // The last part has no terminator yet (it is '' when the text ended with one).
    let partial = parts.pop() ?? '';
    const lines = parts.flatMap((line) => this.#cut(line));
    if (partial.length > this.#max) {
      const pieces = this.#cut(partial);
      partial = pieces.pop() ?? '';
      lines.push(...pieces);
    }
    this.#partial = partial;
    return lines;
  }

  // Cut points depend only on the text from the line's start, so chunking cannot move them.
  #cut(line: string): string[] {
    const pieces: string[] = [];
    let rest = line;
    while (rest.length > this.#max) {
      const code = rest.charCodeAt(this.#max - 1);
      const n = code >= 0xd800 && code <= 0xdbff ? this.#max - 1 : this.#max; // keep surrogate pairs whole
      pieces.push(rest.slice(0, n));
      rest = rest.slice(n);
    }
    pieces.push(rest);
    return pieces;
  }
}

// ---------------------------------------------------------------------------------------
// One line

/** `(1234)` or, with CONFIG_LOG_TIMESTAMP_SOURCE_SYSTEM, `(12:34:56.789)`. */
function timestampMs(stamp: string): number {
  const clock = /^(\d+):(\d{2}):(\d{2})\.(\d{3})$/.exec(stamp);
  if (clock === null) return Number(stamp);
  const [, h, m, s, ms] = clock;
  return ((Number(h) * 60 + Number(m)) * 60 + Number(s)) * 1000 + Number(ms);
}

type Rule = { re: RegExp; build: (m: RegExpExecArray, line: string) => ConsoleRecord };

const panic =
  (kind: PanicKind) =>
  (m: RegExpExecArray, line: string): ConsoleRecord => ({
    kind: 'panic',
    panic: kind,
    reason: m[0].trim(),
    line,
  });

const rom =
  (field: RomField) =>
  (_m: RegExpExecArray, line: string): ConsoleRecord => ({ kind: 'rom', field, line });

// Bytes of a line cut by a reset often precede the ROM's first line.
const JUNK = String.raw`^[^\x21-\x7e]*`;

/**
 * The patterns, first match wins. Panics are searched anywhere in the line (a crash can cut
 * a log line in half); ROM lines come before log lines so a banner behind the remains of a
 * log line still counts as one.
 */
const RULES: readonly Rule[] = [
  { re: /Guru Meditation Error: .*/, build: panic('guru') },
  { re: /abort\(\) was called at PC 0x[0-9a-fA-F]+(?: on core \d+)?/, build: panic('abort') },
  { re: /assert failed: .*/, build: panic('assert') },
  { re: /\*\*\*ERROR\*\*\* A stack overflow in task .*/, build: panic('stack-overflow') },
  { re: /Brownout detector was triggered.*/, build: panic('brownout') },
  { re: /task_wdt: Task watchdog got triggered.*/, build: panic('task-wdt') },
  { re: /CORRUPT HEAP: .*/, build: panic('heap-corruption') },
  { re: /terminate called after throwing .*/, build: panic('cxx-exception') },
  {
    re: /^\s*Backtrace:\s*(.*)$/,
    build: (m, line) => ({
      kind: 'backtrace',
      addresses: [...(m[1] ?? '').matchAll(/(0x[0-9a-fA-F]+):0x[0-9a-fA-F]+/g)].map(
        (a) => a[1] ?? '',
      ),
      corrupted: /CORRUPTED/.test(m[1] ?? ''),
      line,
    }),
  },
  {
    re: new RegExp(`${JUNK}rst:(0x[0-9a-fA-F]+)\\s*\\(([^)]*)\\)`),
    build: (m, line) => ({
      kind: 'rom',
      field: 'rst',
      resetCode: Number.parseInt(m[1] ?? '', 16),
      resetReason: m[2] ?? '',
      line,
    }),
  },
  { re: /ESP-ROM:[\w-]+/, build: rom('banner') },
  { re: /ets [A-Z][a-z]{2} [ \d]\d \d{4} \d{2}:\d{2}:\d{2}/, build: rom('banner') },
  { re: new RegExp(`${JUNK}Build:[A-Z][a-z]{2} [ \\d]\\d \\d{4}$`), build: rom('banner') },
  { re: new RegExp(`${JUNK}boot:0x[0-9a-fA-F]+`), build: rom('boot') },
  { re: /^waiting for download$/, build: rom('boot') },
  { re: /^load:0x[0-9a-fA-F]+,\s*len:/, build: rom('load') },
  { re: /^entry 0x[0-9a-fA-F]+$/, build: rom('entry') },
  {
    re: /^(?:SPIWP:0x|configsip:|clk_drv:0x|mode:(?:DIO|QIO|DOUT|QOUT|FASTRD|SLOWRD)\b|Saved PC:0x|ho \d+ tail \d+ room \d+|csum err|invalid header|flash read err|ets_main\.c)/,
    build: rom('other'),
  },
  {
    // `I (1234) TAG: text`; `wifi:mode : sta` has no space after the tag's colon.
    re: /^([EWIDV]) \((\d+|\d+:\d{2}:\d{2}\.\d{3})\) ([^:]+?): ?(.*)$/,
    build: (m, line) => ({
      kind: 'log',
      level: (m[1] ?? 'I') as LogLevel,
      ms: timestampMs(m[2] ?? '0'),
      tag: m[3] ?? '',
      text: m[4] ?? '',
      line,
    }),
  },
];

/** Classifies one line (without its line ending). `line` in the record is free of ANSI codes. */
export function parseConsoleLine(raw: string): ConsoleRecord {
  const line = stripAnsi(raw).trimEnd();
  for (const rule of RULES) {
    const m = rule.re.exec(line);
    if (m !== null) return rule.build(m, line);
  }
  return { kind: 'text', line };
}

// ---------------------------------------------------------------------------------------
// The lines of docs/protocol.md §9

export type KnownLine =
  | { kind: 'board'; uuid: string; sku: string }
  | { kind: 'projectName'; name: string }
  | { kind: 'appVersion'; version: string }
  | { kind: 'mcpTool'; name: string; userOnly: boolean }
  | { kind: 'mcpError'; message: string }
  | { kind: 'gotIp'; ip: string }
  | { kind: 'wifiConnected'; ssid: string }
  | { kind: 'networkConnected' }
  | { kind: 'wifiConfigMode' }
  | { kind: 'stateChange'; from: string; to: string }
  | { kind: 'otaCurrentVersion'; version: string }
  | { kind: 'otaUpgraded'; from: string; to: string }
  | { kind: 'otaNewVersion'; version: string }
  | { kind: 'otaLatest' }
  | { kind: 'otaCheckFailed'; retryInSeconds: number; attempt: number; maxAttempts: number }
  | { kind: 'otaProgress'; percent: number; received: number; total: number }
  | { kind: 'wsConnecting'; url: string; version: number }
  | { kind: 'sessionId'; sessionId: string }
  | { kind: 'wsHelloFailed' }
  | { kind: 'wsDisconnected' }
  | { kind: 'mqttConnected' }
  | { kind: 'mqttDisconnected'; reconnectInSeconds: number }
  | { kind: 'rebooting' };

type KnownRule = {
  tags: readonly string[];
  re: RegExp;
  build: (m: RegExpExecArray) => KnownLine;
};

const g = (m: RegExpExecArray, i: number): string => m[i] ?? '';
const n = (m: RegExpExecArray, i: number): number => Number(m[i] ?? Number.NaN);

/** Matched against the text of a log line whose tag is one of `tags`. */
const KNOWN_RULES: readonly KnownRule[] = [
  {
    tags: ['Board'],
    re: /^UUID=(\S+) SKU=(\S+)/,
    build: (m) => ({ kind: 'board', uuid: g(m, 1), sku: g(m, 2) }),
  },
  {
    tags: ['cpu_start', 'app_init'],
    re: /^Project name:\s+(\S+)/,
    build: (m) => ({ kind: 'projectName', name: g(m, 1) }),
  },
  {
    tags: ['cpu_start', 'app_init'],
    re: /^App version:\s+(\S+)/,
    build: (m) => ({ kind: 'appVersion', version: g(m, 1) }),
  },
  {
    tags: ['MCP'],
    re: /^Add tool: (\S+)( \[user\])?$/,
    build: (m) => ({ kind: 'mcpTool', name: g(m, 1), userOnly: m[2] !== undefined }),
  },
  {
    tags: ['MCP'],
    re: /^(?:Invalid |Method not implemented|Unknown |Failed ).*/,
    build: (m) => ({ kind: 'mcpError', message: m[0] }),
  },
  { tags: ['WifiStation'], re: /^Got IP: (\S+)/, build: (m) => ({ kind: 'gotIp', ip: g(m, 1) }) },
  {
    tags: ['WifiBoard'],
    re: /^Connected to WiFi: (.*)$/,
    build: (m) => ({ kind: 'wifiConnected', ssid: g(m, 1) }),
  },
  {
    tags: ['WifiBoard'],
    re: /^WiFi config mode entered/,
    build: () => ({ kind: 'wifiConfigMode' }),
  },
  { tags: ['Application'], re: /^Network connected$/, build: () => ({ kind: 'networkConnected' }) },
  {
    tags: ['Application'],
    re: /^Check new version failed, retry in (\d+) seconds \((\d+)\/(\d+)\)/,
    build: (m) => ({
      kind: 'otaCheckFailed',
      retryInSeconds: n(m, 1),
      attempt: n(m, 2),
      maxAttempts: n(m, 3),
    }),
  },
  { tags: ['Application'], re: /^Rebooting\.\.\./, build: () => ({ kind: 'rebooting' }) },
  {
    tags: ['StateMachine'],
    re: /^State: (\S+) -> (\S+)$/,
    build: (m) => ({ kind: 'stateChange', from: g(m, 1), to: g(m, 2) }),
  },
  {
    tags: ['Ota'],
    re: /^Current version: (\S+), New version: (\S+)$/,
    build: (m) => ({ kind: 'otaUpgraded', from: g(m, 1), to: g(m, 2) }),
  },
  {
    tags: ['Ota'],
    re: /^Current version: (\S+)$/,
    build: (m) => ({ kind: 'otaCurrentVersion', version: g(m, 1) }),
  },
  {
    tags: ['Ota'],
    re: /^New version available: (\S+)$/,
    build: (m) => ({ kind: 'otaNewVersion', version: g(m, 1) }),
  },
  { tags: ['Ota'], re: /^Current is the latest version/, build: () => ({ kind: 'otaLatest' }) },
  {
    tags: ['Ota'],
    re: /^Progress: (\d+)% \((\d+)\/(\d+)\)/,
    build: (m) => ({ kind: 'otaProgress', percent: n(m, 1), received: n(m, 2), total: n(m, 3) }),
  },
  {
    tags: ['WS'],
    re: /^Connecting to websocket server: (\S+) with version: (\d+)/,
    build: (m) => ({ kind: 'wsConnecting', url: g(m, 1), version: n(m, 2) }),
  },
  {
    tags: ['WS'],
    re: /^Session ID: (\S+)/,
    build: (m) => ({ kind: 'sessionId', sessionId: g(m, 1) }),
  },
  { tags: ['WS'], re: /^Failed to receive server hello/, build: () => ({ kind: 'wsHelloFailed' }) },
  { tags: ['WS'], re: /^Websocket disconnected/, build: () => ({ kind: 'wsDisconnected' }) },
  { tags: ['MQTT'], re: /^Connected to endpoint/, build: () => ({ kind: 'mqttConnected' }) },
  {
    tags: ['MQTT'],
    re: /^MQTT disconnected, schedule reconnect in (\d+) seconds/,
    build: (m) => ({ kind: 'mqttDisconnected', reconnectInSeconds: n(m, 1) }),
  },
];

/** What a docs/protocol.md §9 line says, or `undefined` for any other line. */
export function knownLine(record: ConsoleRecord): KnownLine | undefined {
  if (record.kind !== 'log') return undefined;
  for (const rule of KNOWN_RULES) {
    if (!rule.tags.includes(record.tag)) continue;
    const m = rule.re.exec(record.text);
    if (m !== null) return rule.build(m);
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------
// Boot loops

export interface BootLoopOptions {
  /** Resets within `windowMs` that make a loop. Default 3. */
  resets?: number;
  /** Default 30 000. */
  windowMs?: number;
  /** Lines that show the app came up; each clears the count. Default: network connected, or a state change to idle. */
  healthy?: readonly RegExp[];
  now?: () => number;
}

export interface BootLoopReport {
  resets: number;
  /** From the first to the last counted reset. */
  spanMs: number;
  windowMs: number;
  /** The ROM's reset reasons, oldest first (`POWERON`, `RTC_SW_CPU_RST`, ...). */
  reasons: string[];
  /** The `rst:` lines. */
  lines: string[];
}

export const DEFAULT_HEALTHY_LINES: readonly RegExp[] = [
  /Application: Network connected/,
  /StateMachine: State: \S+ -> idle\b/,
];

/**
 * Counts ROM `rst:` lines; reports once when `resets` of them fall within `windowMs` without
 * a healthy line in between, then starts counting afresh.
 */
export class BootLoopDetector {
  readonly #resets: number;
  readonly #windowMs: number;
  readonly #healthy: readonly RegExp[];
  readonly #now: () => number;
  #seen: { at: number; reason: string; line: string }[] = [];

  constructor(options: BootLoopOptions = {}) {
    this.#resets = options.resets ?? 3;
    this.#windowMs = options.windowMs ?? 30_000;
    this.#healthy = options.healthy ?? DEFAULT_HEALTHY_LINES;
    this.#now = options.now ?? (() => Date.now());
  }

  feed(record: ConsoleRecord): BootLoopReport | undefined {
    if (this.#healthy.some((re) => re.test(record.line))) {
      this.#seen = [];
      return undefined;
    }
    if (record.kind !== 'rom' || record.field !== 'rst') return undefined;
    const at = this.#now();
    this.#seen = this.#seen.filter((reset) => at - reset.at <= this.#windowMs);
    this.#seen.push({ at, reason: record.resetReason ?? '', line: record.line });
    if (this.#seen.length < this.#resets) return undefined;
    const seen = this.#seen;
    this.#seen = [];
    return {
      resets: seen.length,
      spanMs: at - (seen[0]?.at ?? at),
      windowMs: this.#windowMs,
      reasons: seen.map((reset) => reset.reason),
      lines: seen.map((reset) => reset.line),
    };
  }

  reset(): void {
    this.#seen = [];
  }
}

// ---------------------------------------------------------------------------------------
// Panics

export interface PanicReport {
  panic: PanicKind;
  /** The first panic line, from its trigger on: `Guru Meditation Error: Core  1 panic'ed (LoadProhibited). ...`. */
  reason: string;
  /** The dump, from the panic line to `Rebooting...` (the `rst:` line that may end it is not part of it). */
  lines: string[];
  /** PCs of the first `Backtrace:` line; empty when there was none (RISC-V chips print a stack dump instead). */
  backtrace: string[];
  endedBy: 'reboot' | 'reset' | 'limit' | 'resumed' | 'flush';
}

export interface PanicDetectorOptions {
  /** A dump longer than this ends here. Default 80 lines. */
  maxLines?: number;
  /** Called with each finished report (also returned by `feed`/`flush`). */
  onReport?: (report: PanicReport) => void;
}

/**
 * Gathers a panic and the dump after it (register dump, backtrace, `ELF file SHA256`) into
 * one report, finished at `Rebooting...`, at the next `rst:` line, after `maxLines`, or,
 * for a task watchdog that does not panic, at the first log line of another tag after the
 * backtrace (the app kept running).
 */
export class PanicDetector {
  readonly #maxLines: number;
  readonly #onReport: ((report: PanicReport) => void) | undefined;
  #current: Omit<PanicReport, 'endedBy'> | undefined;

  constructor(options: PanicDetectorOptions = {}) {
    this.#maxLines = options.maxLines ?? 80;
    this.#onReport = options.onReport;
  }

  get collecting(): boolean {
    return this.#current !== undefined;
  }

  /** The dump gathered so far, while one is open. */
  snapshot(): PanicReport | undefined {
    const current = this.#current;
    if (current === undefined) return undefined;
    return {
      ...current,
      lines: [...current.lines],
      backtrace: [...current.backtrace],
      endedBy: 'flush',
    };
  }

  feed(record: ConsoleRecord): PanicReport | undefined {
    const current = this.#current;
    if (current === undefined) {
      if (record.kind !== 'panic') return undefined;
      this.#current = {
        panic: record.panic,
        reason: record.reason,
        lines: [record.line],
        backtrace: [],
      };
      return this.#current.lines.length >= this.#maxLines ? this.#end('limit') : undefined;
    }
    if (record.kind === 'rom' && record.field === 'rst') return this.#end('reset');
    if (
      current.panic === 'task-wdt' &&
      current.backtrace.length > 0 &&
      record.kind === 'log' &&
      record.tag !== 'task_wdt'
    ) {
      return this.#end('resumed');
    }
    current.lines.push(record.line);
    if (record.kind === 'backtrace' && current.backtrace.length === 0)
      current.backtrace = record.addresses;
    if (record.line.trim() === 'Rebooting...') return this.#end('reboot');
    return current.lines.length >= this.#maxLines ? this.#end('limit') : undefined;
  }

  /** The end of the stream: the open dump, if any. */
  flush(): PanicReport | undefined {
    return this.#current === undefined ? undefined : this.#end('flush');
  }

  #end(endedBy: PanicReport['endedBy']): PanicReport | undefined {
    const current = this.#current;
    if (current === undefined) return undefined;
    this.#current = undefined;
    const report: PanicReport = { ...current, endedBy };
    this.#onReport?.(report);
    return report;
  }
}
