/**
 * The board's serial console: ESP-IDF log lines `I (1234) TAG: text`, milliseconds since
 * boot, as docs/protocol.md §9 lists them. Lines are events, so a CLI can print them and a
 * test or the HIL runner can wait for one.
 */
import { EventEmitter } from 'node:events';

export type LogLevel = 'E' | 'W' | 'I' | 'D' | 'V';

export interface ConsoleLine {
  /** The text as it would appear on the UART, without the line ending. */
  readonly text: string;
  readonly level: LogLevel | undefined;
  readonly tag: string | undefined;
  /** Milliseconds since boot, for log lines. */
  readonly ms: number | undefined;
}

export interface BoardConsoleEvents {
  line: [ConsoleLine];
}

export class BoardConsole extends EventEmitter<BoardConsoleEvents> {
  #bootedAt = performance.now();
  readonly #history: ConsoleLine[] = [];
  readonly #historyLimit: number;

  constructor(options: { historyLimit?: number } = {}) {
    super();
    this.#historyLimit = options.historyLimit ?? 2000;
  }

  /** Restarts the millisecond clock, as a reset does. */
  resetClock(): void {
    this.#bootedAt = performance.now();
  }

  get uptimeMs(): number {
    return Math.floor(performance.now() - this.#bootedAt);
  }

  /** An ESP-IDF log line. */
  log(level: LogLevel, tag: string, text: string): void {
    const ms = this.uptimeMs;
    this.#emit({ text: `${level} (${ms}) ${tag}: ${text}`, level, tag, ms });
  }

  /** A raw line (ROM bootloader output, panic dumps). */
  raw(text: string): void {
    this.#emit({ text, level: undefined, tag: undefined, ms: undefined });
  }

  /** The most recent lines, oldest first. */
  get history(): readonly ConsoleLine[] {
    return this.#history;
  }

  #emit(line: ConsoleLine): void {
    this.#history.push(line);
    if (this.#history.length > this.#historyLimit) this.#history.shift();
    this.emit('line', line);
  }
}
