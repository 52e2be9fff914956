import { readFile } from 'node:fs/promises';

/** Where a command writes and reads; tests pass their own. */
export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  readFile(path: string): Promise<string>;
}

export const processIo: CliIo = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  readFile: (path) => readFile(path, 'utf8'),
};

/** A failure the user can act on: printed as one line, exit code attached. */
export class CliError extends Error {
  override readonly name = 'CliError';
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

/** Exit codes shared by every command. */
export const ExitCode = {
  ok: 0,
  /** The thing checked is wrong: an unsafe OTA reply, a page the firmware answers with an error. */
  failed: 1,
  /** Bad usage or input: unknown option, unreadable file, invalid JSON. */
  usage: 2,
  /** Stopped by Ctrl-C (SIGINT), as a shell reports it: 128 + 2. A SIGTERM is a normal stop (0). */
  interrupted: 130,
} as const;

/** Reads and parses a JSON file, naming the file in the error. */
export async function readJsonFile(io: CliIo, path: string): Promise<unknown> {
  const text = await readTextFile(io, path);
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new CliError(`${path} is not valid JSON: ${(error as Error).message}`, ExitCode.usage);
  }
}

/** Resolves at the first Ctrl-C (SIGINT) or SIGTERM, with its name: how long-running commands wait to stop. */
export function interrupted(): Promise<'SIGINT' | 'SIGTERM'> {
  return new Promise((resolve) => {
    // A signal listener does not keep the process alive: with nothing else pending (`sim
    // --session none` once every board is idle) node would end with an unsettled await (13).
    const keepAlive = setInterval(() => {}, 2 ** 30);
    const stop = (signal: 'SIGINT' | 'SIGTERM') => {
      clearInterval(keepAlive);
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve(signal);
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}

/** Six bytes in hex, with `:`, `-` or nothing between them. */
export function parseMac(text: string): number[] | undefined {
  const match =
    /^([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})$/i.exec(
      text.trim(),
    );
  return match?.slice(1).map((byte) => Number.parseInt(byte, 16));
}

/** A MAC option (`--first-mac`, `--mac`): six bytes, unicast (a board's own address never has the group bit). */
export function checkMac(text: string, flag = '--first-mac'): string {
  const bytes = parseMac(text);
  if (bytes === undefined)
    throw new CliError(
      `${flag} must be a MAC such as f4:12:fa:00:00:01, got ${JSON.stringify(text)}`,
      ExitCode.usage,
    );
  if (((bytes[0] ?? 0) & 1) !== 0)
    throw new CliError(
      `${flag} must be a unicast MAC (the first byte even), got ${JSON.stringify(text)}`,
      ExitCode.usage,
    );
  return bytes.map((byte) => byte.toString(16).padStart(2, '0')).join(':');
}

/** Reads a text file, naming it in the one-line error (exit 2). */
export async function readTextFile(io: CliIo, path: string): Promise<string> {
  try {
    return await io.readFile(path);
  } catch (error) {
    const reason =
      (error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : String(error);
    throw new CliError(`cannot read ${path}: ${reason}`, ExitCode.usage);
  }
}
