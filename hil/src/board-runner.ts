/**
 * One board through a run (docs/hil.md §1.3): open → flash (optional) → provision (optional) → reset →
 * boot (console) → OTA check at our endpoint → session → suites → close. Every wait is
 * bounded; a failure names the step and the reason, and the board's console log and protocol
 * transcript are kept whatever happens.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { SerialPortStream } from '@serialport/stream';
import { formatReplica, type ReplicaFile, replicaFromTranscript } from '@xiaozhi-mcp/device';
import {
  PARTITION_TABLE_MAX_SIZE,
  PARTITION_TABLE_OFFSET,
  type PartitionTable,
  readPartitionTable,
} from '@xiaozhi-mcp/firmware';
import type { PageReport } from '@xiaozhi-mcp/protocol';
import {
  BOOT_CLICK,
  ConsoleExpect,
  ConsoleLineSplitter,
  type ExpectMatch,
  type FlashProgress,
  flasherFor,
  flashImage,
  type ImageToFlash,
  lineSetterFor,
  PanicDetector,
  parseConsoleLine,
  provisionBoard,
  RESET_SEQUENCES,
  type ResolvedPort,
  reopenPort,
  runLineSteps,
  SerialError,
} from '@xiaozhi-mcp/serial';
import type { DeviceRecord, OtaCheckRecord, XiaozhiServer } from '@xiaozhi-mcp/server';
import { applyBaseline, type Baseline, type FixedDeviationPolicy } from './baseline.js';
import {
  type BoardConfig,
  isNativeUsb,
  type LatencyConfig,
  macOfSerialNumber,
  type SessionStart,
  sessionStartFor,
} from './inventory.js';
import type { BoardReport, CheckResult, RigStep, RigStepName, SuiteName } from './model.js';
import {
  BoardClaims,
  isNetworkBoard,
  isNetworkBoardCheck,
  networkIdentity,
} from './network-board.js';
import { offerCandidate } from './ota-offers.js';
import type { ConsoleReporter } from './reporters/console.js';
import type { BootButton, SuiteContext } from './suite.js';
import { SUITES } from './suites/index.js';
import {
  judgeSession,
  SESSION_REPLY_MS,
  type SessionObservation,
  SessionWatch,
} from './suites/session.js';
import { ConsoleLog, Transcript } from './transcript.js';

export interface FirmwareUnderTest {
  /** What to flash and where (an app image without an offset goes to the first app partition). */
  readonly image: ImageToFlash;
  readonly version: string;
  readonly chip: string;
}

/**
 * Why a board behind an RFC 2217 server that plays resets itself is not clicked: there `DTR on`
 * is a reset into download mode (esp_rfc2217_server's `esp_port_manager.py`).
 */
const RESETS_ONLY_WHY =
  "its port's RFC 2217 server plays esptool's resets itself (esp_rfc2217_server, or one that sends no SIGNATURE): DTR on is a reset into download mode there, so DTR cannot press BOOT";

/**
 * A board's port in the rig. `pressBoot` is a hand on the board's BOOT button: the virtual
 * rig's stand-in for the person a `manual` session start prompts; `pressReset` one on its RESET
 * button (BOOT held when `boot`), for a board on `reset: none`.
 */
export type RigPort = ResolvedPort & {
  readonly pressBoot?: () => void;
  readonly pressReset?: (options?: { readonly boot?: boolean }) => void;
};

export interface BoardRunOptions {
  readonly config: BoardConfig;
  readonly port: () => Promise<RigPort>;
  readonly server: XiaozhiServer;
  readonly outDir: string;
  readonly firmware: FirmwareUnderTest | undefined;
  readonly provision: { readonly ssid: string; readonly password: string } | undefined;
  readonly candidateImage: Uint8Array | undefined;
  readonly suites: readonly SuiteName[];
  readonly latency: LatencyConfig;
  readonly baseline: Baseline;
  /** A listed deviation that is gone fails the check unless allowed (docs/hil.md §3). */
  readonly fixedDeviations?: FixedDeviationPolicy;
  /**
   * The identities the rig's boards are known by: a board without port and without an identity
   * of its own takes the first OTA check none of them claims (network-board.ts).
   */
  readonly claims?: BoardClaims;
  readonly reporter: ConsoleReporter;
  readonly signal: AbortSignal;
  readonly timeouts?: Partial<RunnerTimeouts>;
  /**
   * A person watches the run at a terminal and can press a board's buttons when asked (a board
   * on `reset: none`). Unattended (CI, no TTY), a step that needs a hand fails at once rather
   * than waiting for nobody. Default false.
   */
  readonly attended?: boolean;
  /**
   * A board without port that hil runs itself (a replica, `virtual.replica`): `start`ed once the
   * rig has offered the board its transport, so that its first OTA check counts; `pressBoot` is
   * hil's hand on its BOOT button (the `audio` suite's click).
   */
  readonly networkBoard?: { readonly start: () => void; readonly pressBoot: () => void };
}

export interface RunnerTimeouts {
  readonly bootMs: number;
  readonly otaMs: number;
  readonly sessionMs: number;
  readonly suiteMs: number;
  /**
   * How long the console port may take to open, or to come back after it vanished (USB
   * re-enumeration: 1–3 s), found again and opened with retries (serial's `reopenPort`).
   */
  readonly refindMs: number;
  /** How long closing the console port may take. */
  readonly closeMs: number;
}

/** The boot wait past the console's return: the firmware's first OTA retry (10 s) and 10 s more. */
const BOOT_AFTER_CONSOLE_MS = 20_000;

/**
 * Each wait is for something the firmware or the host does on its own schedule, with a margin
 * (docs/hil.md, "On a busy machine"): none is a guess at how fast this machine is.
 */
const DEFAULT_TIMEOUTS: RunnerTimeouts = {
  // The app prints its first lines within a second of the reset; where the console lost them
  // (USB-Serial-JTAG, re-enumerating), its next line or its OTA check comes on the firmware's
  // schedule: the check after Wi-Fi, a failed one retried after 10 s (CheckNewVersion). The
  // console's return (refindMs) and that first retry, with 10 s to spare (timeoutsFor).
  bootMs: 10_000 + BOOT_AFTER_CONSOLE_MS,
  // CheckNewVersion retries a failed check after 10 s, then 20 s: the third attempt, ~30 s after
  // the first, with its HTTP exchange, is inside 60 s.
  otaMs: 60_000,
  // The firmware's own bound on its hello (10 s) and on each MCP reply the session start needs,
  // three of them in a row at worst.
  sessionMs: 30_000,
  suiteMs: 300_000,
  // A real board is off the bus 1-3 s when it re-enumerates: three times the slowest (a
  // virtual board's own reenumerateMs, three times over, where that is longer: timeoutsFor).
  refindMs: 10_000,
  closeMs: 5_000,
};

/** The app's start line, with the version it runs (`app_init: App version:      2.4.2`). */
const APP_LINE = /app_init: App version:\s+(\S+)/;
/** The firmware's Board line: the Client-Id (UUID) its OTA checks carry, and its SKU. */
const BOARD_LINE = /Board: UUID=(\S+) SKU=(\S+)/;
/**
 * The waits for a board: a virtual board says how long it stays off the bus when it
 * re-enumerates (`virtual.reenumerateMs`, up to 10 s), and the console's return and the boot
 * wait follow it; `overrides` (a test's) win.
 */
function timeoutsFor(config: BoardConfig, overrides: Partial<RunnerTimeouts> = {}): RunnerTimeouts {
  const reenumerateMs = config.virtual?.reenumerateMs ?? 0;
  const refindMs = overrides.refindMs ?? Math.max(DEFAULT_TIMEOUTS.refindMs, 3 * reenumerateMs);
  return {
    ...DEFAULT_TIMEOUTS,
    refindMs,
    bootMs: Math.max(DEFAULT_TIMEOUTS.bootMs, refindMs + BOOT_AFTER_CONSOLE_MS),
    ...overrides,
  };
}

/** Either: the first console sign that the app booted. */
const BOOT_LINE = new RegExp(`${APP_LINE.source}|${BOARD_LINE.source}`);
/**
 * A line the xiaozhi app logs, by the tags of docs/protocol.md §9 (never the ROM's or the
 * bootloader's): only a running app prints it. Where the console lost the app's first lines
 * (a USB-Serial-JTAG console while the board re-enumerates), the first of these after the
 * console came back shows the board booted.
 */
const APP_LOG_LINE =
  /^[IWE] \(\d+\) (?:Application|Board|MCP|Ota|StateMachine|WifiBoard|WifiStation|WS|MQTT): /;

/** What tells this boot's OTA check apart, from what showed the board booted. */
interface BootEvidence {
  readonly clientId?: string;
  readonly mac?: string;
  /** The OTA check itself, when that is what showed it. */
  readonly check?: OtaCheckRecord;
}

/** A run without other boards: nothing is claimed. */
const NO_CLAIMS = new BoardClaims();

/** No OTA check within the wait (the caller says whose and where). */
class OtaCheckTimeout extends Error {}

/** The firmware crashed: the board fails (exit 1), the rig did not. */
class BoardCrash extends Error {}

/** The session did not open because the firmware failed these session checks (exit 1, not 3). */
class SessionChecksFailed extends Error {
  constructor(
    /** The checks that say why, failures first. */
    readonly checks: readonly CheckResult[],
  ) {
    super(`the session did not open: ${checks.map((c) => `${c.id}: ${c.message}`).join('; ')}`);
  }
}

/** After the board closed a session that was not ready, how long a panic report may take to arrive. */
const PANIC_GRACE_MS = 2000;

/** An image the flash step wrote and verified (by MD5), and where. */
interface FlashedBytes {
  readonly offset: number;
  readonly data: Uint8Array;
}

/** The bytes at `offset` the flash step wrote, when it wrote all `size` of them; else undefined. */
function bytesWritten(
  written: FlashedBytes | undefined,
  offset: number,
  size: number,
): Uint8Array | undefined {
  if (written === undefined) return undefined;
  const start = offset - written.offset;
  if (start < 0 || start + size > written.data.length) return undefined;
  return written.data.slice(start, start + size);
}

/** The partition table the flash step wrote at 0x8000 (a merged image holds one); else undefined. */
function readPartitionTableFrom(written: FlashedBytes | undefined): PartitionTable | undefined {
  const bytes = bytesWritten(written, PARTITION_TABLE_OFFSET, PARTITION_TABLE_MAX_SIZE);
  return bytes === undefined ? undefined : readPartitionTable(bytes);
}

class StepFailure extends Error {
  constructor(
    readonly step: RigStepName,
    message: string,
    /**
     * `board`: the firmware failed (a panic); `check`: a check failed and the board cannot go
     * on (the session did not open); `refused`: the flasher refused, before writing a byte, an
     * image the board would not survive (its Secure Boot, flash encryption or chip revision:
     * exit 2, bad input); `rig`: the rig could not go on (port lost, timeout); `interrupted`:
     * Ctrl-C.
     */
    readonly kind: 'board' | 'check' | 'refused' | 'rig' | 'interrupted',
  ) {
    super(message);
  }
}

function raced<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** What closing needs of a port's stream. */
export interface ClosableStream {
  readonly isOpen: boolean;
  close(callback: (error?: Error | null) => void): void;
  destroy(): void;
}

/**
 * Closes a port, waiting at most `ms`: a port that hangs on close (a wedged driver, a board
 * gone mid-write) is destroyed and abandoned rather than holding the whole run. Resolves
 * whether it closed in time.
 */
export async function closeWithin(stream: ClosableStream, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const closed = new Promise<boolean>((resolve) => stream.close(() => resolve(true)));
  const timedOut = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  const inTime = await Promise.race([closed, timedOut]);
  clearTimeout(timer);
  if (!inTime) stream.destroy();
  return inTime;
}

/**
 * The server's API as the rig reaches it in process: its bound address, loopback for a
 * wildcard one, never `publicUrl` (the boards' way in, which may be a name only they resolve).
 */
function rigApiUrl(server: XiaozhiServer): string {
  const bound = server.config.host;
  const host = bound === '0.0.0.0' || bound === '' ? '127.0.0.1' : bound === '::' ? '::1' : bound;
  return `http://${host.includes(':') ? `[${host}]` : host}:${server.port}${server.config.apiPrefix}`;
}

export class BoardRunner {
  readonly report: BoardReport;
  readonly #options: BoardRunOptions;
  readonly #timeouts: RunnerTimeouts;
  readonly #abort = new AbortController();
  #console: ConsoleExpect | undefined;
  #stream: SerialPortStream | undefined;
  /** Set while the console port is being looked for again (a board on native USB re-enumerates). */
  #refinding: Promise<void> | undefined;
  /** Where the console was last opened (a native-USB board moves on every reset). */
  #consolePath: string | undefined;
  /** The console's last time away (lost, then found again): what the board printed then is lost. */
  #outage: { lostAt: string; backAt?: string } | undefined;
  /** Called each time the console is back after an outage. */
  readonly #onConsoleBack = new Set<() => void>();
  /** From the reset until the boot step ends: an outage meanwhile is the reset's re-enumeration. */
  #booting = false;
  /** The console came back after an outage that began after the reset: it lost the board's first lines. */
  #backSinceReset = false;
  /** The OTA check the last idle wait accounted for: a later one means a new boot. */
  #idleCheckAt: string | undefined;
  #port: RigPort | undefined;
  #closing = false;
  #deviceId: string | undefined;
  /** How this board's sessions start, once the rig has offered it its transport. */
  #style: { style: SessionStart; why?: string } | undefined;
  /** OTA checks count from here on: the first after the rig offered the board its transport. */
  #otaSince: string | undefined;
  /** A board on MQTT: its first session, watched from before its OTA check. */
  #firstWatch: SessionWatch | undefined;
  /** The checks of the first session's start, judged by the session suite. */
  #sessionChecks: CheckResult[] = [];
  #log: ConsoleLog;
  #transcript: Transcript | undefined;

  constructor(options: BoardRunOptions) {
    this.#options = options;
    this.#timeouts = timeoutsFor(options.config, options.timeouts);
    const { config } = options;
    this.report = {
      name: config.name,
      kind: isNetworkBoard(config)
        ? 'network'
        : config.port?.startsWith('virtual:')
          ? 'virtual'
          : 'serial',
      ...(config.chip ? { chip: config.chip } : {}),
      ...(config.variant ? { variant: config.variant } : {}),
      ...(options.firmware ? { expectedVersion: options.firmware.version } : {}),
      status: 'passed',
      steps: [],
      checks: [],
      latency: [],
      startedAt: new Date().toISOString(),
      durationMs: 0,
    };
    this.#log = new ConsoleLog(join(options.outDir, config.name, 'console.log'));
    this.report.consoleLog = `${config.name}/console.log`;
    this.report.transcript = `${config.name}/transcript.jsonl`;
    options.signal.addEventListener('abort', () => this.#abort.abort(options.signal.reason), {
      once: true,
    });
  }

  get #signal(): AbortSignal {
    return this.#abort.signal;
  }

  async run(): Promise<BoardReport> {
    const started = performance.now();
    const { server } = this.#options;
    this.#transcript = new Transcript(
      join(this.#options.outDir, this.#options.config.name, 'transcript.jsonl'),
      server.registry,
      () => this.#deviceId,
    );
    try {
      // A board without a serial port is met at its OTA check; the serial steps are skipped.
      const booted = isNetworkBoard(this.#options.config)
        ? this.#skipSerialSteps()
        : await this.#bringUpOverSerial();
      const ota = await this.#step('ota-check', async () => {
        if (booted === undefined) {
          this.#offerTransport();
          this.#options.networkBoard?.start();
        }
        const check =
          booted === undefined
            ? await this.#waitForNetworkBoard()
            : (booted.check ?? (await this.#waitForOtaCheck(booted)));
        this.#options.claims?.claim(check.deviceId);
        this.#deviceId = check.deviceId;
        this.report.mac = check.deviceId;
        this.report.otaRequest = check.body;
        return {
          result: check,
          note: `${check.board ?? '?'} ${check.version} checked at our endpoint${this.#sessionStart().style === 'mqtt' ? '; given our MQTT broker' : ''}`,
        };
      });
      const record = await this.#step('session', async () => {
        try {
          const opened = await this.#startSession(ota.deviceId, this.#timeouts.sessionMs);
          const failed = this.#sessionChecks.filter((c) => c.status === 'failed');
          const mqtt = opened.transport === 'mqtt' ? 'on MQTT with no click, ' : '';
          // The session opened, but the step is as good as its checks, as the suites step is.
          return {
            result: opened,
            note: `${mqtt}initialized, tools listed${failed.length > 0 ? `; ${failed.length} session check(s) failed` : ''}`,
            ...(failed[0] === undefined ? {} : { failedCheck: failed[0].id }),
          };
        } finally {
          // The session suite's checks, whatever happened (none when a crash or Ctrl-C came first).
          if (!this.#signal.aborted) this.#recordChecks(this.#sessionChecks.splice(0));
        }
      });
      this.report.firmwareVersion = record.initialize?.serverInfo.version ?? record.version;
      this.report.variant ??= record.initialize?.serverInfo.name;
      this.#noteBoard();
      // What `hil compare` diffs between builds (docs/ci.md §1): the tool list and the pages.
      this.report.tools = record.tools.map(({ name, description, inputSchema, userOnly }) => ({
        name,
        description,
        inputSchema,
        userOnly,
      }));
      const sizes = (pages: readonly PageReport[]) =>
        pages.map((page) => ({ tools: page.toolCount, bytes: page.budgetBytes }));
      this.report.pages = {
        plain: sizes(record.pages.plain),
        withUserTools: sizes(record.pages.withUserTools),
      };
      await this.#step('suites', async () => {
        const before = this.report.checks.length;
        await this.#runSuites(ota.deviceId);
        // The suites' own checks: the session's are the session step's.
        const checks = this.report.checks.slice(before);
        const failed = checks.filter((c) => c.status === 'failed');
        // The step is as good as its checks: failed, naming the first failure (not the rig's).
        return {
          note: `${checks.length} checks, ${failed.length} failed${failed[0] === undefined ? '' : `, the first ${failed[0].id}`}`,
          ...(failed[0] === undefined ? {} : { failedCheck: failed[0].id }),
        };
      });
      if (this.report.checks.some((c) => c.status === 'failed')) this.report.status = 'failed';
    } catch (error) {
      const step = error instanceof StepFailure ? error.step : 'suites';
      const kind = error instanceof StepFailure ? error.kind : 'rig';
      const reason = error instanceof Error ? error.message : String(error);
      if (this.#options.signal.aborted) {
        // Ctrl-C: the board's verdict is unknown, not a rig failure.
        this.report.status = 'interrupted';
        this.report.failure = { step, reason: 'interrupted by Ctrl-C' };
      } else if (kind === 'check') {
        // A named check failed and the board could not go on: exit 1, and the checks say why.
        this.report.status = 'failed';
        this.#skip('suites', `not run: ${reason}`);
      } else if (kind === 'refused') {
        // The build cannot go on this board (exit 2): nothing was written to it.
        this.report.status = 'failed';
        this.report.failure = { step, reason, refused: true };
      } else {
        this.report.status = kind === 'board' ? 'failed' : 'rig-failed';
        this.report.failure = { step, reason };
      }
    } finally {
      // A suite that changed what the board runs (ota-upgrade): the version it reported last.
      const last =
        this.#deviceId === undefined
          ? undefined
          : server.registry.get(this.#deviceId)?.initialize?.serverInfo.version;
      if (
        last !== undefined &&
        this.report.firmwareVersion !== undefined &&
        last !== this.report.firmwareVersion
      )
        this.report.upgradedVersion = last;
      // Before the transcript closes: a session that failed its checks still reached a session.
      this.#noteBoard();
      await this.#close();
      this.#writeReplica();
      this.report.durationMs = performance.now() - started;
    }
    return this.report;
  }

  /** Whether the board's identity note is in the transcript. */
  #boardNoted = false;

  /**
   * The board's identity as the rig knows it once a session opened, for the transcript (so a
   * replica can be rebuilt from the transcript alone) and the replica: no secrets, only what the
   * board says of itself (initialize, its OTA check) or the chip said at identify.
   */
  #identity(): Partial<ReplicaFile['board']> {
    const body = this.report.otaRequest;
    const flashSize = typeof body?.flash_size === 'number' ? body.flash_size : undefined;
    const chipModel = typeof body?.chip_model_name === 'string' ? body.chip_model_name : undefined;
    const chip = this.report.chip ?? chipModel ?? this.#options.config.chip;
    const flashSizeMb =
      flashSize === undefined
        ? this.#options.config.virtual?.flashSizeMb
        : Math.round(flashSize / (1024 * 1024));
    return {
      ...(this.report.variant === undefined ? {} : { variant: this.report.variant }),
      ...(this.report.firmwareVersion === undefined
        ? {}
        : { firmwareVersion: this.report.firmwareVersion }),
      ...(chip === undefined ? {} : { chip: chip.toLowerCase().replace(/-/g, '') }),
      ...(flashSizeMb === undefined ? {} : { flashSizeMb }),
      ...(this.report.mac === undefined ? {} : { mac: this.report.mac.toLowerCase() }),
    };
  }

  /** The `board` note, once, when the board reached a session. */
  #noteBoard(): void {
    const transcript = this.#transcript;
    if (this.#boardNoted || transcript === undefined || transcript.sessions === 0) return;
    this.#boardNoted = true;
    transcript.note('board', this.#identity());
  }

  /**
   * `<board>/replica.json` beside the transcript, for a board that reached a session: the board
   * as it was recorded, which `virtual.replica` and `xiaozhi-mcp sim --replica` run anywhere. A
   * replica that cannot be built is said, and changes no verdict.
   */
  #writeReplica(): void {
    const transcript = this.#transcript;
    if (transcript === undefined || transcript.sessions === 0) return;
    const name = this.#options.config.name;
    try {
      const replica = replicaFromTranscript(
        readFileSync(transcript.path, 'utf8'),
        this.#identity(),
      );
      writeFileSync(join(this.#options.outDir, name, 'replica.json'), formatReplica(replica));
      this.report.replica = `${name}/replica.json`;
    } catch (error) {
      this.#options.reporter.log(
        name,
        `no replica.json: ${error instanceof Error ? error.message : String(error)}`,
      );
    }
  }

  /**
   * open → identify/flash/provision → reset (the console opened, the board reset) → boot;
   * resolves what tells this board's OTA check: the Client-Id its console printed, its MAC,
   * or the check itself when that is what showed it booted.
   */
  async #bringUpOverSerial(): Promise<BootEvidence> {
    const port = await this.#step('open', async () => {
      const opened = await this.#options.port();
      this.report.port =
        opened.provider === undefined ? opened.path : `${opened.label} (${opened.path})`;
      return {
        result: opened,
        note: opened.info.serialNumber ? `serial ${opened.info.serialNumber}` : opened.path,
      };
    });
    this.#port = port;
    await this.#flashAndProvision(port);
    await this.#step('reset', async () => {
      const none = this.#options.config.reset === 'none';
      // Nobody to press RESET: said at once, not after the boot wait runs out.
      if (none) this.#requireHand('run');
      // Before the board boots and checks OTA: our reply must already offer its transport.
      this.#offerTransport();
      // Opened before the reset, so the whole boot log is captured where the port allows.
      const opened = await this.#openConsole(port);
      const console =
        opened.refinds === 0
          ? `console on ${opened.path}`
          : `console found again on ${opened.path}`;
      this.#booting = true;
      if (none) return { note: `${console}; ${this.#pressReset('run')}` };
      // A hard reset through the console port.
      await runLineSteps(await this.#lines(), RESET_SEQUENCES.hard, { signal: this.#signal });
      return { note: `${console}; EN pulsed through RTS` };
    });
    const booted = await this.#step('boot', async () => {
      try {
        const evidence = await this.#bootEvidence();
        return { result: evidence, note: evidence.note };
      } finally {
        this.#booting = false;
      }
    });
    this.#options.claims?.claim(this.report.mac);
    this.#options.claims?.claim(booted.clientId);
    return booted;
  }

  /**
   * What shows the board booted, whichever comes first (a USB-Serial-JTAG console loses what the
   * board prints while the port is closed, as it is while the board re-enumerates after a reset,
   * so the early lines may never arrive): its `app_init` line, its later `Board:` line, or its
   * OTA check at our endpoint (by its MAC, with the version it runs). A panic or a boot loop on
   * the console fails at once. After the app line, the Client-Id that tells its OTA check is
   * waited for (its Board line, or the check), unless its MAC already does.
   */
  async #bootEvidence(): Promise<BootEvidence & { note: string }> {
    const bootMs = this.#timeouts.bootMs;
    const mac = this.#knownMac();
    const first = await this.#bootSign(BOOT_LINE, mac, bootMs, { appLines: true });
    // An app line after the console came back: its OTA check may be in already, the better
    // sign, since it tells the check apart.
    const check =
      first.check ??
      (first.appLine !== undefined && mac !== undefined ? this.#checkSince({ mac }) : undefined);
    if (check !== undefined)
      return this.#bootByCheck(
        check,
        'its OTA check at our endpoint, the first sign (no boot line on the console before it: a USB-Serial-JTAG console loses what the board prints while the port is closed)',
      );
    if (first.appLine !== undefined)
      return {
        ...(mac === undefined ? {} : { mac }),
        note: `booted: ${JSON.stringify(first.appLine.line)} on its console, the first line of the app since the console came back (a USB-Serial-JTAG console loses what the board prints while the port is closed)`,
      };
    const line = first.line;
    const board = line?.match[3];
    if (line !== undefined && board !== undefined) {
      return {
        ...(line.match[2] === undefined ? {} : { clientId: line.match[2] }),
        ...(mac === undefined ? {} : { mac }),
        note: `booted (${board}): its Board line on the console, the first sign (no app_init line before it)`,
      };
    }
    const running = line?.match[1] ?? '?';
    // The app line is in: the Client-Id (or the check) tells this boot's OTA check apart.
    const next = await this.#bootSign(BOARD_LINE, mac, bootMs).catch((error: unknown) => {
      // Its MAC tells its OTA check too: the Board line is not needed.
      if (mac !== undefined && (error as { code?: string }).code === 'EXPECT_TIMEOUT')
        return undefined;
      throw error;
    });
    const by = 'its app_init line on the console';
    if (next?.check !== undefined) return this.#bootByCheck(next.check, by, running);
    return {
      ...(next?.line?.match[1] === undefined ? {} : { clientId: next.line.match[1] }),
      ...(mac === undefined ? {} : { mac }),
      note: `runs ${running} (${next?.line?.match[2] ?? '?'}): ${by}`,
    };
  }

  #bootByCheck(
    check: OtaCheckRecord,
    by: string,
    running = check.version,
  ): BootEvidence & { note: string } {
    return {
      clientId: check.clientId,
      mac: check.deviceId.toLowerCase(),
      check,
      note: `runs ${running} (${check.board ?? '?'}): ${by}`,
    };
  }

  /**
   * The first of: a console line matching `pattern`, or this board's OTA check since the reset
   * (when its MAC is known). Bounded by `ms`; the loser is let go.
   */
  async #bootSign(
    pattern: RegExp,
    mac: string | undefined,
    ms: number,
    options: { readonly appLines?: boolean } = {},
  ): Promise<{ line?: ExpectMatch; appLine?: ExpectMatch; check?: OtaCheckRecord }> {
    const stop = new AbortController();
    const console = this.#requireConsole()
      .expect(pattern, { timeoutMs: ms, forbidden: ['panic', 'boot-loop'], signal: stop.signal })
      .then((line) => ({ line }));
    const ota =
      mac === undefined
        ? new Promise<never>(() => {})
        : this.#otaCheck({ mac }, { signal: stop.signal }).then((check) => ({ check }));
    // Any line of the app tells that it runs, once its first lines are known lost; its MAC
    // (not a Board line) then tells its OTA check.
    const app =
      options.appLines === true && mac !== undefined
        ? this.#appLineSinceReturn(stop.signal).then((appLine) => ({ appLine }))
        : new Promise<never>(() => {});
    try {
      return await Promise.race([console, ota, app]);
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (code !== 'EXPECT_TIMEOUT') throw error;
      const endpoint = this.#options.server.urls.ota;
      const checks = mac === undefined ? '' : ` and no OTA check from ${mac} at ${endpoint}`;
      throw Object.assign(
        new Error(
          `no sign that ${this.report.name} booted within ${ms / 1000} s: no ${pattern === BOARD_LINE ? 'Board line' : 'boot line'} on its console${checks}; ${this.#lastSeen({ ...(mac === undefined ? {} : { mac }) })}`,
        ),
        { code },
      );
    } finally {
      stop.abort(new Error('another sign came first'));
      console.catch(() => {});
      ota.catch(() => {});
      app.catch(() => {});
    }
  }

  /**
   * The first line of the app the console shows once it came back from an outage that began
   * after the reset (what the board printed before is lost); never, without such an outage.
   * Unbounded: the boot step's own wait bounds it.
   */
  #appLineSinceReturn(signal: AbortSignal): Promise<ExpectMatch> {
    return new Promise<ExpectMatch>((resolve, reject) => {
      const expectLine = () => {
        this.#onConsoleBack.delete(onBack);
        this.#requireConsole()
          .expect(APP_LOG_LINE, {
            timeoutMs: this.#timeouts.bootMs,
            forbidden: ['panic', 'boot-loop'],
            signal,
          })
          .then(resolve, reject);
      };
      const onBack = () => {
        if (this.#backSinceReset) expectLine();
      };
      if (this.#backSinceReset) return expectLine();
      this.#onConsoleBack.add(onBack);
      signal.addEventListener(
        'abort',
        () => {
          this.#onConsoleBack.delete(onBack);
          reject(signal.reason);
        },
        { once: true },
      );
    });
  }

  /**
   * What the rig saw of the board last, for a wait that ran out: its console's last line (and
   * whether the console is away), and its last OTA check at our endpoint.
   */
  #lastSeen(by: { readonly clientId?: string; readonly mac?: string }): string {
    const line = this.#console?.lines.at(-1);
    const outage = this.#outage;
    const away =
      outage !== undefined && outage.backAt === undefined
        ? ` (the console has been away since ${outage.lostAt})`
        : '';
    const mine = (check: OtaCheckRecord) =>
      (by.mac !== undefined && check.deviceId.toLowerCase() === by.mac) ||
      (by.clientId !== undefined && check.clientId === by.clientId);
    const last =
      by.mac === undefined && by.clientId === undefined
        ? undefined
        : this.#options.server.registry.otaChecks().filter(mine).at(-1);
    const since = this.#otaSince;
    const check =
      last === undefined
        ? 'none'
        : `${last.version} at ${last.at}${since !== undefined && last.at < since ? ', before this run reset it' : ''}`;
    return `last console line: ${line === undefined ? 'none' : JSON.stringify(line)}${away}; the board's last OTA check: ${check}`;
  }

  /** The board's MAC, where it is known before its OTA check (see {@link #offerTransport}). */
  #knownMac(): string | undefined {
    const kind = this.#port?.info.kind;
    return (
      this.report.mac?.toLowerCase() ??
      (kind === 'usb-serial-jtag' ? macOfSerialNumber(this.#port?.info.serialNumber) : undefined) ??
      this.#options.config.deviceId?.toLowerCase()
    );
  }

  /**
   * Whoever can press this board's buttons: the virtual rig's hand, or a person at the terminal.
   * Unattended (CI, no TTY), a board that must be reset by hand to run fails at once.
   */
  #requireHand(why: 'download' | 'run'): void {
    if (this.#port?.pressReset !== undefined || this.#options.attended === true) return;
    const press =
      why === 'download'
        ? `hold BOOT and press RESET on ${this.report.name}`
        : `press RESET on ${this.report.name}`;
    throw new Error(
      `${press}: reset is none, and nobody is at a terminal to press it (no TTY, or CI): run hil where someone can press the board's buttons when asked, or give the board a reset the rig can play through its lines (reset: classic, tight or usb-jtag)`,
    );
  }

  /**
   * Asks for the board's buttons (`reset: none`: no line is touched): RESET with BOOT held to
   * put it into its serial bootloader, or RESET to run its firmware. The virtual rig's hand
   * presses them; a person is asked through the console. Says what happened.
   */
  #pressReset(why: 'download' | 'run'): string {
    const { reporter } = this.#options;
    const press = this.#port?.pressReset;
    const ask =
      why === 'download'
        ? `hold BOOT and press RESET on ${this.report.name}, then let go of BOOT: reset is none, so the flasher does not reset it into its bootloader`
        : `press RESET on ${this.report.name}: reset is none, so the rig does not reset it through its lines`;
    if (press !== undefined) {
      reporter.log(this.report.name, `${ask} (the virtual rig's operator presses it)`);
      press({ boot: why === 'download' });
      return why === 'download'
        ? 'BOOT held and RESET pressed by hand'
        : 'RESET pressed by hand; no line touched';
    }
    // A person at the terminal (#requireHand saw to it).
    reporter.log(this.report.name, ask);
    return why === 'download'
      ? 'asked to hold BOOT and press RESET'
      : 'asked to press RESET; no line touched';
  }

  /** A board without port: nothing to open, flash, reset or read; it is met at its OTA check. */
  #skipSerialSteps(): undefined {
    const why = 'no serial port: the board is reached over the network only';
    this.#skip('open', why);
    this.#skip(
      'flash',
      `${why}${this.#options.firmware ? ' (flash it by other means; initialize still expects its version)' : ''}`,
    );
    this.#skip('provision', `${why}: point its OTA URL at ${this.#options.server.urls.ota}`);
    this.#skip('reset', why);
    this.#skip('boot', `${why}: no console to follow`);
    return undefined;
  }

  /** Stops this board's run, e.g. when its port vanished. */
  fail(reason: string): void {
    this.#abort.abort(new Error(reason));
  }

  async #step<T>(
    name: RigStepName,
    body: () => Promise<{ result?: T; note?: string; flaky?: boolean; failedCheck?: string }>,
  ): Promise<T> {
    const step: RigStep = { step: name, status: 'passed', durationMs: 0 };
    this.report.steps.push(step);
    this.#options.reporter.boardStep(this.report.name, name, 'running');
    this.#transcript?.note('step', { step: name });
    const started = performance.now();
    try {
      if (this.#signal.aborted) throw this.#signal.reason;
      const outcome = await raced(body(), this.#signal);
      // A step is not done while its board's port is still being looked for: if the board
      // never comes back, the step fails as the rig's (port lost), not as the board's checks.
      if (this.#refinding !== undefined) await raced(this.#refinding, this.#signal);
      step.durationMs = performance.now() - started;
      if (outcome.note !== undefined) step.message = outcome.note;
      if (outcome.flaky) step.flaky = true;
      // The step ran to its end but a check of it failed: the run goes on, the step is failed.
      if (outcome.failedCheck !== undefined) {
        step.status = 'failed';
        step.check = outcome.failedCheck;
      }
      this.#options.reporter.boardStep(this.report.name, name, step.status, outcome.note, {
        durationMs: step.durationMs,
        flaky: outcome.flaky === true,
      });
      return outcome.result as T;
    } catch (error) {
      step.durationMs = performance.now() - started;
      const interrupted = this.#options.signal.aborted;
      step.status = interrupted ? 'interrupted' : 'failed';
      step.message = interrupted
        ? 'interrupted by Ctrl-C'
        : error instanceof Error
          ? error.message
          : String(error);
      if (error instanceof SessionChecksFailed && !interrupted)
        step.check = error.checks[0]?.id ?? 'session';
      this.#options.reporter.boardStep(this.report.name, name, step.status, step.message, {
        durationMs: step.durationMs,
      });
      const crashed =
        error instanceof BoardCrash || (error as { code?: string }).code === 'EXPECT_FORBIDDEN';
      throw new StepFailure(
        name,
        step.message,
        interrupted
          ? 'interrupted'
          : crashed
            ? 'board'
            : error instanceof SessionChecksFailed
              ? 'check'
              : error instanceof SerialError && error.code === 'WRITE_REFUSED'
                ? 'refused'
                : 'rig',
      );
    }
  }

  #skip(name: RigStepName, why: string): void {
    this.report.steps.push({ step: name, status: 'skipped', durationMs: 0, message: why });
    this.#options.reporter.boardStep(this.report.name, name, 'skipped', why);
  }

  async #flashAndProvision(port: ResolvedPort): Promise<void> {
    const { firmware, provision, config, server } = this.#options;
    if (firmware === undefined && provision === undefined) {
      this.#skip('flash', 'no --firmware');
      this.#skip('provision', 'no --provision');
      return;
    }
    const flasher = flasherFor(port, {
      log: (line) => this.#log.append(`[esptool] ${line}\n`),
      // An RFC 2217 port writes RTS, then DTR (resolve.ts `linePlatform`): esptool's classic reset.
      ...(port.linePlatform === undefined ? {} : { platform: port.linePlatform }),
      // The inventory's reset strategy; unset, the port's own (serial's reset/plan.ts `resetPlan`).
      ...(config.reset === undefined ? {} : { reset: config.reset }),
    });
    // The inventory's baud ladder (`flashBauds`), else `flashBaud` and the rungs below it
    // (serial's flash-timing.ts `flashBaudLadder`).
    const ladder =
      config.flashBauds === undefined
        ? { baudRate: config.flashBaud ?? 921_600 }
        : {
            baudRates: config.flashBauds,
            ...(config.flashBaud === undefined ? {} : { baudRate: config.flashBaud }),
          };
    try {
      const chip = await this.#step('identify', async () => {
        // reset none: the flasher plays no reset, so a hand puts the board into its bootloader.
        if (config.reset === 'none') this.#requireHand('download');
        const hand = config.reset === 'none' ? `${this.#pressReset('download')}; ` : '';
        const connected = await flasher.connect();
        this.report.chip = connected.chip;
        this.report.mac = connected.mac;
        return {
          result: connected,
          note: `${hand}${connected.description}, MAC ${connected.mac}`,
        };
      });
      // What the flash step wrote, MD5-verified: the board's flash holds these bytes there.
      let written: FlashedBytes | undefined;
      if (firmware !== undefined) {
        await this.#step('flash', async () => {
          let last = -1;
          const result = await flashImage(flasher, chip, firmware.image, {
            ...ladder,
            ...(config.chip ? { expectedChip: config.chip } : {}),
            reset: false,
            onProgress: (progress: FlashProgress) => {
              const decile = Math.floor(progress.percent / 10);
              if (decile !== last) {
                last = decile;
                this.#options.reporter.log(
                  this.report.name,
                  `flash ${Math.round(progress.percent)}%`,
                );
              }
            },
          });
          written = { offset: result.offset, data: firmware.image.data };
          const size =
            result.bytes >= 1024 * 1024
              ? `${(result.bytes / 1024 / 1024).toFixed(1)} MB`
              : `${Math.round(result.bytes / 1024)} KB`;
          return {
            note: `${size} at ${result.baudRate} baud, MD5 verified${result.flaky ? ` (retried: ${result.firstError ?? ''})` : ''}`,
            flaky: result.flaky,
          };
        });
      } else {
        this.#skip('flash', 'no --firmware');
      }
      if (provision !== undefined) {
        await this.#step('provision', async () => {
          // Where the flash step just wrote (a merged image holds the partition table and the
          // NVS partition), its bytes are what a read would bring back: not read again over the
          // wire. Encrypted flash is read back: what it holds is not the bytes written.
          const known = chip.security.flashEncryption ? undefined : written;
          const result = await provisionBoard(
            {
              readPartitionTable: async () =>
                readPartitionTableFrom(known) ?? flasher.readPartitionTable(),
              readFlash: async (offset, size) =>
                bytesWritten(known, offset, size) ?? flasher.readFlash(offset, size),
              flash: (parts) => flasher.flash(parts, { reset: false, ...ladder }),
            },
            { ssid: provision.ssid, password: provision.password, otaUrl: server.urls.ota },
          );
          return {
            note: `nvs at 0x${result.partition.offset.toString(16)}: wifi ${provision.ssid}, ota_url ${server.urls.ota}`,
          };
        });
      } else {
        this.#skip('provision', 'no --provision');
      }
    } finally {
      // The stub stays until the reset step pulses EN with the console open. With reset none,
      // the flasher's own after-write step: esptool's `--after no_reset`, back to the ROM
      // loader with no line touched, until a hand presses RESET.
      await flasher.disconnect(config.reset === 'none' ? { reset: true } : {}).catch(() => {});
    }
  }

  /**
   * Opens the board's console where its port was last, or wherever it is found again by its
   * identity (a native-USB board re-enumerates), retrying a port that is busy, not yet permitted
   * or not there yet, within `refindMs` (serial's `reopenPort`, as `monitor` and `port serve`
   * follow a board). Fails naming the port, where it was looked for and why it did not open.
   */
  async #openConsole(port: ResolvedPort): Promise<{ path: string; refinds: number }> {
    const console = new ConsoleExpect({ logPath: this.#log.path });
    this.#console = console;
    // A panic at any moment fails the board, naming the step it happened in and the crash.
    const splitter = new ConsoleLineSplitter();
    const panics = new PanicDetector({
      onReport: (panic) => {
        const where =
          panic.backtrace.length > 0 ? ` (backtrace ${panic.backtrace.slice(0, 4).join(' ')})` : '';
        this.#abort.abort(new BoardCrash(`expected no panic, got one: ${panic.reason}${where}`));
      },
    });
    const feed = (chunk: Buffer) => {
      this.#log.append(chunk);
      console.feed(chunk);
      for (const line of splitter.feed(chunk)) panics.feed(parseConsoleLine(line));
    };
    const refindMs = this.#timeouts.refindMs;
    const path = this.#consolePath ?? port.path;
    try {
      const opened = await reopenPort(port, {
        baudRate: this.#baudRate(),
        withinMs: refindMs,
        path,
        signal: this.#signal,
      });
      this.#attachConsole(port, opened.stream, opened.path, feed);
      return opened;
    } catch (error) {
      if (this.#signal.aborted) throw error;
      throw new Error(
        `the console of ${this.report.name} could not be opened within ${refindMs / 1000} s, at ${path} and wherever ${port.label} was looked for again by its identity: ${error instanceof Error ? error.message : String(error)}`,
      );
    }
  }

  #baudRate(): number {
    return this.#options.config.baud ?? 115_200;
  }

  /**
   * Follows the console at `path`. When the port goes away (a reset re-enumerates a board on
   * native USB under a new path; a cable glitch), the board is looked for again by its identity
   * for a bounded time and the console reopened, so resets, reboots and upgrades are followed;
   * only a board that does not come back fails the run.
   */
  #attachConsole(
    port: ResolvedPort,
    stream: SerialPortStream,
    path: string,
    feed: (chunk: Buffer) => void,
  ): void {
    this.#stream = stream;
    this.#consolePath = path;
    if (path !== port.path) this.report.port = `${port.label} (${path})`;
    stream.on('data', feed);
    const lost = (why: string) => {
      if (this.#stream !== stream || this.#closing) return;
      this.#stream = undefined;
      this.#outage = { lostAt: new Date().toISOString() };
      this.#refinding = this.#refindConsole(port, path, why, feed);
    };
    stream.on('error', (error: Error) => lost(`failed: ${error.message}`));
    stream.on('close', () => lost('closed'));
  }

  async #refindConsole(
    port: ResolvedPort,
    path: string,
    why: string,
    feed: (chunk: Buffer) => void,
  ): Promise<void> {
    const refindMs = this.#timeouts.refindMs;
    this.#log.append(
      `\n--- ${path} ${why}; looking for the board again (${refindMs / 1000} s) ---\n`,
    );
    try {
      const found = await reopenPort(port, {
        baudRate: this.#baudRate(),
        withinMs: refindMs,
        signal: this.#signal,
      });
      if (this.#closing) {
        await closeWithin(found.stream, this.#timeouts.closeMs);
        return;
      }
      // Back during the boot: what the board printed since the reset is lost, and what it
      // prints from here on is the boot's sign (#appLineSinceReturn), not what came before.
      if (this.#booting) {
        this.#console?.discard();
        this.#backSinceReset = true;
      }
      this.#attachConsole(port, found.stream, found.path, feed);
      this.#log.append(`--- reconnected on ${found.path} ---\n`);
      if (this.#outage !== undefined) this.#outage.backAt = new Date().toISOString();
      for (const back of this.#onConsoleBack) back();
    } catch (error) {
      if (this.#signal.aborted || this.#closing) return;
      this.fail(
        `the board's port ${path} vanished (${why}) and did not come back within ${refindMs / 1000} s (${error instanceof Error ? error.message : String(error)}): check the cable and the board's power`,
      );
    } finally {
      this.#refinding = undefined;
    }
  }

  /** The console port's line setter, once the port is (back) open. */
  async #lines(): Promise<ReturnType<typeof lineSetterFor>> {
    await this.#refinding;
    if (this.#stream === undefined) throw new Error('the console port is not open');
    const platform = this.#port?.linePlatform;
    // An RFC 2217 port waits for the server's acknowledgement of each line (up to 3 s).
    return lineSetterFor(this.#stream, platform === undefined ? {} : { platform, timeoutMs: 5000 });
  }

  #requireConsole(): ConsoleExpect {
    if (this.#console === undefined) throw new Error('the console port is not open');
    return this.#console;
  }

  /**
   * A board without port: its OTA check at our endpoint, from the device the inventory names
   * (`deviceId`, `clientId`), else the first device no other board claims.
   */
  #waitForNetworkBoard(): Promise<OtaCheckRecord> {
    const { config, server, reporter, claims } = this.#options;
    const { registry } = server;
    const ota = server.urls.ota;
    const since = this.#otaSince ?? this.report.startedAt;
    const mine = (check: OtaCheckRecord) =>
      check.at >= since && isNetworkBoardCheck(config, check, claims ?? NO_CLAIMS);
    const seen = registry.otaChecks().find(mine);
    if (seen !== undefined) return Promise.resolve(seen);
    const who = networkIdentity(config);
    const seconds = this.#timeouts.otaMs / 1000;
    reporter.log(
      config.name,
      `no serial port: waiting ${seconds} s for the OTA check of ${who} at ${ota}`,
    );
    return new Promise((resolve, reject) => {
      const onCheck = (check: OtaCheckRecord) => {
        if (!mine(check)) return;
        clearTimeout(timer);
        registry.off('ota-check', onCheck);
        resolve(check);
      };
      const timer = setTimeout(() => {
        registry.off('ota-check', onCheck);
        const others = registry
          .otaChecks()
          .filter((c) => c.at >= this.report.startedAt)
          .map((c) => c.deviceId);
        reject(
          new Error(
            `no OTA check from ${config.name} (${who}) at ${ota} within ${seconds} s: point the device at ${ota} (its OTA URL: NVS wifi/ota_url, the build's default, or a simulator's --ota-url) and restart it${others.length > 0 ? `; checks came from ${[...new Set(others)].join(', ')} only` : ''}`,
          ),
        );
      }, this.#timeouts.otaMs);
      registry.on('ota-check', onCheck);
    });
  }

  /**
   * The OTA check this boot made at our endpoint, by the Client-Id the console printed or the
   * board's MAC (its Device-Id).
   */
  #waitForOtaCheck(by: BootEvidence): Promise<OtaCheckRecord> {
    const { otaMs } = this.#timeouts;
    const who = [
      ...(by.clientId === undefined ? [] : [`Client-Id ${by.clientId}`]),
      ...(by.mac === undefined ? [] : [`Device-Id ${by.mac}`]),
    ].join(', ');
    return this.#otaCheck(by, { timeoutMs: otaMs }).catch((error: unknown) => {
      if (!(error instanceof OtaCheckTimeout)) throw error;
      throw new Error(
        `no OTA check from this board (${who}) at ${this.#options.server.urls.ota} within ${otaMs / 1000} s: is the board provisioned with our OTA URL and on a network that reaches it? (--provision); ${this.#lastSeen(by)}`,
      );
    });
  }

  /**
   * This board's OTA check since the rig offered it its transport, by Client-Id or MAC; at once
   * if it came already. Bounded by `timeoutMs` ({@link OtaCheckTimeout}) or let go by `signal`.
   */
  #otaCheck(
    by: { readonly clientId?: string; readonly mac?: string },
    options: { readonly timeoutMs?: number; readonly signal?: AbortSignal } = {},
  ): Promise<OtaCheckRecord> {
    const { registry } = this.#options.server;
    const mine = (check: OtaCheckRecord) => this.#isMine(check, by);
    const seen = this.#checkSince(by);
    if (seen !== undefined) return Promise.resolve(seen);
    const { signal, timeoutMs } = options;
    if (signal?.aborted === true) return Promise.reject(signal.reason);
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        registry.off('ota-check', onCheck);
        signal?.removeEventListener('abort', onAbort);
      };
      const onCheck = (check: OtaCheckRecord) => {
        if (!mine(check)) return;
        done();
        resolve(check);
      };
      const onAbort = () => {
        done();
        reject(signal?.reason);
      };
      const timer =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              done();
              reject(new OtaCheckTimeout());
            }, timeoutMs);
      registry.on('ota-check', onCheck);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Whether `check` is this board's (by Client-Id or MAC), made since the rig offered it its transport. */
  #isMine(
    check: OtaCheckRecord,
    by: { readonly clientId?: string; readonly mac?: string },
  ): boolean {
    const since = this.#otaSince ?? this.report.startedAt;
    return (
      check.at >= since &&
      ((by.clientId !== undefined && check.clientId === by.clientId) ||
        (by.mac !== undefined && check.deviceId.toLowerCase() === by.mac))
    );
  }

  /** This board's first OTA check since the rig offered it its transport, if it came. */
  #checkSince(by: {
    readonly clientId?: string;
    readonly mac?: string;
  }): OtaCheckRecord | undefined {
    return this.#options.server.registry.otaChecks().find((check) => this.#isMine(check, by));
  }

  /**
   * How this board's sessions start (inventory.ts `sessionStartFor`). A BOOT click needs GPIO0
   * behind a USB-UART bridge's auto-reset transistors: on native USB (USB-Serial-JTAG) DTR does
   * not reach GPIO0, so a click would do nothing and the session wait would run out; such a
   * board told to be clicked is prompted for instead, and by default it runs over MQTT.
   */
  #sessionStart(): { style: SessionStart; why?: string } {
    if (this.#style !== undefined) return this.#style;
    const { config } = this.#options;
    const style = sessionStartFor(config, this.#port?.info.kind);
    const native = this.#port?.info.kind === 'usb-serial-jtag' || config.reset === 'usb-jtag';
    if (style === 'boot-click' && native)
      return {
        style: 'manual',
        why: 'this board is on native USB (USB-Serial-JTAG), where DTR cannot press BOOT',
      };
    if (style === 'boot-click' && config.reset === 'none')
      return {
        style: 'manual',
        why: 'its reset is none: the rig touches neither DTR nor RTS, so it does not click BOOT',
      };
    if (style === 'boot-click' && this.#port?.lineControl === 'resets')
      return { style: 'manual', why: RESETS_ONLY_WHY };
    return { style };
  }

  /**
   * Offers the board its transport in our OTA reply before its OTA check (docs/protocol.md §5,
   * §7): MQTT to a board on `mqtt`, WebSocket with the MQTT endpoint blanked to every other, so
   * a board an earlier run left on MQTT comes back to WebSocket. The server offers by MAC: read
   * by the identify step, named by a native USB port as its serial number, or the inventory's
   * `deviceId`. A board on MQTT is watched from here on, so its session's start is seen whole.
   */
  #offerTransport(): void {
    const { config, server, reporter } = this.#options;
    const mac = this.#knownMac();
    let start = this.#sessionStart();
    if (start.style === 'mqtt' && mac === undefined) {
      const what = `its MAC is not known before its OTA check: give its deviceId (aa:bb:cc:dd:ee:ff) in the inventory, or run with --provision or --firmware (the identify step reads it from the chip)`;
      if (config.session === 'mqtt')
        throw new Error(`board ${config.name} cannot be offered MQTT by our OTA reply: ${what}`);
      // On native USB by default: prompted instead, saying what would spare the prompt.
      start = {
        style: 'manual',
        why: `this board is on native USB, where DTR cannot press BOOT, and MQTT needs no press, but ${what}`,
      };
    }
    this.#style = start;
    this.#otaSince = new Date().toISOString();
    // Unknown MAC: the server's own offer, WebSocket, stands.
    if (mac === undefined) return;
    server.setTransport(mac, start.style === 'mqtt' ? 'mqtt' : 'websocket');
    if (start.style !== 'mqtt') return;
    this.#firstWatch?.dispose();
    this.#firstWatch = new SessionWatch(server.registry, mac, SESSION_REPLY_MS, { fresh: true });
    reporter.log(
      config.name,
      `our OTA reply gives ${mac} our MQTT broker (${server.urls.mqtt ?? 'not running'}): its session needs no click`,
    );
  }

  /** A BOOT click the rig can give this board (the `audio` suite's), or why it cannot. */
  #bootButton(): BootButton {
    const { config, reporter } = this.#options;
    const hand = this.#options.networkBoard;
    if (isNetworkBoard(config) && hand !== undefined)
      return {
        press: async () => {
          reporter.log(config.name, 'hil presses BOOT on the replica it runs');
          hand.pressBoot();
        },
      };
    if (isNetworkBoard(config))
      return { unavailable: 'no serial port: nothing here can press its BOOT button' };
    const native = isNativeUsb(config, this.#port?.info.kind);
    const resetsOnly = this.#port?.lineControl === 'resets';
    if (native || config.reset === 'none' || resetsOnly) {
      const press = this.#port?.pressBoot;
      if (press === undefined)
        return {
          unavailable: native
            ? 'it is on native USB (USB-Serial-JTAG), where DTR cannot press BOOT'
            : resetsOnly
              ? RESETS_ONLY_WHY
              : 'its reset is none: the rig touches neither DTR nor RTS',
        };
      return {
        press: async () => {
          reporter.log(config.name, "the virtual rig's operator presses BOOT");
          press();
        },
      };
    }
    return {
      press: async () => runLineSteps(await this.#lines(), BOOT_CLICK, { signal: this.#signal }),
    };
  }

  /**
   * Starts a session the way the inventory says (the first time, or again after the board
   * rebooted): waits until the board is idle, clicks BOOT or prompts for it, and waits until
   * the server has listed the tools.
   */
  async #startSession(deviceId: string, timeoutMs: number, again = false): Promise<DeviceRecord> {
    // Watching from before the click, so the hello and the first frames are seen; a board on
    // MQTT is watched from before its OTA check (#offerTransport).
    const first = again ? undefined : this.#firstWatch;
    this.#firstWatch = undefined;
    const watch = first ?? new SessionWatch(this.#options.server.registry, deviceId);
    try {
      return await this.#openSession(watch, deviceId, timeoutMs, again);
    } finally {
      watch.dispose();
    }
  }

  /**
   * Waits for the session the click (or the prompt) opens, judged by the session suite: ready,
   * or failed at once with the session checks that say why ({@link SessionChecksFailed}). Only
   * no session at all within `timeoutMs` is the rig's failure.
   */
  async #sessionOpened(
    watch: SessionWatch,
    deviceId: string,
    timeoutMs: number,
    again: boolean,
  ): Promise<DeviceRecord> {
    const { server, config } = this.#options;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new Error(
              `device ${deviceId} opened no session within ${timeoutMs / 1000} s${server.registry.get(deviceId)?.lastError ? ` (${server.registry.get(deviceId)?.lastError})` : ''}; ${this.#lastSeen({ mac: deviceId.toLowerCase() })}`,
            ),
          ),
        timeoutMs,
      );
    });
    let observed: SessionObservation;
    try {
      observed = await raced(Promise.race([watch.outcome, timedOut]), this.#signal);
    } finally {
      clearTimeout(timer);
    }
    if (observed.refused !== undefined)
      this.#transcript?.note('hello-refused', {
        text: observed.hello?.text ?? null,
        reason: observed.refused,
      });
    // A board that closed its session may be crashing: its panic report fails it as a crash.
    if (observed.failure?.closed === true)
      await raced(new Promise((resolve) => setTimeout(resolve, PANIC_GRACE_MS)), this.#signal);
    const judged = applyBaseline(
      await judgeSession(observed, {
        name: config.name,
        ...(config.skip ? { skip: config.skip } : {}),
      }),
      this.#options.baseline,
      this.#options.fixedDeviations,
    );
    if (!again) this.#sessionChecks = judged;
    const record = server.registry.get(deviceId);
    if (observed.ready && record?.ready === true) {
      if (record.transport !== undefined) this.report.transport = record.transport;
      return record;
    }
    const why = [
      ...judged.filter((c) => c.status === 'failed'),
      ...judged.filter((c) => c.status === 'known-deviation'),
    ];
    if (why.length > 0) throw new SessionChecksFailed(why);
    throw new Error(
      `device ${deviceId}: the session did not get ready (${observed.failure?.reason ?? 'no reason given'})`,
    );
  }

  async #openSession(
    watch: SessionWatch,
    deviceId: string,
    timeoutMs: number,
    again: boolean,
  ): Promise<DeviceRecord> {
    const { server, reporter } = this.#options;
    const { style, why } = this.#sessionStart();
    const network = isNetworkBoard(this.#options.config);
    // Over MQTT the board connects by itself after its OTA check: no idle to wait for, no click.
    if (style !== 'none' && style !== 'mqtt' && !network) await this.#idle(deviceId, timeoutMs);
    if (style === 'boot-click') {
      await runLineSteps(await this.#lines(), BOOT_CLICK, { signal: this.#signal });
    } else if (style === 'manual') {
      const press = this.#port?.pressBoot;
      const prompt = `${why === undefined ? '' : `${why}: `}press the BOOT button on the board to start a session${again ? ' again' : ''}`;
      reporter.log(
        this.report.name,
        press === undefined ? prompt : `${prompt} (the virtual rig's operator presses it)`,
      );
      press?.();
    }
    if (style === 'mqtt')
      return this.#sessionOpened(watch, deviceId, timeoutMs, again).catch((error: unknown) => {
        if (error instanceof SessionChecksFailed) throw error;
        throw new Error(
          `no MQTT session from ${this.report.name} (${deviceId}) within ${timeoutMs / 1000} s after its OTA check: it was given our MQTT broker ${server.urls.mqtt ?? '(not running)'} but did not connect there (${error instanceof Error ? error.message : String(error)}): can the board reach that address? (--listen with server.publicUrl for boards on the network)`,
        );
      });
    if (!network) return this.#sessionOpened(watch, deviceId, timeoutMs, again);
    return this.#sessionOpened(watch, deviceId, timeoutMs, again).catch((error: unknown) => {
      if (error instanceof SessionChecksFailed) throw error;
      throw new Error(
        `no session from ${this.report.name} (${deviceId}) within ${timeoutMs / 1000} s after its OTA check: it was given our WebSocket URL ${server.urls.websocket} but did not open a session there (${error instanceof Error ? error.message : String(error)}): start a conversation on the device (BOOT, the wake word), or set "session": "manual" to be prompted`,
      );
    });
  }

  /**
   * Waits until the board is idle, so a click or a press starts a session: its `StateMachine:
   * ... -> idle` line, or, where the console was away while the board made its OTA check and
   * came back after it (a native-USB board re-enumerating on reset, whose console loses what it
   * prints meanwhile), that return: the firmware goes idle right after an answered check, and
   * that line was lost with the rest. An OTA check an earlier wait accounted for does not count.
   */
  async #idle(deviceId: string, timeoutMs: number): Promise<void> {
    const record = () => this.#options.server.registry.get(deviceId);
    const missed = (): boolean => {
      const at = record()?.lastOtaCheck?.at;
      const outage = this.#outage;
      return (
        at !== undefined &&
        outage?.backAt !== undefined &&
        (this.#idleCheckAt === undefined || at > this.#idleCheckAt) &&
        outage.lostAt <= at &&
        at <= outage.backAt
      );
    };
    try {
      if (missed()) return;
      const stop = new AbortController();
      let onBack: (() => void) | undefined;
      const back = new Promise<void>((resolve) => {
        onBack = () => {
          if (missed()) resolve();
        };
        this.#onConsoleBack.add(onBack);
      });
      try {
        await Promise.race([
          this.#requireConsole().expect(/StateMachine: State: \S+ -> idle/, {
            timeoutMs,
            forbidden: ['panic', 'boot-loop'],
            signal: stop.signal,
          }),
          back,
        ]);
      } finally {
        stop.abort(new Error('the console came back after the OTA check'));
        if (onBack !== undefined) this.#onConsoleBack.delete(onBack);
      }
    } finally {
      this.#idleCheckAt = record()?.lastOtaCheck?.at;
    }
  }

  async #runSuites(deviceId: string): Promise<void> {
    const { config, server, suites, candidateImage, reporter, latency, baseline } = this.#options;
    const context: SuiteContext = {
      board: {
        name: config.name,
        ...(config.variant ? { variant: config.variant } : {}),
        ...(this.report.expectedVersion ? { expectedVersion: this.report.expectedVersion } : {}),
        ...(config.expectedTools ? { expectedTools: config.expectedTools } : {}),
        ...(config.expectedToolCount === undefined
          ? {}
          : { expectedToolCount: config.expectedToolCount }),
        ...(this.#options.firmware?.image.board
          ? { imageBoard: this.#options.firmware.image.board }
          : {}),
        ...(config.safeTools ? { safeTools: config.safeTools } : {}),
        ...(config.safeToolTimeoutMs === undefined
          ? {}
          : { safeToolTimeoutMs: config.safeToolTimeoutMs }),
        ...(config.skip ? { skip: config.skip } : {}),
      },
      registry: server.registry,
      deviceId,
      session: () => server.registry.session(deviceId),
      record: () => {
        const record = server.registry.get(deviceId);
        if (record === undefined) throw new Error(`device ${deviceId} is not known to the server`);
        return record;
      },
      reconnect: (timeoutMs) => this.#startSession(deviceId, timeoutMs, true),
      // For this board only: another device of its variant checking in here is offered nothing.
      offerFirmware: (image) => {
        offerCandidate(server.firmware, image, {
          config,
          deviceId,
          clientId: server.registry.get(deviceId)?.clientId,
        });
      },
      candidateImage,
      bootButton: this.#bootButton(),
      audioStats: () => server.audioStatsFor(deviceId),
      endAudioSession: () => server.endAudioSession(deviceId),
      serverApi: {
        url: rigApiUrl(server),
        ...(server.config.apiTokens[0] === undefined ? {} : { token: server.config.apiTokens[0] }),
      },
      latency: {
        calls: latency.calls ?? 50,
        warmup: latency.warmup ?? 5,
        tool: latency.tool ?? 'self.get_device_status',
        ...(latency.p50Ms === undefined ? {} : { p50Ms: latency.p50Ms }),
        ...(latency.p99Ms === undefined ? {} : { p99Ms: latency.p99Ms }),
      },
      log: (text) => reporter.log(config.name, text),
      signal: this.#signal,
    };
    for (const name of suites) {
      if (this.#signal.aborted) break;
      // Judged while the session opened (#sessionOpened).
      if (name === 'session') continue;
      const outcome = await raced(SUITES[name].run(context), this.#signal);
      for (const check of applyBaseline(outcome.checks, baseline, this.#options.fixedDeviations)) {
        this.report.checks.push(check);
        reporter.check(config.name, check);
      }
      if (outcome.latency) this.report.latency.push(...outcome.latency);
    }
  }

  /** Checks into the report (after the baseline) and onto the console. */
  #recordChecks(checks: readonly CheckResult[]): void {
    for (const check of checks) {
      this.report.checks.push(check);
      this.#options.reporter.check(this.report.name, check);
    }
  }

  async #close(): Promise<void> {
    this.#closing = true;
    this.#firstWatch?.dispose();
    this.#transcript?.close();
    const stream = this.#stream;
    this.#stream = undefined;
    this.#console?.close('run finished');
    const started = performance.now();
    let message: string | undefined;
    if (stream?.isOpen && !(await closeWithin(stream, this.#timeouts.closeMs)))
      message = `the port did not close within ${this.#timeouts.closeMs} ms; abandoned`;
    this.#port?.dispose();
    this.report.steps.push({
      step: 'close',
      status: 'passed',
      durationMs: performance.now() - started,
      ...(message === undefined ? {} : { message }),
    });
  }
}
