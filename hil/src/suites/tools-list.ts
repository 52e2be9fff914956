/**
 * `tools/list` (docs/protocol.md §3.2): both walks (plain and with user tools) page by page, then
 * probes of the cursor rules and repeated walks. The judging is hil's own: the walk, the page
 * budget and maximality arithmetic, and the schema rules are written here from docs/protocol.md,
 * with the firmware's numbers and texts from firmware-facts.ts, and measured on the bytes each
 * page travelled in. The protocol core only carries the requests and reads the frames.
 */
import { readDeviceFrame, WireError } from '@xiaozhi-mcp/protocol';
import type { Suite, SuiteContext, SuiteOutcome } from '../suite.js';
import { type CheckSpec, expectThat } from '../suite.js';
import {
  INT32_MAX,
  INT32_MIN,
  PAGE_BUDGET_BYTES,
  PAGE_OPENING,
  PAGE_SLACK_BYTES,
  PROPERTY_KEYS,
  PROPERTY_TYPES,
  TOOL_KEYS,
  UNKNOWN_CURSOR_MESSAGE,
  USER_ONLY_TOOLS,
} from './firmware-facts.js';
import { describeError, isRecord, preview, requestOptions, SuiteChecks, skip } from './support.js';

/** A cursor no board registers as a tool name. */
export const UNKNOWN_CURSOR = 'self.hil.no_such_cursor';
/** A walk that has not ended after this many pages is taken as a loop. */
const MAX_PAGES = 64;

export const TOOLS_LIST_CHECKS = {
  walk: {
    id: 'walk',
    description: 'tools/list walks end cleanly, with and without user tools',
    severity: 'critical',
  },
  pageBudget: {
    id: 'page-budget',
    description: `every page keeps the firmware's budget (text up to the last tool, a comma and ${PAGE_SLACK_BYTES} bytes fit in ${PAGE_BUDGET_BYTES})`,
    severity: 'major',
  },
  pageMaximal: {
    id: 'page-maximal',
    description: "every page but the last is full: the next page's first tool would not fit",
    severity: 'minor',
  },
  cursors: {
    id: 'cursors',
    description:
      'each page starts at the tool its cursor names; cursors advance and never name a tool already listed',
    severity: 'major',
  },
  cursorContinues: {
    id: 'cursor-continues',
    description:
      "a cursor naming the last tool of a page gets a page that starts there and goes on with the next page's tools: nothing is skipped between pages",
    severity: 'major',
  },
  lastPage: {
    id: 'last-page',
    description: 'the last page has no nextCursor key (never "" or null)',
    severity: 'major',
  },
  noDuplicates: {
    id: 'no-duplicates',
    description: 'no tool is listed twice in a walk',
    severity: 'major',
  },
  complete: {
    id: 'complete',
    description: 'every tool of the plain listing is in the listing with user tools',
    severity: 'major',
  },
  userOnly: {
    id: 'user-only',
    description:
      'user-only tools carry annotations.audience=["user"], are listed with user tools, and are absent from plain listings',
    severity: 'major',
  },
  schemas: {
    id: 'schemas',
    description:
      'every tool is in the firmware shape: keys in order, boolean/integer/string properties, ranges, defaults, required',
    severity: 'major',
  },
  unknownCursor: {
    id: 'unknown-cursor',
    description: `a cursor naming no tool gets the error "${UNKNOWN_CURSOR_MESSAGE}", not a page`,
    severity: 'major',
  },
  stable: {
    id: 'stable',
    description:
      "walks repeated give the same tools, the same as the session start's, and as many as the inventory expects",
    severity: 'major',
  },
  expectedTools: {
    id: 'expected-tools',
    description: "the board lists the inventory's expected tools",
    severity: 'critical',
  },
} as const satisfies Record<string, CheckSpec>;

/** What one `tools/list` request asked for. */
interface PageParams {
  cursor?: string;
  withUserTools?: true;
}

/** One page as it travelled. */
interface Page {
  readonly params: PageParams;
  readonly result: Record<string, unknown>;
  /** The page's `result` text exactly as received, when the session saw the frame. */
  readonly resultText: string | undefined;
  readonly tools: readonly Record<string, unknown>[];
  /**
   * Each tool's JSON text: cut from the received bytes when there are any (`exact`), else
   * re-serialised (the same bytes for the firmware's ASCII tool JSON).
   */
  readonly toolTexts: readonly string[];
  readonly exact: boolean;
  /** Undefined when the page has no `nextCursor` key. */
  readonly nextCursor: unknown;
}

interface Walk {
  readonly label: string;
  readonly pages: readonly Page[];
  /** Every tool of every page, in order. */
  readonly tools: readonly Record<string, unknown>[];
  /** Why the walk stopped before a last page, if it did. */
  readonly error: string | undefined;
}

type CompleteWalk = Walk & { readonly error: undefined };

function bytes(text: string): number {
  return Buffer.byteLength(text, 'utf8');
}

/**
 * The JSON text of each element of a page's `tools` array, cut from the page's `result` text
 * as the firmware printed it (`{"tools":[` + tools joined by commas + the tail). Undefined when
 * the text is not in that shape.
 */
export function splitToolTexts(resultText: string): string[] | undefined {
  if (!resultText.startsWith(PAGE_OPENING)) return undefined;
  const texts: string[] = [];
  let i = PAGE_OPENING.length;
  if (resultText[i] === ']') return texts;
  for (;;) {
    const start = i;
    if (resultText[i] !== '{') return undefined;
    let depth = 0;
    let inString = false;
    for (; i < resultText.length; i++) {
      const c = resultText[i];
      if (inString) {
        if (c === '\\') i++;
        else if (c === '"') inString = false;
      } else if (c === '"') inString = true;
      else if (c === '{' || c === '[') depth++;
      else if (c === '}' || c === ']') {
        depth--;
        if (depth === 0) {
          i++;
          break;
        }
      }
    }
    if (depth !== 0) return undefined;
    texts.push(resultText.slice(start, i));
    if (resultText[i] === ',') i++;
    else return resultText[i] === ']' ? texts : undefined;
  }
}

/**
 * docs/protocol.md §3.2: the bytes the firmware counts when it adds a page's tools: the opening
 * text and each tool's JSON with its comma.
 */
export function countedBytes(toolTexts: readonly string[]): number {
  return toolTexts.reduce((sum, text) => sum + bytes(text) + 1, bytes(PAGE_OPENING));
}

/** docs/protocol.md §3.2: the last tool of a page was added only if this held. */
export function withinBudget(counted: number): boolean {
  return counted + PAGE_SLACK_BYTES <= PAGE_BUDGET_BYTES;
}

/** docs/protocol.md §3.2: the page ended because the next tool (`nextText`) did not fit. */
export function pageIsFull(counted: number, nextText: string): boolean {
  return counted + bytes(nextText) + 1 + PAGE_SLACK_BYTES > PAGE_BUDGET_BYTES;
}

function toolName(tool: unknown): string {
  return isRecord(tool) && typeof tool.name === 'string' ? tool.name : '';
}

/**
 * Sends one `tools/list` request and keeps the `result` text exactly as it arrived (the
 * session emits a request's frame synchronously inside `request()`: that gives its id).
 */
async function requestPage(
  context: SuiteContext,
  params: PageParams,
): Promise<{ result: unknown; resultText: string | undefined }> {
  const session = context.session();
  let sentId: number | undefined;
  let resultText: string | undefined;
  const onFrame = (direction: 'in' | 'out', text: string) => {
    const frame = readDeviceFrame(text);
    if (frame.kind !== 'mcp') return;
    const { message } = frame;
    if (direction === 'out' && message.kind === 'request' && typeof message.id === 'number') {
      sentId ??= message.id;
    } else if (direction === 'in' && message.kind === 'result' && message.id === sentId) {
      resultText = message.resultText;
    }
  };
  session.on('frame', onFrame);
  try {
    const result = await session.request('tools/list', { ...params }, requestOptions(context));
    return { result, resultText };
  } finally {
    session.off('frame', onFrame);
  }
}

/** A received page in the shape the walk needs; throws a readable reason when it is not. */
function readPage(params: PageParams, result: unknown, resultText: string | undefined): Page {
  if (!isRecord(result)) throw new Error(`result is ${preview(JSON.stringify(result), 80)}`);
  const { tools } = result;
  if (!Array.isArray(tools) || !tools.every(isRecord)) {
    throw new Error(
      `result.tools is not an array of objects: ${preview(JSON.stringify(tools), 80)}`,
    );
  }
  const cut = resultText === undefined ? undefined : splitToolTexts(resultText);
  const exact = cut !== undefined && cut.length === tools.length;
  return {
    params,
    result,
    resultText,
    tools,
    toolTexts: exact ? cut : tools.map((tool) => JSON.stringify(tool)),
    exact,
    nextCursor: Object.hasOwn(result, 'nextCursor') ? result.nextCursor : undefined,
  };
}

/**
 * Walks every page, following `nextCursor`. It stops at a page without a cursor (or with an
 * empty one: the last-page check says what is wrong with that), and with an error at an error
 * reply, a page that is not a page, a cursor that comes twice, or after {@link MAX_PAGES}.
 */
async function walkTools(
  context: SuiteContext,
  withUserTools: boolean,
  label: string,
): Promise<Walk> {
  const pages: Page[] = [];
  const seen = new Set<string>();
  let cursor: string | undefined;
  const end = (error?: string): Walk => ({
    label,
    pages,
    tools: pages.flatMap((page) => page.tools),
    error,
  });
  for (;;) {
    if (pages.length >= MAX_PAGES) return end(`no last page after ${MAX_PAGES} pages`);
    const params: PageParams = {
      ...(cursor === undefined ? {} : { cursor }),
      ...(withUserTools ? { withUserTools: true as const } : {}),
    };
    let page: Page;
    try {
      const { result, resultText } = await requestPage(context, params);
      page = readPage(params, result, resultText);
    } catch (error) {
      return end(
        `page ${pages.length + 1} (cursor ${JSON.stringify(cursor ?? '')}): ${describeError(error)}`,
      );
    }
    pages.push(page);
    const next = page.nextCursor;
    if (next === undefined || next === '') return end();
    if (typeof next !== 'string') {
      return end(`page ${pages.length} has "nextCursor":${JSON.stringify(next)}, not a tool name`);
    }
    if (seen.has(next)) return end(`cursor ${JSON.stringify(next)} came twice: the walk loops`);
    seen.add(next);
    cursor = next;
  }
}

function pageName(walk: Walk, index: number): string {
  const cursor = walk.pages[index]?.params.cursor;
  return `${walk.label} page ${index + 1} (cursor ${JSON.stringify(cursor ?? '')})`;
}

function isUserOnly(tool: Record<string, unknown>): boolean {
  const { annotations } = tool;
  return (
    isRecord(annotations) &&
    Array.isArray(annotations.audience) &&
    annotations.audience.length === 1 &&
    annotations.audience[0] === 'user'
  );
}

function mentionsUserAudience(tool: Record<string, unknown>): boolean {
  const { annotations } = tool;
  return (
    isRecord(annotations) &&
    Array.isArray(annotations.audience) &&
    annotations.audience.includes('user')
  );
}

/** True when `keys` come in the order `order` gives (keys not in `order` are reported apart). */
function inOrder(keys: readonly string[], order: readonly string[]): boolean {
  const ranks = keys.map((key) => order.indexOf(key));
  return ranks.every((rank, i) => i === 0 || rank > (ranks[i - 1] ?? -1));
}

/** What is wrong with one property schema (docs/protocol.md §3.2 and §3.3). */
function propertyProblems(key: string, value: unknown): string[] {
  if (!isRecord(value)) return [`property ${key} is not an object`];
  const problems: string[] = [];
  const keys = Object.keys(value);
  const unknown = keys.filter((k) => !PROPERTY_KEYS.includes(k));
  if (unknown.length > 0)
    problems.push(`property ${key} has keys the firmware never writes: ${unknown.join(', ')}`);
  else if (!inOrder(keys, PROPERTY_KEYS)) {
    problems.push(
      `property ${key}'s keys come as ${keys.join(', ')}, not in the order ${PROPERTY_KEYS.join(', ')}`,
    );
  }
  const { type } = value;
  if (typeof type !== 'string' || !PROPERTY_TYPES.includes(type)) {
    problems.push(
      `property ${key} has type ${JSON.stringify(type)}, not one of ${PROPERTY_TYPES.join(', ')}`,
    );
    return problems;
  }
  const int = (v: unknown) =>
    typeof v === 'number' && Number.isInteger(v) && v >= INT32_MIN && v <= INT32_MAX;
  const hasMin = 'minimum' in value;
  const hasMax = 'maximum' in value;
  if (type !== 'integer' && (hasMin || hasMax)) {
    problems.push(`property ${key}: a range on a ${type} property`);
  }
  if (type === 'integer' && hasMin !== hasMax) {
    problems.push(`property ${key}: minimum and maximum come together or not at all`);
  }
  if (hasMin && !int(value.minimum))
    problems.push(
      `property ${key}: minimum ${JSON.stringify(value.minimum)} is not a 32-bit integer`,
    );
  if (hasMax && !int(value.maximum))
    problems.push(
      `property ${key}: maximum ${JSON.stringify(value.maximum)} is not a 32-bit integer`,
    );
  const min = int(value.minimum) ? (value.minimum as number) : undefined;
  const max = int(value.maximum) ? (value.maximum as number) : undefined;
  if (min !== undefined && max !== undefined && min > max) {
    problems.push(`property ${key}: minimum ${min} is above maximum ${max}`);
  }
  if ('default' in value) {
    const fallback = value.default;
    const typed =
      type === 'integer'
        ? int(fallback)
        : type === 'boolean'
          ? typeof fallback === 'boolean'
          : typeof fallback === 'string';
    if (!typed)
      problems.push(`property ${key}: default ${JSON.stringify(fallback)} is not a ${type}`);
    else if (
      type === 'integer' &&
      ((min !== undefined && (fallback as number) < min) ||
        (max !== undefined && (fallback as number) > max))
    ) {
      problems.push(`property ${key}: default ${fallback} is outside ${min}..${max}`);
    }
  }
  return problems;
}

/** What is wrong with a tool's JSON against the firmware's tool shape; empty when right. */
export function schemaProblems(tool: Record<string, unknown>): string[] {
  const problems: string[] = [];
  if (toolName(tool) === '') problems.push('name is not a non-empty string');
  if (typeof tool.description !== 'string') problems.push('description is not a string');
  const keys = Object.keys(tool);
  const unknown = keys.filter((k) => !TOOL_KEYS.includes(k));
  if (unknown.length > 0) problems.push(`keys the firmware never writes: ${unknown.join(', ')}`);
  else if (!inOrder(keys, TOOL_KEYS))
    problems.push(`keys come as ${keys.join(', ')}, not in the order ${TOOL_KEYS.join(', ')}`);
  const schema = tool.inputSchema;
  if (!isRecord(schema)) return [...problems, 'inputSchema is not an object'];
  if (schema.type !== 'object') {
    problems.push(`inputSchema.type is ${JSON.stringify(schema.type)}, expected "object"`);
  }
  const { properties } = schema;
  if (!isRecord(properties)) return [...problems, 'inputSchema.properties is not an object'];
  const withoutDefault: string[] = [];
  for (const [key, value] of Object.entries(properties)) {
    if (isRecord(value) && !('default' in value)) withoutDefault.push(key);
    problems.push(...propertyProblems(key, value));
  }
  if ('required' in schema) {
    const { required } = schema;
    if (!Array.isArray(required) || required.some((entry) => typeof entry !== 'string')) {
      problems.push(`required is ${JSON.stringify(required)}, not an array of names`);
    } else if (required.length === 0) {
      problems.push('required is an empty array (the firmware omits the key when empty)');
    } else {
      const listed = new Set<unknown>(required);
      const missing = withoutDefault.filter((key) => !listed.has(key));
      const extra = required.filter((key) => !withoutDefault.includes(key as string));
      if (missing.length > 0 || extra.length > 0) {
        problems.push(
          `required is ${JSON.stringify(required)}, expected exactly the properties without a default ${JSON.stringify(withoutDefault)}`,
        );
      }
    }
  } else if (withoutDefault.length > 0) {
    problems.push(
      `required is missing, expected the properties without a default ${JSON.stringify(withoutDefault)}`,
    );
  }
  return problems;
}

/** Fails with every problem listed, the first as the actual value. */
function expectNone(problems: readonly string[], expected: string): void {
  expectThat(
    problems.length === 0,
    `expected ${expected}, got: ${problems.join('; ')}`,
    expected,
    problems[0],
  );
}

/** How two tool lists differ, in a few words per tool; empty when identical. */
function listDifferences(
  what: string,
  reference: readonly Record<string, unknown>[],
  other: readonly Record<string, unknown>[],
  referenceLabel: string,
): string[] {
  const texts = (tools: readonly Record<string, unknown>[]) =>
    new Map(tools.map((tool) => [toolName(tool), JSON.stringify(tool)]));
  const before = texts(reference);
  const after = texts(other);
  const problems: string[] = [];
  for (const [name, text] of before) {
    if (!after.has(name)) problems.push(`${what} lacks ${name}, which ${referenceLabel} listed`);
    else if (after.get(name) !== text)
      problems.push(`${what} lists ${name} differently from ${referenceLabel}`);
  }
  for (const name of after.keys()) {
    if (!before.has(name)) problems.push(`${what} lists ${name}, which ${referenceLabel} did not`);
  }
  if (problems.length === 0) {
    const order = (tools: readonly Record<string, unknown>[]) => tools.map(toolName).join('\n');
    if (order(reference) !== order(other))
      problems.push(`${what} lists the tools in another order than ${referenceLabel}`);
  }
  return problems;
}

export const toolsListSuite: Suite = {
  name: 'tools-list',
  description: 'tools/list: paging, cursors, user-only tools, schemas, stability, expected tools',
  async run(context: SuiteContext): Promise<SuiteOutcome> {
    const run = new SuiteChecks('tools-list', context);
    let plain: Walk | undefined;
    let user: Walk | undefined;

    await run.check(TOOLS_LIST_CHECKS.walk, async () => {
      plain = await walkTools(context, false, 'plain walk');
      user = await walkTools(context, true, 'user walk');
      const failures = [plain, user]
        .filter((walk) => walk.error !== undefined)
        .map((walk) => `${walk.label} after ${walk.pages.length} page(s): ${walk.error}`);
      expectNone(failures, 'both walks to end on a last page');
      return `${plain.pages.length} plain page(s) with ${plain.tools.length} tools, ${user.pages.length} page(s) with ${user.tools.length} tools and user tools`;
    });

    // The walks that ended; checks that need both skip when one failed.
    const walks = (): [CompleteWalk, CompleteWalk] => {
      const p = plain;
      const u = user;
      if (p === undefined || u === undefined || p.error !== undefined || u.error !== undefined) {
        skip('a tools/list walk did not complete (see tools-list.walk)');
      }
      return [p as CompleteWalk, u as CompleteWalk];
    };

    await run.check(TOOLS_LIST_CHECKS.pageBudget, async () => {
      const problems: string[] = [];
      const pages: Record<string, unknown>[] = [];
      for (const walk of walks()) {
        walk.pages.forEach((page, index) => {
          const counted = countedBytes(page.toolTexts);
          pages.push({
            walk: walk.label,
            cursor: page.params.cursor ?? '',
            tools: page.tools.length,
            budgetBytes: counted,
            ...(page.resultText === undefined ? {} : { resultBytes: bytes(page.resultText) }),
          });
          if (!withinBudget(counted)) {
            problems.push(
              `${pageName(walk, index)} counts ${counted} bytes + ${PAGE_SLACK_BYTES} > ${PAGE_BUDGET_BYTES}`,
            );
          }
        });
      }
      expectNone(
        problems,
        `every page within the budget (bytes up to the last tool and its comma + ${PAGE_SLACK_BYTES} <= ${PAGE_BUDGET_BYTES})`,
      );
      const largest = Math.max(...pages.map((p) => Number(p.resultBytes ?? p.budgetBytes)));
      return { note: `${pages.length} page(s), the largest ${largest} bytes`, data: { pages } };
    });

    await run.check(TOOLS_LIST_CHECKS.pageMaximal, async () => {
      const problems: string[] = [];
      for (const walk of walks()) {
        walk.pages.forEach((page, index) => {
          const next = walk.pages[index + 1];
          const nextText = next?.toolTexts[0];
          if (nextText === undefined) return;
          const counted = countedBytes(page.toolTexts);
          if (pageIsFull(counted, nextText)) return;
          problems.push(
            `${pageName(walk, index)} ends at ${counted} bytes, yet the next page's first tool ${toolName(next?.tools[0])} (${bytes(nextText) + 1} bytes with its comma) would have fitted`,
          );
        });
      }
      expectNone(
        problems,
        "every page but the last to be full (the next page's first tool does not fit)",
      );
      return 'every page but the last is full';
    });

    await run.check(TOOLS_LIST_CHECKS.cursors, async () => {
      const problems: string[] = [];
      for (const walk of walks()) {
        const listed = new Map<string, number>();
        walk.pages.forEach((page, index) => {
          const { cursor } = page.params;
          const first = toolName(page.tools[0]);
          if (cursor !== undefined && first !== cursor) {
            problems.push(
              `${walk.label} page ${index + 1} for cursor ${JSON.stringify(cursor)} starts at ${JSON.stringify(first)}`,
            );
          }
          for (const tool of page.tools)
            if (!listed.has(toolName(tool))) listed.set(toolName(tool), index);
          const next = page.nextCursor;
          const where = typeof next === 'string' ? listed.get(next) : undefined;
          if (where !== undefined) {
            problems.push(
              `${walk.label} page ${index + 1} has nextCursor ${JSON.stringify(next)}, a tool already listed on page ${where + 1}`,
            );
          }
        });
      }
      expectNone(
        problems,
        "each page to start at its cursor's tool, and each nextCursor to name a tool not listed yet",
      );
      return 'each page starts at its cursor';
    });

    await run.check(TOOLS_LIST_CHECKS.cursorContinues, async () => {
      const problems: string[] = [];
      let probes = 0;
      for (const walk of walks()) {
        const names = walk.tools.map(toolName);
        // The last tool of every page but the last; a one-page list: its second tool.
        const cursors =
          walk.pages.length > 1
            ? walk.pages.slice(0, -1).map((page) => toolName(page.tools.at(-1)))
            : names.slice(1, 2);
        for (const cursor of cursors) {
          const at = names.indexOf(cursor);
          if (cursor === '' || at === -1) continue;
          probes++;
          const params: PageParams = {
            cursor,
            ...(walk.label === 'user walk' ? { withUserTools: true as const } : {}),
          };
          let got: string[];
          try {
            const { result } = await requestPage(context, params);
            const tools = isRecord(result) && Array.isArray(result.tools) ? result.tools : [];
            got = tools.map(toolName);
          } catch (error) {
            problems.push(
              `${walk.label}: cursor ${JSON.stringify(cursor)} got ${describeError(error)}`,
            );
            continue;
          }
          const expected = names.slice(at, at + got.length);
          const differs = got.findIndex((name, i) => name !== expected[i]);
          if (got.length === 0 || differs !== -1) {
            const i = Math.max(differs, 0);
            problems.push(
              `${walk.label}: the page for cursor ${JSON.stringify(cursor)} has ${JSON.stringify(got[i] ?? null)} at position ${i + 1}, where the walk has ${JSON.stringify(expected[i] ?? null)}${i > 0 && !names.includes(got[i] ?? '') ? ` (the walk never listed ${got[i]}: a cursor skipped it)` : ''}`,
            );
          }
        }
      }
      if (probes === 0) skip('no walk lists two tools: no cursor to probe');
      expectNone(
        problems,
        "each probed page to start at its cursor and go on with the walk's tools",
      );
      return `${probes} cursor(s) probed, each page goes on with the walk's tools`;
    });

    await run.check(TOOLS_LIST_CHECKS.lastPage, async () => {
      const problems: string[] = [];
      for (const walk of walks()) {
        const last = walk.pages.at(-1)?.result;
        if (isRecord(last) && Object.hasOwn(last, 'nextCursor')) {
          problems.push(
            `${walk.label}: the last page has "nextCursor":${JSON.stringify(last.nextCursor)}`,
          );
        }
      }
      expectNone(problems, 'no nextCursor key on the last page');
      return 'no nextCursor on the last pages';
    });

    await run.check(TOOLS_LIST_CHECKS.noDuplicates, async () => {
      const problems: string[] = [];
      for (const walk of walks()) {
        const seen = new Set<string>();
        for (const tool of walk.tools) {
          const name = toolName(tool);
          if (seen.has(name)) problems.push(`${walk.label} lists ${name} twice`);
          seen.add(name);
        }
      }
      expectNone(problems, 'every tool listed once per walk');
      return 'no tool twice';
    });

    await run.check(TOOLS_LIST_CHECKS.complete, async () => {
      const [p, u] = walks();
      const userNames = new Set(u.tools.map(toolName));
      const missing = p.tools.map(toolName).filter((name) => !userNames.has(name));
      expectThat(
        missing.length === 0,
        `expected every plain tool in the listing with user tools, missing: ${missing.join(', ')}`,
        'plain tools ⊆ tools with user tools',
        missing.join(', '),
      );
      const userOnly = u.tools.length - (p.tools.length - missing.length);
      return `${p.tools.length} plain tools, ${userOnly} user-only`;
    });

    await run.check(TOOLS_LIST_CHECKS.userOnly, async () => {
      const [p, u] = walks();
      const plainNames = new Set(p.tools.map(toolName));
      const problems: string[] = [];
      let userOnly = 0;
      for (const tool of u.tools) {
        if (plainNames.has(toolName(tool))) continue;
        userOnly++;
        if (!isUserOnly(tool)) {
          problems.push(
            `${toolName(tool)} is listed only with user tools but has annotations ${JSON.stringify(tool.annotations)}, not {"audience":["user"]}`,
          );
        }
      }
      for (const tool of p.tools) {
        if (mentionsUserAudience(tool)) {
          problems.push(`${toolName(tool)} carries audience "user" yet is in the plain listing`);
        } else if (USER_ONLY_TOOLS.includes(toolName(tool))) {
          problems.push(
            `${toolName(tool)}, a user-only tool of the firmware, is in the plain listing`,
          );
        }
      }
      // The firmware registers user-only tools on every board (self.reboot, self.upgrade_firmware...).
      if (userOnly === 0) {
        problems.push(
          `the listing with user tools has no tool beyond the plain listing's ${p.tools.length} (withUserTools ignored?)`,
        );
      }
      expectNone(
        problems,
        'user-only tools listed with user tools only, annotated audience ["user"]',
      );
      return `${userOnly} user-only tools, all annotated`;
    });

    await run.check(TOOLS_LIST_CHECKS.schemas, async () => {
      const [p, u] = walks();
      const tools = new Map<string, Record<string, unknown>>();
      for (const tool of [...u.tools, ...p.tools]) {
        if (!tools.has(toolName(tool))) tools.set(toolName(tool), tool);
      }
      const problems = [...tools.values()].flatMap((tool) =>
        schemaProblems(tool).map((problem) => `${toolName(tool) || '(no name)'}: ${problem}`),
      );
      expectNone(problems, "every tool in the firmware's shape");
      return `${tools.size} schemas`;
    });

    await run.check(TOOLS_LIST_CHECKS.unknownCursor, async () => {
      const outcome = await requestPage(context, { cursor: UNKNOWN_CURSOR }).then(
        ({ result }) => {
          const tools = isRecord(result) && Array.isArray(result.tools) ? result.tools : [];
          return `a page of ${tools.length} tool(s)${tools.length > 0 ? ` starting at ${toolName(tools[0])}` : ''}`;
        },
        (error: unknown) =>
          error instanceof WireError && error.message === UNKNOWN_CURSOR_MESSAGE
            ? undefined
            : describeError(error),
      );
      expectThat(
        outcome === undefined,
        `expected the error "${UNKNOWN_CURSOR_MESSAGE}" for cursor ${JSON.stringify(UNKNOWN_CURSOR)}, got ${outcome}`,
        UNKNOWN_CURSOR_MESSAGE,
        outcome,
      );
      return UNKNOWN_CURSOR_MESSAGE;
    });

    await run.check(TOOLS_LIST_CHECKS.stable, async () => {
      const [p, u] = walks();
      const plainAgain = await walkTools(context, false, 'plain walk 2');
      const userAgain = await walkTools(context, true, 'user walk 2');
      const problems: string[] = [];
      for (const again of [plainAgain, userAgain]) {
        if (again.error !== undefined) problems.push(`${again.label} failed: ${again.error}`);
      }
      problems.push(...listDifferences('plain walk 2', p.tools, plainAgain.tools, 'plain walk 1'));
      problems.push(...listDifferences('user walk 2', u.tools, userAgain.tools, 'user walk 1'));
      const record = context.record();
      const atStart = record.tools.map((tool) => tool.raw);
      problems.push(...listDifferences('the user walk', atStart, u.tools, 'the session start'));
      const plainAtStart = new Set(
        record.tools.filter((tool) => !tool.userOnly).map((t) => t.name),
      );
      const plainNow = p.tools.map(toolName);
      const gone = [...plainAtStart].filter((name) => !plainNow.includes(name));
      const added = plainNow.filter((name) => !plainAtStart.has(name));
      if (gone.length > 0)
        problems.push(`the plain walk lacks ${gone.join(', ')}, listed at the session start`);
      if (added.length > 0)
        problems.push(`the plain walk lists ${added.join(', ')}, not listed at the session start`);
      const expected = context.board.expectedToolCount;
      if (expected !== undefined && u.tools.length !== expected) {
        problems.push(
          `the board lists ${u.tools.length} tools with user tools, the inventory expects ${expected}`,
        );
      }
      expectNone(problems, 'the same tools on every walk and at the session start');
      return `${u.tools.length} tools on 4 walks and at the session start${expected === undefined ? '' : ', as the inventory expects'}`;
    });

    await run.check(TOOLS_LIST_CHECKS.expectedTools, async () => {
      const expected = context.board.expectedTools ?? [];
      if (expected.length === 0) skip('the inventory lists no expected tools');
      const [, u] = walks();
      const names = new Set(u.tools.map(toolName));
      const missing = expected.filter((name) => !names.has(name));
      expectThat(
        missing.length === 0,
        `expected tools ${missing.join(', ')} to be listed, the board lists ${names.size} tools without them`,
        expected.join(', '),
        [...names].join(', '),
      );
      return `${expected.length} expected tools present`;
    });

    return { checks: run.checks };
  },
};
