/**
 * How DTR and RTS reach the chip. Boards with a USB-UART bridge (CP2102, CH340) carry the
 * two-transistor auto-reset circuit: EN (chip enable) is pulled low while RTS is asserted
 * and DTR is not, GPIO0 (BOOT strap) is pulled low while DTR is asserted and RTS is not;
 * both asserted or both released pull neither. EN rising starts the chip, sampling GPIO0:
 * low means the ROM's serial download mode. EN rises through an RC network (10 kΩ, ~1 µF), so
 * the chip starts a few milliseconds after the lines release it and samples GPIO0 then: that
 * is why esptool's classic reset may pass through both-asserted before pulling GPIO0 low.
 * While the chip runs, a short GPIO0-low pulse is what pressing and releasing the BOOT button
 * does, so the firmware sees a click.
 *
 * Boards on the chip's own USB-Serial-JTAG port have no such circuit: the USB peripheral
 * reads the lines itself (esptool's USBJTAGSerialReset): RTS asserted with DTR released holds
 * the chip in reset, a DTR-asserted-RTS-released state before that reset asks for download
 * mode, both released outside a reset withdraws that request, both asserted changes nothing
 * (why esptool goes from (DTR, RTS) = (1, 0) to (0, 1) "through (1,1) instead of (0,0)",
 * `esptool/reset.py`), and releasing RTS lets the chip run. Such boards cannot be clicked
 * through the lines.
 */

/** Line states as the host sets them; `true` = asserted. */
export interface SerialLineState {
  readonly dtr: boolean;
  readonly rts: boolean;
}

/** Pin levels the lines produce; `true` = pulled low. */
export interface StrapPins {
  /** The chip is held in reset. */
  readonly enLow: boolean;
  /** BOOT strap low: download mode if the chip starts now, a button press if it runs. */
  readonly gpio0Low: boolean;
}

/** The bridge board's auto-reset circuit, as a pure function of the lines. */
export function autoResetPins(lines: SerialLineState): StrapPins {
  return { enLow: lines.rts && !lines.dtr, gpio0Low: lines.dtr && !lines.rts };
}

/** What the circuit drives: the subset of `VirtualBoard` it needs. */
export interface AutoResetBoard {
  readonly state: string;
  reset(reason: 'POWERON' | 'EXT_SYS_RST', options: { download?: boolean }): void;
  powerOff(): void;
  click(): void;
}

export type AutoResetEvent =
  /** The chip is held in reset (it stopped). */
  | { readonly kind: 'hold' }
  /** The chip left reset; `download` when GPIO0 was low as it started. */
  | { readonly kind: 'reset'; readonly download: boolean }
  /** A BOOT click reached the running firmware. */
  | { readonly kind: 'click'; readonly pressedMs: number }
  /** A GPIO0 pulse that was not a click, and why. */
  | { readonly kind: 'ignored'; readonly reason: string };

export interface AutoResetOptions {
  /** USB-Serial-JTAG semantics instead of the bridge circuit (native-USB boards). */
  readonly usbJtag?: boolean;
  /**
   * Bridge circuit: how long EN takes to rise (the RC delay) before the chip starts and samples
   * GPIO0. Default 5 ms; 0 starts the chip within the `setLines` call.
   */
  readonly enRiseMs?: number;
  /** Every event, including a delayed start. */
  readonly onEvent?: (event: AutoResetEvent) => void;
  /** The longest GPIO0-low pulse taken as a click; longer is a long press. Default 2000 ms. */
  readonly clickMaxMs?: number;
  /**
   * The shortest GPIO0-low pulse taken as a click; shorter is a glitch the button driver never
   * sees. Default {@link BUTTON_DEBOUNCE_MS}.
   */
  readonly clickMinMs?: number;
  /** Clock, for tests. */
  readonly now?: () => number;
}

const RELEASED: SerialLineState = { dtr: false, rts: false };

/**
 * How long BOOT must read low before the firmware's button driver (espressif/button, iot_button)
 * reports a press: it scans every `CONFIG_BUTTON_PERIOD_TIME_MS` (default 5) and wants
 * `CONFIG_BUTTON_DEBOUNCE_TICKS` (default 2) scans in a row (esp-iot-solution,
 * `components/button/Kconfig`). A line glitch of one USB request is far shorter.
 */
export const BUTTON_DEBOUNCE_MS = 10;

/**
 * The circuit between a port's lines and a board. Feed it every line change, in order;
 * it resets, holds or clicks the board, and returns what happened.
 */
export class AutoResetCircuit {
  readonly usbJtag: boolean;
  readonly #board: AutoResetBoard;
  readonly #clickMaxMs: number;
  readonly #clickMinMs: number;
  readonly #enRiseMs: number;
  readonly #onEvent: ((event: AutoResetEvent) => void) | undefined;
  readonly #now: () => number;
  #lines: SerialLineState = RELEASED;
  /** The chip as EN leaves it: running, held in reset, or starting (EN rising). */
  #chip: 'running' | 'held' | 'rising' = 'running';
  #riseTimer: NodeJS.Timeout | undefined;
  /** Events of the current `setLines` call. */
  #events: AutoResetEvent[] = [];
  /** When GPIO0 went low while the chip was already running; undefined otherwise. */
  #pressedAt: number | undefined;
  /** USB-Serial-JTAG: download mode requested for the next reset release. */
  #downloadLatch = false;

  constructor(board: AutoResetBoard, options: AutoResetOptions = {}) {
    this.#board = board;
    this.usbJtag = options.usbJtag ?? false;
    this.#clickMaxMs = options.clickMaxMs ?? 2000;
    this.#clickMinMs = options.clickMinMs ?? BUTTON_DEBOUNCE_MS;
    this.#enRiseMs = options.enRiseMs ?? 5;
    this.#onEvent = options.onEvent;
    this.#now = options.now ?? (() => performance.now());
  }

  /** Cancels a pending start (the board went away). */
  dispose(): void {
    clearTimeout(this.#riseTimer);
    this.#riseTimer = undefined;
  }

  get lines(): SerialLineState {
    return this.#lines;
  }

  /** The pins as the chip sees them now. */
  get pins(): StrapPins {
    if (!this.usbJtag) return autoResetPins(this.#lines);
    return { enLow: this.#lines.rts && !this.#lines.dtr, gpio0Low: this.#downloadLatch };
  }

  /** Applies a line change (one `set()` of the port); returns what it did at once. */
  setLines(next: SerialLineState): AutoResetEvent[] {
    const previous = this.#lines;
    this.#lines = { dtr: next.dtr, rts: next.rts };
    this.#events = [];
    if (previous.dtr !== next.dtr || previous.rts !== next.rts) {
      if (this.usbJtag) this.#usbJtag(previous, next);
      else this.#bridge(previous, next);
    }
    const events = this.#events;
    this.#events = [];
    return events;
  }

  /** The port closed: the OS drops both lines (hupcl). */
  release(): AutoResetEvent[] {
    return this.setLines(RELEASED);
  }

  #emit(event: AutoResetEvent): void {
    this.#events.push(event);
    this.#onEvent?.(event);
  }

  #bridge(previous: SerialLineState, next: SerialLineState): void {
    const before = autoResetPins(previous);
    const after = autoResetPins(next);
    if (!before.enLow && after.enLow) {
      this.#pressedAt = undefined;
      clearTimeout(this.#riseTimer);
      this.#riseTimer = undefined;
      const wasRunning = this.#chip === 'running';
      this.#chip = 'held';
      if (wasRunning) {
        this.#board.powerOff();
        this.#emit({ kind: 'hold' });
      }
      return;
    }
    if (before.enLow && !after.enLow) {
      this.#chip = 'rising';
      if (this.#enRiseMs <= 0) this.#start();
      else this.#riseTimer = setTimeout(() => this.#start(), this.#enRiseMs);
      return;
    }
    if (this.#chip !== 'running') return;
    if (!before.gpio0Low && after.gpio0Low) {
      this.#pressedAt = this.#now();
      return;
    }
    if (before.gpio0Low && !after.gpio0Low) {
      const pressedAt = this.#pressedAt;
      this.#pressedAt = undefined;
      if (pressedAt === undefined) {
        this.#emit({ kind: 'ignored', reason: 'GPIO0 was low as the chip started' });
        return;
      }
      const pressedMs = this.#now() - pressedAt;
      const state = this.#board.state;
      if (state === 'download' || state === 'off') {
        this.#emit({ kind: 'ignored', reason: `the chip is ${state}` });
      } else if (pressedMs > this.#clickMaxMs) {
        this.#emit({ kind: 'ignored', reason: `a long press (${Math.round(pressedMs)} ms)` });
      } else if (pressedMs < this.#clickMinMs) {
        this.#emit({
          kind: 'ignored',
          reason: `a glitch (${Math.round(pressedMs)} ms, under the ${this.#clickMinMs} ms debounce)`,
        });
      } else {
        this.#board.click();
        this.#emit({ kind: 'click', pressedMs });
      }
    }
  }

  /** EN has risen: the chip starts and samples GPIO0 as the lines hold it now. */
  #start(): void {
    this.#riseTimer = undefined;
    if (this.#chip !== 'rising') return;
    this.#chip = 'running';
    // A GPIO0 already low now is the download strap, never the start of a button press.
    this.#pressedAt = undefined;
    const download = autoResetPins(this.#lines).gpio0Low;
    this.#board.reset('POWERON', { download });
    this.#emit({ kind: 'reset', download });
  }

  #usbJtag(previous: SerialLineState, next: SerialLineState): void {
    const heldBefore = previous.rts && !previous.dtr;
    const heldAfter = next.rts && !next.dtr;
    if (next.dtr && !next.rts) this.#downloadLatch = true;
    else if (!next.dtr && !next.rts && !heldBefore) this.#downloadLatch = false;
    if (!heldBefore && heldAfter) {
      this.#board.powerOff();
      this.#emit({ kind: 'hold' });
    } else if (heldBefore && !heldAfter) {
      const download = this.#downloadLatch;
      this.#downloadLatch = false;
      this.#board.reset('EXT_SYS_RST', { download });
      this.#emit({ kind: 'reset', download });
    }
  }
}
