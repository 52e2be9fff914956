/**
 * What the serial commands (`ports`, `flash`, `provision`, `monitor`) share, whichever CLI
 * registers them: their context (output, providers of boards, how failures exit), the
 * one-line failure report, option parsing and opening the port a command names.
 */
import { FirmwareError } from '@xiaozhi-mcp/firmware';
import { type Command, Option } from 'commander';
import { PortProviderError, SerialError } from '../errors.js';
import { BoardLockError } from '../lock.js';
import type { PortInfo } from '../port-info.js';
import type { PortProvider, ResolvedPort } from '../port-provider.js';
import { chooseSelector, providerFor, resolvePort } from '../resolve.js';

/** Where a command writes: results on stdout, notes and failures on stderr. */
export interface Output {
  stdout(text: string): void;
  stderr(text: string): void;
}

/**
 * usage: exit 2; failed: exit 1; port (missing, busy, not permitted, refused to open, lost): the
 * context's `portExitCode`.
 */
export type FailureKind = 'usage' | 'failed' | 'port';

export class SerialCommandError extends Error {
  override readonly name = 'SerialCommandError';
  constructor(
    message: string,
    readonly kind: FailureKind,
    options: { cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
  }
}

/** What every serial command gets from the CLI that registered it. */
export interface SerialCommandContext {
  /** `hil` or `xiaozhi-mcp`: the prefix of every failure line. */
  readonly program: string;
  readonly out: Output;
  /** Default `process.env`: `FORCE_COLOR`, `NO_COLOR`. */
  readonly env?: NodeJS.ProcessEnv;
  /** The real stdout when the CLI writes to it: a TTY gets a progress bar and colour. */
  readonly terminal?: NodeJS.WritableStream & { readonly isTTY?: boolean };
  /** Boards besides the host's serial ports (virtual boards), by selector prefix. */
  readonly providers?: readonly PortProvider[];
  /** Default {@link listPorts}. */
  readonly lister?: () => Promise<PortInfo[]>;
  /** Stops a running `monitor` (Ctrl-C does too). */
  readonly signal?: AbortSignal;
  /**
   * Exit code when the port is missing, busy, not permitted, refused to open or lost: 1
   * (xiaozhi-mcp) or 3 (hil).
   */
  readonly portExitCode?: number;
  /** How long `monitor` waits for a vanished port to come back. Default 10 s. */
  readonly refindMs?: number;
  /**
   * The command of this program that lists the attached ports, which a missing port's error
   * suggests: `hil boards` under hil. Default `<program> ports`.
   */
  readonly listCommand?: string;
}

/** The command a failure suggests for listing the ports, in the words of the program that failed. */
function listCommandOf(context: SerialCommandContext): string {
  return context.listCommand ?? `${context.program} ports`;
}

export function usageError(message: string): SerialCommandError {
  return new SerialCommandError(message, 'usage');
}

/** The kind of a failure from any layer (formats, serial, lock, provider, ours). */
export function failureKind(error: unknown): FailureKind {
  if (error instanceof SerialCommandError || error instanceof PortProviderError) return error.kind;
  if (error instanceof SerialError || error instanceof FirmwareError) {
    // A write the board's security eFuses or chip revision forbid: refused before anything was
    // written, as bad input is.
    if (error.code === 'OPTION_INVALID' || error.code === 'WRITE_REFUSED') return 'usage';
    // A port that is missing, busy, not permitted, refused to open or cannot be locked: the rig,
    // not the usage.
    if (
      error.code === 'PORT_NOT_FOUND' ||
      error.code === 'PORT_BUSY' ||
      error.code === 'PORT_DENIED' ||
      error.code === 'PORT_OPEN_FAILED' ||
      error.code === 'LOCK_FAILED'
    )
      return 'port';
    return 'failed';
  }
  if (error instanceof BoardLockError) return 'port';
  return 'failed';
}

/**
 * Runs a command body; a failure becomes one line, `<program>: <what>: <reason>`, and its
 * exit code. `what` names the command and the port (`flash virtual:desk`).
 */
export async function runReported(
  context: SerialCommandContext,
  what: () => string,
  body: () => Promise<number>,
): Promise<number> {
  try {
    return await body();
  } catch (error) {
    const kind = failureKind(error);
    const reason = (error instanceof Error ? error.message : String(error)).replace(
      /\s*\n\s*/g,
      ' ',
    );
    const prefix = what();
    context.out.stderr(`${context.program}: ${prefix === '' ? '' : `${prefix}: `}${reason}\n`);
    if (kind === 'usage') return 2;
    if (kind === 'port') return context.portExitCode ?? 1;
    return 1;
  }
}

/** `--baud`: a positive integer rate. */
export function parseBaud(value: string, flag = '--baud'): number {
  const baud = Number(value);
  if (!Number.isInteger(baud) || baud < 300 || baud > 10_000_000)
    throw usageError(`${flag} must be a baud rate such as 115200, got ${JSON.stringify(value)}`);
  return baud;
}

/** `--port`, `--board` and `--flash-size` as the commands take them. */
export interface PortOptions {
  readonly port?: string;
  /** Provided (virtual) boards, when creating one: the preset. */
  readonly board?: string;
  /** Provided (virtual) boards, when creating one: 4, 8 or 16. */
  readonly flashSize?: string;
  /**
   * `--create`: a provided board that does not exist is made (with `board`/`flashSize`).
   * Without it a name that is not there fails, so a typo does not become a new board.
   */
  readonly create?: boolean;
}

/**
 * `--port` (or the only board there is) resolved for a command; with `--create` a provider
 * makes a board that is not there yet, and says so. `--board`/`--flash-size` given for a real
 * port, or without `--create`, are noted as ignored.
 */
export async function openCommandPort(
  context: SerialCommandContext,
  options: PortOptions,
  onSelector: (selector: string) => void = () => {},
): Promise<ResolvedPort> {
  const providers = context.providers ?? [];
  const lister = context.lister;
  const selector = await chooseSelector(options.port, {
    providers,
    ...(lister === undefined ? {} : { lister }),
  });
  onSelector(selector);
  const create = {
    ...(options.board === undefined ? {} : { board: options.board }),
    ...(options.flashSize === undefined ? {} : { flashSize: options.flashSize }),
  };
  const sized = [
    ...(options.board === undefined ? [] : ['--board']),
    ...(options.flashSize === undefined ? [] : ['--flash-size']),
  ];
  const notify = (stream: 'stdout' | 'stderr', text: string): void =>
    stream === 'stdout'
      ? context.out.stdout(text)
      : context.out.stderr(`${context.program}: note: ${text}`);
  if (providerFor(selector, providers) === undefined) {
    // `notify`: an rfc2217:// port says when its connection is lost and made again.
    const port = await resolvePort(selector, {
      providers,
      request: { notify },
      listCommand: listCommandOf(context),
      ...(lister === undefined ? {} : { lister }),
    });
    const ignored = [...sized, ...(options.create === true ? ['--create'] : [])];
    if (ignored.length > 0)
      context.out.stderr(
        `${context.program}: note: ${flagList(ignored)} ${ignored.length === 1 ? 'is' : 'are'} for virtual boards; ignored for ${port.label}\n`,
      );
    return port;
  }
  const port = await resolvePort(selector, {
    providers,
    request: {
      ...(options.create === true ? { create } : {}),
      notify,
    },
  });
  if (sized.length > 0 && options.create !== true)
    context.out.stderr(
      `${context.program}: note: ${flagList(sized)} ${sized.length === 1 ? 'applies' : 'apply'} when --create makes a new board; ignored for ${port.label}, which exists\n`,
    );
  return port;
}

/** `--a`, `--a and --b`, `--a, --b and --c`. */
function flagList(flags: readonly string[]): string {
  return flags.length <= 1
    ? flags.join('')
    : `${flags.slice(0, -1).join(', ')} and ${flags[flags.length - 1]}`;
}

/**
 * Runs a command on one board: `body` checks its options first, then calls `open` to resolve
 * `--port`; failures are reported as `<command> <port>: <reason>` with their exit code, and
 * the port's board is released however the body ends.
 */
export async function runPortCommand(
  context: SerialCommandContext,
  command: string,
  options: PortOptions,
  body: (open: () => Promise<ResolvedPort>) => Promise<number>,
): Promise<number> {
  let label = options.port ?? '';
  let opened: ResolvedPort | undefined;
  try {
    return await runReported(
      context,
      () => `${command}${label === '' ? '' : ` ${label}`}`,
      () =>
        body(async () => {
          opened = await openCommandPort(context, options, (selector) => {
            label = selector;
          });
          label = opened.label;
          return opened;
        }),
    );
  } finally {
    opened?.dispose();
  }
}

/** `--port`, `--board` and `--flash-size`: how every board command names its board. */
export function withPortOptions(command: Command): Command {
  return withVirtualBoardOptions(
    command.option(
      '--port <selector>',
      'the board: a path, serial:<sn>, usb:<vid>:<pid>, by-id:<name>, by-path:<name>, virtual:<name>, or rfc2217://<host>:<port> for a port another host shares (default: the only board attached)',
    ),
  );
}

/** `--board`, `--flash-size` and `--create`: what a command that may make a virtual board takes. */
export function withVirtualBoardOptions(command: Command): Command {
  return command
    .addOption(
      new Option('--board <preset>', "a new virtual board's preset (default bread-compact-wifi)"),
    )
    .addOption(
      new Option('--flash-size <mb>', "a new virtual board's flash: 4, 8 or 16 (default 16)"),
    )
    .addOption(
      new Option(
        '--create',
        'make virtual:<name> when there is no such board yet (else a name that is not there fails)',
      ),
    );
}
