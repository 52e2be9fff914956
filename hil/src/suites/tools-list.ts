/**
 * `tools/list` (docs/protocol.md §3.2): both walks (plain and with user tools) page by page. The
 * budget and maximality rules come from the protocol core's walker, which re-serialises each
 * page the firmware's way; the exact bytes of every page are kept for the report. Schemas
 * are checked against the firmware's tool model through the core's `defineTool`.
 */
import {
  byteLength,
  defineTool,
  PAGE_BUDGET_BYTES,
  PAGE_SLACK_BYTES,
  type PageReport,
  type Property,
  printCJson,
  readDeviceFrame,
  type ToolsListParams,
  type ToolsWalk,
  walkToolsPages,
} from '@xiaozhi-mcp/protocol';
import type { Suite, SuiteContext, SuiteOutcome } from '../suite.js';
import { type CheckSpec, expectThat } from '../suite.js';
import { describeError, isRecord, requestOptions, SuiteChecks, skip } from './support.js';

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
    description: 'each page starts at the tool its cursor names; cursors advance',
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
      'user-only tools carry annotations.audience=["user"] and are absent from plain listings',
    severity: 'major',
  },
  schemas: {
    id: 'schemas',
    description:
      'every inputSchema is well formed: object, boolean/integer/string properties, ranges, defaults, required',
    severity: 'major',
  },
  expectedTools: {
    id: 'expected-tools',
    description: "the board lists the inventory's expected tools",
    severity: 'critical',
  },
} as const satisfies Record<string, CheckSpec>;

/** One page as it travelled. */
interface PageRecord {
  readonly params: ToolsListParams;
  readonly result: unknown;
  /** The page's `result` text exactly as received, when the session saw the frame. */
  readonly resultText: string | undefined;
}

interface Walk {
  readonly label: string;
  readonly records: readonly PageRecord[];
  readonly walk: ToolsWalk | undefined;
  readonly error: string | undefined;
}

async function walkTools(context: SuiteContext, withUserTools: boolean): Promise<Walk> {
  const label = withUserTools ? 'user walk' : 'plain walk';
  const session = context.session();
  const records: PageRecord[] = [];
  const resultTexts = new Map<number, string>();
  let sentId: number | undefined;
  // The session emits a request's frame synchronously inside request(): that gives its id.
  const lastSentId = () => sentId;
  const onFrame = (direction: 'in' | 'out', text: string) => {
    const frame = readDeviceFrame(text);
    if (frame.kind !== 'mcp') return;
    const { message } = frame;
    if (direction === 'out' && message.kind === 'request' && typeof message.id === 'number') {
      sentId = message.id;
    } else if (
      direction === 'in' &&
      message.kind === 'result' &&
      typeof message.id === 'number' &&
      message.resultText !== undefined
    ) {
      resultTexts.set(message.id, message.resultText);
    }
  };
  session.on('frame', onFrame);
  try {
    const walk = await walkToolsPages(
      async (params) => {
        sentId = undefined;
        const pending = session.request('tools/list', params, requestOptions(context));
        const id = lastSentId();
        const result = await pending;
        records.push({
          params: { ...params },
          result,
          resultText: id === undefined ? undefined : resultTexts.get(id),
        });
        return result;
      },
      { withUserTools },
    );
    return { label, records, walk, error: undefined };
  } catch (error) {
    return { label, records, walk: undefined, error: describeError(error) };
  } finally {
    session.off('frame', onFrame);
  }
}

function toolName(tool: unknown): string {
  return isRecord(tool) && typeof tool.name === 'string' ? tool.name : '';
}

function pageTools(record: PageRecord | undefined): readonly unknown[] {
  return isRecord(record?.result) && Array.isArray(record.result.tools) ? record.result.tools : [];
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

function pageName(walk: Walk, index: number, page: PageReport): string {
  return `${walk.label} page ${index + 1} (cursor ${JSON.stringify(page.cursor ?? '')})`;
}

/** What is wrong with a tool's schema against the firmware's tool model; empty when right. */
export function schemaProblems(tool: Record<string, unknown>): string[] {
  const name = toolName(tool);
  const problems: string[] = [];
  if (name === '') problems.push('name is not a non-empty string');
  if (typeof tool.description !== 'string') problems.push('description is not a string');
  const schema = tool.inputSchema;
  if (!isRecord(schema)) return [...problems, 'inputSchema is not an object'];
  if (schema.type !== 'object') {
    problems.push(`inputSchema.type is ${JSON.stringify(schema.type)}, expected "object"`);
  }
  const { properties } = schema;
  if (!isRecord(properties)) return [...problems, 'inputSchema.properties is not an object'];
  const withoutDefault: string[] = [];
  for (const [key, value] of Object.entries(properties)) {
    if (!isRecord(value)) {
      problems.push(`property ${key} is not an object`);
      continue;
    }
    if (!('default' in value)) withoutDefault.push(key);
    if (value.type !== 'integer' && ('minimum' in value || 'maximum' in value)) {
      problems.push(`property ${key}: a range on a ${JSON.stringify(value.type)} property`);
    }
    // The core's defineTool holds the firmware's rules: types, int32 ranges, defaults in range.
    const property = {
      name: key,
      type: value.type,
      ...('default' in value ? { default: value.default } : {}),
      ...('minimum' in value ? { minimum: value.minimum } : {}),
      ...('maximum' in value ? { maximum: value.maximum } : {}),
    } as Property;
    try {
      defineTool({ name: name || '?', description: '', properties: [property] });
    } catch (error) {
      problems.push(`property ${key}: ${(error as Error).message}`);
    }
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

export const toolsListSuite: Suite = {
  name: 'tools-list',
  description: 'tools/list: paging, cursors, user-only tools, schemas, expected tools',
  async run(context: SuiteContext): Promise<SuiteOutcome> {
    const run = new SuiteChecks('tools-list', context);
    let plain: Walk | undefined;
    let user: Walk | undefined;

    await run.check(TOOLS_LIST_CHECKS.walk, async () => {
      plain = await walkTools(context, false);
      user = await walkTools(context, true);
      const failures = [plain, user]
        .filter((walk) => walk.error !== undefined)
        .map((walk) => `${walk.label} after ${walk.records.length} page(s): ${walk.error}`);
      expectNone(failures, 'both walks to end on a last page');
      return `${plain.walk?.pages.length} plain page(s) with ${plain.walk?.tools.length} tools, ${user.walk?.pages.length} page(s) with ${user.walk?.tools.length} tools and user tools`;
    });

    // The walks that ended; checks that need both skip when one failed.
    const walks = (): [Walk & { walk: ToolsWalk }, Walk & { walk: ToolsWalk }] => {
      const p = plain;
      const u = user;
      if (p?.walk === undefined || u?.walk === undefined) {
        skip('a tools/list walk did not complete (see tools-list.walk)');
      }
      return [p as Walk & { walk: ToolsWalk }, u as Walk & { walk: ToolsWalk }];
    };

    await run.check(TOOLS_LIST_CHECKS.pageBudget, async () => {
      const problems: string[] = [];
      const pages: Record<string, unknown>[] = [];
      for (const walk of walks()) {
        walk.walk.pages.forEach((page, index) => {
          const resultText = walk.records[index]?.resultText;
          pages.push({
            walk: walk.label,
            cursor: page.cursor ?? '',
            tools: page.toolCount,
            budgetBytes: page.budgetBytes,
            ...(resultText === undefined ? {} : { resultBytes: byteLength(resultText) }),
          });
          if (!page.withinBudget) {
            problems.push(
              `${pageName(walk, index, page)} counts ${page.budgetBytes} bytes + ${PAGE_SLACK_BYTES} > ${PAGE_BUDGET_BYTES}`,
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
        walk.walk.pages.forEach((page, index) => {
          if (page.maximal !== false) return;
          const next = pageTools(walk.records[index + 1])[0];
          const size =
            next === undefined ? '' : ` (${byteLength(printCJson(next)) + 1} bytes with its comma)`;
          problems.push(
            `${pageName(walk, index, page)} ends at ${page.budgetBytes} bytes, yet the next page's first tool ${toolName(next)}${size} would have fitted`,
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
        const seen = new Set<string>();
        walk.records.forEach((record, index) => {
          const cursor = record.params.cursor;
          if (cursor === undefined) return;
          if (seen.has(cursor))
            problems.push(`${walk.label}: cursor ${JSON.stringify(cursor)} came twice`);
          seen.add(cursor);
          const first = toolName(pageTools(record)[0]);
          if (first !== cursor) {
            problems.push(
              `${walk.label} page ${index + 1} for cursor ${JSON.stringify(cursor)} starts at ${JSON.stringify(first)}`,
            );
          }
        });
      }
      expectNone(problems, "each page to start at its cursor's tool, and cursors never to repeat");
      return 'each page starts at its cursor';
    });

    await run.check(TOOLS_LIST_CHECKS.lastPage, async () => {
      const problems: string[] = [];
      for (const walk of walks()) {
        const last = walk.records.at(-1)?.result;
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
        for (const tool of walk.walk.tools) {
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
      const userNames = new Set(u.walk.tools.map(toolName));
      const missing = p.walk.tools.map(toolName).filter((name) => !userNames.has(name));
      expectThat(
        missing.length === 0,
        `expected every plain tool in the listing with user tools, missing: ${missing.join(', ')}`,
        'plain tools ⊆ tools with user tools',
        missing.join(', '),
      );
      const userOnly = u.walk.tools.length - (p.walk.tools.length - missing.length);
      return `${p.walk.tools.length} plain tools, ${userOnly} user-only`;
    });

    await run.check(TOOLS_LIST_CHECKS.userOnly, async () => {
      const [p, u] = walks();
      const plainNames = new Set(p.walk.tools.map(toolName));
      const problems: string[] = [];
      for (const tool of u.walk.tools) {
        if (!plainNames.has(toolName(tool)) && !isUserOnly(tool)) {
          problems.push(
            `${toolName(tool)} is listed only with user tools but has annotations ${JSON.stringify(tool.annotations)}, not {"audience":["user"]}`,
          );
        }
      }
      for (const tool of p.walk.tools) {
        if (mentionsUserAudience(tool)) {
          problems.push(`${toolName(tool)} carries audience "user" yet is in the plain listing`);
        }
      }
      expectNone(
        problems,
        'user-only tools annotated audience ["user"] and absent from plain listings',
      );
      return `${u.walk.tools.length - p.walk.tools.length} user-only tools, all annotated`;
    });

    await run.check(TOOLS_LIST_CHECKS.schemas, async () => {
      const [p, u] = walks();
      const tools = new Map<string, Record<string, unknown>>();
      for (const tool of [...u.walk.tools, ...p.walk.tools]) {
        if (!tools.has(toolName(tool))) tools.set(toolName(tool), tool);
      }
      const problems = [...tools.values()].flatMap((tool) =>
        schemaProblems(tool).map((problem) => `${toolName(tool) || '(no name)'}: ${problem}`),
      );
      expectNone(problems, "every schema in the firmware's tool model");
      return `${tools.size} schemas`;
    });

    await run.check(TOOLS_LIST_CHECKS.expectedTools, async () => {
      const expected = context.board.expectedTools ?? [];
      if (expected.length === 0) skip('the inventory lists no expected tools');
      const [, u] = walks();
      const names = new Set(u.walk.tools.map(toolName));
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
