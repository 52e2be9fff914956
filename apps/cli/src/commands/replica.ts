import { rename, rm, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import {
  formatReplica,
  parseReplica,
  ReplicaError,
  type ReplicaFile,
  replicaFromTools,
  replicaFromTranscript,
} from '@xiaozhi-mcp/device';
import type { Command } from 'commander';
import { CliError, type CliIo, checkMac, ExitCode, readTextFile } from '../io.js';

export interface ReplicaOptions {
  /** hil's `transcript.jsonl` of one board (`hil-reports/<board>/transcript.jsonl`). */
  from?: string;
  /** A hand-written tool set: `{ board?, tools, defaults? }`. */
  tools?: string;
  /** Where the replica goes; stdout without it. */
  out?: string;
  /** The board's MAC in the replica, over what the input says. */
  mac?: string;
}

/**
 * A replica refused as one line naming the file and the field, exit 2: what the user fixes is
 * in their file, so the line says where.
 */
function replicaUsageError(file: string, error: ReplicaError): CliError {
  let line = error.message.replace(/\s*\n\s*/g, ' ');
  if (!line.includes(file)) line = `${file}: ${line}`;
  if (!line.includes(error.field)) line = `${line} (field ${error.field})`;
  return new CliError(line, ExitCode.usage);
}

/** Reads and checks a replica file (schema, no secrets, pages as the firmware's pager makes them). */
export async function loadReplica(io: CliIo, file: string): Promise<ReplicaFile> {
  const text = await readTextFile(io, file);
  try {
    return parseReplica(text, file);
  } catch (error) {
    if (error instanceof ReplicaError) throw replicaUsageError(file, error);
    throw error;
  }
}

/** Writes `text` whole or not at all: a temporary file beside `path`, renamed over it. */
async function writeWhole(path: string, text: string): Promise<void> {
  const temporary = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  try {
    await writeFile(temporary, text, 'utf8');
    await rename(temporary, path);
  } catch (error) {
    await rm(temporary, { force: true });
    // No check ran and the path is the user's: bad input (2), as an unreadable file is.
    throw new CliError(`cannot write ${path}: ${(error as Error).message}`, ExitCode.usage);
  }
}

/** `replica`: builds a replica from a transcript or a tool set and prints or writes it. */
export async function replicaCommand(io: CliIo, options: ReplicaOptions): Promise<number> {
  if ((options.from === undefined) === (options.tools === undefined))
    throw new CliError(
      'give exactly one of --from TRANSCRIPT.jsonl and --tools FILE',
      ExitCode.usage,
    );
  const mac = options.mac === undefined ? undefined : checkMac(options.mac, '--mac');
  const source = (options.from ?? options.tools) as string;
  const text = await readTextFile(io, source);
  let replica: ReplicaFile;
  try {
    if (options.from !== undefined) {
      replica = replicaFromTranscript(text, mac === undefined ? undefined : { mac });
    } else {
      replica = replicaFromTools(text, source);
      if (mac !== undefined) replica = { ...replica, board: { ...replica.board, mac } };
    }
  } catch (error) {
    if (error instanceof ReplicaError) throw replicaUsageError(source, error);
    throw error;
  }
  const formatted = formatReplica(replica);
  if (options.out === undefined) io.stdout(formatted);
  else {
    await writeWhole(options.out, formatted);
    io.stderr(
      `xiaozhi-mcp replica: wrote ${options.out} (${replica.board.variant}, ${replica.tools.length} tool${replica.tools.length === 1 ? '' : 's'})\n`,
    );
  }
  return ExitCode.ok;
}

export function registerReplica(
  program: Command,
  io: CliIo,
  setExit: (code: number) => void,
): void {
  program
    .command('replica')
    .description(
      "write a board's replica (its identity, tools, tools/list pages and recorded calls) from a hil transcript or a tool set; `sim --replica` runs it",
    )
    .option(
      '--from <transcript>',
      "a board's hil transcript (hil-reports/<board>/transcript.jsonl)",
    )
    .option(
      '--tools <file>',
      'a tool set: {"board"?: {...}, "tools": [corpus tool definitions], "defaults"?: {...}}',
    )
    .option('--out <file>', 'write the replica here (whole, or nothing on failure); default stdout')
    .option('--mac <mac>', "the board's MAC in the replica, over what the input says")
    .action(async (options: ReplicaOptions) => setExit(await replicaCommand(io, options)));
}
