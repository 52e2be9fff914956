/**
 * Waiting on console lines, in the spirit of pexpect and pytest-embedded's `dut.expect`:
 * feed it the raw serial output, ask for the next line that matches. Every wait is bounded,
 * and a panic (or any line the caller forbids) fails the wait at once instead of letting it
 * run into its timeout; the error carries the last lines and the log path, so a CI log alone
 * says what happened (docs/hil.md §6: wait on console lines, never fixed sleeps).
 */
import type { BootLoopOptions, BootLoopReport, ConsoleRecord, PanicReport } from './console-log.js';
import {
  BootLoopDetector,
  ConsoleLineSplitter,
  PanicDetector,
  parseConsoleLine,
} from './console-log.js';
import { SerialError } from './errors.js';

export type ExpectErrorCode = 'EXPECT_TIMEOUT' | 'EXPECT_FORBIDDEN' | 'EXPECT_CLOSED';

export type Forbidden = RegExp | 'panic' | 'boot-loop';

export interface ExpectOptions {
  /** Default 30 000. Must be finite. */
  timeoutMs?: number;
  /** Fail as soon as one appears. Default `['panic']`; `[]` forbids nothing. */
  forbidden?: readonly Forbidden[];
  /**
   * The caller no longer needs the wait (another sign came first): it rejects with the signal's
   * reason, its timer stops, and the read position stays where it was.
   */
  signal?: AbortSignal;
}

export interface ExpectMatch {
  match: RegExpMatchArray;
  /** The line, free of ANSI codes. */
  line: string;
  record: ConsoleRecord;
}

export interface Timers {
  setTimeout: (callback: () => void, ms: number) => unknown;
  clearTimeout: (handle: unknown) => void;
}

export interface ConsoleExpectOptions {
  /** A file the caller writes the whole log to; errors name it. */
  logPath?: string;
  /** Lines kept in memory (older ones are dropped). Default 20 000. */
  bufferLimit?: number;
  /** Lines quoted in errors. Default 40. */
  tailLines?: number;
  /** How long a wait that met a panic waits for the rest of the dump (the backtrace) before failing. Default 2000 ms. */
  panicGraceMs?: number;
  maxLineLength?: number;
  bootLoop?: Omit<BootLoopOptions, 'now'>;
  now?: () => number;
  timers?: Timers;
}

export interface ExpectErrorDetails {
  pattern: string;
  waitedMs: number;
  tail: readonly string[];
  logPath: string | undefined;
  /** Why it failed early: `panic: Guru Meditation Error ...`, `forbidden /re/: line`, the close reason. */
  reason?: string;
  panic?: PanicReport;
  bootLoop?: BootLoopReport;
}

export class ExpectError extends SerialError {
  override readonly name = 'ExpectError';
  declare readonly code: ExpectErrorCode;
  readonly pattern: string;
  readonly waitedMs: number;
  readonly tail: readonly string[];
  readonly logPath: string | undefined;
  readonly reason: string | undefined;
  readonly panic: PanicReport | undefined;
  readonly bootLoop: BootLoopReport | undefined;

  constructor(code: ExpectErrorCode, details: ExpectErrorDetails) {
    super(code, describeFailure(code, details));
    this.pattern = details.pattern;
    this.waitedMs = details.waitedMs;
    this.tail = details.tail;
    this.logPath = details.logPath;
    this.reason = details.reason;
    this.panic = details.panic;
    this.bootLoop = details.bootLoop;
  }
}

function describeFailure(code: ExpectErrorCode, d: ExpectErrorDetails): string {
  const head =
    code === 'EXPECT_TIMEOUT'
      ? `timed out after ${d.waitedMs} ms waiting for ${d.pattern}`
      : code === 'EXPECT_FORBIDDEN'
        ? `${d.reason ?? 'forbidden line'} (after ${d.waitedMs} ms waiting for ${d.pattern})`
        : `console closed (${d.reason ?? 'closed'}) after ${d.waitedMs} ms waiting for ${d.pattern}`;
  const parts = [head];
  if (d.panic !== undefined && d.panic.backtrace.length > 0) {
    parts.push(`backtrace: ${d.panic.backtrace.join(' ')}`);
  }
  parts.push(
    d.tail.length === 0
      ? 'no console output'
      : `last ${d.tail.length} lines:\n${d.tail.map((line) => `  | ${line}`).join('\n')}`,
  );
  parts.push(d.logPath === undefined ? 'full log: not saved' : `full log: ${d.logPath}`);
  return parts.join('\n');
}

// ---------------------------------------------------------------------------------------

interface PanicEvent {
  report: PanicReport | undefined;
}

interface Entry {
  line: string;
  record: ConsoleRecord;
  /** On a panic line: the dump it belongs to. */
  panic?: PanicEvent;
  /** On the `rst:` line that completed a boot loop. */
  bootLoop?: BootLoopReport;
}

interface Waiter {
  patterns: RegExp[];
  labels: string[];
  found: (ExpectMatch & { index: number })[];
  forbidden: readonly Forbidden[];
  /** Absolute index of the next line to look at. */
  pos: number;
  startedAt: number;
  timer: unknown;
  graceTimer: unknown;
  /** Set once the wait met a panic: it fails when the dump ends. */
  panic: PanicEvent | undefined;
  resolve: (matches: ExpectMatch[]) => void;
  reject: (error: unknown) => void;
  /** Stops listening to the caller's signal. */
  unlisten: (() => void) | undefined;
}

const DEFAULT_TIMERS: Timers = {
  // Looked up at call time, so vitest's fake timers apply.
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

function toRegExp(pattern: RegExp | string): RegExp {
  if (typeof pattern === 'string')
    return new RegExp(pattern.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  // `g` and `y` make `exec` stateful; a line is matched on its own.
  return pattern.global || pattern.sticky
    ? new RegExp(pattern.source, pattern.flags.replace(/[gy]/g, ''))
    : pattern;
}

function label(pattern: RegExp | string): string {
  return typeof pattern === 'string' ? JSON.stringify(pattern) : String(pattern);
}

/**
 * Lines are matched from a read position: a successful `expect` moves it past the matching
 * line, so consecutive `expect`s see the console in order. A line that matches the pattern
 * resolves even when it is also forbidden (`expect(/Guru Meditation/)` works with the default
 * forbidden list). A failed wait leaves the read position where it was.
 */
export class ConsoleExpect {
  readonly #splitter: ConsoleLineSplitter;
  readonly #panics = new PanicDetector();
  readonly #bootLoops: BootLoopDetector;
  readonly #logPath: string | undefined;
  readonly #bufferLimit: number;
  readonly #tailLines: number;
  readonly #panicGraceMs: number;
  readonly #now: () => number;
  readonly #timers: Timers;
  readonly #lines: string[] = [];
  readonly #entries: Entry[] = [];
  readonly #waiters = new Set<Waiter>();
  readonly #panicReports: PanicReport[] = [];
  /** Absolute index of `#entries[0]`. */
  #base = 0;
  #readPos = 0;
  #openPanic: PanicEvent | undefined;
  #closed: string | undefined;

  constructor(options: ConsoleExpectOptions = {}) {
    this.#logPath = options.logPath;
    this.#bufferLimit = options.bufferLimit ?? 20_000;
    this.#tailLines = options.tailLines ?? 40;
    this.#panicGraceMs = options.panicGraceMs ?? 2000;
    this.#now = options.now ?? (() => Date.now());
    this.#timers = options.timers ?? DEFAULT_TIMERS;
    this.#splitter = new ConsoleLineSplitter(
      options.maxLineLength === undefined ? {} : { maxLineLength: options.maxLineLength },
    );
    this.#bootLoops = new BootLoopDetector({ ...options.bootLoop, now: () => this.#now() });
  }

  /** The lines seen (the last `bufferLimit` of them), ANSI codes removed. */
  get lines(): readonly string[] {
    return this.#lines;
  }

  /** The panics seen so far, each once its dump ended. */
  get panics(): readonly PanicReport[] {
    return this.#panicReports;
  }

  get closed(): boolean {
    return this.#closed !== undefined;
  }

  /** Raw serial output. Ignored after `close`. */
  feed(chunk: string | Uint8Array): void {
    if (this.#closed !== undefined) return;
    this.#take(this.#splitter.feed(chunk));
  }

  /** Moves the read position past every line seen so far (e.g. after an expected reset). */
  discard(): void {
    this.#readPos = this.#base + this.#entries.length;
  }

  expect(pattern: RegExp | string, options: ExpectOptions = {}): Promise<ExpectMatch> {
    return this.#wait([pattern], options).then((matches) => {
      const [first] = matches;
      if (first === undefined) throw new Error('unreachable: one pattern, no match');
      return first;
    });
  }

  /** Waits until every pattern has matched a line, in any order; results in pattern order. */
  expectAll(
    patterns: readonly (RegExp | string)[],
    options: ExpectOptions = {},
  ): Promise<ExpectMatch[]> {
    return this.#wait(patterns, options);
  }

  /** The end of the stream (port lost, board gone): the last partial line is taken, then pending waits fail. */
  close(reason = 'closed'): void {
    if (this.#closed !== undefined) return;
    this.#take(this.#splitter.flush());
    const report = this.#panics.flush();
    if (report !== undefined) this.#panicEnded(report);
    this.#closed = reason;
    for (const waiter of this.#waiters) this.#fail(waiter, 'EXPECT_CLOSED', { reason });
  }

  #wait(patterns: readonly (RegExp | string)[], options: ExpectOptions): Promise<ExpectMatch[]> {
    const timeoutMs = options.timeoutMs ?? 30_000;
    if (!Number.isFinite(timeoutMs) || timeoutMs < 0) {
      return Promise.reject(
        new SerialError(
          'OPTION_INVALID',
          `timeoutMs must be a finite number >= 0, got ${timeoutMs}`,
        ),
      );
    }
    if (patterns.length === 0) return Promise.resolve([]);
    const { signal } = options;
    if (signal?.aborted === true) return Promise.reject(signal.reason);
    return new Promise<ExpectMatch[]>((resolve, reject) => {
      const waiter: Waiter = {
        patterns: patterns.map(toRegExp),
        labels: patterns.map(label),
        found: [],
        forbidden: (options.forbidden ?? ['panic']).map((rule) =>
          typeof rule === 'string' ? rule : toRegExp(rule),
        ),
        pos: this.#readPos,
        startedAt: this.#now(),
        timer: undefined,
        graceTimer: undefined,
        panic: undefined,
        resolve,
        reject,
        unlisten: undefined,
      };
      this.#waiters.add(waiter);
      this.#scan(waiter);
      if (!this.#waiters.has(waiter)) return; // settled from the buffer
      if (this.#closed !== undefined) {
        this.#fail(waiter, 'EXPECT_CLOSED', { reason: this.#closed });
        return;
      }
      waiter.timer = this.#timers.setTimeout(() => this.#onTimeout(waiter), timeoutMs);
      if (signal !== undefined) {
        const onAbort = () => {
          if (!this.#waiters.has(waiter)) return;
          this.#settle(waiter);
          reject(signal.reason);
        };
        signal.addEventListener('abort', onAbort, { once: true });
        waiter.unlisten = () => signal.removeEventListener('abort', onAbort);
      }
    });
  }

  #take(lines: readonly string[]): void {
    for (const raw of lines) {
      const record = parseConsoleLine(raw);
      const entry: Entry = { line: record.line, record };
      const report = this.#panics.feed(record);
      if (record.kind === 'panic') {
        this.#openPanic ??= { report: undefined };
        entry.panic = this.#openPanic;
      }
      const loop = this.#bootLoops.feed(record);
      if (loop !== undefined) entry.bootLoop = loop;
      this.#entries.push(entry);
      this.#lines.push(entry.line);
      this.#trim();
      // After the push, so the error's tail ends with the line that ended the dump.
      if (report !== undefined) this.#panicEnded(report);
      for (const waiter of this.#waiters) this.#scan(waiter);
    }
  }

  #panicEnded(report: PanicReport): void {
    this.#panicReports.push(report);
    const event = this.#openPanic;
    this.#openPanic = undefined;
    if (event === undefined) return;
    event.report = report;
    for (const waiter of this.#waiters) {
      if (waiter.panic === event) this.#failPanic(waiter, report);
    }
  }

  #trim(): void {
    const excess = this.#entries.length - this.#bufferLimit;
    if (excess <= 0) return;
    this.#entries.splice(0, excess);
    this.#lines.splice(0, excess);
    this.#base += excess;
    this.#readPos = Math.max(this.#readPos, this.#base);
    for (const waiter of this.#waiters) waiter.pos = Math.max(waiter.pos, this.#base);
  }

  #scan(waiter: Waiter): void {
    const end = this.#base + this.#entries.length;
    while (waiter.panic === undefined && waiter.pos < end) {
      const index = waiter.pos++;
      const entry = this.#entries[index - this.#base];
      if (entry === undefined) continue;
      const matched = this.#match(waiter, entry, index);
      if (matched === 'done') return;
      // A line that matched a pattern is wanted, even when it is also forbidden.
      if (matched === 'none') this.#checkForbidden(waiter, entry);
      if (!this.#waiters.has(waiter)) return;
    }
  }

  #match(waiter: Waiter, entry: Entry, index: number): 'done' | 'some' | 'none' {
    let matched = false;
    for (const [i, re] of waiter.patterns.entries()) {
      if (waiter.found[i] !== undefined) continue;
      const match = re.exec(entry.line);
      if (match === null) continue;
      matched = true;
      waiter.found[i] = { match, line: entry.line, record: entry.record, index };
    }
    if (!matched) return 'none';
    const results: ExpectMatch[] = [];
    for (let i = 0; i < waiter.patterns.length; i++) {
      const found = waiter.found[i];
      if (found === undefined) return 'some';
      results.push({ match: found.match, line: found.line, record: found.record });
    }
    this.#readPos = Math.max(this.#readPos, index + 1);
    this.#settle(waiter);
    waiter.resolve(results);
    return 'done';
  }

  #checkForbidden(waiter: Waiter, entry: Entry): void {
    for (const rule of waiter.forbidden) {
      if (rule === 'panic') {
        if (entry.panic === undefined) continue;
        if (entry.panic.report !== undefined) {
          this.#failPanic(waiter, entry.panic.report);
        } else {
          // Wait for the backtrace, but not for long: the board may hang mid-dump.
          waiter.panic = entry.panic;
          waiter.graceTimer = this.#timers.setTimeout(
            () => this.#onGrace(waiter),
            this.#panicGraceMs,
          );
        }
        return;
      }
      if (rule === 'boot-loop') {
        const loop = entry.bootLoop;
        if (loop === undefined) continue;
        const reason = `boot loop: ${loop.resets} resets in ${loop.spanMs} ms (${loop.reasons.join(', ')})`;
        this.#fail(waiter, 'EXPECT_FORBIDDEN', { reason, bootLoop: loop });
        return;
      }
      if (rule.test(entry.line)) {
        this.#fail(waiter, 'EXPECT_FORBIDDEN', {
          reason: `forbidden ${String(rule)}: ${entry.line}`,
        });
        return;
      }
    }
  }

  #onTimeout(waiter: Waiter): void {
    waiter.timer = undefined;
    if (waiter.panic !== undefined) {
      this.#onGrace(waiter);
      return;
    }
    this.#fail(waiter, 'EXPECT_TIMEOUT', {});
  }

  #onGrace(waiter: Waiter): void {
    waiter.graceTimer = undefined;
    const report = waiter.panic?.report ?? this.#panics.snapshot();
    if (report !== undefined) this.#failPanic(waiter, report);
    else this.#fail(waiter, 'EXPECT_FORBIDDEN', { reason: 'panic' });
  }

  #failPanic(waiter: Waiter, report: PanicReport): void {
    this.#fail(waiter, 'EXPECT_FORBIDDEN', { reason: `panic: ${report.reason}`, panic: report });
  }

  #fail(
    waiter: Waiter,
    code: ExpectErrorCode,
    extra: { reason?: string; panic?: PanicReport; bootLoop?: BootLoopReport },
  ): void {
    if (!this.#waiters.has(waiter)) return;
    this.#settle(waiter);
    const missing = waiter.labels.filter((_, i) => waiter.found[i] === undefined);
    const pattern =
      waiter.labels.length === 1 ? (waiter.labels[0] ?? '') : `all of ${missing.join(', ')}`;
    waiter.reject(
      new ExpectError(code, {
        pattern,
        waitedMs: this.#now() - waiter.startedAt,
        tail: this.#lines.slice(-this.#tailLines),
        logPath: this.#logPath,
        ...extra,
      }),
    );
  }

  #settle(waiter: Waiter): void {
    this.#waiters.delete(waiter);
    waiter.unlisten?.();
    waiter.unlisten = undefined;
    if (waiter.timer !== undefined) this.#timers.clearTimeout(waiter.timer);
    if (waiter.graceTimer !== undefined) this.#timers.clearTimeout(waiter.graceTimer);
    waiter.timer = undefined;
    waiter.graceTimer = undefined;
  }
}
