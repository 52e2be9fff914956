/**
 * A replica's `tools/list` pages: produced by the protocol's pager (the one the device SDK
 * pages with) for both walks, and compared with the recorded pages byte for byte.
 */
import {
  buildToolsPage,
  encodeDeviceError,
  encodeDeviceResult,
  parseToolSet,
  type Tool,
} from '@xiaozhi-mcp/protocol';
import { ReplicaError, type ReplicaFile, type ReplicaTool } from './replica-types.js';

/** The replica's tools as the firmware's tool model, in listing order. */
export function replicaTools(tools: readonly ReplicaTool[]): Tool[] {
  return parseToolSet(tools).map((entry) => entry.tool);
}

/** One page of a walk: the page's `result` text, or the error the firmware sends instead. */
export type WalkPage = { readonly result: string } | { readonly error: string };

/**
 * The pages a walk from the first cursor receives: each page's `nextCursor` asked next, until a
 * page has none or the firmware answers an error (a tool too big for a page).
 */
export function walkPages(tools: readonly Tool[], withUserTools: boolean): WalkPage[] {
  const pages: WalkPage[] = [];
  let cursor = '';
  for (;;) {
    const page = buildToolsPage(tools, { cursor, withUserTools });
    if (!page.ok) {
      pages.push({ error: page.message });
      return pages;
    }
    pages.push({ result: page.result });
    if (page.nextCursor === undefined) return pages;
    cursor = page.nextCursor;
  }
}

/** A page as the firmware sends it in reply to request `id`. */
export function pagePayload(page: WalkPage, id: number): string {
  return 'result' in page ? encodeDeviceResult(id, page.result) : encodeDeviceError(id, page.error);
}

/** Both walks as reply payloads, as a walker numbering its requests from `firstId` receives them. */
export function producePages(
  tools: readonly ReplicaTool[],
  firstId = 1,
): { plain: string[]; withUserTools: string[] } {
  const model = replicaTools(tools);
  let id = firstId;
  const plain = walkPages(model, false).map((page) => pagePayload(page, id++));
  const withUserTools = walkPages(model, true).map((page) => pagePayload(page, id++));
  return { plain, withUserTools };
}

const REPLY_ID = /^\{"jsonrpc":"2\.0","id":(-?\d+),/;

function firstDifference(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

function byteOffset(text: string, index: number): number {
  return new TextEncoder().encode(text.slice(0, index)).length;
}

const WHY =
  "the recording came from a firmware whose tools/list paging this toolkit does not model, or from a different tool set than the replica's tools";

/**
 * Checks the recorded pages against the pager: the id is the one the recording's request
 * carried, every other byte must be the firmware's. Throws REPLICA_PAGES_DIFFER naming the
 * first differing page and the byte offset where it parts from the pager's.
 */
export function checkReplicaPages(replica: ReplicaFile, source?: string): void {
  if (replica.pages === undefined) return;
  const model = replicaTools(replica.tools);
  const label = source === undefined ? 'replica' : `replica ${source}`;
  for (const walk of ['plain', 'withUserTools'] as const) {
    const recorded = replica.pages[walk];
    if (recorded.length === 0) continue; // this walk was not recorded
    const expected = walkPages(model, walk === 'withUserTools');
    for (let i = 0; i < Math.max(recorded.length, expected.length); i++) {
      const field = `pages.${walk}[${i}]`;
      const text = recorded[i];
      const page = expected[i];
      if (text === undefined) {
        throw new ReplicaError(
          'REPLICA_PAGES_DIFFER',
          field,
          `${label}: ${field} is missing: the firmware's pager produces ${expected.length} page(s) for the replica's tools, the recording has ${recorded.length}; ${WHY}`,
        );
      }
      if (page === undefined) {
        throw new ReplicaError(
          'REPLICA_PAGES_DIFFER',
          field,
          `${label}: ${field} is one page too many: the firmware's pager ends after ${expected.length} page(s) for the replica's tools; ${WHY}`,
        );
      }
      const id = REPLY_ID.exec(text);
      const want = pagePayload(page, id === null ? 0 : Number(id[1]));
      if (text !== want) {
        const at = firstDifference(text, want);
        throw new ReplicaError(
          'REPLICA_PAGES_DIFFER',
          field,
          `${label}: ${field} differs from the firmware's pager from byte ${byteOffset(text, at)} on (recorded ${JSON.stringify(text.slice(at, at + 40))}, pager ${JSON.stringify(want.slice(at, at + 40))}); ${WHY}`,
        );
      }
    }
  }
}
