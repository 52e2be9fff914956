// The property harness of every package's hostile-input suite: a target is the real thing under
// attack plus the property that must hold after each case; `fuzzProperty` turns it into one
// fast-check property that both runners use (a package's `src/hostile-input.test.ts` with a fixed
// seed and a few runs, its `fuzz/run.ts` through `runFuzz` with its share of 100,000 cases).
import { EventEmitter } from 'node:events';
import fc from 'fast-check';

export interface FuzzTarget<T> {
  readonly name: string;
  /** What the target attacks and what must hold, for the report. */
  readonly summary: string;
  readonly arbitrary: fc.Arbitrary<T>;
  /**
   * Runs one case against the real thing and checks the property; throws when it does not
   * hold. Resolves with the milliseconds the system under test spent on the input (the harness
   * times the whole call when it resolves with nothing): set-up such as a reconnect is not the
   * input's time.
   */
  run(input: T): Promise<number | undefined>;
  /** A short description of an input: its kind, size and start. */
  describe(input: T): string;
}

/** A target whose input type is forgotten, so targets of several types go in one list. */
export type AnyTarget = FuzzTarget<unknown>;

export function erase<T>(target: FuzzTarget<T>): AnyTarget {
  return target as unknown as AnyTarget;
}

export interface ProcessEvent {
  readonly kind: 'uncaughtException' | 'unhandledRejection' | 'warning';
  readonly error: unknown;
}

/** Warnings that mean a bug (a bad timer, a listener leak), not a deprecation. */
const BUG_WARNINGS = new Set([
  'TimeoutOverflowWarning',
  'TimeoutNegativeWarning',
  'MaxListenersExceededWarning',
]);

/**
 * Process-level listeners: an exception nothing caught, a rejection nothing handled, a warning
 * that means a bug. The system under test runs in this process, so "the server died" is an
 * uncaught exception here; each case takes what happened since the last.
 */
export class ProcessWatch extends EventEmitter<{ event: [ProcessEvent] }> {
  readonly all: ProcessEvent[] = [];
  #unseen: ProcessEvent[] = [];
  readonly #listeners = {
    uncaughtException: (error: unknown) => this.#add({ kind: 'uncaughtException', error }),
    unhandledRejection: (error: unknown) => this.#add({ kind: 'unhandledRejection', error }),
    warning: (warning: Error) => {
      if (BUG_WARNINGS.has(warning.name)) this.#add({ kind: 'warning', error: warning });
    },
  };

  start(): this {
    process.on('uncaughtException', this.#listeners.uncaughtException);
    process.on('unhandledRejection', this.#listeners.unhandledRejection);
    process.on('warning', this.#listeners.warning);
    return this;
  }

  stop(): void {
    process.off('uncaughtException', this.#listeners.uncaughtException);
    process.off('unhandledRejection', this.#listeners.unhandledRejection);
    process.off('warning', this.#listeners.warning);
  }

  /** What happened since the last call. */
  take(): ProcessEvent[] {
    return this.#unseen.splice(0);
  }

  get pending(): number {
    return this.#unseen.length;
  }

  #add(event: ProcessEvent): void {
    this.all.push(event);
    this.#unseen.push(event);
    this.emit('event', event);
  }
}

/** A case's failure as the harness reports it: its message says everything, no stack needed. */
export class CaseFailure extends Error {
  override name = 'CaseFailure';
}

export function describeError(error: unknown): string {
  if (error instanceof CaseFailure) return error.message;
  if (error instanceof Error) {
    const frame = error.stack
      ?.split('\n')
      .map((line) => line.trim())
      .find((line) => line.startsWith('at ') && !line.includes('node:internal'));
    return `${error.name}: ${error.message.slice(0, 300)}${frame ? ` (${frame})` : ''}`;
  }
  return String(error).slice(0, 300);
}

/** Per target: cases run and the slowest input. */
export class TargetStats {
  cases = 0;
  slowest: { ms: number; description: string } | undefined;

  /** A case that failed has no time worth comparing: it is counted, not timed. */
  record(ms: number | undefined, describe: () => string): void {
    this.cases++;
    if (ms === undefined) return;
    if (this.slowest === undefined || ms > this.slowest.ms)
      this.slowest = { ms, description: describe() };
  }
}

export interface PropertyOptions {
  readonly stats?: TargetStats;
  /**
   * An input slower than this (but not four times slower) is timed again, twice at most, and
   * its fastest time kept, so a GC pause or a busy machine does not count as the input's cost.
   * Only the fuzz runner sets it.
   */
  readonly retimeOverMs?: number;
}

/** One fast-check property for a target: run the case, then no process-level event may have happened. */
export function fuzzProperty<T>(
  target: FuzzTarget<T>,
  watch: ProcessWatch,
  options: PropertyOptions = {},
): fc.IAsyncPropertyWithHooks<[T]> {
  const timed = async (input: T): Promise<number> => {
    const started = performance.now();
    const measured = await target.run(input);
    return measured ?? performance.now() - started;
  };
  return fc.asyncProperty(target.arbitrary, async (input) => {
    let failure: unknown;
    let ms = 0;
    try {
      ms = await timed(input);
      const { retimeOverMs } = options;
      for (
        let again = 0;
        retimeOverMs !== undefined && ms > retimeOverMs && ms < 4 * retimeOverMs && again < 2;
        again++
      )
        ms = Math.min(ms, await timed(input));
    } catch (error) {
      failure = error;
    }
    options.stats?.record(failure === undefined ? ms : undefined, () => target.describe(input));
    const events = watch.take();
    if (events.length > 0) {
      throw new CaseFailure(
        `${events.map((e) => `${e.kind}: ${describeError(e.error)}`).join('\n')}${failure === undefined ? '' : `\nand the case failed: ${describeError(failure)}`}`,
        { cause: events[0]?.error },
      );
    }
    if (failure !== undefined) throw failure;
  });
}

/** The deepest `[`/`{` nesting of a text, strings skipped: what a recursive reader would need. */
export function nestingDepth(text: string): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) deepest = Math.max(deepest, ++depth);
    else if (c === 0x5d || c === 0x7d) depth--;
  }
  return deepest;
}

/** `text` cut for a report line, with its size and nesting depth. */
export function preview(text: string, max = 60): string {
  const shown = text.length > max ? `${text.slice(0, max)}…` : text;
  const depth = nestingDepth(text);
  return `${JSON.stringify(shown)} (${Buffer.byteLength(text)} bytes${depth > 3 ? `, nested ${depth} deep` : ''})`;
}
