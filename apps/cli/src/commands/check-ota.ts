import { type OtaFinding, validateOtaReply } from '@xiaozhi-mcp/protocol';
import type { Command } from 'commander';
import { CliError, type CliIo, ExitCode, readJsonFile } from '../io.js';

export interface CheckOtaOptions {
  currentVersion?: string;
  json?: boolean;
}

/** Validates an OTA reply against every hazard that crashes or bricks a real board. */
export async function checkOtaCommand(
  io: CliIo,
  file: string,
  options: CheckOtaOptions,
): Promise<number> {
  const reply = await readJsonFile(io, file);
  const findings: OtaFinding[] = validateOtaReply(
    reply,
    options.currentVersion === undefined ? {} : { currentVersion: options.currentVersion },
  );
  const failing = findings.filter((f) => f.severity !== 'warning');
  if (options.json) {
    io.stdout(`${JSON.stringify({ ok: failing.length === 0, file, findings })}\n`);
    return failing.length === 0 ? ExitCode.ok : ExitCode.failed;
  }
  for (const finding of findings)
    io.stdout(`${finding.severity} ${finding.field}: ${finding.message}\n`);
  const first = failing[0];
  if (first !== undefined) {
    const hazards = failing.filter((f) => f.severity === 'hazard').length;
    const what =
      hazards > 0
        ? `${hazards} hazard${hazards === 1 ? '' : 's'}`
        : `${failing.length} error${failing.length === 1 ? '' : 's'}`;
    throw new CliError(
      `${file} is not safe to send (${what}); first: ${first.field}: ${first.message}`,
      ExitCode.failed,
    );
  }
  const warnings = findings.length;
  io.stdout(
    `ok: ${file} has no hazards${warnings > 0 ? ` (${warnings} warning${warnings === 1 ? '' : 's'})` : ''}\n`,
  );
  return ExitCode.ok;
}

export function registerCheckOta(
  program: Command,
  io: CliIo,
  setExit: (code: number) => void,
): void {
  program
    .command('check-ota')
    .description(
      'validate an OTA reply: refuses every hazard that crashes or bricks a board (docs/protocol.md §7)',
    )
    .argument('<reply.json>', 'the OTA reply body')
    .option(
      '--current-version <version>',
      'the version the device runs (checks force-upgrade loops)',
    )
    .option('--json', 'print the findings as JSON')
    .action(async (file: string, options: CheckOtaOptions) =>
      setExit(await checkOtaCommand(io, file, options)),
    );
}
