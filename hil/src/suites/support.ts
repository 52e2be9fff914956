/**
 * What every suite shares: running checks (with a way to skip one with a reason), request
 * options bound to the run's abort signal, raw exchanges that observe the wire, and reboots.
 */
import {
  type DeviceFrame,
  encodeEnvelope,
  type JsonRpcMessage,
  readDeviceFrame,
  WireError,
} from '@xiaozhi-mcp/protocol';
import type { DeviceSession, RequestOptions } from '@xiaozhi-mcp/server';
import { ServerError } from '@xiaozhi-mcp/server';
import type { CheckResult, SuiteName } from '../model.js';
import { CheckFailure, type CheckSpec, NO_REPLY, runCheck, type SuiteContext } from '../suite.js';

/**
 * Bound on one request to a ready board: a real board answers in milliseconds; 10 s is the
 * firmware's own bound on a peer's hello, the longest it waits for anyone.
 */
export const REPLY_TIMEOUT_MS = 10_000;
/**
 * Bound on a board going down after a reboot request: `Application::Reboot` pauses 1 s before
 * `esp_restart` (3 s after an upgrade); 15 s leaves 12 s to spare.
 */
export const REBOOT_DOWN_TIMEOUT_MS = 15_000;
/**
 * Bound on a board booting, checking OTA and becoming ready again: the rig's OTA check wait
 * (60 s, the firmware's retry schedule) and its session wait (30 s) one after the other.
 */
export const RECONNECT_TIMEOUT_MS = 90_000;

/** Thrown by a check body to report the check as skipped, with the reason. */
export class SkipCheck extends Error {}

export function skip(reason: string): never {
  throw new SkipCheck(reason);
}

/**
 * Sessions whose board stopped answering (a check's request got no reply within its deadline),
 * with the check where it did: later checks of that session are skipped at once instead of each
 * waiting out its own deadline. A new session (after a reboot) starts answered.
 */
const unresponsive = new WeakMap<DeviceSession, string>();

function currentSession(context: SuiteContext): DeviceSession | undefined {
  try {
    return context.session();
  } catch {
    return undefined;
  }
}

/** A check body as `runCheck` takes it. */
type CheckBody = Parameters<typeof runCheck>[2];

/** The checks of one suite run, in order. */
export class SuiteChecks {
  readonly checks: CheckResult[] = [];

  constructor(
    readonly suite: SuiteName,
    readonly context: SuiteContext,
  ) {}

  /** Runs a check through {@link runCheck}; a {@link SkipCheck} makes it `skipped`. */
  async check(spec: CheckSpec, body: CheckBody): Promise<CheckResult> {
    const session = currentSession(this.context);
    const stoppedAt = session === undefined ? undefined : unresponsive.get(session);
    if (stoppedAt !== undefined) {
      const result: CheckResult = {
        id: `${this.suite}.${spec.id}`,
        suite: this.suite,
        description: spec.description,
        severity: spec.severity,
        retries: 0,
        status: 'skipped',
        message: `the board stopped answering at ${stoppedAt}`,
        skippedAfter: stoppedAt,
        durationMs: 0,
      };
      this.checks.push(result);
      return result;
    }
    let skipped: string | undefined;
    const result = await runCheck(
      this.suite,
      spec,
      async () => {
        try {
          return await body();
        } catch (error) {
          if (!(error instanceof SkipCheck)) throw error;
          skipped = error.message;
          return error.message;
        }
      },
      this.context,
    );
    const final: CheckResult =
      skipped === undefined ? result : { ...result, status: 'skipped', message: skipped };
    if (final.status === 'failed' && final.observed === NO_REPLY && session !== undefined)
      unresponsive.set(session, final.id);
    this.checks.push(final);
    return final;
  }
}

export function requestOptions(
  context: SuiteContext,
  timeoutMs: number = REPLY_TIMEOUT_MS,
): RequestOptions {
  return { timeoutMs, signal: context.signal };
}

/** True when the board lists the tool (with or without user tools). */
export function hasTool(context: SuiteContext, name: string): boolean {
  return context.record().tools.some((tool) => tool.name === name);
}

/** The start of a long text, for failure messages. */
export function preview(text: string, max = 300): string {
  return text.length <= max ? text : `${text.slice(0, max)}... (${text.length} chars)`;
}

/** An error as a failure message shows it: the device's text, or the local code and message. */
export function describeError(error: unknown): string {
  if (error instanceof WireError) {
    return `error reply ${JSON.stringify(error.message)}${error.codeless ? ' (no code)' : ` (code ${error.code})`}`;
  }
  if (error instanceof ServerError) return `${error.code}: ${error.message}`;
  return error instanceof Error ? error.message : String(error);
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** An MCP frame the board sent, as read by the protocol core. */
export interface WireReply {
  readonly payloadText: string;
  readonly message: JsonRpcMessage;
}

/** The id of a reply (result or error), if it has one. */
export function replyId(reply: WireReply): number | string | null | undefined {
  const { message } = reply;
  return message.kind === 'result' || message.kind === 'error' ? message.id : undefined;
}

/**
 * Sends payload texts as they are, each in an MCP envelope, and collects every MCP frame the
 * board sends back until `done` accepts one (included). Bounded by `timeoutMs` (the failure
 * names what was `awaited`); a session that closes meanwhile fails at once.
 */
export function exchange(
  session: DeviceSession,
  payloads: readonly string[],
  done: (reply: WireReply) => boolean,
  awaited: string,
  timeoutMs: number = REPLY_TIMEOUT_MS,
): Promise<WireReply[]> {
  return new Promise((resolve, reject) => {
    const replies: WireReply[] = [];
    const finish = (error?: Error) => {
      clearTimeout(timer);
      session.off('frame', onFrame);
      session.off('closed', onClosed);
      if (error === undefined) resolve(replies);
      else reject(error);
    };
    const onFrame = (direction: 'in' | 'out', text: string) => {
      if (direction !== 'in') return;
      const frame: DeviceFrame = readDeviceFrame(text);
      if (frame.kind !== 'mcp') return;
      const reply = { payloadText: frame.payloadText, message: frame.message };
      replies.push(reply);
      if (done(reply)) finish();
    };
    const onClosed = (reason: string) =>
      finish(new CheckFailure(`the board disconnected during the exchange (${reason})`));
    const timer = setTimeout(
      () =>
        finish(
          new CheckFailure(
            `expected ${awaited} within ${timeoutMs} ms, got none${replies.length > 0 ? ` (got ${replies.map((r) => preview(r.payloadText, 120)).join(', ')})` : ''}`,
            undefined,
            undefined,
            NO_REPLY,
          ),
        ),
      timeoutMs,
    );
    session.on('frame', onFrame);
    session.on('closed', onClosed);
    try {
      for (const payload of payloads)
        session.sendRaw(encodeEnvelope(session.info.sessionId, payload));
    } catch (error) {
      finish(error instanceof Error ? error : new Error(String(error)));
    }
  });
}

/** Resolves when the session closes (at once if it has); rejects after `timeoutMs`. */
export function waitForClose(session: DeviceSession, timeoutMs: number): Promise<void> {
  if (session.closed) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const onClosed = () => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      session.off('closed', onClosed);
      reject(
        new CheckFailure(
          `expected the board to disconnect for its reboot, still connected after ${timeoutMs} ms`,
        ),
      );
    }, timeoutMs);
    session.once('closed', onClosed);
  });
}

export const REBOOT_TOOL = 'self.reboot';

/** How a reboot request went: a lost reply is what the firmware does. */
export type RebootOutcome =
  | { readonly via: 'self.reboot'; readonly lost: true }
  | { readonly via: 'self.reboot'; readonly lost: false; readonly actual: string }
  | { readonly via: 'system'; readonly lost: true };

/**
 * Reboots the board: `self.reboot` when it lists it (its reply must be lost: the request
 * rejects with DEVICE_DISCONNECTED), else the `system` reboot message; then waits for the
 * session to close.
 */
export async function requestReboot(context: SuiteContext): Promise<RebootOutcome> {
  const session = context.session();
  if (!hasTool(context, REBOOT_TOOL)) {
    session.sendMessage({ type: 'system', command: 'reboot' });
    await waitForClose(session, REBOOT_DOWN_TIMEOUT_MS);
    return { via: 'system', lost: true };
  }
  const outcome = await session
    .callTool(REBOOT_TOOL, {}, requestOptions(context, REBOOT_DOWN_TIMEOUT_MS))
    .then(
      (result) => ({ lost: false as const, actual: `a result ${JSON.stringify(result)}` }),
      (error: unknown) =>
        error instanceof ServerError && error.code === 'DEVICE_DISCONNECTED'
          ? { lost: true as const }
          : { lost: false as const, actual: describeError(error) },
    );
  return { via: REBOOT_TOOL, ...outcome };
}
