/**
 * The virtual board's vocabulary, shared by the board and its rooms: states, timings, fault
 * knobs, the running app, options and events (`virtual-board.ts` re-exports them), and console
 * output as data.
 */
import type { BoardPreset } from '../board-api.js';
import type { BoardConsole, LogLevel } from '../console.js';
import type { BoardPanic } from '../errors.js';
import type { FlashStorage } from '../flash-storage.js';
import type { McpProfile } from '../mcp-server.js';
import type { NvsStorage } from '../nvs-storage.js';
import type { OtaCheck } from '../ota-client.js';
import type { BoardSilicon } from '../serial/efuse.js';
import type { RegressionName } from './regressions.js';

/** The firmware's device states (`StateMachine`), plus `off`. */
export type DeviceState =
  | 'off'
  | 'starting'
  | 'wifi_configuring'
  | 'activating'
  | 'idle'
  | 'connecting'
  | 'listening'
  | 'speaking'
  | 'upgrading'
  | 'fatal_error'
  /** Held in the ROM's serial download mode (GPIO0 low at reset): the flasher talks to the ROM. */
  | 'download';

/** Durations the firmware uses; tests shorten them. */
export interface BoardTiming {
  /** Reset to application start (ROM and second-stage bootloader). */
  bootMs: number;
  wifiConnectMs: number;
  /** First OTA retry delay; it doubles after each failure (firmware: 10 s, 10 tries). */
  otaRetryMs: number;
  otaMaxRetries: number;
  /** Wait after a 202 from `/activate` (firmware: 3 s), and after another failure (10 s). */
  activationRetryMs: number;
  activationFailMs: number;
  helloTimeoutMs: number;
  /** No incoming data for this long and the channel is dead (firmware: 120 s). */
  channelIdleMs: number;
  /** `Application::Reboot`'s pause before `esp_restart`. */
  rebootMs: number;
  /** Pause after a panic dump before the reset. */
  panicRebootMs: number;
  /** Pause after a successful upgrade (firmware: 3 s). */
  upgradeRebootMs: number;
  /** Bound on each HTTP exchange of the OTA client. */
  httpTimeoutMs: number;
  /** After an MQTT drop, the one reconnect (firmware: `MQTT_RECONNECT_INTERVAL_MS`, 60 s). */
  mqttReconnectMs: number;
  /** How long an MQTT connect may take before it counts as failed (our model: 10 s). */
  mqttConnectTimeoutMs: number;
  /**
   * Over MQTT + UDP, how many Opus frames the board sends once an audio session opens, before
   * it stops listening and says goodbye (a real board streams for as long as it listens).
   */
  uplinkFrames: number;
  /** The pause between two uplink frames (the Opus frame duration, 60 ms). */
  uplinkFrameMs: number;
}

export const FIRMWARE_TIMING: BoardTiming = {
  bootMs: 300,
  wifiConnectMs: 1500,
  otaRetryMs: 10_000,
  otaMaxRetries: 10,
  activationRetryMs: 3000,
  activationFailMs: 10_000,
  helloTimeoutMs: 10_000,
  channelIdleMs: 120_000,
  rebootMs: 1000,
  panicRebootMs: 500,
  upgradeRebootMs: 3000,
  httpTimeoutMs: 10_000,
  mqttReconnectMs: 60_000,
  mqttConnectTimeoutMs: 10_000,
  // 3 s of speech: what a board sends for a short utterance.
  uplinkFrames: 50,
  uplinkFrameMs: 60,
};

/** The transport a board runs once its OTA check succeeded (docs/protocol.md §5, §7). */
export type BoardTransport = 'websocket' | 'mqtt';

/** One MQTT + UDP audio session's uplink, as the board sent it. */
export interface UplinkSessionStats {
  readonly sessionId: string;
  /** Packets handed to the UDP socket; their sequence numbers were 1 to `packets`. */
  readonly packets: number;
  /** Opus payload bytes in them. */
  readonly bytes: number;
}

/** What a board sent over UDP since it was made. */
export interface UplinkStats {
  readonly sessions: number;
  readonly packets: number;
  readonly bytes: number;
  /** The last session that ended (or the one still open). */
  readonly last: UplinkSessionStats | undefined;
}

/** Faults a test or benchmark can switch on. */
export interface FaultKnobs {
  /** Delay every MCP reply by this many milliseconds (replies keep their order). */
  replyLatencyMs: number;
  /** Return true to drop a reply instead of sending it. */
  dropReply: ((payload: string) => boolean) | undefined;
  /** Drop the connection when this tool is called, before it answers. */
  disconnectOnCall: string | undefined;
  /** Page `tools/list` with this budget instead of the firmware's 8000 (a board that pages wrong). */
  pageBudgetBytes: number | undefined;
  /** Crash on the server hello as if it had no `transport` (the firmware's null dereference). */
  crashOnHello: boolean;
  /** Abort during boot, after printing the app version: a build that panics at boot. */
  panicAtBoot: boolean;
  /** Firmware regressions the board is built with, by name (`regressions.ts`). */
  regressions: readonly RegressionName[];
  /** Leave these fields out of the device hello: dotted paths such as `transport`, `features.mcp`. */
  helloWithout: readonly string[];
  /** Leave these fields out of `initialize`'s result: dotted paths such as `serverInfo`. */
  initializeWithout: readonly string[];
  /** Every `tools/list` page's `nextCursor` names the page's own first tool: a walk that never ends. */
  cursorLoop: boolean;
}

/** The running app image's description (what `esp_app_get_description()` returns). */
export interface RunningApp {
  readonly projectName: string;
  readonly version: string;
  readonly idfVersion: string;
  readonly elfSha256: string;
  readonly compileTime: string;
}

export interface VirtualBoardOptions {
  /** A preset name (`bread-compact-wifi`, `otto-robot`) or a preset. Default `bread-compact-wifi`. */
  readonly preset?: string | BoardPreset;
  /** Lowercase Wi-Fi MAC; random with an Espressif prefix by default. */
  readonly mac?: string;
  /**
   * The serial number burnt in eFuse USER_DATA (1 to 32 printable ASCII characters). With one,
   * the OTA check sends `Serial-Number` and `Activation-Version: 2`, and activation signs the
   * challenge (docs/protocol.md §7). Without one, the board sends `Activation-Version: 1` and an
   * empty activation payload, as most boards do.
   */
  readonly serialNumber?: string;
  /**
   * The HMAC key burnt in eFuse KEY0, hex (a real board's is 32 bytes; 16 to 64 are taken, as
   * the server takes them). Needs `serialNumber`. A board with a serial number and no key
   * fails its HMAC and sends `{}`.
   */
  readonly activationKey?: string;
  /** The app the board runs at first power-on. */
  readonly app?: Partial<RunningApp>;
  /** Storage to start from (it is kept and mutated, so it can outlive the board). */
  readonly storage?: NvsStorage;
  /** Provisions `wifi/ssid` and `wifi/password` in NVS. */
  readonly wifi?: { readonly ssid: string; readonly password?: string };
  /** Provisions `wifi/ota_url` in NVS. */
  readonly otaUrl?: string;
  /** The build's default OTA URL, used when NVS has none. */
  readonly defaultOtaUrl?: string;
  readonly profile?: McpProfile;
  readonly timing?: Partial<BoardTiming>;
  readonly faults?: Partial<FaultKnobs>;
  readonly language?: string;
  /** Send a close frame when closing the channel; the firmware does not. */
  readonly closeFrame?: boolean;
  /**
   * The board's SPI flash. With one, every boot reads the partition table, the app's
   * description and the NVS partition from it (what a flasher wrote is what runs), and NVS
   * changes are written back. Without one, the app and NVS live in memory.
   */
  readonly flash?: FlashStorage;
  /**
   * The chip as its eFuse describes it to a flasher in download mode: its revision (default the
   * emulator's for the chip, `efuse.ts`). A revision the chip's eFuse cannot record throws
   * `BOARD_OPTIONS_INVALID` when the board is plugged in.
   */
  readonly silicon?: BoardSilicon;
}

export interface VirtualBoardEvents {
  state: [state: DeviceState, previous: DeviceState];
  /** The OTA check succeeded. */
  ota: [OtaCheck];
  /** A session is open: the server hello was accepted. */
  session: [sessionId: string];
  panic: [BoardPanic];
  /** The board (re)started: `reason` as the ROM prints it. */
  /** `download`: the ROM stays in its serial bootloader instead of starting the app. */
  boot: [reason: ResetReason, count: number, download: boolean];
  /** A valid `tools/call` is about to run this tool. */
  'tool-call': [name: string];
  /** The MQTT connection came up (true) or dropped (false). */
  mqtt: [connected: boolean];
  /** An MQTT + UDP audio session ended: what its uplink sent. */
  'uplink-end': [UplinkSessionStats];
}

export type ResetReason =
  | 'POWERON'
  | 'RTC_SW_CPU_RST'
  | 'RTC_SW_SYS_RST'
  | 'RTC_WDT_RTC_RST'
  | 'EXT_SYS_RST';

/** Thrown inside the boot sequence when a reset aborted it: not a failure, nothing to report. */
export class Reset extends Error {}

interface BootWait {
  readonly timer: NodeJS.Timeout;
  readonly reject: (reason: Reset) => void;
}

/**
 * One boot's life: a reset or power-off ends it, and with it every wait it started (each
 * rejects with {@link Reset}). Lighter than an AbortSignal with `timers/promises`, whose
 * listeners and abort errors a fleet of boards powering on at once pays for per board.
 */
export class BootSignal {
  #aborted = false;
  #waits: Set<BootWait> | undefined;

  get aborted(): boolean {
    return this.#aborted;
  }

  /** Ends the boot: pending waits reject with {@link Reset}, later ones at once. */
  abort(): void {
    if (this.#aborted) return;
    this.#aborted = true;
    const waits = this.#waits;
    this.#waits = undefined;
    if (waits === undefined) return;
    const reset = new Reset('reset');
    for (const wait of waits) {
      clearTimeout(wait.timer);
      wait.reject(reset);
    }
  }

  /** Resolves after `ms`, unless the boot ends first. */
  sleep(ms: number): Promise<void> {
    if (this.#aborted) return Promise.reject(new Reset('reset'));
    return new Promise((resolve, reject) => {
      const wait: BootWait = {
        timer: setTimeout(() => {
          this.#waits?.delete(wait);
          resolve();
        }, ms),
        reject,
      };
      this.#waits ??= new Set();
      this.#waits.add(wait);
    });
  }
}

/** A console line as data: raw text, or an ESP-IDF log line. */
export type ConsoleOutput =
  | { readonly raw: string }
  | { readonly level: LogLevel; readonly tag: string; readonly text: string };

/** Prints console outputs in order. */
export function print(console: BoardConsole, outputs: readonly ConsoleOutput[]): void {
  for (const line of outputs) {
    if ('raw' in line) console.raw(line.raw);
    else console.log(line.level, line.tag, line.text);
  }
}
