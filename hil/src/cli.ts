#!/usr/bin/env node
/**
 * The `hil` command. Exit codes (docs/hil.md §5): 0 all passed, 1 a check failed, 2 bad usage or
 * config, 3 the rig failed (board missing, port lost, backend could not start); 130 when
 * interrupted (the reports are still written).
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { defaultVirtualDir, VirtualBoardStore } from '@xiaozhi-mcp/device';
import { listPorts } from '@xiaozhi-mcp/serial';
import {
  registerFlashCommand,
  registerMonitorCommand,
  registerProvisionCommand,
  type SerialCommandContext,
} from '@xiaozhi-mcp/serial/commands';
import { Command, CommanderError, Option } from 'commander';
import { BaselineError } from './baseline.js';
import { baselineAcceptCommand } from './commands/baseline.js';
import { boardsCommand, type Output } from './commands/boards.js';
import {
  attachComparison,
  COMPARE_FORMATS,
  compareCommand,
  mergeCommand,
} from './compare/commands.js';
import { loadReport, ReportInputError } from './compare/load.js';
import {
  DEFAULT_VIRTUAL_RIG,
  InventoryError,
  baselinePath as inventoryBaseline,
  loadInventory,
  type RigConfig,
} from './inventory.js';
import { DEFAULT_SUITES, type ExitCode, SUITE_NAMES, type SuiteName } from './model.js';
import { parseListen } from './network-board.js';
import { ConsoleReporter, isLiveTerminal } from './reporters/console.js';
import { writeGithubSummary } from './reporters/github.js';
import { REPORTER_NAMES, type ReporterName, writeReports } from './reporters/index.js';
import { parseFirmwareArgument, prepareOutDir, RunInputError } from './run-inputs.js';
import { HIL_VERSION } from './version.js';

const processOutput: Output = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
};

class UsageError extends Error {}

interface RunFlags {
  config?: string;
  board?: string[];
  firmware?: string[];
  otaImage?: string;
  provision?: boolean;
  suite?: string[];
  reporter?: string[];
  out: string;
  baseline?: string;
  allowFixedDeviations?: boolean;
  listen?: string;
  lockWait: string;
  compareTo?: string;
}

async function chooseRig(
  configPath: string | undefined,
): Promise<{ rig: RigConfig; kind: 'virtual' | 'inventory'; path: string | undefined }> {
  const path = configPath ?? (existsSync('hil.config.json') ? 'hil.config.json' : undefined);
  if (path !== undefined) return { rig: loadInventory(path), kind: 'inventory', path };
  const attached = await listPorts().catch(() => []);
  if (attached.some((p) => p.kind !== 'unknown')) {
    throw new UsageError(
      `boards are attached (${attached.map((p) => p.path).join(', ')}) but there is no hil.config.json: run \`hil boards\` to write one`,
    );
  }
  return { rig: DEFAULT_VIRTUAL_RIG, kind: 'virtual', path: undefined };
}

async function runCommand(flags: RunFlags, out: Output): Promise<ExitCode | 130> {
  const suites = flags.suite?.flatMap((s) => s.split(',')) as SuiteName[] | undefined;
  for (const suite of suites ?? []) {
    if (!SUITE_NAMES.includes(suite))
      throw new UsageError(`--suite ${suite} is not a suite; suites: ${SUITE_NAMES.join(', ')}`);
  }
  const reporters = (flags.reporter?.flatMap((r) => r.split(',')) ?? [
    'console',
    'junit',
    'json',
    'html',
    'openmetrics',
  ]) as ReporterName[];
  for (const reporter of reporters) {
    if (!REPORTER_NAMES.includes(reporter))
      throw new UsageError(
        `--reporter ${reporter} is not a reporter; reporters: ${REPORTER_NAMES.join(', ')}`,
      );
  }
  const lockWaitMs = Number(flags.lockWait) * 1000;
  if (!Number.isFinite(lockWaitMs) || lockWaitMs < 0)
    throw new UsageError(`--lock-wait must be seconds, got ${flags.lockWait}`);
  for (const [flag, path] of [
    ['--ota-image', flags.otaImage],
    ['--baseline', flags.baseline],
  ] as const) {
    if (path !== undefined && !existsSync(path))
      throw new UsageError(`${flag} ${path}: no such file`);
  }
  // Read before any board is touched: a base that is not a hil report is bad input (exit 2).
  const base = flags.compareTo === undefined ? undefined : loadReport(flags.compareTo);
  const listen = flags.listen === undefined ? undefined : parseListen(flags.listen);
  if (typeof listen === 'string') throw new UsageError(listen);
  // The rig (backend, board runner, suites) loads while the attached ports are listed.
  const [{ runRig }, { rig, kind, path }] = await Promise.all([
    import('./rig.js'),
    chooseRig(flags.config),
  ]);
  // --baseline, else the inventory's (relative to its file), else the one shipped with hil.
  const baseline = flags.baseline ?? inventoryBaseline(rig, path);
  const outDir = resolve(flags.out);
  prepareOutDir(outDir);
  const reporter = new ConsoleReporter({
    write: (text) => out.stdout(text),
    live: isLiveTerminal(process.stdout, process.env),
  });
  const abort = new AbortController();
  const onSignal = () => {
    out.stderr('\nhil: stopping (Ctrl-C); the reports will still be written\n');
    abort.abort(new Error('interrupted by Ctrl-C'));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // Held until the reports are written: a Ctrl-C as the run ends must not cut them short.
  try {
    const report = await runRig({
      rig,
      rigKind: kind,
      ...(flags.board ? { boards: flags.board.flatMap((b) => b.split(',')) } : {}),
      ...(flags.firmware ? { firmware: flags.firmware.map(parseFirmwareArgument) } : {}),
      ...(flags.otaImage ? { otaImagePath: flags.otaImage } : {}),
      ...(suites ? { suites } : {}),
      ...(baseline === undefined ? {} : { baselinePath: baseline }),
      ...(flags.allowFixedDeviations ? { allowFixedDeviations: true } : {}),
      ...(listen === undefined ? {} : { listen }),
      provision: flags.provision === true,
      outDir,
      reporter,
      signal: abort.signal,
      lockWaitMs,
    });
    if (base !== undefined) attachComparison(report, base, rig.compare);
    const files = await writeReports(report, {
      outDir,
      reporters: reporters.filter((r): r is Exclude<ReporterName, 'console'> => r !== 'console'),
    });
    // Awaited: the process exits right after, and an unfinished append leaves the summary empty.
    if (!reporters.includes('github')) await writeGithubSummary(report);
    reporter.finish(report);
    out.stdout(`reports: ${Object.values(files).join(', ')}\n`);
    return report.interrupted ? 130 : report.exitCode;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

export function createProgram(out: Output, setExit: (code: number) => void): Command {
  const program = new Command('hil')
    .description(
      'hardware-in-the-loop qualification of xiaozhi boards and firmware builds (virtual boards when none is attached)',
    )
    .version(HIL_VERSION)
    .exitOverride()
    .configureOutput({
      writeOut: out.stdout,
      writeErr: out.stderr,
      outputError: (text, write) => write(text.replace(/^error: /, 'hil: ')),
    });

  program
    .command('run')
    .description(
      'qualify every board of the rig: flash, provision, OTA check, session, suites, reports',
    )
    .option(
      '--config <file>',
      'rig inventory (default ./hil.config.json; none and no board attached: the virtual rig)',
    )
    .option('--board <name...>', 'only these boards')
    .option(
      '--firmware <[board=]file>',
      "flash this build first (a merged image at 0x0, or an app image): FILE on every board, BOARD=FILE on one; repeatable; before the inventory's firmware",
      (value: string, previous: string[] | undefined) => [...(previous ?? []), value],
    )
    .option(
      '--ota-image <file>',
      'the app image the ota-upgrade suite offers (release qualification)',
    )
    .option('--provision', 'write the rig Wi-Fi and our OTA URL into each board NVS')
    .addOption(
      new Option(
        '--suite <name...>',
        `suites to run, instead of the inventory's suites (default: ${DEFAULT_SUITES.join(', ')}; reboot, ota-upgrade and bridge are opt-in)`,
      ),
    )
    .option(
      '--reporter <name...>',
      'console, junit, json, html, openmetrics (default all); github when GITHUB_STEP_SUMMARY is set',
    )
    .option('--out <dir>', 'where reports, console logs and transcripts go', 'hil-reports')
    .option(
      '--baseline <file>',
      'known firmware deviations (default: the baseline shipped with hil)',
    )
    .option(
      '--allow-fixed-deviations',
      'a known deviation that is gone passes (reported as fixed) instead of failing the run',
    )
    .option(
      '--listen <host:port>',
      'serve the OTA endpoint and WebSocket here (overrides server.host/port; an MQTT broker, when a board runs over MQTT, binds the same host); boards without a port are pointed at it',
    )
    .option('--lock-wait <seconds>', 'wait this long for a board another hil is using', '0')
    .option(
      '--compare-to <report>',
      'compare this run with a base report (report.json or its folder); a regression exits 1',
    )
    .action(async (flags: RunFlags) => setExit(await runCommand(flags, out)));

  program
    .command('compare')
    .description(
      'compare a candidate build with a base, board by board: checks, tools, pages, latency (rank test), boot, flash, image, heap; exit 1 on a regression',
    )
    .argument('<base>', 'the base report (report.json, or the folder holding it)')
    .argument('<candidate>', 'the candidate report')
    .option(
      '--config <file>',
      'the inventory whose `compare` thresholds apply (default ./hil.config.json)',
    )
    .option('--format <format>', `what to print: ${COMPARE_FORMATS.join(', ')}`, 'text')
    .option(
      '--out <dir>',
      "write the candidate's reports with the comparison (json, html, junit, comparison.md)",
    )
    .action(
      async (
        baseReport: string,
        candidate: string,
        flags: { config?: string; format: string; out?: string },
      ) => setExit(await compareCommand(baseReport, candidate, flags, out)),
    );

  program
    .command('merge')
    .description(
      "combine the rigs' reports into one qualification report (boards × builds); exit 1 if a board failed, 3 if a rig failed",
    )
    .argument('[report...]', 'reports (report.json or their folders), each optionally RIG=PATH')
    .option(
      '--out <dir>',
      'where the merged report.json, report.html, junit.xml and summary.md go',
      'hil-qualification',
    )
    .option(
      '--expect <rig...>',
      'rigs that must have sent a report (a missing one is a rig failure)',
    )
    .action(async (reports: string[], flags: { out: string; expect?: string[] }) =>
      setExit(await mergeCommand(reports, flags, out)),
    );

  program
    .command('baseline')
    .description('change the known-deviation baseline after a run (a person decides)')
    .command('accept')
    .description(
      'remove the deviations a run found fixed from the baseline (and add failed checks named with --add); prints what changed',
    )
    .requiredOption('--from <report>', "the run's report.json (or its --out folder)")
    .option('--baseline <file>', 'the baseline to rewrite (default: the one the run used)')
    .option('--add <check-id...>', 'also accept these failed checks as known deviations')
    .action((flags: { from: string; baseline?: string; add?: string[] }) =>
      setExit(baselineAcceptCommand(out, flags)),
    );

  program
    .command('boards')
    .description('list attached ports and print inventory entries for them')
    .option('--json', 'print ports and entries as JSON')
    .action(async (flags: { json?: boolean }) => setExit(await boardsCommand(out, flags)));

  // The serial commands shared with xiaozhi-mcp; a lost or missing port is a rig failure (3).
  const serial: SerialCommandContext = {
    program: 'hil',
    out,
    portExitCode: 3,
    // hil has no `ports`: `hil boards` lists the attached ports.
    listCommand: 'hil boards',
    providers: [new VirtualBoardStore({ dir: defaultVirtualDir() })],
    ...(out === processOutput ? { terminal: process.stdout } : {}),
  };
  registerFlashCommand(program, serial, setExit);
  registerProvisionCommand(program, serial, setExit);
  registerMonitorCommand(program, serial, setExit);

  return program;
}

export async function main(argv: readonly string[], out: Output = processOutput): Promise<number> {
  let code = 0;
  const program = createProgram(out, (c) => {
    code = c;
  });
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return code;
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
    if (
      error instanceof UsageError ||
      error instanceof ReportInputError ||
      error instanceof RunInputError ||
      error instanceof InventoryError ||
      error instanceof BaselineError
    ) {
      out.stderr(`hil: ${error.message}\n`);
      return 2;
    }
    out.stderr(`hil: the rig failed: ${error instanceof Error ? error.message : String(error)}\n`);
    return 3;
  }
}

// Run when executed as the bin (not when imported by tests).
if (process.argv[1] !== undefined && /hil(\.js)?$|cli\.js$/.test(process.argv[1])) {
  const code = await main(process.argv.slice(2));
  // Exit once the output is flushed: abandoned work of an interrupted board must not hold the process.
  process.stdout.write('', () => process.exit(code));
}
