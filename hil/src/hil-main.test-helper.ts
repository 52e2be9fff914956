/**
 * `hil` run in this process with its output captured: what most of hil's tests run. The GitHub
 * step summary is what `summary` says (none by default), never the CI job's own.
 */
import { main } from './cli.js';

export interface HilRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  /** stdout and stderr as they came, interleaved. */
  readonly output: string;
}

/** `hil <argv...>`, with no GitHub step summary. */
export function hil(...argv: string[]): Promise<HilRun> {
  return hilWithSummary(undefined, argv);
}

/** `hil <argv...>` with `GITHUB_STEP_SUMMARY` set to `summary` (unset when undefined). */
export async function hilWithSummary(
  summary: string | undefined,
  argv: readonly string[],
): Promise<HilRun> {
  let stdout = '';
  let stderr = '';
  let output = '';
  const saved = process.env.GITHUB_STEP_SUMMARY;
  if (summary === undefined) delete process.env.GITHUB_STEP_SUMMARY;
  else process.env.GITHUB_STEP_SUMMARY = summary;
  try {
    const code = await main(argv, {
      stdout: (text) => {
        stdout += text;
        output += text;
      },
      stderr: (text) => {
        stderr += text;
        output += text;
      },
    });
    return { code, stdout, stderr, output };
  } finally {
    if (saved === undefined) delete process.env.GITHUB_STEP_SUMMARY;
    else process.env.GITHUB_STEP_SUMMARY = saved;
  }
}
