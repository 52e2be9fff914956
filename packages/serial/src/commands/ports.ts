/**
 * `ports`: the serial ports a board can be on (`listPorts`, which falls back to
 * `/dev/serial/by-id` and sysfs where `udevadm` is missing) and the boards of each registered
 * provider (virtual boards, with what their flash holds).
 */
import type { Command } from 'commander';
import { formatPortSelector, listPorts, type PortInfo, portIdentity } from '../ports.js';
import { isBoardPort } from '../resolve.js';
import { runReported, type SerialCommandContext } from './context.js';

export interface PortsCommandOptions {
  readonly json?: boolean;
  /** Also ports without a USB id (built-in UARTs, ptys). */
  readonly all?: boolean;
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

/** `ports`: resolves to the exit code. A failing port listing is a warning, not a failure. */
export async function portsCommand(
  context: SerialCommandContext,
  options: PortsCommandOptions,
): Promise<number> {
  return runReported(
    context,
    () => 'ports',
    async () => {
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
        context.out.stdout(`${JSON.stringify({ ports: shown, ...extra })}\n`);
        return 0;
      }
      const provided = listings.flatMap((l) => l.boards);
      const lines = [
        `${'PORT'.padEnd(22)} ${'USB ID'.padEnd(10)} ${'KIND'.padEnd(16)} ${'SERIAL/MAC'.padEnd(18)} DESCRIPTION`,
        ...shown.map((port) => realLine(port, real)),
        ...provided.map((b) => b.line),
      ];
      if (shown.length === 0 && provided.length === 0) {
        const none = listings.map((l) => ` and ${l.none}; ${l.createHint}`).join('');
        context.out.stdout(`no board attached${none}\n`);
      } else {
        context.out.stdout(`${lines.join('\n')}\n`);
      }
      if (hidden > 0)
        context.out.stdout(
          `(${hidden} serial port${hidden === 1 ? '' : 's'} without a USB id not shown; --all shows them)\n`,
        );
      return 0;
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
    .option('--json', 'print {ports, virtual, virtualDir} as JSON')
    .option('--all', 'also list serial ports without a USB id')
    .action(async (options: PortsCommandOptions) => setExit(await portsCommand(context, options)));
}
