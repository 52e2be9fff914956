/**
 * What the ROM bootloader prints coming out of reset, read back from the port: its boot line
 * says which mode the chip came up in (esptool reads it the same way after a failed connect).
 */

/** The last `limit` characters of what the port printed (latin1: the ROM's text is ASCII). */
export class PrintedText {
  #text = '';
  readonly #limit: number;

  constructor(limit: number) {
    this.#limit = limit;
  }

  push(bytes: Uint8Array): void {
    this.#text += Buffer.from(bytes).toString('latin1');
    if (this.#text.length > this.#limit) this.#text = this.#text.slice(-this.#limit);
  }

  get text(): string {
    return this.#text;
  }
}

/** What the ROM prints coming out of reset: `rst:0x1 (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)`. */
export interface RomBootLine {
  /** The line as printed. */
  readonly line: string;
  readonly bootMode: string;
  /** The boot mode is the serial download mode (`DOWNLOAD(...)`, or `waiting for download` followed). */
  readonly download: boolean;
}

/**
 * The last ROM boot line in `text` (esptool's `_connect_attempt` reads
 * `boot:(0x[0-9a-fA-F]+)(.*waiting for download)?` from what the port printed after a reset).
 */
export function romBootLine(text: string): RomBootLine | undefined {
  // One line only: a reset can cut the banner mid-line and start another.
  const pattern = /rst:0x[0-9a-f]+ \([^)\r\n]*\),boot:(0x[0-9a-f]+)(?: \(([^)\r\n]*)\))?/gi;
  let last: RegExpExecArray | undefined;
  let lastWhole: RegExpExecArray | undefined;
  for (let match = pattern.exec(text); match !== null; match = pattern.exec(text)) {
    last = match;
    // Whole: its mode is named, or its line ended. The port may stop reading mid-line while a
    // board in a boot loop prints on: then the last whole line is the one to quote.
    const next = text[match.index + match[0].length];
    if (match[2] !== undefined || next === '\r' || next === '\n') lastWhole = match;
  }
  last = lastWhole ?? last;
  if (last === undefined) return undefined;
  const bootMode = last[2] === undefined ? (last[1] ?? '') : `${last[1]} (${last[2]})`;
  const after = text.slice(last.index);
  const download = /DOWNLOAD/i.test(last[2] ?? '') || /waiting for download/i.test(after);
  return { line: last[0], bootMode, download };
}
