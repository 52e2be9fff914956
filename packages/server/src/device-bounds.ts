/**
 * How much the server keeps of what a device sends: text cut to a size that is safe to keep,
 * log and answer with, and JSON no deeper than `JSON.stringify` can safely recurse into.
 */

/** Deepest nesting kept from a device (tool lists, results): JSON Schemas nest a few levels. */
export const MAX_DEVICE_JSON_DEPTH = 32;
/** Longest `lastError` / page violation kept: device text can be as long as a frame. */
const MAX_NOTE_CHARS = 1000;

/**
 * Frozen values (the tool pages boards of one build share) found to nest within a limit: the
 * smallest limit each was checked against. A frozen value cannot change, so it is walked once.
 */
const checkedFrozen = new WeakMap<object, number>();

/**
 * Whether `value` nests at most `limit` objects/arrays deep. Iterative, so any depth is safe to
 * ask about; what passes is then safe for `JSON.stringify`, which recurses.
 */
export function nestsWithin(value: unknown, limit: number): boolean {
  if (typeof value !== 'object' || value === null) return true;
  const frozen = Object.isFrozen(value);
  if (frozen && (checkedFrozen.get(value) ?? Number.POSITIVE_INFINITY) <= limit) return true;
  // Two parallel stacks, no tuple per node.
  const nodes: object[] = [value];
  const depths: number[] = [1];
  for (;;) {
    const node = nodes.pop();
    const depth = depths.pop() as number;
    if (node === undefined) break;
    if (depth > limit) return false;
    const children = Array.isArray(node) ? node : Object.values(node);
    for (let i = 0; i < children.length; i++) {
      const child: unknown = children[i];
      if (typeof child === 'object' && child !== null) {
        nodes.push(child);
        depths.push(depth + 1);
      }
    }
  }
  if (frozen) checkedFrozen.set(value, limit);
  return true;
}

/** Device text cut to a size that is safe to keep, log and answer with. */
export function clip(text: string, max = MAX_NOTE_CHARS): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length} chars)`;
}
