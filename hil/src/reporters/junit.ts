/**
 * JUnit XML in the dialect Jenkins, GitLab and GitHub test reporters read: one `<testsuite>` per
 * board, one `<testcase>` per check, rig failures as `rig.<step>` errors, and retries in the
 * Maven Surefire shape (`<flakyFailure>` in a passing testcase, `<rerunFailure>` in a failing one).
 */
import { renderComparisonTestsuite } from '../compare/render.js';
import { type BoardReport, type CheckResult, headline, type RunReport } from '../model.js';
import { xmlAttr, xmlText } from './escape.js';
import { checkText, type RigFailure, rigFailures, rootCauseText } from './format.js';

function seconds(ms: number): string {
  return Number.isFinite(ms) && ms > 0 ? (ms / 1000).toFixed(3) : '0.000';
}

function attrs(values: Readonly<Record<string, string | number | undefined>>): string {
  return Object.entries(values)
    .filter((entry): entry is [string, string | number] => entry[1] !== undefined)
    .map(([name, value]) => ` ${name}="${xmlAttr(String(value))}"`)
    .join('');
}

/** Expected/actual on their own lines, so a CI page shows the difference at a glance. */
function body(check: CheckResult): string {
  const lines = check.message === '' ? [] : [check.message];
  if (check.expected !== undefined) lines.push(`expected: ${check.expected}`);
  if (check.actual !== undefined) lines.push(`actual: ${check.actual}`);
  lines.push(`description: ${check.description}`);
  return xmlText(lines.join('\n'));
}

function testcase(board: BoardReport, check: CheckResult): string {
  const open = `    <testcase${attrs({
    classname: `${board.name}.${check.suite}`,
    name: check.id,
    time: seconds(check.durationMs),
  })}`;
  const inner: string[] = [];
  const retryWord = check.retries === 1 ? 'retry' : 'retries';
  switch (check.status) {
    case 'failed':
      inner.push(
        `      <failure${attrs({ message: checkText(check), type: check.severity })}>${body(check)}</failure>`,
      );
      // Surefire: each rerun that also failed; the model keeps only the count.
      for (let attempt = 2; attempt <= check.retries + 1; attempt++) {
        inner.push(
          `      <rerunFailure${attrs({ message: `attempt ${attempt} of ${check.retries + 1} failed`, type: check.severity })}/>`,
        );
      }
      break;
    case 'known-deviation':
      inner.push(
        `      <skipped${attrs({ message: `known deviation: ${check.deviation?.reason ?? check.message}` })}>${body(check)}</skipped>`,
      );
      break;
    case 'skipped':
      inner.push(
        `      <skipped${attrs({ message: check.message === '' ? 'skipped' : check.message })}/>`,
      );
      break;
    case 'passed': {
      // Surefire's flaky shape: the testcase passed, the failed attempts come before it.
      for (let attempt = 1; attempt <= check.retries; attempt++) {
        inner.push(
          `      <flakyFailure${attrs({
            message: `attempt ${attempt} failed; passed after ${check.retries} ${retryWord}`,
            type: check.severity,
          })}/>`,
        );
      }
      const notes: string[] = [];
      if (check.message !== '') notes.push(check.message);
      if (check.deviation?.fixed === true) {
        notes.push(
          `known deviation no longer occurs (${check.deviation.reason}): update the baseline`,
        );
      }
      if (notes.length > 0)
        inner.push(`      <system-out>${xmlText(notes.join('\n'))}</system-out>`);
      break;
    }
  }
  return inner.length === 0 ? `${open}/>` : `${open}>\n${inner.join('\n')}\n    </testcase>`;
}

const FAILED_AT: Readonly<Record<RigFailure['kind'], string>> = {
  rig: 'the rig failed at',
  board: 'the board failed at',
  refused: 'the board refused the build at',
};

function rigTestcase(board: BoardReport, failure: RigFailure): string {
  return [
    `    <testcase${attrs({ classname: `${board.name}.rig`, name: `rig.${failure.step}`, time: seconds(failure.durationMs) })}>`,
    `      <error${attrs({ message: failure.reason, type: failure.kind })}>${xmlText(
      `${FAILED_AT[failure.kind]} ${failure.step}: ${failure.reason}`,
    )}</error>`,
    '    </testcase>',
  ].join('\n');
}

/** A rig `hil merge --expect` named that sent no report: a testsuite with its one error. */
function missingRigTestsuite(rig: string, report: RunReport): string {
  return [
    `  <testsuite${attrs({ name: rig, tests: 1, failures: 0, errors: 1, skipped: 0, time: '0.000', timestamp: report.startedAt })}>`,
    '    <properties>',
    ...runProperties(report).map(([name, value]) => `      <property${attrs({ name, value })}/>`),
    '    </properties>',
    `    <testcase${attrs({ classname: `${rig}.rig`, name: 'rig.report', time: '0.000' })}>`,
    `      <error${attrs({ message: `no report from rig ${rig}`, type: 'rig' })}>${xmlText(
      `rig ${rig} was expected (--expect) but sent no report: the rig failed`,
    )}</error>`,
    '    </testcase>',
    '  </testsuite>',
  ].join('\n');
}

/** What each testsuite says of the whole run: its exit code, headline and root cause. */
function runProperties(report: RunReport): [string, string][] {
  const cause = report.summary.rootCause;
  return [
    ['run.exitCode', String(report.exitCode)],
    ['run.headline', headline(report).text],
    ...(cause === undefined ? [] : [['run.rootCause', rootCauseText(cause)] as [string, string]]),
    ['run.interrupted', String(report.interrupted)],
  ];
}

/** A board cut short by Ctrl-C: the step it was in, skipped (its verdict is unknown, not failed). */
function interruptedTestcase(board: BoardReport): string {
  const step = board.failure?.step ?? board.steps.find((s) => s.status === 'interrupted')?.step;
  return [
    `    <testcase${attrs({ classname: `${board.name}.rig`, name: `rig.${step ?? 'run'}`, time: '0.000' })}>`,
    `      <skipped${attrs({ message: `interrupted by Ctrl-C${step === undefined ? '' : ` at ${step}`}` })}/>`,
    '    </testcase>',
  ].join('\n');
}

/** A step that passed on a retry (a flash at the lower baud) is flaky in the same shape as a check. */
function flakyStepTestcase(board: BoardReport, step: BoardReport['steps'][number]): string {
  return [
    `    <testcase${attrs({ classname: `${board.name}.rig`, name: `rig.${step.step}`, time: seconds(step.durationMs) })}>`,
    `      <flakyError${attrs({ message: `passed on a retry: ${step.message ?? step.step}`, type: 'rig' })}/>`,
    '    </testcase>',
  ].join('\n');
}

interface Counts {
  tests: number;
  failures: number;
  errors: number;
  skipped: number;
}

function testsuite(board: BoardReport, report: RunReport): { xml: string; counts: Counts } {
  const failures = rigFailures(board);
  const flakySteps = board.steps.filter((s) => s.flaky === true && s.status === 'passed');
  const interrupted = board.status === 'interrupted' ? 1 : 0;
  const counts: Counts = {
    tests: board.checks.length + failures.length + flakySteps.length + interrupted,
    failures: board.checks.filter((c) => c.status === 'failed').length,
    errors: failures.length,
    skipped:
      board.checks.filter((c) => c.status === 'skipped' || c.status === 'known-deviation').length +
      interrupted,
  };
  const image = board.image ?? report.firmware;
  const properties: [string, string | undefined][] = [
    ['firmwareVersion', board.firmwareVersion],
    ['expectedVersion', board.expectedVersion],
    ['upgradedVersion', board.upgradedVersion],
    ['image.file', image?.file],
    ['image.sha256', image?.sha256],
    ['image.project', image?.project],
    ['image.version', image?.version],
    ['image.board', image?.board],
    ['otaImage.file', report.otaImage?.file],
    ['otaImage.sha256', report.otaImage?.sha256],
    ['otaImage.version', report.otaImage?.version],
    ['chip', board.chip],
    ['mac', board.mac],
    ['variant', board.variant],
    ['transport', board.transport],
    ['port', board.port],
    ['kind', board.kind],
    ['status', board.status],
    // Each rig step's outcome; a step a failed check stopped or failed names that check.
    ...board.steps.map((s): [string, string] => [
      `step.${s.step}`,
      s.check === undefined ? s.status : `${s.status} (${s.check})`,
    ]),
    ['consoleLog', board.consoleLog],
    ['transcript', board.transcript],
    ['replica', board.replica],
    ...runProperties(report),
    ['host', report.host?.hostname],
    ['host.os', report.host?.os],
    ['host.node', report.host?.node],
    ['tool', `${report.tool.name} ${report.tool.version}`],
  ];
  const lines = [
    `  <testsuite${attrs({
      name: board.name,
      tests: counts.tests,
      failures: counts.failures,
      errors: counts.errors,
      skipped: counts.skipped,
      time: seconds(board.durationMs),
      timestamp: board.startedAt,
    })}>`,
    '    <properties>',
    ...properties
      .filter((entry): entry is [string, string] => entry[1] !== undefined)
      .map(([name, value]) => `      <property${attrs({ name, value })}/>`),
    '    </properties>',
    ...failures.map((f) => rigTestcase(board, f)),
    ...(interrupted > 0 ? [interruptedTestcase(board)] : []),
    ...flakySteps.map((s) => flakyStepTestcase(board, s)),
    ...board.checks.map((c) => testcase(board, c)),
    '  </testsuite>',
  ];
  return { xml: lines.join('\n'), counts };
}

export function renderJunit(report: RunReport): string {
  const suites = report.boards.map((board) => testsuite(board, report));
  // `hil run --compare-to`: a `comparison` testsuite, a failing testcase per regression.
  if (report.comparison !== undefined) {
    const { xml, tests, failures } = renderComparisonTestsuite(report.comparison);
    suites.push({ xml, counts: { tests, failures, errors: 0, skipped: 0 } });
  }
  // `hil merge --expect`: a rig that sent no report failed, and JUnit says so too.
  for (const rig of report.qualification?.missing ?? []) {
    suites.push({
      xml: missingRigTestsuite(rig, report),
      counts: { tests: 1, failures: 0, errors: 1, skipped: 0 },
    });
  }
  const total = suites.reduce<Counts>(
    (sum, { counts }) => ({
      tests: sum.tests + counts.tests,
      failures: sum.failures + counts.failures,
      errors: sum.errors + counts.errors,
      skipped: sum.skipped + counts.skipped,
    }),
    { tests: 0, failures: 0, errors: 0, skipped: 0 },
  );
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites${attrs({ name: 'hil', ...total, time: seconds(report.durationMs), timestamp: report.startedAt })}>`,
    ...suites.map((s) => s.xml),
    '</testsuites>',
    '',
  ].join('\n');
}
