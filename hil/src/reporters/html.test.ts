import { describe, expect, it } from 'vitest';
import { escapeHtml } from './escape.js';
import {
  elements,
  fixtureReport,
  mqttReport,
  parseXml,
  reportOf,
  textContent,
  type XmlElement,
} from './fixture.test-helper.js';
import { artefactHref, LABEL_GAP, renderHtml, spreadLabels } from './html.js';

/**
 * The report is written as well-formed markup, so after closing the HTML void elements and
 * dropping the doctype the strict XML parser reads the whole page.
 */
function parsePage(html: string): XmlElement {
  const xmlish = html
    .replace(/^<!doctype html>\n/, '')
    .replace(/<(meta|input|br)\b([^>]*?)\/?>/g, '<$1$2/>')
    .replace(/<style>[\s\S]*?<\/style>/, '<style/>')
    .replace(/<script>[\s\S]*?<\/script>/, '<script/>');
  return parseXml(xmlish);
}

function byTestId(root: XmlElement, id: string): XmlElement[] {
  return [root, ...allElements(root)].filter((e) => e.attributes['data-testid'] === id);
}

function allElements(root: XmlElement): XmlElement[] {
  return root.children.flatMap((c) => [c, ...allElements(c)]);
}

const textOf = textContent;

describe('renderHtml', () => {
  const report = fixtureReport();
  const html = renderHtml(report);
  const page = parsePage(html);

  it('is one well-formed page', () => {
    expect(
      html.startsWith('<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">'),
    ).toBe(true);
    expect(page.name).toBe('html');
  });

  it('is self-contained: no external stylesheet, script, image, font or URL', () => {
    expect(html).not.toMatch(/<link\b/i);
    expect(html).not.toMatch(/<script\b[^>]*\bsrc=/i);
    expect(html).not.toMatch(/<img\b/i);
    expect(html).not.toMatch(/@import|url\(/i);
    const hrefs = [...html.matchAll(/\bhref="([^"]*)"/g)].map((m) => m[1] ?? '');
    for (const href of hrefs) expect(href, href).toMatch(/^(#board-\d+|[\w.%-]+(\/[\w.%-]+)*)$/);
    // Only the SVG namespace appears as a URL.
    const urls = [...html.matchAll(/\b(?:https?|wss?):\/\/[^\s"<]+/g)].map((m) => m[0]);
    expect(new Set(urls)).toEqual(
      new Set([
        'http://www.w3.org/2000/svg',
        'http://192.168.1.20:8002/xiaozhi/ota/',
        'ws://192.168.1.20:8000/xiaozhi/v1/',
      ]),
    );
    // The server addresses are shown as text, never linked.
    expect(html).not.toContain('href="http');
  });

  it('has a run summary with the exit code', () => {
    const [summary] = byTestId(page, 'run-summary');
    expect(summary?.attributes['data-exit-code']).toBe('3');
    const text = textOf(summary ?? page);
    expect(text).toContain('exit 3');
    expect(textOf(byTestId(page, 'headline')[0] ?? page)).toBe(
      'rig failed: vanished at session; 2 checks failed; 10 checks passed, 1 skipped, 3 known deviations, 1 deviation fixed (update the baseline)',
    );
    expect(textOf(byTestId(page, 'root-cause')[0] ?? page)).toBe(
      'Root cause: vanished at session: port /dev/ttyUSB1 vanished while waiting for the hello',
    );
    expect(text).toContain('the rig failed (board missing, port lost, backend could not start)');
  });

  it('has a card per board with its name and identity', () => {
    const cards = byTestId(page, 'board-card');
    expect(cards.map((c) => c.attributes['data-board'])).toEqual([
      'bread-compact-wifi',
      'robot',
      'vanished',
    ]);
    expect(cards.map((c) => c.attributes['data-status'])).toEqual([
      'passed',
      'failed',
      'rig-failed',
    ]);
    for (const card of cards) {
      expect(byTestId(card, 'board-name').map(textOf)).toEqual([card.attributes['data-board']]);
    }
    const robot = textOf(cards[1] ?? page);
    for (const value of [
      'otto-robot',
      'ESP32-S3',
      'a0:b7:65:12:34:56',
      '/dev/serial/by-id/',
      '1.8.2',
      'Expected version',
      'MQTT',
    ]) {
      expect(robot).toContain(value);
    }
  });

  it('has a row per check, failures first, with its status', () => {
    const cards = byTestId(page, 'board-card');
    report.boards.forEach((board, i) => {
      const rows = byTestId(cards[i] ?? page, 'check-row');
      expect(rows.map((r) => r.attributes['data-check-id']).sort()).toEqual(
        board.checks.map((c) => c.id).sort(),
      );
      for (const row of rows) expect(byTestId(row, 'check-status')).toHaveLength(1);
    });
    const robotRows = byTestId(cards[1] ?? page, 'check-row');
    expect(robotRows.map((r) => r.attributes['data-status'])).toEqual([
      'failed',
      'failed',
      'known-deviation',
      'passed',
      'passed',
      'passed',
    ]);
    const first = robotRows[0] ?? page;
    expect(first.attributes['data-check-id']).toBe('tools-list.page-budget');
    expect(textOf(first)).toContain(
      'page 2 is over the budget: expected ≤ 8000 bytes by the firmware rule, got 8123',
    );
    expect(textOf(first)).toContain('major');
    const virtualStatuses = byTestId(cards[0] ?? page, 'check-status').map((s) => textOf(s));
    expect(virtualStatuses.slice(0, 4)).toEqual([
      'known deviation',
      'known deviation',
      'passed (fixed)',
      'passed (flaky)',
    ]);
  });

  it('shows rig steps with durations and the rig failure', () => {
    const cards = byTestId(page, 'board-card');
    const vanished = cards[2] ?? page;
    const steps = byTestId(vanished, 'step-row');
    expect(steps.map((s) => s.attributes['data-step'])).toEqual([
      'open',
      'identify',
      'reset',
      'boot',
      'ota-check',
      'session',
    ]);
    expect(textOf(steps[5] ?? page)).toContain('30.0 s');
    expect(textOf(byTestId(vanished, 'rig-failure')[0] ?? page)).toBe(
      'The rig failed at session: port /dev/ttyUSB1 vanished while waiting for the hello',
    );
    expect(textOf(vanished)).toContain('no checks ran');
  });

  it('plots latency per method as inline SVG with p50/p90/p99 and ping marked', () => {
    const plots = byTestId(page, 'latency-plot');
    expect(plots.map((p) => p.attributes['data-method'])).toEqual([
      'tools/call self.get_device_status',
      'tools/call self.get_device_status',
      'tools/list',
    ]);
    const svgs = elements(plots[0] ?? page, 'svg');
    expect(svgs).toHaveLength(2);
    const [curve, histogram] = svgs;
    expect(
      elements(curve ?? page, 'circle').filter((c) => c.attributes.class === 'sample'),
    ).toHaveLength(50);
    const labels = elements(curve ?? page, 'text').map(textOf);
    expect(labels).toEqual(
      expect.arrayContaining([
        'p50 4.40 ms',
        'p90 5.31 ms',
        'p99 20.0 ms',
        'ping p50 0.42 ms',
        'ping p99 1.90 ms',
      ]),
    );
    const bars = elements(histogram ?? page, 'rect');
    expect(bars.reduce((sum, bar) => sum + Number(/: (\d+)$/.exec(textOf(bar))?.[1]), 0)).toBe(50);
    expect(textOf(plots[0] ?? page)).toContain('50 samples: min 3.07 ms, p50 4.40 ms');
  });

  it('keeps the labels right of each latency plot apart, each next to what it names', () => {
    for (const plot of byTestId(page, 'latency-plot')) {
      const [curve] = elements(plot, 'svg');
      const labels = elements(curve ?? page, 'text').filter((t) =>
        ['marker-label', 'ping-label'].includes(t.attributes.class ?? ''),
      );
      expect(labels).toHaveLength(5);
      const ys = labels.map((t) => Number(t.attributes.y)).sort((a, b) => a - b);
      for (let i = 1; i < ys.length; i++)
        expect((ys[i] ?? 0) - (ys[i - 1] ?? 0)).toBeGreaterThanOrEqual(LABEL_GAP - 0.05);
    }
    // The fixture's first plot: the ping lines 1.5 ms apart at a 25 ms scale once overlapped.
    const [first] = byTestId(page, 'latency-plot');
    const y = (name: string) =>
      Number(
        elements(elements(first ?? page, 'svg')[0] ?? page, 'text').find(
          (t) => t.attributes.class?.endsWith('-label') && textOf(t).startsWith(`${name} `),
        )?.attributes.y,
      );
    expect(y('ping p50') - y('ping p99')).toBeGreaterThanOrEqual(LABEL_GAP - 0.05);
    // p99 (20 ms) sits high, the pings low: the labels keep that order.
    expect(y('p99')).toBeLessThan(y('p50'));
    expect(y('p50')).toBeLessThan(y('ping p99'));
  });

  it('links every board from the top of the page to its card', () => {
    const links = byTestId(page, 'board-link');
    const ids = byTestId(page, 'board-card').map((card) => `#${card.attributes.id}`);
    expect(links.map((a) => a.attributes.href)).toEqual(ids);
    expect(links.map(textOf)).toEqual([
      'bread-compact-wifi: passed',
      'robot: failed',
      'vanished: rig failed at session',
    ]);
  });

  it('links the console log and transcript relative to the report', () => {
    const cards = byTestId(page, 'board-card');
    const links = elements(cards[1] ?? page, 'a').map((a) => [textOf(a), a.attributes.href]);
    expect(links).toEqual([
      ['console log', 'robot/console.log'],
      ['transcript', 'robot/transcript.jsonl'],
    ]);
    expect(elements(cards[2] ?? page, 'a').map(textOf)).toEqual(['console log']);
  });

  it('escapes what the board sent', () => {
    expect(html).toContain('say &quot;hi&quot; &lt;now&gt; &amp; later');
    expect(html).not.toContain('<now>');
    expect(html.includes('\u0007') || html.includes('\u001b')).toBe(false);
    const board = fixtureReport().boards[0];
    if (board === undefined) throw new Error('fixture');
    const odd = renderHtml(reportOf([{ ...board, name: '<script>alert(1)</script>' }]));
    expect(odd).not.toContain('<script>alert');
    expect(byTestId(parsePage(odd), 'board-name').map(textOf)).toEqual([
      '<script>alert(1)</script>',
    ]);
  });

  it('says when a series has no samples', () => {
    const board = fixtureReport().boards[0];
    const stats = board?.latency[0];
    if (board === undefined || stats === undefined) throw new Error('fixture');
    board.latency.splice(0, 1, { ...stats, valuesMs: [] });
    const text = renderHtml(reportOf([board]));
    expect(text).toContain('no samples recorded');
    expect(elements(byTestId(parsePage(text), 'latency-plot')[0] ?? page, 'svg')).toHaveLength(0);
  });
});

describe('renderHtml of a board over MQTT (no ping there)', () => {
  const page = parsePage(renderHtml(mqttReport()));
  const [plot] = byTestId(page, 'latency-plot');
  const [curve] = elements(plot ?? page, 'svg');
  const ticks = elements(curve ?? page, 'text')
    .filter((t) => t.attributes.class === 'tick')
    .map(textOf);

  it('scales the latency plot to the samples, not 0–1 ms', () => {
    // The samples reach 20 ms: the axis goes past them.
    expect(ticks).toContain('20 ms');
    expect(ticks).not.toContain('1 ms');
    expect(
      elements(curve ?? page, 'text').filter((t) => t.attributes.class === 'ping-label'),
    ).toEqual([]);
    expect(elements(curve ?? page, 'line').filter((l) => l.attributes.class === 'ping')).toEqual(
      [],
    );
  });

  it('says the ping is n/a over MQTT, never "?"', () => {
    const caption = textOf(elements(plot ?? page, 'figcaption')[0] ?? page);
    expect(caption).toContain('WebSocket ping n/a over MQTT');
    expect(caption).not.toContain('?');
  });

  it('shows the severity of a check that passed in a neutral tone', () => {
    const row = byTestId(page, 'check-row').find(
      (r) => r.attributes['data-check-id'] === 'initialize.reply-shape',
    );
    const [cell] = byTestId(row ?? page, 'check-severity');
    expect(textOf(cell ?? page)).toBe('critical');
    expect(cell?.attributes.class).toBe('severity');
  });
});

describe('severity on a failure', () => {
  it('keeps its tone where the check failed', () => {
    const page = parsePage(renderHtml(fixtureReport()));
    const row = byTestId(page, 'check-row').find(
      (r) =>
        r.attributes['data-check-id'] === 'tools-list.page-budget' &&
        r.attributes['data-status'] === 'failed',
    );
    expect(byTestId(row ?? page, 'check-severity')[0]?.attributes.class).toBe('severity major');
  });
});

describe('helpers', () => {
  it('spreads labels apart, near where they want to be, inside the bounds', () => {
    expect(spreadLabels([50, 100, 150], 13, 0, 200)).toEqual([50, 100, 150]);
    expect(spreadLabels([100, 95, 101], 13, 0, 200)).toEqual([108, 95, 121]);
    // Pushed past the bottom, they move up together.
    expect(spreadLabels([199, 200], 13, 0, 200)).toEqual([187, 200]);
    expect(spreadLabels([-5], 13, 10, 200)).toEqual([10]);
  });

  it('escapes HTML text and attributes', () => {
    expect(escapeHtml(`<a href="x">'&'</a>`)).toBe(
      '&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;',
    );
  });

  it('keeps artefact links relative and inert', () => {
    expect(artefactHref('robot/console.log')).toBe('robot/console.log');
    expect(artefactHref('lab board #2/console log.txt')).toBe(
      'lab%20board%20%232/console%20log.txt',
    );
    expect(artefactHref('javascript:alert(1)')).toBe('javascript%3Aalert(1)');
    expect(artefactHref('robot\\console.log')).toBe('robot/console.log');
  });
});
