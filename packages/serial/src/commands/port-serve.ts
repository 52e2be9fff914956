/**
 * `port serve PORT`: shares a board's serial port (real, or `virtual:NAME` from a provider)
 * over RFC 2217, so that `flash`, `monitor` and `hil` on another host reach it as
 * `rfc2217://HOST:PORT`, the way ESP-IDF's `esp_rfc2217_server` shares one. esptool's resets
 * into download mode are recognised and played here, with this port's own timing
 * ({@link Rfc2217Server}). One client at a time; loopback unless `--listen` says otherwise.
 *
 * Prints `serving <label> on rfc2217://HOST:PORT` on stdout once listening (scripts wait for
 * it), then one `--- ... ---` line per event on stderr, until Ctrl-C (exit 130) or SIGTERM
 * (exit 0).
 */
import type { Command } from 'commander';
import { DEFAULT_RFC2217_PORT, Rfc2217Server } from '../rfc2217/server.js';
import {
  type PortOptions,
  parseBaud,
  runPortCommand,
  type SerialCommandContext,
  usageError,
  withVirtualBoardOptions,
} from './context.js';

export const DEFAULT_SERVE_BAUD = 115_200;

export interface PortServeCommandOptions extends Omit<PortOptions, 'port'> {
  /** `HOST:PORT`, `[IPv6]:PORT`, `:PORT` or `PORT`; default `127.0.0.1:2217`. */
  readonly listen?: string;
  /** The rate each client starts at. */
  readonly baud?: string;
}

/** `--listen`: where to listen; the host defaults to loopback, the port to 2217 (0: any free one). */
export function parseListen(value: string | undefined): { host: string; port: number } {
  if (value === undefined) return { host: '127.0.0.1', port: DEFAULT_RFC2217_PORT };
  const text = value.trim();
  const bad = (why: string) =>
    usageError(
      `--listen ${JSON.stringify(value)}: ${why}; expected HOST:PORT, e.g. 127.0.0.1:2217, 0.0.0.0:4000, [::1]:2217 or :4000 (port 0: any free one)`,
    );
  let host: string;
  let portText: string;
  if (text.startsWith('[')) {
    const close = text.indexOf(']');
    if (close < 0 || text[close + 1] !== ':') throw bad('an IPv6 address goes as [ADDRESS]:PORT');
    host = text.slice(1, close);
    portText = text.slice(close + 2);
    if (!/^[0-9a-fA-F:.]+$/.test(host) || !host.includes(':'))
      throw bad(`${JSON.stringify(host)} is not an IPv6 address`);
  } else if (/^\d+$/.test(text)) {
    host = '127.0.0.1';
    portText = text;
  } else {
    const colon = text.lastIndexOf(':');
    if (colon < 0) throw bad('the port is missing');
    if (text.indexOf(':') !== colon) throw bad('an IPv6 address goes in brackets');
    host = colon === 0 ? '127.0.0.1' : text.slice(0, colon);
    portText = text.slice(colon + 1);
    if (!/^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$/.test(host))
      throw bad(`${JSON.stringify(host)} is not a host name or address`);
  }
  if (!/^\d{1,5}$/.test(portText)) throw bad(`port ${JSON.stringify(portText)} is not a number`);
  const port = Number(portText);
  if (port > 65_535) throw bad(`port ${port} is not 0-65535`);
  return { host, port };
}

/** `port serve`: resolves to the exit code; failures are reported as one line. */
export async function portServeCommand(
  context: SerialCommandContext,
  selector: string,
  options: PortServeCommandOptions,
): Promise<number> {
  return runPortCommand(context, 'port serve', { ...options, port: selector }, async (open) => {
    const listen = parseListen(options.listen);
    const baudRate = parseBaud(options.baud ?? String(DEFAULT_SERVE_BAUD));
    const port = await open();
    const stop = new AbortController();
    let stoppedBy: 'SIGINT' | 'SIGTERM' | undefined;
    const onSigint = () => {
      stoppedBy ??= 'SIGINT';
      stop.abort();
    };
    const onSigterm = () => {
      stoppedBy ??= 'SIGTERM';
      stop.abort();
    };
    const onAbort = () => stop.abort();
    const external = context.signal;
    // Handled before the port is opened, so that a Ctrl-C at any moment closes it cleanly.
    process.once('SIGINT', onSigint);
    process.once('SIGTERM', onSigterm);
    external?.addEventListener('abort', onAbort, { once: true });
    if (external?.aborted) stop.abort();
    try {
      let server: Rfc2217Server | undefined;
      try {
        server = await Rfc2217Server.start({
          port,
          host: listen.host,
          listenPort: listen.port,
          baudRate,
          log: (line) => context.out.stderr(`--- ${line} ---\n`),
          signal: stop.signal,
        });
      } catch (error) {
        // Stopped before it was serving: a stop, not a failure.
        if (!stop.signal.aborted) throw error;
      }
      if (server !== undefined) {
        if (!stop.signal.aborted) context.out.stdout(`serving ${port.label} on ${server.url}\n`);
        await server.closed;
      }
      context.out.stderr(`--- stopped serving ${port.label} ---\n`);
      // Ctrl-C is 130 (128 + SIGINT), as a shell reports it; a SIGTERM or the caller's abort is a normal stop.
      return stoppedBy === 'SIGINT' ? 130 : 0;
    } finally {
      process.off('SIGINT', onSigint);
      process.off('SIGTERM', onSigterm);
      external?.removeEventListener('abort', onAbort);
    }
  });
}

/** `port`: commands on one board's port; today `port serve`. */
export function registerPortCommand(
  program: Command,
  context: SerialCommandContext,
  setExit: (code: number) => void,
): Command {
  const port = program
    .command('port')
    .description("commands on one board's serial port: serve shares it over RFC 2217");
  const serve = port
    .command('serve')
    .description(
      "share a board's serial port over RFC 2217 (rfc2217://HOST:PORT) until Ctrl-C; esptool's resets are played here with this port's timing; one client at a time",
    )
    .argument(
      '<port>',
      'the board: a path, serial:<sn>, usb:<vid>:<pid>, by-id:<name>, by-path:<name> or virtual:<name>',
    )
    .option(
      '--listen <host:port>',
      `where clients connect; another host than loopback is reachable from the network, without authentication (port 0: any free one)`,
      `127.0.0.1:${DEFAULT_RFC2217_PORT}`,
    )
    .option('--baud <rate>', 'the rate each client starts at', String(DEFAULT_SERVE_BAUD));
  withVirtualBoardOptions(serve).action(
    async (selector: string, options: PortServeCommandOptions) =>
      setExit(await portServeCommand(context, selector, options)),
  );
  return port;
}
