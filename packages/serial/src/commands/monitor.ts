/**
 * `monitor`: the board's serial console, line by line, opened safely (neither a reset nor
 * download mode; closing leaves the lines as they are). Panics and their dumps stand out in
 * red (or behind `!! ` where there is no colour). Optionally a hard reset first, so the boot
 * log shows, and a BOOT click once the board reports idle. Runs until Ctrl-C, `--timeout`, or
 * a line matching `--until` (exit 1 when the timeout comes first), so scripts can wait on
 * the board. A port that goes away (unplugged, or a USB-Serial-JTAG board re-enumerating on
 * reset) is looked for again by serial number, for a bounded time, and reopened with retries:
 * a port that just came back may be busy (ModemManager probing it) or not yet permitted (udev).
 *
 * For `virtual:<name>` the virtual board runs inside this process: it boots from its flash
 * file (what `flash` and `provision` wrote) and makes its OTA check at the provisioned URL.
 */
import type { SerialPortStream } from '@serialport/stream';
import type { Command } from 'commander';
import {
  ConsoleLineSplitter,
  type ConsoleRecord,
  PanicDetector,
  type PanicReport,
  parseConsoleLine,
  stripAnsi,
} from '../console-log.js';
import { SerialError } from '../errors.js';
import { lineSetterFor, runLineSteps } from '../line-steps.js';
import { closeStream, openSafely } from '../port-open.js';
import type { ResolvedPort } from '../port-provider.js';
import { reopenPort } from '../port-reopen.js';
import { BOOT_CLICK, RESET_SEQUENCES } from '../reset/sequences.js';
import {
  type PortOptions,
  parseBaud,
  runPortCommand,
  type SerialCommandContext,
  SerialCommandError,
  usageError,
  withPortOptions,
} from './context.js';

export const DEFAULT_MONITOR_BAUD = 115_200;
/** The firmware's state line when it settles (`StateMachine: State: activating -> idle`). */
const IDLE_LINE = /StateMachine: State: \S+ -> idle\b/;
/** How often the port's presence is checked: an unplug does not always emit `close`. */
const PRESENCE_POLL_MS = 1000;
/** How long a vanished port may take to come back (USB re-enumeration takes 1–3 s). */
const DEFAULT_REFIND_MS = 10_000;
const RED = '\x1b[31m';
const RESET = '\x1b[0m';

export interface MonitorCommandOptions extends PortOptions {
  readonly baud?: string;
  readonly reset?: boolean;
  readonly click?: boolean;
  /** Seconds. */
  readonly timeout?: string;
  /** A JavaScript regular expression. */
  readonly until?: string;
}

/** Colour when stdout is a terminal or `FORCE_COLOR` says so (`NO_COLOR` turns it off). */
export function useColor(
  terminal: { readonly isTTY?: boolean } | undefined,
  env: NodeJS.ProcessEnv,
): boolean {
  const force = env.FORCE_COLOR;
  if (force !== undefined) return force !== '0' && force !== 'false';
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== '') return false;
  return terminal?.isTTY === true;
}

export interface PrintedLine {
  readonly record: ConsoleRecord;
  /** The line without ANSI codes. */
  readonly text: string;
  /** Part of a panic dump (the panic line, its register dump, backtrace, `Rebooting...`). */
  readonly panic: boolean;
  /** The dump this line finished, if any. */
  readonly report?: PanicReport;
}

/** Prints console lines, panic dumps in red (colour) or behind `!! ` (plain). */
export class ConsolePrinter {
  readonly #color: boolean;
  readonly #write: (text: string) => void;
  readonly #detector = new PanicDetector();

  constructor(options: { color: boolean; write: (text: string) => void }) {
    this.#color = options.color;
    this.#write = options.write;
  }

  line(raw: string): PrintedLine {
    const record = parseConsoleLine(raw);
    const report = this.#detector.feed(record);
    // A dump ended by the next `rst:` line does not include that line.
    const panic =
      record.kind === 'panic' ||
      record.kind === 'backtrace' ||
      this.#detector.collecting ||
      (report !== undefined && report.endedBy !== 'reset' && report.endedBy !== 'resumed');
    const text = stripAnsi(raw);
    if (panic) this.#write(this.#color ? `${RED}${text}${RESET}\n` : `!! ${text}\n`);
    // The firmware's own colours pass through to a terminal, never into a file.
    else this.#write(`${this.#color ? raw : text}\n`);
    return { record, text, panic, ...(report === undefined ? {} : { report }) };
  }

  /** The end of the stream: an unfinished dump, if any. */
  flush(): PanicReport | undefined {
    return this.#detector.flush();
  }
}

function parseSeconds(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const seconds = Number(value);
  if (!Number.isFinite(seconds) || seconds <= 0 || seconds > 7 * 24 * 3600)
    throw usageError(`--timeout must be seconds greater than 0, got ${JSON.stringify(value)}`);
  return seconds;
}

function parseUntil(value: string | undefined): RegExp | undefined {
  if (value === undefined) return undefined;
  try {
    return new RegExp(value);
  } catch (error) {
    throw usageError(
      `--until ${JSON.stringify(value)} is not a regular expression: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
}

type Outcome =
  | { readonly kind: 'matched'; readonly line: string }
  | { readonly kind: 'timeout' }
  | { readonly kind: 'stopped'; readonly signal?: 'SIGINT' | 'SIGTERM' }
  | { readonly kind: 'failed'; readonly error: unknown };

/** Follows one port until the outcome; everything it starts, it stops. */
class MonitorSession {
  readonly #context: SerialCommandContext;
  readonly #port: ResolvedPort;
  readonly #baud: number;
  readonly #printer: ConsolePrinter;
  readonly #splitter = new ConsoleLineSplitter();
  readonly #until: RegExp | undefined;
  readonly #abort = new AbortController();
  readonly #panics: PanicReport[] = [];
  #path: string;
  #stream: SerialPortStream | undefined;
  #clickPending: boolean;
  #lines = 0;
  #settle: (outcome: Outcome) => void = () => {};
  #outcome: Outcome | undefined;
  #recovering = false;

  constructor(
    context: SerialCommandContext,
    port: ResolvedPort,
    options: { baud: number; until: RegExp | undefined; click: boolean; color: boolean },
  ) {
    this.#context = context;
    this.#port = port;
    this.#path = port.path;
    this.#baud = options.baud;
    this.#until = options.until;
    this.#clickPending = options.click;
    this.#printer = new ConsolePrinter({
      color: options.color,
      write: (text) => context.out.stdout(text),
    });
  }

  get lines(): number {
    return this.#lines;
  }

  get panics(): readonly PanicReport[] {
    return this.#panics;
  }

  async run(options: {
    reset: boolean;
    timeoutMs: number | undefined;
    announce?: () => void;
  }): Promise<Outcome> {
    const done = new Promise<Outcome>((resolve) => {
      this.#settle = (outcome) => {
        if (this.#outcome !== undefined) return;
        this.#outcome = outcome;
        this.#abort.abort();
        resolve(outcome);
      };
    });
    const timers: NodeJS.Timeout[] = [];
    const stop = () => this.#settle({ kind: 'stopped' });
    const onSigint = () => this.#settle({ kind: 'stopped', signal: 'SIGINT' });
    const onSigterm = () => this.#settle({ kind: 'stopped', signal: 'SIGTERM' });
    const external = this.#context.signal;
    external?.addEventListener('abort', stop, { once: true });
    process.once('SIGINT', onSigint);
    process.once('SIGTERM', onSigterm);
    // Announced only once Ctrl-C is handled, so a Ctrl-C right after the banner stops cleanly.
    options.announce?.();
    try {
      if (external?.aborted) return { kind: 'stopped' };
      if (options.timeoutMs !== undefined)
        timers.push(setTimeout(() => this.#settle({ kind: 'timeout' }), options.timeoutMs));
      await this.#open();
      timers.push(setInterval(() => void this.#checkPresence(), PRESENCE_POLL_MS));
      if (options.reset) {
        const stream = this.#stream;
        if (stream !== undefined) {
          // EN pulsed through RTS with GPIO0 high: the app boots, and its whole log shows.
          await runLineSteps(this.#lineSetter(stream), RESET_SEQUENCES.hard, {
            signal: this.#abort.signal,
          }).catch((error: unknown) => {
            if (!this.#abort.signal.aborted) throw error;
          });
        }
      }
      return await done;
    } catch (error) {
      this.#settle({ kind: 'failed', error });
      return await done;
    } finally {
      for (const timer of timers) clearTimeout(timer);
      external?.removeEventListener('abort', stop);
      process.off('SIGINT', onSigint);
      process.off('SIGTERM', onSigterm);
      const stream = this.#stream;
      this.#stream = undefined;
      for (const line of this.#splitter.flush()) this.#onLine(line);
      const open = this.#printer.flush();
      if (open !== undefined) this.#panics.push(open);
      if (stream !== undefined) await closeStream(stream);
    }
  }

  /** Opens the current path. */
  async #open(): Promise<void> {
    this.#attach(
      await openSafely(this.#path, {
        baudRate: this.#baud,
        binding: this.#port.binding,
        signal: this.#abort.signal,
      }),
    );
  }

  #attach(stream: SerialPortStream): void {
    if (this.#outcome !== undefined) {
      void closeStream(stream);
      return;
    }
    this.#stream = stream;
    stream.on('data', (chunk: Buffer) => {
      for (const line of this.#splitter.feed(chunk)) this.#onLine(line);
    });
    stream.on('error', (error: Error) => void this.#lost(error.message));
    stream.on('close', () => void this.#lost('the port closed'));
  }

  #onLine(raw: string): void {
    if (this.#outcome !== undefined) return;
    this.#lines++;
    const printed = this.#printer.line(raw);
    if (printed.report !== undefined) this.#panics.push(printed.report);
    if (this.#until?.test(printed.text)) {
      this.#settle({ kind: 'matched', line: printed.text });
      return;
    }
    if (this.#clickPending && IDLE_LINE.test(printed.text)) {
      this.#clickPending = false;
      void this.#click();
    }
  }

  /** The port's lines, played the way its `set()` writes them (`ResolvedPort.linePlatform`). */
  #lineSetter(stream: SerialPortStream) {
    const platform = this.#port.linePlatform;
    return lineSetterFor(stream, platform === undefined ? {} : { platform });
  }

  async #click(): Promise<void> {
    const stream = this.#stream;
    if (stream === undefined) return;
    try {
      await runLineSteps(this.#lineSetter(stream), BOOT_CLICK, { signal: this.#abort.signal });
      this.#context.out.stderr('--- BOOT click sent (GPIO0 low for 100 ms through DTR) ---\n');
    } catch (error) {
      if (this.#abort.signal.aborted) return;
      this.#settle({
        kind: 'failed',
        error: new SerialCommandError(
          `BOOT click: ${error instanceof Error ? error.message : String(error)}; press the BOOT button by hand`,
          'port',
        ),
      });
    }
  }

  async #checkPresence(): Promise<void> {
    if (this.#outcome !== undefined || this.#recovering) return;
    if (!(await this.#port.present(this.#path))) await this.#lost('the device is gone');
  }

  /** The port went away: look for the same device again (bounded), or give up. */
  async #lost(why: string): Promise<void> {
    if (this.#outcome !== undefined || this.#recovering) return;
    const refindMs = this.#context.refindMs ?? DEFAULT_REFIND_MS;
    this.#recovering = true;
    const old = this.#stream;
    this.#stream = undefined;
    if (old !== undefined) await closeStream(old);
    this.#context.out.stderr(
      `--- ${this.#path}: ${why}; waiting up to ${refindMs / 1000} s for it to come back ---\n`,
    );
    // One budget for finding the port and opening it (serial's reopenPort): a port that came
    // back may refuse opens for a moment (EBUSY, EACCES), or vanish again (a native-USB board
    // resetting twice).
    try {
      const { stream, path } = await reopenPort(this.#port, {
        baudRate: this.#baud,
        withinMs: refindMs,
        signal: this.#abort.signal,
        onFound: (found) => {
          this.#path = found;
        },
      });
      if (this.#outcome !== undefined) {
        await closeStream(stream);
        return;
      }
      this.#attach(stream);
      this.#context.out.stderr(`--- reconnected on ${path} ---\n`);
    } catch (error) {
      if (this.#abort.signal.aborted) return;
      const reason = error instanceof Error ? error.message : String(error);
      // Found again but not opened (busy, not permitted): not a lost cable.
      const cameBack = error instanceof SerialError && error.code !== 'PORT_NOT_FOUND';
      this.#settle({
        kind: 'failed',
        error: new SerialCommandError(
          cameBack
            ? `the port was lost (${why}); it came back as ${this.#path} but could not be opened within ${refindMs / 1000} s: ${reason}`
            : `the port was lost (${why}) and did not come back within ${refindMs / 1000} s: ${reason}; check the cable, then run \`${this.#context.program} monitor\` again`,
          'port',
          { cause: error },
        ),
      });
    } finally {
      this.#recovering = false;
    }
  }
}

function describePanics(panics: readonly PanicReport[]): string {
  if (panics.length === 0) return 'no panic';
  const [first] = panics;
  const more = panics.length > 1 ? ` (+${panics.length - 1} more)` : '';
  return `${panics.length} panic${panics.length === 1 ? '' : 's'}: ${first?.reason ?? ''}${more}`;
}

/** `monitor`: resolves to the exit code; failures are reported as one line. */
export async function monitorCommand(
  context: SerialCommandContext,
  options: MonitorCommandOptions,
): Promise<number> {
  return runPortCommand(context, 'monitor', options, async (open) => {
    const baud = parseBaud(options.baud ?? String(DEFAULT_MONITOR_BAUD));
    const seconds = parseSeconds(options.timeout);
    const until = parseUntil(options.until);
    const port = await open();
    if (options.click === true && port.info.kind === 'usb-serial-jtag') {
      throw usageError(
        "--click needs a USB-UART bridge with the auto-reset transistors; this port is the chip's USB-Serial-JTAG, so press the BOOT button by hand",
      );
    }
    if (options.click === true && port.lineControl === 'resets') {
      // Such a server turns DTR on into a reset into download mode (esp_port_manager.py).
      throw usageError(
        `--click needs DTR to reach GPIO0 alone; ${port.label} is served by an RFC 2217 server that plays esptool's resets itself (esp_rfc2217_server, or one that sends no SIGNATURE), where DTR on is a reset into download mode: press the BOOT button by hand, or share the board with \`xiaozhi-mcp port serve\``,
      );
    }
    const session = new MonitorSession(context, port, {
      baud,
      until,
      click: options.click === true,
      color: useColor(context.terminal, context.env ?? process.env),
    });
    const ending = [
      seconds === undefined ? undefined : `${seconds} s`,
      until === undefined ? undefined : `a line matching ${until}`,
      'Ctrl-C',
    ].filter((part) => part !== undefined);
    const announce = () => {
      context.out.stderr(
        `--- monitor ${port.label} at ${baud} baud until ${ending.join(' or ')} ---\n`,
      );
      if (options.click === true && options.reset !== true && port.provider === undefined) {
        context.out.stderr(
          '--- --click waits for the board to report idle; add --reset if it is already running ---\n',
        );
      }
    };
    const started = performance.now();
    const outcome = await session.run({
      reset: options.reset === true,
      timeoutMs: seconds === undefined ? undefined : seconds * 1000,
      announce,
    });
    const elapsed = ((performance.now() - started) / 1000).toFixed(1);
    const summary = `${elapsed} s, ${session.lines} lines, ${describePanics(session.panics)}`;
    switch (outcome.kind) {
      case 'failed':
        throw outcome.error;
      case 'matched':
        context.out.stderr(`--- matched ${until ?? ''} (${summary}) ---\n`);
        return 0;
      case 'stopped':
        context.out.stderr(`--- stopped (${summary}) ---\n`);
        // Ctrl-C is 130 (128 + SIGINT), as a shell reports it; a SIGTERM or the caller's abort is a normal stop.
        return outcome.signal === 'SIGINT' ? 130 : 0;
      case 'timeout':
        if (until === undefined) {
          context.out.stderr(`--- timeout (${summary}) ---\n`);
          return 0;
        }
        throw new SerialCommandError(
          `no console line matched ${until} within ${seconds ?? 0} s (${summary}); check the board's log above, or raise --timeout`,
          'failed',
        );
    }
  });
}

export function registerMonitorCommand(
  program: Command,
  context: SerialCommandContext,
  setExit: (code: number) => void,
): Command {
  return withPortOptions(program.command('monitor'))
    .description(
      "print the board's console (panics highlighted) without resetting it, until Ctrl-C, --timeout or --until",
    )
    .option('--baud <rate>', 'console rate', String(DEFAULT_MONITOR_BAUD))
    .option('--reset', 'hard-reset the board first (EN through RTS), so the boot log shows')
    .option('--click', 'press BOOT (a DTR pulse) once the board reports idle: starts a session')
    .option('--timeout <seconds>', 'stop after this long (exit 0, or 1 with --until)')
    .option('--until <regex>', 'stop at the first line matching this (exit 0)')
    .action(async (options: MonitorCommandOptions) =>
      setExit(await monitorCommand(context, options)),
    );
}
