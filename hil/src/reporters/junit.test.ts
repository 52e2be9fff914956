import { describe, expect, it } from 'vitest';
import { xmlAttr, xmlText } from './escape.js';
import {
  elements,
  fixtureReport,
  parseXml,
  reportOf,
  type XmlElement,
} from './fixture.test-helper.js';
import { renderJunit } from './junit.js';

function suiteOf(root: XmlElement, board: string): XmlElement {
  const suite = elements(root, 'testsuite').find((s) => s.attributes.name === board);
  if (suite === undefined) throw new Error(`no testsuite ${board}`);
  return suite;
}

function caseOf(suite: XmlElement, name: string): XmlElement {
  const testcase = elements(suite, 'testcase').find((c) => c.attributes.name === name);
  if (testcase === undefined) throw new Error(`no testcase ${name}`);
  return testcase;
}

describe('renderJunit', () => {
  const xml = renderJunit(fixtureReport());
  const root = parseXml(xml);

  it('is well-formed XML with a declaration and a testsuites root', () => {
    expect(xml.startsWith('<?xml version="1.0" encoding="UTF-8"?>\n')).toBe(true);
    expect(root.name).toBe('testsuites');
    expect(root.attributes).toMatchObject({
      name: 'hil',
      tests: '18',
      failures: '2',
      errors: '1',
      skipped: '4',
      time: '51.250',
    });
  });

  it('has one testsuite per board with its counts and properties', () => {
    expect(elements(root, 'testsuite').map((s) => s.attributes.name)).toEqual([
      'bread-compact-wifi',
      'robot',
      'vanished',
    ]);
    const robot = suiteOf(root, 'robot');
    expect(robot.attributes).toMatchObject({
      tests: '7',
      failures: '2',
      errors: '0',
      skipped: '1',
      time: '49.480',
    });
    const properties = Object.fromEntries(
      elements(robot, 'property').map((p) => [p.attributes.name, p.attributes.value]),
    );
    expect(properties).toMatchObject({
      firmwareVersion: '1.8.2',
      chip: 'ESP32-S3',
      mac: 'a0:b7:65:12:34:56',
      variant: 'otto-robot',
      transport: 'mqtt',
      port: '/dev/serial/by-id/usb-Espressif_USB_JTAG_serial_debug_unit_A0:B7:65:12:34:56-if00',
    });
    // A board that never initialised has no firmware version to report.
    const vanished = elements(suiteOf(root, 'vanished'), 'property').map((p) => p.attributes.name);
    expect(vanished).not.toContain('firmwareVersion');
    expect(vanished).toContain('port');
  });

  it('names testcases <board>.<suite> / <check id> with the time in seconds', () => {
    const testcase = caseOf(suiteOf(root, 'bread-compact-wifi'), 'tools-call.volume-round-trip');
    expect(testcase.attributes).toEqual({
      classname: 'bread-compact-wifi.tools-call',
      name: 'tools-call.volume-round-trip',
      time: '0.310',
    });
    expect(elements(suiteOf(root, 'bread-compact-wifi'), 'testcase')).toHaveLength(10);
  });

  it('reports a failure with its severity, message and expected/actual in the body', () => {
    const testcase = caseOf(suiteOf(root, 'robot'), 'tools-list.page-budget');
    const [failure] = elements(testcase, 'failure');
    expect(failure?.attributes).toEqual({
      message: 'page 2 is over the budget: expected ≤ 8000 bytes by the firmware rule, got 8123',
      type: 'major',
    });
    expect(failure?.text).toContain('expected: ≤ 8000 bytes by the firmware rule\nactual: 8123');
  });

  it('reports a check that failed on every retry with Surefire rerunFailure elements', () => {
    const testcase = caseOf(suiteOf(root, 'robot'), 'tools-call.concurrent');
    expect(elements(testcase, 'failure')).toHaveLength(1);
    expect(elements(testcase, 'rerunFailure').map((e) => e.attributes.message)).toEqual([
      'attempt 2 of 3 failed',
      'attempt 3 of 3 failed',
    ]);
  });

  it('reports a check that passed after a retry as flaky: flakyFailure inside a passing testcase', () => {
    const testcase = caseOf(suiteOf(root, 'bread-compact-wifi'), 'tools-call.volume-round-trip');
    expect(testcase.children.map((c) => c.name)).toEqual(['flakyFailure', 'system-out']);
    expect(elements(testcase, 'flakyFailure')[0]?.attributes.type).toBe('major');
    // Jenkins and GitHub count it as passed: no failure, error or skipped element.
    expect(elements(testcase, 'failure')).toHaveLength(0);
  });

  it('reports known deviations and skipped checks as skipped', () => {
    const suite = suiteOf(root, 'bread-compact-wifi');
    const deviation = elements(caseOf(suite, 'tools-call.error-code'), 'skipped')[0];
    expect(deviation?.attributes.message).toBe(
      'known deviation: firmware error replies carry no code (baseline)',
    );
    expect(deviation?.text).toContain('expected: "code": -32602');
    expect(elements(caseOf(suite, 'initialize.vision'), 'skipped')[0]?.attributes.message).toBe(
      'skipped by the inventory',
    );
    // A deviation that disappeared passes, with a note to update the baseline.
    const fixed = caseOf(suite, 'robustness.ping');
    expect(elements(fixed, 'skipped')).toHaveLength(0);
    expect(elements(fixed, 'system-out')[0]?.text).toContain('update the baseline');
  });

  it('reports a rig failure as a rig.<step> testcase with an error', () => {
    const suite = suiteOf(root, 'vanished');
    expect(suite.attributes).toMatchObject({ tests: '1', failures: '0', errors: '1' });
    const testcase = caseOf(suite, 'rig.session');
    expect(testcase.attributes).toMatchObject({ classname: 'vanished.rig', time: '30.000' });
    expect(elements(testcase, 'error')[0]?.attributes).toEqual({
      message: 'port /dev/ttyUSB1 vanished while waiting for the hello',
      type: 'rig',
    });
  });

  it('reports a flash that passed at the lower baud as a flaky rig testcase', () => {
    const testcase = caseOf(suiteOf(root, 'robot'), 'rig.flash');
    expect(elements(testcase, 'flakyError')[0]?.attributes.message).toContain('passed on a retry');
    expect(elements(testcase, 'error')).toHaveLength(0);
  });

  it('synthesises the rig testcase when the failed step was never recorded', () => {
    const report = fixtureReport();
    const vanished = report.boards[2];
    if (vanished === undefined) throw new Error('fixture');
    vanished.steps.splice(0);
    const suite = suiteOf(parseXml(renderJunit(reportOf([vanished]))), 'vanished');
    expect(elements(caseOf(suite, 'rig.session'), 'error')).toHaveLength(1);
  });

  it('escapes markup, quotes and removes control characters and ANSI colours', () => {
    const testcase = caseOf(suiteOf(root, 'bread-compact-wifi'), 'robustness.unescaped-message');
    const skipped = elements(testcase, 'skipped')[0];
    expect(skipped?.attributes.message).toBe(
      'known deviation: firmware does not escape "quotes" in messages',
    );
    expect(skipped?.text).toContain('actual: {"message":"Unknown tool: say "hi" <now> & later"}\n');
    expect(xml).toContain('&lt;now&gt; &amp; later');
    expect(xml.includes('\u0007') || xml.includes('\u001b')).toBe(false);
  });

  it('keeps the whole document well-formed whatever the names and messages hold', () => {
    const report = fixtureReport();
    const board = report.boards[1];
    const check = board?.checks[1];
    if (board === undefined || check === undefined) throw new Error('fixture');
    check.message = `bad ]]> <![CDATA[ & "x" 'y' \u0000\u0001\ud800 tab\tnew\nline`;
    const xmlWithJunk = renderJunit(reportOf([{ ...board, name: 'r<o>b"o&t' }]));
    const parsed = parseXml(xmlWithJunk);
    expect(elements(parsed, 'testsuite')[0]?.attributes.name).toBe('r<o>b"o&t');
    const failure = elements(parsed, 'failure')[0];
    // Line breaks and tabs in attributes survive as character references.
    expect(failure?.attributes.message).toMatch(
      /^bad \]\]> <!\[CDATA\[ & "x" 'y' {2}tab\tnew\nline: expected/,
    );
  });
});

describe('xml escaping', () => {
  it('escapes text and attributes', () => {
    expect(xmlText('a < b && c > d')).toBe('a &lt; b &amp;&amp; c &gt; d');
    expect(xmlAttr(`"it's"\n`)).toBe('&quot;it&apos;s&quot;&#10;');
  });

  it('drops characters XML 1.0 cannot carry but keeps astral characters', () => {
    expect(xmlText('ok\u0000\u0008\u000b\u001f\ufffe 🙂 \udc00')).toBe('ok 🙂 ');
  });
});

describe('the test parser is strict', () => {
  it.each([
    ['crossed tags', '<a><b></a></b>'],
    ['an unclosed tag', '<a><b></b>'],
    ['a bare ampersand', '<a>x & y</a>'],
    ['an unknown entity', '<a>&nbsp;</a>'],
    ['an unquoted attribute', '<a b=c/>'],
    ['< in an attribute', '<a b="<"/>'],
    ['a duplicate attribute', '<a b="1" b="2"/>'],
    ['two roots', '<a/><b/>'],
    ['a control character', '<a>\u0001</a>'],
    ['a stray <', '<a>1 < 2</a>'],
  ])('rejects %s', (_, text) => {
    expect(() => parseXml(text)).toThrow();
  });
});
