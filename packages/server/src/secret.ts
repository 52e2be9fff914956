/**
 * Token comparison that takes the same time whatever the guess: both sides are hashed to
 * 32 bytes first, so neither a differing byte nor a differing length shows in the timing.
 */
import { hash, timingSafeEqual } from 'node:crypto';

const digest = (text: string): Buffer => hash('sha256', text, 'buffer');

/** True when `given` is exactly `expected`, compared in constant time. */
export function sameSecret(given: string | undefined, expected: string): boolean {
  if (given === undefined) return false;
  return timingSafeEqual(digest(given), digest(expected));
}

/** True when `given` is one of `secrets`; every secret is compared, found or not. */
export function oneOfSecrets(given: string | undefined, secrets: readonly string[]): boolean {
  let found = false;
  for (const secret of secrets) found = sameSecret(given, secret) || found;
  return found;
}
