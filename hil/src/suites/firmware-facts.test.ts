/**
 * hil's own firmware facts and page arithmetic, held against the firmware's recorded replies
 * (fixtures/corpus/mcp: the firmware's own MCP server code, byte for byte), not against the
 * protocol core or the virtual board, which are what hil judges.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  CALL_ERRORS,
  methodNotImplemented,
  PAGE_BUDGET_BYTES,
  PAGE_SLACK_BYTES,
  PROTOCOL_VERSION,
  UNKNOWN_CURSOR_MESSAGE,
} from './firmware-facts.js';
import {
  countedBytes,
  pageIsFull,
  schemaProblems,
  splitToolTexts,
  withinBudget,
} from './tools-list.js';

const corpusDir = join(
  resolve(dirname(fileURLToPath(import.meta.url)), '../../..'),
  'fixtures/corpus/mcp',
);

interface Exchange {
  readonly request: string;
  readonly replies: readonly string[];
}

function exchanges(name: string): readonly Exchange[] {
  const file = JSON.parse(readFileSync(join(corpusDir, `${name}.json`), 'utf8')) as {
    exchanges: Exchange[];
  };
  return file.exchanges;
}

/** The one reply to the request with this id. */
function replyTo(name: string, id: number): string {
  const found = exchanges(name).find((e) => (JSON.parse(e.request) as { id?: unknown }).id === id);
  const reply = found?.replies[0];
  if (reply === undefined) throw new Error(`${name}: no reply to id ${id}`);
  return reply;
}

/** An error reply as docs/protocol.md §2 says the firmware writes it. */
function errorReply(id: number, message: string): string {
  return `{"jsonrpc":"2.0","id":${id},"error":{"message":"${message}"}}`;
}

/** The `result` text of a firmware result reply. */
function resultText(reply: string): string {
  const match = /^\{"jsonrpc":"2\.0","id":-?\d+,"result":(.*)\}$/.exec(reply);
  if (match?.[1] === undefined) throw new Error(`not a result reply: ${reply.slice(0, 80)}`);
  return match[1];
}

describe("hil's firmware facts are the firmware's own replies", () => {
  it('tools/call validation messages, byte for byte (call-errors)', () => {
    expect(replyTo('call-errors', 35)).toBe(errorReply(35, CALL_ERRORS.unknownTool('self.nope')));
    expect(replyTo('call-errors', 36)).toBe(errorReply(36, CALL_ERRORS.missingArgument('on')));
    expect(replyTo('call-errors', 38)).toBe(errorReply(38, CALL_ERRORS.missingArgument('on')));
    expect(replyTo('call-errors', 39)).toBe(errorReply(39, CALL_ERRORS.belowMinimum(0)));
    expect(replyTo('call-errors', 40)).toBe(errorReply(40, CALL_ERRORS.aboveMaximum(100)));
    expect(replyTo('call-errors', 42)).toBe(errorReply(42, CALL_ERRORS.missingArgument('volume')));
    expect(replyTo('call-errors', 44)).toBe(errorReply(44, CALL_ERRORS.invalidArguments));
    expect(replyTo('call-errors', 46)).toBe(errorReply(46, CALL_ERRORS.missingParams));
    expect(replyTo('call-errors', 47)).toBe(errorReply(47, CALL_ERRORS.missingName));
  });

  it('an unknown cursor, an unknown method and initialize (list-small, jsonrpc-drops, initialize)', () => {
    expect(replyTo('list-small', 8)).toBe(errorReply(8, UNKNOWN_CURSOR_MESSAGE));
    const unknownMethod = exchanges('jsonrpc-drops')
      .flatMap((e) => e.replies)
      .find((reply) => reply.includes('resources/list'));
    expect(unknownMethod).toMatch(
      new RegExp(
        `^\\{"jsonrpc":"2\\.0","id":\\d+,"error":\\{"message":"${methodNotImplemented('resources/list')}"\\}\\}$`,
      ),
    );
    for (const { replies } of exchanges('initialize')) {
      const result = JSON.parse(resultText(replies[0] ?? '')) as { protocolVersion: unknown };
      expect(result.protocolVersion).toBe(PROTOCOL_VERSION);
    }
  });
});

describe("hil's page arithmetic on the firmware's own pages (list-paging)", () => {
  const pages = exchanges('list-paging')
    .filter(
      (e) =>
        (JSON.parse(e.request) as { params?: { cursor?: string } }).params?.cursor !==
        'self.arm.joint5.move',
    )
    .map((e) => resultText(e.replies[0] ?? ''));

  it('cuts each page into the tools as printed, and counts them as the firmware does', () => {
    expect(pages.length).toBeGreaterThanOrEqual(3);
    for (const page of pages) {
      const texts = splitToolTexts(page);
      const parsed = JSON.parse(page) as { tools: unknown[] };
      expect(texts?.map((t) => JSON.parse(t))).toEqual(parsed.tools);
      // Every page keeps the budget; a full one ends a few bytes short of it.
      const counted = countedBytes(texts ?? []);
      expect(withinBudget(counted)).toBe(true);
      expect(counted + PAGE_SLACK_BYTES).toBeLessThanOrEqual(PAGE_BUDGET_BYTES);
    }
  });

  it('finds every page but the last full, and no room wasted', () => {
    for (const [index, page] of pages.slice(0, -1).entries()) {
      const next = splitToolTexts(pages[index + 1] ?? '')?.[0] ?? '';
      expect(pageIsFull(countedBytes(splitToolTexts(page) ?? []), next)).toBe(true);
    }
    // One tool fewer, and the page would not have been full.
    const first = splitToolTexts(pages[0] ?? '') ?? [];
    expect(pageIsFull(countedBytes(first.slice(0, -1)), first.at(-1) ?? '')).toBe(false);
  });

  it("finds the firmware's tools in the firmware's shape", () => {
    for (const page of pages) {
      for (const tool of (JSON.parse(page) as { tools: Record<string, unknown>[] }).tools) {
        expect(schemaProblems(tool)).toEqual([]);
      }
    }
  });
});
