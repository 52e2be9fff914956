/**
 * Token comparison that takes the same time whatever the guess: both sides are hashed to
 * 32 bytes first, so neither a differing byte nor a differing length shows in the timing.
 */
import * as crypto from 'node:crypto';

// One-shot `crypto.hash` (Node 20.12+) where there is one: no Hash object per comparison.
const oneShot = (
  crypto as { hash?: (algorithm: string, data: string, encoding: 'buffer') => Buffer }
).hash;
const digest = (text: string): Buffer =>
  oneShot === undefined
    ? crypto.createHash('sha256').update(text, 'utf8').digest()
    : oneShot('sha256', text, 'buffer');

/** True when `given` is exactly `expected`, compared in constant time. */
export function sameSecret(given: string | undefined, expected: string): boolean {
  if (given === undefined) return false;
  return crypto.timingSafeEqual(digest(given), digest(expected));
}

/** True when `given` is one of `secrets`; every secret is compared, found or not. */
export function oneOfSecrets(given: string | undefined, secrets: readonly string[]): boolean {
  let found = false;
  for (const secret of secrets) found = sameSecret(given, secret) || found;
  return found;
}
