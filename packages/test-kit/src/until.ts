/**
 * A bounded poll: the one way our tests wait for something another process, socket or timer
 * will make true. A fixed sleep is too short on a busy machine and too long on an idle one;
 * `until` returns as soon as the condition holds and, when it never does, fails saying what it
 * waited for and what it saw last, so a timeout on a loaded CI machine reads as a diagnosis.
 */

export interface UntilOptions {
  /** What is waited for, for the error ("the board's OTA check"). */
  readonly what?: string;
  /**
   * The bound. Generous by default: it only matters when the condition never holds, and a busy
   * machine must not turn a slow success into a failure.
   */
  readonly timeoutMs?: number;
  /** Between two looks (default 10 ms). */
  readonly intervalMs?: number;
  /** What the condition saw, for the error when it never held (e.g. the last status). */
  readonly seen?: () => unknown;
  /** Stops waiting at once (the test's own teardown, a peer that exited). */
  readonly signal?: AbortSignal;
}

/** The wait ran out: `what` never held within `timeoutMs`. */
export class UntilTimeout extends Error {
  override readonly name = 'UntilTimeout';
  constructor(
    message: string,
    readonly timeoutMs: number,
  ) {
    super(message);
  }
}

export const DEFAULT_UNTIL_TIMEOUT_MS = 20_000;

/**
 * Resolves with the condition's first truthy value (a found item, `true`), looking every
 * `intervalMs` until `timeoutMs`; a condition that throws is looked at again (the thing is not
 * there yet), and its last error is quoted if the wait runs out.
 */
export async function until<T>(
  condition: () => T | Promise<T>,
  options: UntilOptions = {},
): Promise<NonNullable<Exclude<T, false | 0 | ''>>> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_UNTIL_TIMEOUT_MS;
  const intervalMs = options.intervalMs ?? 10;
  const deadline = performance.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    options.signal?.throwIfAborted();
    try {
      const value = await condition();
      if (value) return value as NonNullable<Exclude<T, false | 0 | ''>>;
      lastError = undefined;
    } catch (error) {
      lastError = error;
    }
    if (performance.now() >= deadline) {
      const parts = [`waited ${timeoutMs} ms for ${options.what ?? 'a condition'}`];
      if (options.seen !== undefined) parts.push(`last seen: ${describe(options.seen())}`);
      if (lastError !== undefined) parts.push(`last error: ${describe(lastError)}`);
      throw new UntilTimeout(parts.join('; '), timeoutMs);
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

function describe(value: unknown): string {
  if (value instanceof Error) return value.message;
  if (typeof value === 'string')
    return JSON.stringify(value.length > 500 ? `${value.slice(-500)}` : value);
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
