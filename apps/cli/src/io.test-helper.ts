/**
 * Running the CLI in tests: in-process with its output captured, or a built binary spawned as a
 * shell would. A test helper: the build leaves `*.test-helper.ts` out of dist.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import type { CliIo } from './io.js';
import { run } from './program.js';

/** A CLI's I/O that keeps what it prints in `out` (files are read from disk). */
export function capture(): { io: CliIo; out: { stdout: string; stderr: string } } {
  const out = { stdout: '', stderr: '' };
  return {
    out,
    io: {
      stdout: (text) => {
        out.stdout += text;
      },
      stderr: (text) => {
        out.stderr += text;
      },
      readFile: (path) => readFile(path, 'utf8'),
    },
  };
}

/** Runs the CLI in-process and captures what it prints. */
export async function runCli(
  ...argv: string[]
): Promise<{ code: number; stdout: string; stderr: string }> {
  const { io, out } = capture();
  const code = await run(argv, io);
  return { code, ...out };
}

/** What a spawned command printed and how it ended (`code` null until it has). */
export interface SpawnedRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs a built binary (`node BIN ARGS`) as a shell would, collecting its output. Every run is
 * bounded: a command that hangs is killed after `timeoutMs` (default 60 s), so it fails its test
 * instead of hanging it.
 */
export function spawnCommand(
  bin: string,
  args: readonly string[],
  options: { env?: NodeJS.ProcessEnv; stdin?: 'pipe' | 'ignore'; timeoutMs?: number } = {},
): { child: ChildProcess; run: SpawnedRun; done: Promise<SpawnedRun> } {
  const child = spawn(process.execPath, [bin, ...args], {
    env: options.env ?? process.env,
    stdio: [options.stdin ?? 'ignore', 'pipe', 'pipe'],
  });
  const run: SpawnedRun = { code: null, stdout: '', stderr: '' };
  child.stdout?.on('data', (chunk: Buffer) => {
    run.stdout += chunk.toString();
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    run.stderr += chunk.toString();
  });
  const done = new Promise<SpawnedRun>((resolveRun) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      run.code = code;
      resolveRun(run);
    });
  });
  return { child, run, done };
}
