/**
 * `ports`: the serial ports a board can be on (`listPorts`, which falls back to
 * `/dev/serial/by-id` and sysfs where `udevadm` is missing), the boards of each registered
 * provider (virtual boards, with what their flash holds), and the RFC 2217 ports named with
 * `--port rfc2217://host:port`, each probed (its signature read, no line touched).
 */
import type { Command } from 'commander';
import { SerialError } from '../errors.js';
import type { PortInfo } from '../port-info.js';
import { formatPortSelector, portIdentity } from '../port-selector.js';
import { listPorts } from '../ports.js';
import { isBoardPort } from '../resolve.js';
import { probeRfc2217, type Rfc2217Probe } from '../rfc2217/client.js';
import { formatRfc2217Url, parseRfc2217Url, SERVE_SIGNATURE_PREFIX } from '../rfc2217/url.js';
import { runReported, type SerialCommandContext, usageError } from './context.js';

export interface PortsCommandOptions {
  readonly json?: boolean;
  /** Also ports without a USB id (built-in UARTs, ptys). */
  readonly all?: boolean;
  /** `rfc2217://host:port` URLs to probe; each may be a comma-separated list. */
  readonly port?: readonly string[];
  /** The probe's bound per URL; default 5000 ms. */
  readonly probeTimeoutMs?: number;
}

/** One `--port rfc2217://...`, as probed. */
type RemotePort =
  | ({ readonly url: string; readonly reachable: true } & Rfc2217Probe)
  | { readonly url: string; readonly reachable: false; readonly error: string };

/** `--port` values: comma lists split, each an `rfc2217://` URL (else a usage error). */
function remoteUrls(values: readonly string[]): string[] {
  const urls: string[] = [];
  for (const text of values.flatMap((v) => v.split(','))) {
    if (text.trim() === '') continue;
    try {
      urls.push(formatRfc2217Url(parseRfc2217Url(text)));
    } catch (error) {
      if (!(error instanceof SerialError)) throw error;
      throw usageError(
        `--port: ${error.message}; ports lists the ports attached here by itself, --port adds ports on other hosts`,
      );
    }
  }
  return urls.filter((url, i) => urls.indexOf(url) === i);
}

/** What the server says about the port it shares. */
function remoteDescription(remote: Rfc2217Probe): string {
  if (remote.signature.startsWith(SERVE_SIGNATURE_PREFIX))
    return `served by xiaozhi-mcp: ${remote.label ?? remote.signature}`;
  const what =
    remote.signature === ''
      ? 'RFC 2217 server (no signature)'
      : `RFC 2217 server: ${remote.signature}`;
  // As esp_rfc2217_server: `monitor --click` and hil's BOOT click are refused there.
  return remote.lineControl === 'resets' ? `${what}; it plays resets itself, no BOOT click` : what;
}

function remoteLine(remote: RemotePort): string {
  const what = remote.reachable ? remoteDescription(remote) : `unreachable: ${remote.error}`;
  const kind = remote.reachable ? remote.kind : '-';
  return `${remote.url.padEnd(22)} ${'-'.padEnd(10)} ${kind.padEnd(16)} ${'-'.padEnd(18)} ${what}`;
}

async function probeRemote(url: string, timeoutMs: number | undefined): Promise<RemotePort> {
  try {
    const probe = await probeRfc2217(url, timeoutMs === undefined ? {} : { timeoutMs });
    return { url, reachable: true, ...probe };
  } catch (error) {
    if (!(error instanceof SerialError)) throw error;
    return { url, reachable: false, error: error.message };
  }
}

/** A port's row; where its USB location is what tells it apart, the row ends with it. */
function realLine(port: PortInfo, listed: readonly PortInfo[]): string {
  const id = port.vendorId && port.productId ? `${port.vendorId}:${port.productId}` : '-';
  const identity = portIdentity(port, listed);
  const what = [
    port.manufacturer,
    port.product,
    'byPath' in identity ? `(${formatPortSelector(identity)})` : undefined,
  ]
    .filter((p) => p !== undefined)
    .join(' ');
  return `${port.path.padEnd(22)} ${id.padEnd(10)} ${port.kind.padEnd(16)} ${(port.serialNumber ?? '-').padEnd(18)} ${what}`.trimEnd();
}

/**
 * `ports`: resolves to the exit code. A failing port listing is a warning, not a failure; an
 * RFC 2217 port named with `--port` that cannot be reached gets its row and fails the command
 * with the port exit code, since it was asked for by name.
 */
export async function portsCommand(
  context: SerialCommandContext,
  options: PortsCommandOptions,
): Promise<number> {
  return runReported(
    context,
    () => 'ports',
    async () => {
      const urls = remoteUrls(options.port ?? []);
      const remotes = await Promise.all(
        urls.map((url) => probeRemote(url, options.probeTimeoutMs)),
      );
      const unreachable = remotes.filter((r) => !r.reachable);
      for (const remote of unreachable)
        if (!remote.reachable)
          context.out.stderr(`${context.program}: ports: ${remote.url}: ${remote.error}\n`);
      const exitCode = unreachable.length === 0 ? 0 : (context.portExitCode ?? 1);
      let real: PortInfo[];
      try {
        real = await (context.lister ?? (() => listPorts()))();
      } catch (error) {
        context.out.stderr(
          `${context.program}: note: cannot list serial ports (${error instanceof Error ? error.message : String(error)}); showing virtual boards only\n`,
        );
        real = [];
      }
      const shown = options.all === true ? real : real.filter(isBoardPort);
      const hidden = real.length - shown.length;
      const listings = (context.providers ?? []).map((provider) => provider.listing());
      if (options.json === true) {
        const extra = Object.assign({}, ...listings.map((l) => l.json)) as Record<string, unknown>;
        const rfc2217 = remotes.length === 0 ? {} : { rfc2217: remotes };
        context.out.stdout(`${JSON.stringify({ ports: shown, ...extra, ...rfc2217 })}\n`);
        return exitCode;
      }
      const provided = listings.flatMap((l) => l.boards);
      const lines = [
        `${'PORT'.padEnd(22)} ${'USB ID'.padEnd(10)} ${'KIND'.padEnd(16)} ${'SERIAL/MAC'.padEnd(18)} DESCRIPTION`,
        ...shown.map((port) => realLine(port, real)),
        ...provided.map((b) => b.line),
        ...remotes.map(remoteLine),
      ];
      if (shown.length === 0 && provided.length === 0 && remotes.length === 0) {
        const none = listings.map((l) => ` and ${l.none}; ${l.createHint}`).join('');
        context.out.stdout(`no board attached${none}\n`);
      } else {
        context.out.stdout(`${lines.join('\n')}\n`);
      }
      if (hidden > 0)
        context.out.stdout(
          `(${hidden} serial port${hidden === 1 ? '' : 's'} without a USB id not shown; --all shows them)\n`,
        );
      return exitCode;
    },
  );
}

export function registerPortsCommand(
  program: Command,
  context: SerialCommandContext,
  setExit: (code: number) => void,
): Command {
  return program
    .command('ports')
    .description(
      'list the serial ports boards are on, and the virtual boards ($XIAOZHI_VIRTUAL_DIR) with their firmware',
    )
    .option('--json', 'print {ports, virtual, virtualDir, rfc2217} as JSON')
    .option('--all', 'also list serial ports without a USB id')
    .option(
      '--port <url>',
      'also probe a port another host shares, rfc2217://<host>:<port> (repeat, or separate with commas); one that cannot be reached fails the command',
      (value: string, previous: string[] = []) => [...previous, value],
    )
    .action(async (options: PortsCommandOptions) => setExit(await portsCommand(context, options)));
}
