/**
 * The contract between the rig and the suites: a suite gets a connected, ready board (its
 * session on our server) and returns check results. Suites never touch serial ports or
 * flashing; the rig does, so the same suites qualify virtual and real boards.
 */
import type {
  AudioSessionStats,
  DeviceRecord,
  DeviceRegistry,
  DeviceSession,
} from '@xiaozhi-mcp/server';
import type { CheckResult, LatencyStats, Severity, SuiteName } from './model.js';

export interface LatencyBudget {
  /** Calls measured after the warm-up (default 50). */
  readonly calls: number;
  readonly warmup: number;
  /** The tool to call: cheap and safe (default `self.get_device_status`). */
  readonly tool: string;
  /** Budgets from the inventory; a percentile over its budget fails the check. */
  readonly p50Ms?: number;
  readonly p99Ms?: number;
}

export interface SuiteBoard {
  readonly name: string;
  /** The board variant expected (`BOARD_NAME`), if the inventory says. */
  readonly variant?: string;
  /** The version inside the flashed image; `initialize` must report it. */
  readonly expectedVersion?: string;
  /** Tools the board must list (names); from the inventory. */
  readonly expectedTools?: readonly string[];
  /** How many tools the board lists with user tools, if the inventory says. */
  readonly expectedToolCount?: number;
  /** The board the flashed image was built for (its board marker), when the run flashed one. */
  readonly imageBoard?: string;
  /** Tools the safe-tools sweep may call (default: a conservative built-in list). */
  readonly safeTools?: readonly string[];
  /** Bound on each call of the safe-tools sweep (default 5 s). */
  readonly safeToolTimeoutMs?: number;
  /** Check ids to skip for this board (e.g. `tools-call.volume-round-trip` on a board without a speaker). */
  readonly skip?: readonly string[];
}

/**
 * A BOOT click the rig can give the board (DTR on a USB-UART bridge, directly or through RFC
 * 2217; the virtual rig's operator), or why it cannot (native USB, no serial port).
 */
export type BootButton = { readonly press: () => Promise<void> } | { readonly unavailable: string };

export interface SuiteContext {
  readonly board: SuiteBoard;
  readonly registry: DeviceRegistry;
  /** The board's Device-Id (lowercase MAC). */
  readonly deviceId: string;
  /** The current session; after a reboot `reconnect` makes a new one. */
  session(): DeviceSession;
  record(): DeviceRecord;
  /**
   * Waits for the board to boot and opens a new session the way the rig does (BOOT click,
   * prompt, or none), then waits until the server has initialised it and listed its tools.
   */
  reconnect(timeoutMs: number): Promise<DeviceRecord>;
  /** Makes the OTA endpoint offer this app image to the board at its next check. */
  offerFirmware(image: Uint8Array): void;
  /** The app image to offer in `ota-upgrade` (the candidate build), if the run has one. */
  readonly candidateImage: Uint8Array | undefined;
  readonly latency: LatencyBudget;
  /** A BOOT click, where the rig can give one (the `audio` suite's). */
  readonly bootButton?: BootButton;
  /** The server's counts of the board's latest UDP audio session (a board on MQTT), if any. */
  audioStats?(): AudioSessionStats | undefined;
  /** Ends the board's open audio session from our side (a goodbye); false when none is open. */
  endAudioSession?(): boolean;
  /**
   * The rig's server's HTTP API as the rig itself reaches it (`http://127.0.0.1:PORT/api` on a
   * wildcard address) and its bearer token: the `bridge` suite's way to the board.
   */
  readonly serverApi?: { readonly url: string; readonly token?: string };
  /** Progress lines for the live console. */
  log(text: string): void;
  readonly signal: AbortSignal;
}

export interface Suite {
  readonly name: SuiteName;
  readonly description: string;
  run(context: SuiteContext): Promise<SuiteOutcome>;
}

export interface SuiteOutcome {
  readonly checks: CheckResult[];
  readonly latency?: LatencyStats[];
}

/**
 * A failed expectation: what was expected and what came back; `observed` is the failure's
 * stable shape, the key a baseline deviation records.
 */
export class CheckFailure extends Error {
  constructor(
    message: string,
    readonly expected?: string,
    readonly actual?: string,
    readonly observed?: string,
  ) {
    super(message);
  }
}

/** The shape of a failure where the board sent no reply within the deadline. */
export const NO_REPLY = 'no reply';

/** Throws a {@link CheckFailure} unless `condition` holds. */
export function expectThat(
  condition: unknown,
  message: string,
  expected?: string,
  actual?: string,
  observed?: string,
): asserts condition {
  if (!condition) throw new CheckFailure(message, expected, actual, observed);
}

export interface CheckSpec {
  readonly id: string;
  readonly description: string;
  readonly severity: Severity;
}

/**
 * Runs one check: its body throws a {@link CheckFailure} (or any error) to fail, returns a note
 * (or nothing) to pass. Timing and error capture are uniform across suites.
 */
export async function runCheck(
  suite: SuiteName,
  spec: CheckSpec,
  body: () => Promise<string | void | { note?: string; data?: Record<string, unknown> }>,
  context?: Pick<SuiteContext, 'board'>,
): Promise<CheckResult> {
  const id = `${suite}.${spec.id}`;
  const started = performance.now();
  const base = { id, suite, description: spec.description, severity: spec.severity, retries: 0 };
  if (context?.board.skip?.includes(id)) {
    return { ...base, status: 'skipped', message: 'skipped by the inventory', durationMs: 0 };
  }
  try {
    const outcome = await body();
    const detail = typeof outcome === 'object' && outcome !== null ? outcome : undefined;
    const note = typeof outcome === 'string' ? outcome : (detail?.note ?? '');
    const data = detail?.data;
    return {
      ...base,
      status: 'passed',
      message: note,
      durationMs: performance.now() - started,
      ...(data ? { data } : {}),
    };
  } catch (error) {
    const failure = error instanceof CheckFailure ? error : undefined;
    // A request that timed out is a board that did not answer, whatever the check expected.
    const timedOut = (error as { code?: unknown } | null)?.code === 'REQUEST_TIMEOUT';
    const observed = failure?.observed ?? (timedOut ? NO_REPLY : undefined);
    return {
      ...base,
      status: 'failed',
      message: error instanceof Error ? error.message : String(error),
      ...(failure?.expected === undefined ? {} : { expected: failure.expected }),
      ...(failure?.actual === undefined ? {} : { actual: failure.actual }),
      ...(observed === undefined ? {} : { observed }),
      durationMs: performance.now() - started,
    };
  }
}
