/**
 * Opens the written report.html in headless Chromium and checks that what the report is for
 * actually renders: board cards, names, check rows and the latency plots. Needs Debian's
 * chromium at /usr/bin/chromium (`.ci/run` installs it); skipped without it.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { type BrowserContext, chromium, type Locator, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixtureReport } from './fixture.test-helper.js';
import { writeReports } from './index.js';

const CHROMIUM = '/usr/bin/chromium';
const hasChromium = existsSync(CHROMIUM);
const title = hasChromium
  ? 'report.html in headless Chromium'
  : `report.html in headless Chromium (skipped: ${CHROMIUM} not found; install Debian's chromium, as .ci/run does)`;

/** Visible and laid out with a non-zero size. */
async function expectRendered(locator: Locator, what: string): Promise<void> {
  expect(await locator.isVisible(), `${what} visible`).toBe(true);
  const box = await locator.boundingBox();
  expect(box?.width ?? 0, `${what} width`).toBeGreaterThan(0);
  expect(box?.height ?? 0, `${what} height`).toBeGreaterThan(0);
}

describe.skipIf(!hasChromium)(title, () => {
  const report = fixtureReport();
  let dir = '';
  let context: BrowserContext | undefined;
  let page: Page | undefined;
  const errors: string[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'hil-html-'));
    const { html } = await writeReports(report, {
      outDir: join(dir, 'out'),
      reporters: ['html'],
      env: {},
    });
    if (html === undefined) throw new Error('report.html was not written');
    // A fresh profile per run: no state from an earlier run or another test.
    context = await chromium.launchPersistentContext(join(dir, 'profile'), {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
      viewport: { width: 1280, height: 900 },
    });
    page = context.pages()[0] ?? (await context.newPage());
    page.on('pageerror', (error) => errors.push(error.message));
    page.on('console', (message) => {
      if (message.type() === 'error') errors.push(message.text());
    });
    // Nothing may leave the machine: the report is self-contained.
    page.on('request', (request) => {
      if (!request.url().startsWith('file:')) errors.push(`request to ${request.url()}`);
    });
    await page.goto(pathToFileURL(html).href, { waitUntil: 'load' });
  }, 60_000);

  afterAll(async () => {
    await context?.close();
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  function current(): Page {
    if (page === undefined) throw new Error('the page did not open');
    return page;
  }

  it('renders the run summary with the exit code', async () => {
    const summary = current().getByTestId('run-summary');
    await expectRendered(summary, 'run summary');
    expect(await summary.getAttribute('data-exit-code')).toBe('3');
    expect(await summary.textContent()).toContain('exit 3');
  });

  it("renders the root cause in the banner, and a passed check's severity in a neutral tone", async () => {
    const cause = current().getByTestId('root-cause');
    await expectRendered(cause, 'root cause');
    expect(await cause.textContent()).toContain('vanished at session');
    const cell = current()
      .locator(
        '[data-testid="check-row"][data-check-id="initialize.reply-shape"][data-status="passed"]',
      )
      .first()
      .getByTestId('check-severity');
    expect(await cell.textContent()).toBe('critical');
    // The cell's colour, the page's text colour and --bad's, as Chromium computes them (the
    // expression runs in the page: the test's own types have no DOM).
    const [color, text, bad] = (await current().evaluate(`(() => {
      const cell = document.querySelector('[data-check-id="initialize.reply-shape"][data-status="passed"] [data-testid="check-severity"]');
      const probe = document.createElement('span');
      probe.style.color = 'var(--bad)';
      document.body.append(probe);
      const out = [getComputedStyle(cell).color, getComputedStyle(document.body).color, getComputedStyle(probe).color];
      probe.remove();
      return out;
    })()`)) as string[];
    expect(color).toBe(text);
    expect(color).not.toBe(bad);
  });

  it('renders a card per board with its name', async () => {
    const cards = current().getByTestId('board-card');
    expect(await cards.count()).toBe(report.boards.length);
    for (const [i, board] of report.boards.entries()) {
      const card = cards.nth(i);
      await expectRendered(card, `card ${board.name}`);
      const name = card.getByTestId('board-name');
      await expectRendered(name, `name ${board.name}`);
      expect(await name.textContent()).toBe(board.name);
    }
  });

  it('renders every check row with its status', async () => {
    const cards = current().getByTestId('board-card');
    for (const [i, board] of report.boards.entries()) {
      const rows = cards.nth(i).getByTestId('check-row');
      expect(await rows.count()).toBe(board.checks.length);
      for (let r = 0; r < board.checks.length; r++) {
        const row = rows.nth(r);
        await expectRendered(row, `${board.name} row ${r}`);
        await expectRendered(row.getByTestId('check-status'), `${board.name} row ${r} status`);
      }
      const ids = await rows.evaluateAll((elements) =>
        elements.map((e) => e.getAttribute('data-check-id')),
      );
      expect([...ids].sort()).toEqual(board.checks.map((c) => c.id).sort());
    }
    const first = cards.nth(1).getByTestId('check-row').first();
    expect(await first.getAttribute('data-check-id')).toBe('tools-list.page-budget');
    expect(await first.textContent()).toContain('page 2 is over the budget');
  });

  it('renders the latency plots as SVG with the samples drawn', async () => {
    const plots = current().getByTestId('latency-plot');
    const expected = report.boards.reduce((n, b) => n + b.latency.length, 0);
    expect(await plots.count()).toBe(expected);
    for (let i = 0; i < expected; i++) {
      const svg = plots.nth(i).locator('svg.plot');
      await expectRendered(svg, `latency plot ${i}`);
      await expectRendered(svg.locator('polyline.curve'), `latency curve ${i}`);
      await expectRendered(plots.nth(i).locator('svg.histogram'), `histogram ${i}`);
    }
    expect(await plots.first().locator('svg.plot circle.sample').count()).toBe(50);
  });

  it('hides passing rows with the problems filter, and raised no errors', async () => {
    const p = current();
    const passing = p.locator('[data-testid="check-row"][data-status="passed"].passed').first();
    await expectRendered(passing, 'a passing row');
    await p.locator('#only-problems').check();
    expect(await passing.isVisible()).toBe(false);
    await expectRendered(
      p.locator('[data-testid="check-row"][data-status="failed"]').first(),
      'a failed row',
    );
    await p.locator('#only-problems').uncheck();
    expect(await passing.isVisible()).toBe(true);
    expect(errors).toEqual([]);
  });
});
