/**
 * `tools/list` paging as the firmware does it (docs/protocol.md §3.2, `GetToolsList`), and a
 * client-side walker that follows `nextCursor` and checks every page against that rule.
 */
import { printCJson } from './cjson.js';
import { ProtocolError, textForMessage } from './errors.js';
import { byteLength, type Tool } from './tools.js';

/** The firmware's `max_payload_size`. */
export const PAGE_BUDGET_BYTES = 8000;
/** Room the firmware keeps for the page's closing text when it adds a tool. */
export const PAGE_SLACK_BYTES = 30;
const PAGE_OPENING = '{"tools":[';

/** The message of both paging errors; `name` is empty for a cursor that names no tool. */
export function pageSizeErrorMessage(name: string): string {
  return `Failed to add tool ${name} because of payload size limit`;
}

export interface ToolsPageRequest {
  /** Used only when it is a non-empty string; anything else starts from the beginning. */
  readonly cursor?: unknown;
  /** Counts only when it is exactly `true`. */
  readonly withUserTools?: unknown;
  /** The firmware's 8000; another value models a board that pages wrong (tests, fault knobs). */
  readonly budgetBytes?: number | undefined;
}

export type ToolsPage =
  | {
      readonly ok: true;
      /** The `result` text, byte for byte as the firmware sends it. */
      readonly result: string;
      readonly tools: readonly Tool[];
      readonly nextCursor: string | undefined;
    }
  | {
      readonly ok: false;
      /** The error message as the firmware sends it. */
      readonly message: string;
      /** The tool that could not be added; empty for an unknown cursor. */
      readonly toolName: string;
    };

/**
 * Builds one page. The rule, with `text` the page so far: a tool is appended while
 * `bytes(text) + bytes(tool + ",") + 30 <= 8000`; the first tool that does not fit
 * ends the page and becomes `nextCursor`. The cursor is a tool name.
 */
export function buildToolsPage(tools: readonly Tool[], request: ToolsPageRequest = {}): ToolsPage {
  const cursor = typeof request.cursor === 'string' ? request.cursor : '';
  const withUserTools = request.withUserTools === true;
  let index = 0;
  if (cursor !== '') {
    index = tools.findIndex((tool) => tool.name === cursor);
    if (index === -1) index = tools.length;
  }
  let bytes = PAGE_OPENING.length;
  const page: Tool[] = [];
  let nextCursor: string | undefined;
  for (; index < tools.length; index++) {
    const tool = tools[index] as Tool;
    if (tool.userOnly && !withUserTools) continue;
    if (
      bytes + tool.jsonBytes + 1 + PAGE_SLACK_BYTES >
      (request.budgetBytes ?? PAGE_BUDGET_BYTES)
    ) {
      nextCursor = tool.name;
      break;
    }
    page.push(tool);
    bytes += tool.jsonBytes + 1;
  }
  // An empty page is an error, except for a board with no tools at all.
  if (page.length === 0 && tools.length > 0) {
    const toolName = nextCursor ?? '';
    return { ok: false, message: pageSizeErrorMessage(toolName), toolName };
  }
  const body = page.map((tool) => tool.json).join(',');
  // The firmware appends the cursor without escaping it.
  const tail = nextCursor === undefined ? ']}' : `],"nextCursor":"${nextCursor}"}`;
  return { ok: true, result: PAGE_OPENING + body + tail, tools: page, nextCursor };
}

/** Bytes the budget rule counts for a page: the opening and each tool with its comma. */
export function pageBudgetBytes(toolJsons: readonly string[]): number {
  let bytes = PAGE_OPENING.length;
  for (const json of toolJsons) bytes += byteLength(json) + 1;
  return bytes;
}

/** True when the page's tools satisfy the firmware's rule (the last one plus comma and 30 fit). */
export function fitsPageBudget(toolJsons: readonly string[]): boolean {
  return pageBudgetBytes(toolJsons) + PAGE_SLACK_BYTES <= PAGE_BUDGET_BYTES;
}

/** A `tools/list` page as a client receives it. */
export interface ReceivedToolsPage {
  /** The tools, as parsed objects; key order is kept. */
  readonly tools: readonly Record<string, unknown>[];
  readonly nextCursor?: string;
}

/** What the walker asks for; `withUserTools` is present on every page when the walk wants it. */
export interface ToolsListParams {
  cursor?: string;
  withUserTools?: true;
}

export interface PageReport {
  readonly cursor: string | undefined;
  readonly toolCount: number;
  /** Bytes counted by the budget rule, re-serialised the firmware's way. */
  readonly budgetBytes: number;
  readonly withinBudget: boolean;
  /** False when the next page's first tool would have fitted on this page. */
  readonly maximal: boolean | undefined;
}

export interface ToolsWalk {
  readonly tools: readonly Record<string, unknown>[];
  readonly pages: readonly PageReport[];
  /** Human-readable breaches of the firmware's page rule (empty for a firmware-exact device). */
  readonly violations: readonly string[];
}

export interface WalkOptions {
  readonly withUserTools?: boolean;
  /** Stop with `PAGE_LIMIT` after this many pages. Default 64. */
  readonly maxPages?: number;
  /** `throw` stops with `PAGE_BUDGET` at the first breach; `report` (default) collects them. */
  readonly onBudgetViolation?: 'throw' | 'report';
}

/**
 * The firmware's print of each frozen tool seen: a backend that shares the (deeply frozen)
 * pages boards of one build send alike prints each tool once, not once per board.
 */
const printedTools = new WeakMap<object, string>();

/** `printCJson(tool)`; remembered for a frozen tool, which cannot change. */
function toolJson(tool: Record<string, unknown>): string {
  if (!Object.isFrozen(tool)) return printCJson(tool);
  let json = printedTools.get(tool);
  if (json === undefined) {
    json = printCJson(tool);
    printedTools.set(tool, json);
  }
  return json;
}

function toolName(tool: Record<string, unknown>): string {
  return typeof tool.name === 'string' ? tool.name : '';
}

function asReceivedPage(result: unknown, cursor: string | undefined): ReceivedToolsPage {
  const where = `tools/list page at cursor ${JSON.stringify(cursor ?? '')}`;
  if (typeof result !== 'object' || result === null || Array.isArray(result)) {
    throw new ProtocolError('INVALID_PAGE', `${where}: result is not an object`, {
      field: 'result',
    });
  }
  const { tools, nextCursor } = result as { tools?: unknown; nextCursor?: unknown };
  if (
    !Array.isArray(tools) ||
    tools.some((t) => typeof t !== 'object' || t === null || Array.isArray(t))
  ) {
    throw new ProtocolError('INVALID_PAGE', `${where}: result.tools is not an array of objects`, {
      field: 'result.tools',
    });
  }
  if (nextCursor !== undefined && typeof nextCursor !== 'string') {
    throw new ProtocolError('INVALID_PAGE', `${where}: result.nextCursor is not a string`, {
      field: 'result.nextCursor',
    });
  }
  return nextCursor === undefined ? { tools } : { tools, nextCursor };
}

/**
 * Walks every `tools/list` page. `requestPage` sends one request and resolves with its
 * `result`, or rejects (a `WireError` for an error reply). The walk stops with a
 * typed error on an error page (`PAGE_ERROR`), a cursor seen before (`PAGE_LOOP`) or
 * too many pages (`PAGE_LIMIT`). An empty `nextCursor` ends the walk (seed-style servers).
 * A tool object that is frozen is taken as deeply frozen: its print is remembered.
 */
export async function walkToolsPages(
  requestPage: (params: ToolsListParams) => Promise<unknown>,
  options: WalkOptions = {},
): Promise<ToolsWalk> {
  const maxPages = options.maxPages ?? 64;
  const tools: Record<string, unknown>[] = [];
  const pages: PageReport[] = [];
  const violations: string[] = [];
  const seenCursors = new Set<string>();
  const seenTools = new Set<string>();
  let previousBudget: number | undefined;
  let cursor: string | undefined;

  const violate = (message: string) => {
    if (options.onBudgetViolation === 'throw') throw new ProtocolError('PAGE_BUDGET', message);
    violations.push(message);
  };

  for (;;) {
    if (pages.length >= maxPages) {
      throw new ProtocolError('PAGE_LIMIT', `tools/list did not end within ${maxPages} pages`);
    }
    const params: ToolsListParams = {};
    if (cursor !== undefined) params.cursor = cursor;
    if (options.withUserTools === true) params.withUserTools = true;
    let result: unknown;
    try {
      result = await requestPage(params);
    } catch (error) {
      const detail = error instanceof Error ? error.message : textForMessage(error);
      throw new ProtocolError(
        'PAGE_ERROR',
        `tools/list failed at cursor ${JSON.stringify(cursor ?? '')}: ${detail}`,
        { cause: error },
      );
    }
    const page = asReceivedPage(result, cursor);
    const jsons = page.tools.map(toolJson);
    const budgetBytes = pageBudgetBytes(jsons);
    const withinBudget = budgetBytes + PAGE_SLACK_BYTES <= PAGE_BUDGET_BYTES;
    if (!withinBudget) {
      violate(
        `page at cursor ${JSON.stringify(cursor ?? '')} is over budget: ${budgetBytes} + 30 > 8000`,
      );
    }
    // The previous page was maximal only if this page's first tool could not have fitted there.
    const first = jsons[0];
    const previous = pages.at(-1);
    if (previous !== undefined && previousBudget !== undefined && first !== undefined) {
      const maximal = previousBudget + byteLength(first) + 1 + PAGE_SLACK_BYTES > PAGE_BUDGET_BYTES;
      pages[pages.length - 1] = { ...previous, maximal };
      if (!maximal) {
        violate(
          `page at cursor ${JSON.stringify(previous.cursor ?? '')} is not maximal: ${toolName(page.tools[0] ?? {})} would have fitted`,
        );
      }
    }
    for (const tool of page.tools) {
      const name = toolName(tool);
      if (seenTools.has(name)) violate(`tool ${name} is listed twice`);
      seenTools.add(name);
      tools.push(tool);
    }
    const firstName = toolName(page.tools[0] ?? {});
    if (cursor !== undefined && firstName !== cursor) {
      violate(
        `page at cursor ${JSON.stringify(cursor)} starts at ${JSON.stringify(firstName)}, not at the cursor's tool`,
      );
    }
    const last = page.nextCursor === undefined || page.nextCursor === '';
    pages.push({
      cursor,
      toolCount: page.tools.length,
      budgetBytes,
      withinBudget,
      maximal: last ? true : undefined,
    });
    previousBudget = budgetBytes;
    if (last) return { tools, pages, violations };
    const next = page.nextCursor as string;
    if (seenCursors.has(next) || next === cursor || seenTools.has(next)) {
      throw new ProtocolError(
        'PAGE_LOOP',
        `tools/list cursor ${JSON.stringify(next)} was seen before`,
      );
    }
    seenCursors.add(next);
    cursor = next;
  }
}
