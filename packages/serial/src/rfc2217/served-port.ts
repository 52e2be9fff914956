/**
 * The local side of an RFC 2217 server: one port, opened once without disturbing the chip
 * ({@link openSafely}: `hupcl` off, DTR and RTS released right after open) and kept open across
 * clients. What clients ask of it (bytes, line changes, a download reset, a baud rate, a break)
 * runs through one queue, in the order it was asked, so that bytes sent after a reset reach the
 * chip after the reset: esptool's SYNC right after its reset sequence reaches a chip that is
 * out of reset and in the ROM's download mode.
 *
 * A port that goes away (unplugged, or a USB-Serial-JTAG chip re-enumerating after its reset)
 * is looked for again by its identity ({@link ResolvedPort.refind}) and reopened at the rate in
 * effect; what was queued meanwhile waits for it, for a bounded time.
 */
import type { SerialPortStream } from '@serialport/stream';
import { SerialError } from '../errors.js';
import {
  type LinePlatform,
  type LineSetter,
  type LineState,
  lineSetterFor,
  runLineSteps,
  SAFE_LINES,
} from '../line-steps.js';
import type { PortKind } from '../port-info.js';
import { closeStream, openSafely } from '../port-open.js';
import type { ResolvedPort } from '../port-provider.js';
import { reopenPort } from '../port-reopen.js';
import { RESET_DELAYS_MS, type ResetStep, resetSteps } from '../reset/plan.js';
import { defaultResetSequence, RESET_SEQUENCES } from '../reset/sequences.js';
import { abortableWait } from '../wait.js';

/** MODEMSTATE bits (RFC 2217, NOTIFY-MODEMSTATE) for what `get()` reports. */
const MODEM_CTS = 0x10;
const MODEM_DSR = 0x20;
const MODEM_CD = 0x80;

/** Each queued command counts this much against the held-bytes bound, as if it were data. */
const OP_WEIGHT = 16;
/** Consecutive writes are merged up to this many bytes. */
const MAX_WRITE_CHUNK = 64 * 1024;
/** A `set()`, `update()`, `get()`, `flush()` or `close()` that takes longer is given up on. */
const CONTROL_TIMEOUT_MS = 5000;

export interface ServedPortOptions {
  readonly port: ResolvedPort;
  readonly baudRate: number;
  /** Whose `set()` writes the lines (Windows writes RTS, then DTR: line-steps.ts `lineWriteOrder`). */
  readonly platform: LinePlatform;
  readonly log: (line: string) => void;
  /** How long a vanished port may take to come back before clients are let go. Default 10 s. */
  readonly refindMs?: number;
  /** How often the port's presence is checked (an unplug does not always close it). Default 1 s. */
  readonly presencePollMs?: number;
}

type Op =
  | { readonly kind: 'write'; readonly bytes: Uint8Array }
  | { readonly kind: 'lines'; readonly lines: LineState }
  | { readonly kind: 'play'; readonly done: (steps: string) => void }
  | { readonly kind: 'hard'; readonly done: () => void }
  | { readonly kind: 'baud'; readonly rate: number; readonly done: (rate: number) => void }
  | { readonly kind: 'break'; readonly on: boolean; readonly done: (on: boolean) => void }
  | { readonly kind: 'purge-input'; readonly done: () => void }
  | { readonly kind: 'release'; readonly done: () => void };

function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not complete within ${ms} ms`)), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

function callback(run: (done: (error: Error | null | undefined) => void) => void): Promise<void> {
  return new Promise((resolve, reject) => run((error) => (error ? reject(error) : resolve())));
}

const message = (error: unknown): string =>
  error instanceof Error ? error.message : String(error);

/** A deferred that nobody has to await: a rejection nobody listens to is not an error. */
function deferred<T>(): {
  promise: Promise<T>;
  resolve: (value: T) => void;
  reject: (error: unknown) => void;
} {
  let resolve: (value: T) => void = () => {};
  let reject: (error: unknown) => void = () => {};
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  promise.catch(() => {});
  return { promise, resolve, reject };
}

export class ServedPort {
  readonly label: string;
  readonly kind: PortKind;
  readonly #port: ResolvedPort;
  readonly #platform: LinePlatform;
  readonly #log: (line: string) => void;
  readonly #refindMs: number;
  /** The rate clients start at, and get back to between clients. */
  readonly #baseBaud: number;
  readonly #abort = new AbortController();
  readonly #queue: Op[] = [];
  readonly #resetPlan: readonly ResetStep[];
  #path: string;
  #stream: SerialPortStream | undefined;
  #setter: LineSetter | undefined;
  #state: 'open' | 'lost' | 'closed' = 'open';
  #back = deferred<SerialPortStream>();
  #unavailable: string | undefined;
  #baud: number;
  #break = false;
  #queued = 0;
  #running: Promise<void> | undefined;
  #readPaused = false;
  #discarding = false;
  #plays = 0;
  #presence: NodeJS.Timeout | undefined;
  #onData: ((bytes: Buffer) => void) | undefined;
  #onDrain: (() => void) | undefined;
  #onUnavailable: ((reason: string) => void) | undefined;

  private constructor(options: ServedPortOptions, stream: SerialPortStream) {
    this.#port = options.port;
    this.label = options.port.label;
    this.kind = options.port.info.kind;
    this.#path = options.port.path;
    this.#platform = options.platform;
    this.#log = options.log;
    this.#refindMs = options.refindMs ?? 10_000;
    this.#baseBaud = options.baudRate;
    this.#baud = options.baudRate;
    // esptool's connect attempts alternate the reset delay (`loader.py`: DEFAULT_RESET_DELAY,
    // then + 0.5 s for slow EN circuits); so do successive plays, so that a client retrying
    // gets both. The USB-Serial-JTAG reset has no such delay.
    const sequence = defaultResetSequence(this.kind, this.#platform);
    this.#resetPlan =
      sequence === 'classic' || sequence === 'tight'
        ? RESET_DELAYS_MS.map((delayMs) => ({ sequence, delayMs }))
        : [{ sequence: 'usbJtag' }];
    this.#attach(stream);
    const pollMs = options.presencePollMs ?? 1000;
    this.#presence = setInterval(() => void this.#checkPresence(), pollMs);
    this.#presence.unref();
  }

  /** Opens the port safely; rejects `PORT_NOT_FOUND`/`PORT_BUSY` as {@link openSafely} does. */
  static async open(options: ServedPortOptions): Promise<ServedPort> {
    const stream = await openSafely(options.port.path, {
      baudRate: options.baudRate,
      binding: options.port.binding,
    });
    const served = new ServedPort(options, stream);
    try {
      // Through our own setter, so that it knows the lines from here on (line-steps.ts plans a
      // change of both lines on Windows from the lines it knows).
      await served.#setter?.set({ ...SAFE_LINES });
    } catch (error) {
      await served.close();
      throw error;
    }
    return served;
  }

  /** The rate in effect. */
  get baudRate(): number {
    return this.#baud;
  }

  /** The local lines as last set, when known. */
  get lines(): LineState | undefined {
    return this.#setter?.lines;
  }

  get breakOn(): boolean {
    return this.#break;
  }

  /** Bytes (and commands, {@link OP_WEIGHT} each) waiting for the port. */
  get queuedBytes(): number {
    return this.#queued;
  }

  /** Why the port cannot be served now (it went away and did not come back), else undefined. */
  get unavailable(): string | undefined {
    return this.#unavailable;
  }

  /** Where the device's bytes go; undefined discards them (no client). */
  onData(listener: ((bytes: Buffer) => void) | undefined): void {
    this.#onData = listener;
  }

  /** Called whenever the queue shrinks: a paused client may send again. */
  onDrain(listener: (() => void) | undefined): void {
    this.#onDrain = listener;
  }

  /** Called when the port went away and did not come back in time; queued work was dropped. */
  onUnavailable(listener: ((reason: string) => void) | undefined): void {
    this.#onUnavailable = listener;
  }

  /** Stops reading the device (a client that does not keep up); the OS buffers, then drops. */
  pauseReading(): void {
    this.#readPaused = true;
    this.#stream?.pause();
  }

  resumeReading(): void {
    this.#readPaused = false;
    this.#stream?.resume();
  }

  write(bytes: Uint8Array): void {
    if (bytes.length === 0) return;
    this.#enqueue({ kind: 'write', bytes }, bytes.length);
  }

  setLines(lines: LineState): void {
    this.#enqueue({ kind: 'lines', lines: { dtr: lines.dtr, rts: lines.rts } }, OP_WEIGHT);
  }

  /** Plays the port's own reset into download mode; resolves (never rejects) once played. */
  playDownload(): Promise<string> {
    return new Promise((resolve) => this.#enqueue({ kind: 'play', done: resolve }, OP_WEIGHT));
  }

  /** Plays esptool's HardReset (an RTS pulse); resolves (never rejects) once played. */
  playHard(): Promise<void> {
    return new Promise((resolve) => this.#enqueue({ kind: 'hard', done: resolve }, OP_WEIGHT));
  }

  /** Resolves with the rate in effect afterwards (the old one when `rate` was refused). */
  setBaudRate(rate: number): Promise<number> {
    return new Promise((resolve) =>
      this.#enqueue({ kind: 'baud', rate, done: resolve }, OP_WEIGHT),
    );
  }

  /** Resolves with the break state in effect afterwards. */
  setBreak(on: boolean): Promise<boolean> {
    return new Promise((resolve) => this.#enqueue({ kind: 'break', on, done: resolve }, OP_WEIGHT));
  }

  /**
   * Between clients: both lines released (never a board left in reset or strapped), break
   * off, the server's own rate back.
   */
  release(): Promise<void> {
    return new Promise((resolve) => this.#enqueue({ kind: 'release', done: resolve }, OP_WEIGHT));
  }

  /**
   * RFC 2217 PURGE-DATA 2, the access server's transmit buffer: the client's bytes not yet
   * handed to the port are dropped. (bindings' `flush()` discards both directions at once,
   * `tcflush(TCIOFLUSH)`, so the OS's own buffer is left to drain: a few ms at any rate.)
   */
  purgeTransmit(): void {
    const kept = this.#queue.filter((op) => op.kind !== 'write');
    this.#queue.length = 0;
    this.#queue.push(...kept);
    this.#queued = kept.length * OP_WEIGHT;
    this.#onDrain?.();
  }

  /**
   * RFC 2217 PURGE-DATA 1, the access server's receive buffer, as pyserial's PortManager does it
   * (`reset_input_buffer()`, `tcflush(TCIFLUSH)`): the device's bytes read but not passed on
   * are dropped now, and the OS's input buffer once what the client sent before the purge has
   * reached the port. bindings offer only `flush()`, both directions at once (`tcflush(TCIOFLUSH)`),
   * so the output is drained first (`tcdrain`): nothing the client sent is lost. esptool (Python)
   * purges so before every command: a stale answer left in the tty would be read as the next
   * one's. Resolves (never rejects) once done.
   */
  purgeInput(): Promise<void> {
    this.purgeReceive();
    return new Promise((resolve) =>
      this.#enqueue({ kind: 'purge-input', done: resolve }, OP_WEIGHT),
    );
  }

  /**
   * The device's bytes read but not yet passed on (held while the client was not reading) are
   * dropped.
   */
  purgeReceive(): void {
    const stream = this.#stream;
    if (stream === undefined) return;
    this.#discarding = true;
    try {
      while (stream.read() !== null) {
        // Dropped: read() hands each chunk to the 'data' listener, which discards it now.
      }
    } finally {
      this.#discarding = false;
    }
  }

  /** RFC 2217 PURGE-DATA 3: both of the above, and the OS's buffers both ways. */
  async purgeBoth(): Promise<void> {
    this.purgeTransmit();
    this.purgeReceive();
    const stream = this.#stream;
    if (stream === undefined) return;
    await withTimeout(
      callback((done) => stream.flush(done)),
      CONTROL_TIMEOUT_MS,
      `flushing ${this.label}`,
    ).catch((error: unknown) => this.#log(`${this.label}: flush failed: ${message(error)}`));
  }

  /** CTS, DSR and CD as RFC 2217 MODEMSTATE bits; 0 when the port cannot say. */
  async modemState(): Promise<number> {
    const stream = this.#stream;
    if (stream === undefined) return 0;
    try {
      const status = await withTimeout(
        new Promise<{ cts: boolean; dsr: boolean; dcd: boolean }>((resolve, reject) =>
          stream.get((error, value) =>
            error || value === undefined ? reject(error) : resolve(value),
          ),
        ),
        CONTROL_TIMEOUT_MS,
        `reading the modem lines of ${this.label}`,
      );
      return (
        (status.cts ? MODEM_CTS : 0) | (status.dsr ? MODEM_DSR : 0) | (status.dcd ? MODEM_CD : 0)
      );
    } catch {
      return 0;
    }
  }

  /**
   * Drops what is queued (a client that left): each waiting answer gets the state in effect.
   * What runs now finishes.
   */
  dropQueued(): void {
    const dropped = this.#queue.splice(0);
    this.#queued = 0;
    for (const op of dropped) this.#settle(op);
  }

  /** Resolves when the queue is empty and nothing runs. */
  async idle(): Promise<void> {
    while (this.#running !== undefined) await this.#running;
  }

  /** The next client starts over: its first download reset uses the first reset delay. */
  newClient(): void {
    this.#plays = 0;
  }

  /** Closes the port (what is queued is dropped); safe to call twice. */
  async close(): Promise<void> {
    if (this.#state === 'closed') return;
    this.#state = 'closed';
    clearInterval(this.#presence);
    this.#abort.abort(new SerialError('PORT_NOT_FOUND', `${this.label}: the server is closing`));
    this.#back.reject(new SerialError('PORT_NOT_FOUND', `${this.label}: the server is closing`));
    this.dropQueued();
    await withTimeout(this.idle(), 3000, 'the last port operation').catch(() => {});
    const stream = this.#stream;
    this.#stream = undefined;
    this.#setter = undefined;
    if (stream !== undefined) await closeStream(stream);
  }

  #attach(stream: SerialPortStream): void {
    this.#stream = stream;
    // The setter writes break with the lines: serialport's set() writes every flag it is not
    // given with its default (break off), line-steps.ts `lineSetterFor` names only DTR and RTS.
    const port = {
      set: (flags: { dtr?: boolean; rts?: boolean }, done: (error: Error | null) => void) =>
        stream.set({ ...flags, brk: this.#break }, done),
    };
    this.#setter = lineSetterFor(port, { platform: this.#platform });
    stream.on('data', (chunk: Buffer) => {
      if (this.#discarding || this.#stream !== stream) return;
      this.#onData?.(chunk);
    });
    stream.on('error', (error: Error) => {
      if (this.#stream === stream) this.#lost(error.message);
    });
    stream.on('close', (error: Error | null) => {
      if (this.#stream === stream) this.#lost(error ? error.message : 'the port closed');
    });
    if (this.#readPaused) stream.pause();
  }

  #enqueue(op: Op, weight: number): void {
    if (this.#state === 'closed') {
      this.#settle(op);
      return;
    }
    this.#queue.push(op);
    this.#queued += weight;
    if (this.#running === undefined) {
      this.#running = this.#drain().finally(() => {
        this.#running = undefined;
      });
    }
  }

  /** Answers a dropped op with what is in effect, so that nobody waits forever. */
  #settle(op: Op): void {
    switch (op.kind) {
      case 'play':
        op.done('dropped');
        break;
      case 'baud':
        op.done(this.#baud);
        break;
      case 'break':
        op.done(this.#break);
        break;
      case 'release':
      case 'purge-input':
        op.done();
        break;
      default:
        break;
    }
  }

  async #drain(): Promise<void> {
    for (;;) {
      const op = this.#queue.shift();
      if (op === undefined) return;
      let bytes = op.kind === 'write' ? op.bytes : undefined;
      this.#queued -= bytes === undefined ? OP_WEIGHT : bytes.length;
      if (bytes !== undefined) {
        // Consecutive writes go to the port as one.
        const parts = [bytes];
        let length = bytes.length;
        for (;;) {
          const next = this.#queue[0];
          if (next?.kind !== 'write' || length + next.bytes.length > MAX_WRITE_CHUNK) break;
          this.#queue.shift();
          this.#queued -= next.bytes.length;
          parts.push(next.bytes);
          length += next.bytes.length;
        }
        bytes = parts.length === 1 ? bytes : Buffer.concat(parts);
      }
      this.#onDrain?.();
      try {
        await this.#perform(op, bytes);
      } catch (error) {
        // While the port is away its loss was logged once; what failed with it is not news.
        if (this.#state === 'open') this.#log(`${this.label}: ${message(error)}`);
        this.#settle(op);
      }
    }
  }

  /** The open stream; while the port is away, waits for it to come back (bounded). */
  async #ready(): Promise<SerialPortStream> {
    if (this.#state === 'closed')
      throw new SerialError('PORT_NOT_FOUND', `${this.label}: the server is closing`);
    const stream = this.#stream;
    if (this.#state === 'open' && stream !== undefined) return stream;
    if (this.#unavailable !== undefined)
      throw new SerialError('PORT_NOT_FOUND', `${this.label}: ${this.#unavailable}`);
    return this.#back.promise;
  }

  async #perform(op: Op, bytes: Uint8Array | undefined): Promise<void> {
    const stream = await this.#ready();
    const setter = this.#setter;
    if (setter === undefined) throw new Error('the port is not open');
    switch (op.kind) {
      case 'write': {
        const data = bytes ?? op.bytes;
        // Twice the wire time of the chunk, so a slow rate is not mistaken for a hang.
        const wireMs = (data.length * 10 * 1000) / this.#baud;
        try {
          await withTimeout(
            callback((done) => stream.write(Buffer.from(data), done)),
            Math.max(CONTROL_TIMEOUT_MS, 2 * wireMs + 1000),
            `writing ${data.length} bytes to ${this.label}`,
          );
        } catch (error) {
          // A write that never completes leaves the port unusable: open it again.
          this.#lost(message(error));
          throw error;
        }
        return;
      }
      case 'lines':
        await setter.set(op.lines);
        return;
      case 'play': {
        const step = this.#resetPlan[this.#plays % this.#resetPlan.length] as ResetStep;
        this.#plays++;
        const name = `${step.sequence}${step.delayMs === undefined ? '' : ` ${step.delayMs} ms`}`;
        try {
          await runLineSteps(setter, resetSteps(step), {
            signal: this.#abort.signal,
            platform: this.#platform,
          });
        } finally {
          op.done(name);
        }
        return;
      }
      case 'hard':
        try {
          await runLineSteps(setter, RESET_SEQUENCES.hard, {
            signal: this.#abort.signal,
            platform: this.#platform,
          });
        } finally {
          op.done();
        }
        return;
      case 'baud': {
        if (op.rate !== this.#baud) {
          // In place: reopening would reset boards (web-serial.ts says why).
          await withTimeout(
            callback((done) => stream.update({ baudRate: op.rate }, done)),
            CONTROL_TIMEOUT_MS,
            `changing ${this.label} to ${op.rate} baud`,
          ).then(
            () => {
              this.#baud = op.rate;
            },
            (error: unknown) =>
              this.#log(`${this.label}: ${op.rate} baud refused: ${message(error)}`),
          );
        }
        op.done(this.#baud);
        return;
      }
      case 'break': {
        const lines = setter.lines ?? SAFE_LINES;
        await withTimeout(
          callback((done) => stream.set({ dtr: lines.dtr, rts: lines.rts, brk: op.on }, done)),
          CONTROL_TIMEOUT_MS,
          `setting break on ${this.label}`,
        );
        this.#break = op.on;
        op.done(this.#break);
        return;
      }
      case 'purge-input':
        try {
          await withTimeout(
            callback((done) => stream.drain(done)),
            CONTROL_TIMEOUT_MS,
            `draining ${this.label}`,
          );
          await withTimeout(
            callback((done) => stream.flush(done)),
            CONTROL_TIMEOUT_MS,
            `flushing the input of ${this.label}`,
          );
          // What the stream read meanwhile came before the flush.
          this.purgeReceive();
        } finally {
          op.done();
        }
        return;
      case 'release': {
        try {
          this.#break = false;
          await setter.set({ ...SAFE_LINES });
          if (this.#baud !== this.#baseBaud) {
            const base = this.#baseBaud;
            await withTimeout(
              callback((done) => stream.update({ baudRate: base }, done)),
              CONTROL_TIMEOUT_MS,
              `changing ${this.label} back to ${base} baud`,
            );
            this.#baud = base;
          }
        } finally {
          op.done();
        }
        return;
      }
    }
  }

  async #checkPresence(): Promise<void> {
    if (this.#state !== 'open') return;
    const path = this.#path;
    const present = await this.#port.present(path).catch(() => true);
    if (!present && this.#state === 'open' && this.#path === path) this.#lost('the device is gone');
  }

  /** The port went away: look for it again, for as long as the server runs. */
  #lost(why: string): void {
    if (this.#state !== 'open') return;
    this.#state = 'lost';
    const old = this.#stream;
    this.#stream = undefined;
    this.#setter = undefined;
    if (old !== undefined) void closeStream(old);
    this.#log(
      `${this.label}: ${why}; waiting up to ${this.#refindMs / 1000} s for it to come back`,
    );
    void this.#reopen();
  }

  async #reopen(): Promise<void> {
    const signal = this.#abort.signal;
    for (let attempt = 0; this.#state === 'lost'; attempt++) {
      try {
        const found = await reopenPort(this.#port, {
          baudRate: this.#baud,
          withinMs: this.#refindMs,
          signal,
        });
        const { stream } = found;
        if (this.#state !== 'lost') {
          await closeStream(stream);
          return;
        }
        this.#path = found.path;
        this.#state = 'open';
        this.#unavailable = undefined;
        this.#attach(stream);
        // Known lines from here on, and break off as openSafely's set() left it.
        this.#break = false;
        await this.#setter?.set({ ...SAFE_LINES }).catch(() => {});
        this.#log(`${this.label}: back on ${found.path}`);
        const back = this.#back;
        this.#back = deferred();
        back.resolve(stream);
        return;
      } catch (error) {
        if (this.#state !== 'lost' || signal.aborted) return;
        if (attempt === 0) {
          // Whoever waits for it is let go; the server keeps looking.
          this.#unavailable = `it went away and did not come back within ${this.#refindMs / 1000} s (${message(error)})`;
          this.#log(`${this.label}: ${this.#unavailable}; still looking`);
          const back = this.#back;
          this.#back = deferred();
          back.reject(new SerialError('PORT_NOT_FOUND', `${this.label}: ${this.#unavailable}`));
          this.dropQueued();
          this.#onUnavailable?.(this.#unavailable);
        }
        await abortableWait(1000, signal).catch(() => {});
      }
    }
  }
}
