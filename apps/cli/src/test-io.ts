import { readFile } from 'node:fs/promises';
import type { CliIo } from './io.js';
import { run } from './program.js';

/** Runs the CLI in-process and captures what it prints. */
export async function runCli(
  ...argv: string[]
): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const io: CliIo = {
    stdout: (text) => {
      stdout += text;
    },
    stderr: (text) => {
      stderr += text;
    },
    readFile: (path) => readFile(path, 'utf8'),
  };
  const code = await run(argv, io);
  return { code, stdout, stderr };
}
