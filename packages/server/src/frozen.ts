/**
 * Copies that many devices share (OTA body members, `tools/list` pages) are deeply frozen, so
 * that no holder can change what the others see.
 */
export function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const member of Object.values(value)) deepFreeze(member);
  }
  return value;
}
