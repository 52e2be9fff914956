/**
 * `xiaozhi-mcp bridge`: the boards on a running `xiaozhi-mcp serve` as one standard MCP server
 * (@xiaozhi-mcp/bridge), for Claude Desktop, Cursor and the MCP Inspector. Over stdio by
 * default, where stdout carries MCP and nothing else; over Streamable HTTP with `--http`.
 */
import { BlockList, isIP } from 'node:net';
import type { Readable, Writable } from 'node:stream';
import { BridgeError, serveHttp, serveStdio, XiaozhiBridge } from '@xiaozhi-mcp/bridge';
import { type Command, Option } from 'commander';
import { CliError, type CliIo, ExitCode } from '../io.js';
import { type ClientOptions, normalizeDeviceId, targetOf, withServerOptions } from './client.js';

export interface BridgeCommandOptions extends Omit<ClientOptions, 'json'> {
  /** Serve only this board (its MAC, in any case). */
  device?: string;
  /** `HOST:PORT` (or `PORT`) to serve Streamable HTTP on instead of stdio. */
  http?: string;
  /** Bearer token HTTP clients must send (default: $XIAOZHI_BRIDGE_TOKEN). */
  httpToken?: string;
  /** More accepted `Host` names, and `Origin`s, for the HTTP endpoint (repeatable). */
  allowHost?: string[];
  allowOrigin?: string[];
  pollMs?: number;
  callTimeout?: number;
  userTools?: boolean;
}

/** Where the stdio transport reads and writes, and what stops the command; tests pass their own. */
export interface BridgeRuntime {
  readonly stdin?: Readable;
  readonly stdout?: Writable;
  /** Resolves with the signal that stops the bridge (default: the process's SIGINT or SIGTERM). */
  readonly until?: Promise<'SIGINT' | 'SIGTERM'>;
}

export interface HttpAddress {
  readonly host: string;
  readonly port: number;
}

const DEFAULT_HTTP_HOST = '127.0.0.1';

/**
 * `--http` as `HOST:PORT`, `[IPv6]:PORT`, `:PORT` or `PORT` (host 127.0.0.1); port 0 lets the
 * OS choose (the URL printed names the port taken).
 */
export function parseHttpAddress(text: string): HttpAddress {
  const bad = () =>
    new CliError(
      `--http must be HOST:PORT (e.g. 127.0.0.1:8765) or PORT, got ${JSON.stringify(text)}`,
      ExitCode.usage,
    );
  const match = /^(?:(\[[0-9a-fA-F:.]+\]|[^:[\]\s]*):)?(\d{1,5})$/.exec(text.trim());
  if (match === null) throw bad();
  const port = Number(match[2]);
  if (port > 65535) throw bad();
  const given = match[1] ?? '';
  const host = given === '' ? DEFAULT_HTTP_HOST : given.replace(/^\[(.*)\]$/, '$1');
  return { host, port };
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

/** True for a bind address only this machine can reach: 127.0.0.0/8, ::1, localhost. */
export function isLoopback(host: string): boolean {
  if (host.toLowerCase() === 'localhost') return true;
  const family = isIP(host);
  return family !== 0 && LOOPBACK.check(host, family === 4 ? 'ipv4' : 'ipv6');
}

function envValue(name: string): string | undefined {
  const value = process.env[name];
  return value === undefined || value === '' ? undefined : value;
}

/** The process's first SIGINT or SIGTERM, with a way to stop listening (so stdin's end can exit). */
function processSignals(): { signal: Promise<'SIGINT' | 'SIGTERM'>; dispose(): void } {
  let dispose = () => {};
  const signal = new Promise<'SIGINT' | 'SIGTERM'>((resolve) => {
    const stop = (name: 'SIGINT' | 'SIGTERM') => {
      dispose();
      resolve(name);
    };
    const onInt = () => stop('SIGINT');
    const onTerm = () => stop('SIGTERM');
    process.on('SIGINT', onInt);
    process.on('SIGTERM', onTerm);
    dispose = () => {
      process.off('SIGINT', onInt);
      process.off('SIGTERM', onTerm);
    };
  });
  return { signal, dispose: () => dispose() };
}

/** Exit code for a bridge that could not start: its configuration is bad input, the rest a failure. */
function startFailure(error: unknown, server: string): CliError {
  if (!(error instanceof BridgeError)) throw error;
  switch (error.code) {
    case 'CONFIG_INVALID':
      return new CliError(error.message, ExitCode.usage);
    case 'UNAUTHORIZED':
      return new CliError(
        `the server at ${server} refused the API token: ${error.message} (pass it with --token or $XIAOZHI_TOKEN)`,
      );
    case 'SERVER_UNREACHABLE': {
      // fetch says only "fetch failed"; the reason (ECONNREFUSED, ENOTFOUND...) is in a cause.
      const reason = deepestCause(error);
      return new CliError(
        reason === undefined || error.message.includes(reason)
          ? error.message
          : `${error.message} (${reason})`,
      );
    }
    default:
      return new CliError(error.message);
  }
}

function deepestCause(error: Error): string | undefined {
  let found: string | undefined;
  let cause: unknown = error.cause;
  for (let depth = 0; cause instanceof Error && depth < 5; depth++) {
    found = cause.message;
    cause = cause.cause;
  }
  return found;
}

/**
 * Runs the bridge until stopped: 0 on SIGTERM or (stdio) the client closing stdin, 130 on
 * Ctrl-C; 1 when the server cannot be reached, refuses the token or never saw `--device`.
 */
export async function bridgeCommand(
  io: CliIo,
  options: BridgeCommandOptions,
  runtime: BridgeRuntime = {},
): Promise<number> {
  const target = targetOf(options);
  const device = options.device === undefined ? undefined : normalizeDeviceId(options.device);
  const http = options.http === undefined ? undefined : parseHttpAddress(options.http);
  const httpToken = options.httpToken ?? envValue('XIAOZHI_BRIDGE_TOKEN');
  if (http !== undefined && httpToken === undefined && !isLoopback(http.host))
    throw new CliError(
      `--http ${options.http} is not a loopback address: anyone who reaches it could call every board's tools; give --http-token (or $XIAOZHI_BRIDGE_TOKEN)`,
      ExitCode.usage,
    );
  const note = (line: string) =>
    io.stderr(`xiaozhi-mcp ${line.startsWith('bridge: ') ? line : `bridge: ${line}`}\n`);

  let bridge: XiaozhiBridge;
  try {
    bridge = new XiaozhiBridge({
      server: target.server,
      ...(target.token === undefined ? {} : { token: target.token }),
      ...(device === undefined ? {} : { device }),
      ...(options.pollMs === undefined ? {} : { pollMs: options.pollMs }),
      ...(options.callTimeout === undefined ? {} : { callTimeoutMs: options.callTimeout }),
      ...(options.userTools === true ? { withUserTools: true } : {}),
      log: note,
    });
  } catch (error) {
    throw startFailure(error, target.server);
  }
  // Listening for signals from the start: a Ctrl-C during discovery is still a Ctrl-C.
  const signals = runtime.until === undefined ? processSignals() : undefined;
  const stopped = runtime.until ?? (signals as { signal: Promise<'SIGINT' | 'SIGTERM'> }).signal;
  try {
    const started = bridge.start().then(
      () => undefined,
      (error: unknown) => {
        throw startFailure(error, target.server);
      },
    );
    started.catch(() => {}); // surfaced below, unless a signal came first
    const early = await Promise.race([started, stopped]);
    if (early !== undefined) return early === 'SIGINT' ? ExitCode.interrupted : ExitCode.ok;
    const served = `${device ?? 'the boards'} on ${target.server}`;
    if (http === undefined) {
      const session = await serveStdio(bridge, {
        ...(runtime.stdin === undefined ? {} : { stdin: runtime.stdin }),
        ...(runtime.stdout === undefined ? {} : { stdout: runtime.stdout }),
      });
      note(`speaking MCP on stdin/stdout for ${served} (an MCP client starts this command)`);
      const end = await Promise.race([session.closed.then(() => 'end' as const), stopped]);
      await session.close();
      return end === 'SIGINT' ? ExitCode.interrupted : ExitCode.ok;
    }
    let listener: { url: string; close(): Promise<void> };
    try {
      listener = await serveHttp(bridge, {
        host: http.host,
        port: http.port,
        ...(httpToken === undefined ? {} : { token: httpToken }),
        ...(options.allowHost === undefined ? {} : { allowedHosts: options.allowHost }),
        ...(options.allowOrigin === undefined ? {} : { allowedOrigins: options.allowOrigin }),
      });
    } catch (error) {
      throw startFailure(error, target.server);
    }
    // stdout is free in HTTP mode: the endpoint alone, for scripts; the rest is notes.
    io.stdout(`${listener.url}\n`);
    note(
      `listening on ${listener.url} for ${served}${httpToken === undefined ? '' : ' (bearer token required)'}; Ctrl-C to stop`,
    );
    const signal = await stopped;
    await listener.close();
    return signal === 'SIGINT' ? ExitCode.interrupted : ExitCode.ok;
  } finally {
    signals?.dispose();
    await bridge.close();
  }
}

function integer(option: string, min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max)
      throw new CliError(
        `${option} must be an integer from ${min} to ${max}, got ${JSON.stringify(value)}`,
        ExitCode.usage,
      );
    return n;
  };
}

function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

export function registerBridge(program: Command, io: CliIo, setExit: (code: number) => void): void {
  withServerOptions(
    program
      .command('bridge')
      .description(
        "serve the tools of a running server's boards as a standard MCP server (stdio, or Streamable HTTP with --http) for Claude Desktop, Cursor, the MCP Inspector",
      ),
  )
    .option(
      '--device <id>',
      'serve only this board (its MAC); its tools keep their names, without the MAC prefix',
    )
    .option(
      '--http <host:port>',
      'serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio (PORT alone: 127.0.0.1; 0 lets the OS choose)',
    )
    .option(
      '--http-token <token>',
      'a Bearer token HTTP clients must send (default: $XIAOZHI_BRIDGE_TOKEN); required off loopback',
    )
    .addOption(
      new Option(
        '--allow-host <host>',
        'a Host name the HTTP endpoint accepts besides loopback and its own address (repeatable; * for any)',
      ).argParser(collect),
    )
    .addOption(
      new Option(
        '--allow-origin <origin>',
        'an Origin (https://app.example) the HTTP endpoint accepts besides loopback ones (repeatable; * for any)',
      ).argParser(collect),
    )
    .option(
      '--poll-ms <n>',
      'how often boards and their tools are re-read, for tools/list_changed (default 2000)',
      integer('--poll-ms', 1, 3_600_000),
    )
    .option(
      '--call-timeout <ms>',
      "bound on a board's answer to tools/call (default 30000)",
      integer('--call-timeout', 1, 600_000),
    )
    .option('--user-tools', 'serve user-only tools too (self.reboot, self.upgrade_firmware, ...)')
    .action(async (options: BridgeCommandOptions) => setExit(await bridgeCommand(io, options)));
}
