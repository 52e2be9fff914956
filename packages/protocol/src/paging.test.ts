import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ProtocolError, WireError } from './errors.js';
import {
  buildToolsPage,
  fitsPageBudget,
  PAGE_BUDGET_BYTES,
  PAGE_SLACK_BYTES,
  type ToolsListParams,
  walkToolsPages,
} from './paging.js';
import { defineTool, type Tool } from './tools.js';

const tool = (name: string, descriptionBytes = 10, userOnly = false) =>
  defineTool({ name, description: 'd'.repeat(descriptionBytes), userOnly });

/** A device that pages with the firmware's builder: what a real board answers. */
function firmwareDevice(tools: readonly Tool[], seen: ToolsListParams[] = []) {
  return async (params: ToolsListParams): Promise<unknown> => {
    seen.push({ ...params });
    const page = buildToolsPage(tools, params);
    if (!page.ok) throw new WireError(page.message);
    return JSON.parse(page.result);
  };
}

describe('buildToolsPage', () => {
  it('returns {"tools":[]} for a board without tools', () => {
    expect(buildToolsPage([])).toMatchObject({ ok: true, result: '{"tools":[]}' });
  });

  it('fills a page up to the byte budget and names the next tool as the cursor', () => {
    const tools = Array.from({ length: 12 }, (_, i) =>
      tool(`self.tool_${String(i).padStart(2, '0')}`, 1000),
    );
    const page = buildToolsPage(tools);
    expect(page.ok).toBe(true);
    if (!page.ok) return;
    expect(page.tools.length).toBe(7);
    expect(page.nextCursor).toBe('self.tool_07');
    expect(page.result.endsWith('],"nextCursor":"self.tool_07"}')).toBe(true);
    expect(fitsPageBudget(page.tools.map((t) => t.json))).toBe(true);
    expect(fitsPageBudget([...page.tools, tools[7] as Tool].map((t) => t.json))).toBe(false);
  });

  it('may end a full page a few bytes past 8000, as the firmware does', () => {
    // 20-character names and descriptions sized so the rule's slack is used up exactly.
    const name = (i: number) => `self.x.${String(i).padStart(13, '0')}`;
    const probe = tool(name(0), 0);
    const perTool = probe.jsonBytes + 1;
    const count = 8;
    const description = Math.floor((PAGE_BUDGET_BYTES - PAGE_SLACK_BYTES - 10) / count) - perTool;
    const tools = Array.from({ length: count + 1 }, (_, i) => tool(name(i), description));
    const page = buildToolsPage(tools);
    expect(page.ok && page.tools.length).toBe(count);
    expect(page.ok && new TextEncoder().encode(page.result).length).toBeGreaterThan(
      PAGE_BUDGET_BYTES,
    );
  });

  it('skips user-only tools unless withUserTools is exactly true; the cursor never names one', () => {
    const tools = [tool('a'), tool('u', 10, true), tool('b')];
    const names = (request: object) => {
      const page = buildToolsPage(tools, request);
      return page.ok ? page.tools.map((t) => t.name) : page.message;
    };
    expect(names({})).toEqual(['a', 'b']);
    expect(names({ withUserTools: 'true' })).toEqual(['a', 'b']);
    expect(names({ withUserTools: true })).toEqual(['a', 'u', 'b']);
    expect(names({ cursor: 'u' })).toEqual(['b']);
  });

  it('reports both error cases with the firmware message', () => {
    const big = tool('self.big', 8000);
    expect(buildToolsPage([big])).toEqual({
      ok: false,
      message: 'Failed to add tool self.big because of payload size limit',
      toolName: 'self.big',
    });
    expect(buildToolsPage([tool('a')], { cursor: 'zzz' })).toEqual({
      ok: false,
      message: 'Failed to add tool  because of payload size limit',
      toolName: '',
    });
    expect(buildToolsPage([tool('u', 1, true)])).toMatchObject({ ok: false, toolName: '' });
  });

  it('treats a non-string or empty cursor as the start', () => {
    const tools = [tool('a'), tool('b')];
    for (const cursor of [undefined, '', 5, null, {}]) {
      expect(buildToolsPage(tools, { cursor })).toMatchObject({ ok: true, tools: tools });
    }
  });
});

describe('walkToolsPages', () => {
  it('walks a multi-page list, sending withUserTools on every page', async () => {
    const tools = Array.from({ length: 30 }, (_, i) => tool(`t${i}`, 900, i % 7 === 0));
    const seen: ToolsListParams[] = [];
    const walk = await walkToolsPages(firmwareDevice(tools, seen), { withUserTools: true });
    expect(walk.tools.map((t) => t.name)).toEqual(tools.map((t) => t.name));
    expect(walk.violations).toEqual([]);
    expect(seen.length).toBeGreaterThanOrEqual(3);
    expect(seen.every((p) => p.withUserTools === true)).toBe(true);
    expect(seen[0]).toEqual({ withUserTools: true });
    expect(walk.pages.every((p) => p.withinBudget && p.maximal)).toBe(true);
  });

  it('judges frozen pages (whose prints it remembers) as it judges fresh ones, walk after walk', async () => {
    const tools = Array.from({ length: 30 }, (_, i) => tool(`t${i}`, 900, i % 7 === 0));
    const fresh = await walkToolsPages(firmwareDevice(tools), { withUserTools: true });
    const pages: unknown[] = [];
    const device = firmwareDevice(tools);
    await walkToolsPages(
      async (params) => {
        const page = await device(params);
        pages.push(page);
        return page;
      },
      { withUserTools: true },
    );
    const deepFreeze = (value: unknown): unknown => {
      if (typeof value === 'object' && value !== null) {
        for (const member of Object.values(value)) deepFreeze(member);
        Object.freeze(value);
      }
      return value;
    };
    pages.forEach(deepFreeze);
    for (let walk = 0; walk < 2; walk++) {
      const replay = [...pages];
      const frozen = await walkToolsPages(async () => replay.shift(), { withUserTools: true });
      expect(frozen.pages).toEqual(fresh.pages);
      expect(frozen.violations).toEqual(fresh.violations);
    }
  });

  it('stops with PAGE_ERROR on an error page, naming the cursor', async () => {
    const tools = [tool('a'), tool('self.big', 8000), tool('b')];
    await expect(walkToolsPages(firmwareDevice(tools))).rejects.toMatchObject({
      code: 'PAGE_ERROR',
      message: expect.stringContaining('Failed to add tool self.big because of payload size limit'),
    });
  });

  it('stops with PAGE_LOOP on a cursor seen before', async () => {
    const page = (name: string, next: string) => ({ tools: [{ name }], nextCursor: next });
    const answers = [page('a', 'b'), page('b', 'a')];
    await expect(walkToolsPages(async () => answers.shift())).rejects.toMatchObject({
      code: 'PAGE_LOOP',
    });
  });

  it('stops with PAGE_LIMIT when pages never end', async () => {
    let n = 0;
    const endless = async () => ({ tools: [{ name: `t${n}` }], nextCursor: `t${++n}` });
    await expect(walkToolsPages(endless, { maxPages: 5 })).rejects.toMatchObject({
      code: 'PAGE_LIMIT',
    });
  });

  it('reports a page that is not maximal or over budget, and throws on request', async () => {
    const a = tool('a');
    const device = async (params: ToolsListParams) =>
      params.cursor === undefined
        ? { tools: [JSON.parse(a.json)], nextCursor: 'b' }
        : { tools: [{ name: 'b' }] };
    const walk = await walkToolsPages(device);
    expect(walk.violations).toEqual(['page at cursor "" is not maximal: b would have fitted']);
    await expect(walkToolsPages(device, { onBudgetViolation: 'throw' })).rejects.toMatchObject({
      code: 'PAGE_BUDGET',
    });
    const huge = { tools: [{ name: 'x', description: 'y'.repeat(9000) }] };
    expect((await walkToolsPages(async () => huge)).pages[0]?.withinBudget).toBe(false);
  });

  it('rejects a malformed page with INVALID_PAGE', async () => {
    await expect(walkToolsPages(async () => ({ tools: 'no' }))).rejects.toMatchObject({
      code: 'INVALID_PAGE',
      field: 'result.tools',
    });
  });
});

const toolSetArb = fc
  .array(
    fc.record({
      description: fc.oneof(
        fc.nat({ max: 2500 }).map((n) => 'x'.repeat(n)),
        fc.string({ unit: 'grapheme', maxLength: 400 }),
      ),
      userOnly: fc.boolean(),
    }),
    { maxLength: 60 },
  )
  .map((specs) =>
    specs.map((s, i) =>
      defineTool({ name: `self.t${i}`, description: s.description, userOnly: s.userOnly }),
    ),
  );

describe('paging (property-based)', () => {
  it('a walk lists each visible tool exactly once, in order, every page within budget and maximal', async () => {
    await fc.assert(
      fc.asyncProperty(toolSetArb, fc.boolean(), async (tools, withUserTools) => {
        const visible = tools.filter((t) => withUserTools || !t.userOnly);
        fc.pre(visible.length > 0 || tools.length === 0);
        const walk = await walkToolsPages(firmwareDevice(tools), { withUserTools });
        expect(walk.tools.map((t) => t.name)).toEqual(visible.map((t) => t.name));
        expect(walk.violations).toEqual([]);
        for (const page of walk.pages)
          expect(page.budgetBytes + PAGE_SLACK_BYTES).toBeLessThanOrEqual(PAGE_BUDGET_BYTES);
      }),
      { numRuns: 150 },
    );
  });

  it('a tool too large for an empty page always ends the walk with PAGE_ERROR naming it', async () => {
    await fc.assert(
      fc.asyncProperty(toolSetArb, fc.nat(), async (tools, at) => {
        const big = defineTool({ name: 'self.big', description: 'B'.repeat(8000) });
        const all = [...tools];
        all.splice(at % (all.length + 1), 0, big);
        const error = await walkToolsPages(firmwareDevice(all), { withUserTools: true }).catch(
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(ProtocolError);
        expect((error as ProtocolError).code).toBe('PAGE_ERROR');
        expect((error as ProtocolError).message).toContain('self.big');
      }),
      { numRuns: 100 },
    );
  });

  it('the walker always terminates, whatever a broken device answers', async () => {
    const pageArb = fc.oneof(
      fc.record({
        tools: fc.array(fc.record({ name: fc.constantFrom('a', 'b', 'c', 'd') }), { maxLength: 3 }),
        nextCursor: fc.option(fc.constantFrom('a', 'b', 'c', 'd', ''), { nil: undefined }),
      }),
      fc.constant(null),
      fc.constant({ tools: 3 }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(pageArb, { minLength: 1, maxLength: 80 }), async (answers) => {
        let i = 0;
        const device = async () => {
          const answer = answers[i++ % answers.length];
          if (answer === null) throw new WireError('boom');
          return answer;
        };
        const outcome = await walkToolsPages(device, { maxPages: 20 }).then(
          () => 'done',
          (e: unknown) => (e instanceof ProtocolError ? e.code : 'untyped'),
        );
        expect(['done', 'PAGE_ERROR', 'PAGE_LOOP', 'PAGE_LIMIT', 'INVALID_PAGE']).toContain(
          outcome,
        );
        expect(i).toBeLessThanOrEqual(20);
      }),
      { numRuns: 300 },
    );
  });
});

describe('walkToolsPages under hostile pages', () => {
  const deep = (depth: number) => JSON.parse(`${'['.repeat(depth)}${']'.repeat(depth)}`);

  it.each([5_000, 100_000])('measures a tool with a member nested %i deep', async (depth) => {
    const walk = await walkToolsPages(async () => ({ tools: [{ name: 'a', odd: deep(depth) }] }));
    expect(walk.tools.map((t) => t.name)).toEqual(['a']);
    expect(walk.pages[0]?.budgetBytes).toBe(
      '{"tools":['.length + `{"name":"a","odd":}`.length + 2 * depth + 1,
    );
  });

  it('stops with PAGE_ERROR when a page request fails with any value', async () => {
    for (const failure of [deep(100_000), Object.create(null), Symbol('x'), 10n]) {
      await expect(walkToolsPages(() => Promise.reject(failure))).rejects.toMatchObject({
        code: 'PAGE_ERROR',
      });
    }
  });

  it('ends any walk with tools or a ProtocolError', async () => {
    const pageArb = fc.oneof(
      fc.jsonValue({ maxDepth: 3 }),
      fc.record(
        {
          tools: fc.oneof(
            fc.array(
              fc.dictionary(
                fc.constantFrom('name', 'description', 'x'),
                fc.jsonValue({ maxDepth: 2 }),
              ),
              {
                maxLength: 3,
              },
            ),
            fc.jsonValue({ maxDepth: 1 }),
          ),
          nextCursor: fc.oneof(fc.constantFrom('a', 'b', ''), fc.jsonValue({ maxDepth: 1 })),
        },
        { requiredKeys: [] },
      ),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(pageArb, { minLength: 1, maxLength: 4 }), async (pages) => {
        let at = 0;
        try {
          await walkToolsPages(async () => pages[Math.min(at++, pages.length - 1)], {
            maxPages: 6,
          });
        } catch (error) {
          expect(error).toBeInstanceOf(ProtocolError);
        }
      }),
      { seed: 42, numRuns: 500 },
    );
  });
});
