#!/usr/bin/env node
// Runs a command again and again while busy workers occupy the cores, to find verdicts that
// depend on the machine's load (a wait shorter than what it waits for takes under load).
//
//   npm run stress -- [--runs N] [--workers K] [--quiet] [--expect CODE] [--timeout S] -- <command...>
//
// `{out}` in the command becomes a fresh directory per run; a hil run given `--out {out}` is
// read back (report.json) for its slowest step and, when it failed, its headline and root cause.
// `npm test -- --force`: turbo replays cached tasks otherwise, which measures nothing.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Worker } from 'node:worker_threads';

const usage =
  'usage: npm run stress -- [--runs N] [--workers K] [--quiet] [--expect CODE] [--timeout S] -- <command...>';

function options() {
  const split = process.argv.indexOf('--', 2);
  const command = split < 0 ? [] : process.argv.slice(split + 1);
  const { values } = parseArgs({
    args: process.argv.slice(2, split < 0 ? undefined : split),
    options: {
      runs: { type: 'string', default: '10' },
      workers: { type: 'string', default: String(2 * availableParallelism()) },
      quiet: { type: 'boolean', default: false },
      expect: { type: 'string' },
      timeout: { type: 'string', default: '900' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  const number = (name, min) => {
    const n = Number(values[name]);
    if (!Number.isInteger(n) || n < min) fail(`--${name} must be an integer >= ${min}`);
    return n;
  };
  if (values.help) {
    console.log(usage);
    process.exit(0);
  }
  if (command.length === 0) fail('no command after --');
  return {
    command,
    runs: number('runs', 1),
    workers: number('workers', 0),
    quiet: values.quiet,
    expect: values.expect === undefined ? undefined : number('expect', 0),
    timeoutMs: number('timeout', 1) * 1000,
  };
}

function fail(message) {
  console.error(`stress: ${message}\n${usage}`);
  process.exit(2);
}

// Worker threads end with this process, however it ends: no spinner outlives the harness.
function startWorkers(count) {
  return Array.from({ length: count }, () => new Worker('for (;;) {}', { eval: true }));
}

let current;

/** One run: exit code (or `timeout`), duration, and what its hil report says. */
function run(command, dir, timeoutMs) {
  const out = join(dir, 'out');
  const args = command.map((arg) => arg.replaceAll('{out}', out));
  const log = [];
  const started = performance.now();
  return new Promise((resolve) => {
    const child = spawn(args[0], args.slice(1), {
      stdio: ['ignore', 'pipe', 'pipe'],
      shell: process.platform === 'win32',
    });
    current = child;
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGTERM');
    }, timeoutMs);
    child.stdout.on('data', (chunk) => log.push(chunk));
    child.stderr.on('data', (chunk) => log.push(chunk));
    child.on('error', (error) => log.push(Buffer.from(`${error.message}\n`)));
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      current = undefined;
      writeFileSync(join(dir, 'output.log'), Buffer.concat(log));
      resolve({
        code: timedOut ? 'timeout' : (code ?? signal),
        ms: performance.now() - started,
        dir,
        ...hilReport(out),
      });
    });
  });
}

function hilReport(out) {
  const file = join(out, 'report.json');
  if (!existsSync(file)) return {};
  try {
    const report = JSON.parse(readFileSync(file, 'utf8'));
    let slowest;
    for (const board of report.boards ?? [])
      for (const step of board.steps ?? [])
        if (!slowest || step.durationMs > slowest.ms)
          slowest = { what: `${board.name}/${step.step}`, ms: step.durationMs };
    const cause = report.summary?.rootCause;
    return {
      slowest,
      headline: report.headline?.text ?? report.headline,
      cause:
        cause && `${cause.board ?? cause.rig}: ${cause.check ?? cause.step ?? ''}: ${cause.reason}`,
    };
  } catch {
    return {};
  }
}

const seconds = (ms) => `${(ms / 1000).toFixed(1)} s`;
const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

function line(label, result, expected) {
  const verdict = result.code === expected ? 'ok' : 'FALSE FAILURE';
  const slowest = result.slowest
    ? `, slowest step ${result.slowest.what} ${seconds(result.slowest.ms)}`
    : '';
  console.log(`${label}: exit ${result.code} in ${seconds(result.ms)}${slowest}  ${verdict}`);
  if (result.code !== expected) {
    if (result.headline) console.log(`  headline: ${result.headline}`);
    if (result.cause) console.log(`  root cause: ${result.cause}`);
    console.log(`  output: ${join(result.dir, 'output.log')}`);
  }
}

function summary(opts, quiet, loaded, expected) {
  const passed = loaded.filter((r) => r.code === expected).length;
  const durations = loaded.map((r) => r.ms);
  const quietPart = quiet ? `quiet ${seconds(quiet.ms)} (exit ${quiet.code}), ` : '';
  const loadedPart = durations.length
    ? `loaded median ${seconds(median(durations))} max ${seconds(Math.max(...durations))}`
    : 'no loaded run finished';
  console.log(
    `\nstress: ${passed} of ${loaded.length} runs gave exit ${expected} under ${opts.workers} busy worker${opts.workers === 1 ? '' : 's'}; ${quietPart}${loadedPart}; false failures: ${loaded.length - passed}`,
  );
  return passed === loaded.length ? 0 : 1;
}

async function main() {
  const opts = options();
  const root = mkdtempSync(join(tmpdir(), 'stress-'));
  console.log(`stress: ${opts.command.join(' ')}\n  runs in ${root}`);
  const loaded = [];
  let quiet;
  let workers = [];
  let expected = opts.expect ?? 0;
  const stop = (code) => {
    for (const worker of workers) worker.terminate();
    process.exit(code);
  };
  process.once('SIGINT', () => {
    current?.kill('SIGINT');
    summary(opts, quiet, loaded, expected);
    stop(130);
  });
  process.once('SIGTERM', () => {
    current?.kill('SIGTERM');
    stop(143);
  });
  const dir = (name) => {
    const path = join(root, name);
    mkdirSync(path);
    return path;
  };
  if (opts.quiet) {
    quiet = await run(opts.command, dir('quiet'), opts.timeoutMs);
    // The quiet run sets what a loaded run must give, unless --expect says.
    expected = opts.expect ?? quiet.code;
    line('quiet', quiet, expected);
  }
  workers = startWorkers(opts.workers);
  for (let i = 1; i <= opts.runs; i++) {
    const result = await run(opts.command, dir(`run-${i}`), opts.timeoutMs);
    loaded.push(result);
    line(`run ${i}/${opts.runs}`, result, expected);
  }
  stop(summary(opts, quiet, loaded, expected));
}

await main();
