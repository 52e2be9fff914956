/**
 * How much the server keeps of what a device sends: text cut to a size that is safe to keep,
 * log and answer with, and JSON no deeper than `JSON.stringify` can safely recurse into.
 */

/** Deepest nesting kept from a device (tool lists, results): JSON Schemas nest a few levels. */
export const MAX_DEVICE_JSON_DEPTH = 32;
/** Longest `lastError` / page violation kept: device text can be as long as a frame. */
const MAX_NOTE_CHARS = 1000;

/**
 * Whether `value` nests at most `limit` objects/arrays deep. Iterative, so any depth is safe to
 * ask about; what passes is then safe for `JSON.stringify`, which recurses.
 */
export function nestsWithin(value: unknown, limit: number): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    const [node, depth] = item;
    if (typeof node !== 'object' || node === null) continue;
    if (depth > limit) return false;
    for (const child of Array.isArray(node) ? node : Object.values(node))
      if (typeof child === 'object' && child !== null) stack.push([child, depth + 1]);
  }
  return true;
}

/** Device text cut to a size that is safe to keep, log and answer with. */
export function clip(text: string, max = MAX_NOTE_CHARS): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length} chars)`;
}
