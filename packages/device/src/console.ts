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

/**
 * The longest console line, in UTF-8 bytes, before the marker that ends a cut line
 * (`…[truncated: N more bytes]`). ESP-IDF's log has no per-line limit (a board would spend
 * seconds of UART time on a huge line), but this console feeds listeners, a history and CLI
 * output, so a line a backend can make long (a frame echoed in an error, an `stt` text) must
 * not cost megabytes. Every line the firmware prints on its own is far shorter.
 */
export const MAX_CONSOLE_LINE_BYTES = 1024;

/** The history's bound in UTF-8 bytes of line text, besides its bound in lines. */
export const CONSOLE_HISTORY_BYTES = 512 * 1024;

/**
 * `text` cut to {@link MAX_CONSOLE_LINE_BYTES} bytes on a character boundary, with a marker
 * naming how many bytes were dropped; shorter text is returned as it is.
 */
export function truncateConsoleLine(text: string, limit = MAX_CONSOLE_LINE_BYTES): string {
  // Each UTF-16 unit is at most 3 UTF-8 bytes: short text needs no count.
  if (text.length * 3 <= limit) return text;
  const total = Buffer.byteLength(text);
  if (total <= limit) return text;
  let head = text.slice(0, limit);
  // Never split a surrogate pair.
  if (/[\uD800-\uDBFF]$/.test(head)) head = head.slice(0, -1);
  const bytes = Buffer.from(head);
  let end = Math.min(limit, bytes.length);
  // Back up to the start of a UTF-8 sequence.
  while (end > 0 && end < bytes.length && ((bytes[end] ?? 0) & 0xc0) === 0x80) end--;
  const kept = bytes.subarray(0, end).toString('utf8');
  return `${kept}…[truncated: ${total - end} more bytes]`;
}

export class BoardConsole extends EventEmitter<BoardConsoleEvents> {
  #bootedAt = performance.now();
  readonly #history: ConsoleLine[] = [];
  #historyBytes = 0;
  readonly #historyLimit: number;
  readonly #historyBytesLimit: number;

  constructor(options: { historyLimit?: number; historyBytesLimit?: number } = {}) {
    super();
    this.#historyLimit = options.historyLimit ?? 2000;
    this.#historyBytesLimit = options.historyBytesLimit ?? CONSOLE_HISTORY_BYTES;
  }

  /** Restarts the millisecond clock, as a reset does. */
  resetClock(): void {
    this.#bootedAt = performance.now();
  }

  get uptimeMs(): number {
    return Math.floor(performance.now() - this.#bootedAt);
  }

  /** An ESP-IDF log line, cut at {@link MAX_CONSOLE_LINE_BYTES}. */
  log(level: LogLevel, tag: string, text: string): void {
    const ms = this.uptimeMs;
    this.#emit({ text: truncateConsoleLine(`${level} (${ms}) ${tag}: ${text}`), level, tag, ms });
  }

  /** A raw line (ROM bootloader output, panic dumps), cut at {@link MAX_CONSOLE_LINE_BYTES}. */
  raw(text: string): void {
    this.#emit({
      text: truncateConsoleLine(text),
      level: undefined,
      tag: undefined,
      ms: undefined,
    });
  }

  /** The most recent lines, oldest first: at most 2,000 (by default) and 512 KiB of text. */
  get history(): readonly ConsoleLine[] {
    return this.#history;
  }

  #emit(line: ConsoleLine): void {
    this.#history.push(line);
    this.#historyBytes += Buffer.byteLength(line.text);
    while (
      this.#history.length > 1 &&
      (this.#history.length > this.#historyLimit || this.#historyBytes > this.#historyBytesLimit)
    ) {
      const dropped = this.#history.shift();
      if (dropped !== undefined) this.#historyBytes -= Buffer.byteLength(dropped.text);
    }
    this.emit('line', line);
  }
}
