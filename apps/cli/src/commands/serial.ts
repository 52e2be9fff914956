import { defaultVirtualDir, replicaBoardOptions, VirtualBoardStore } from '@xiaozhi-mcp/device';
import {
  registerFlashCommand,
  registerMonitorCommand,
  registerPortCommand,
  registerPortsCommand,
  registerProvisionCommand,
  type SerialCommandContext,
} from '@xiaozhi-mcp/serial/commands';
import type { PortProvider } from '@xiaozhi-mcp/serial/provider';
import type { Command } from 'commander';
import { CliError, type CliIo, ExitCode, processIo } from '../io.js';
import { loadReplica } from './replica.js';

/**
 * `ports`, `flash`, `provision`, `monitor` and `port serve`: the serial operations layer's
 * commands (real and virtual boards alike), with xiaozhi-mcp's name and output. Virtual boards
 * come from the device SDK's store, registered here as a port provider.
 */
export function registerSerial(program: Command, io: CliIo, setExit: (code: number) => void): void {
  // `port serve --replica` swaps in a store whose boards run the replica.
  const providers: PortProvider[] = [new VirtualBoardStore({ dir: defaultVirtualDir() })];
  const context: SerialCommandContext = {
    program: 'xiaozhi-mcp',
    out: { stdout: (text) => io.stdout(text), stderr: (text) => io.stderr(text) },
    providers,
    // Only the real stdout gets a progress bar and colour; tests capture plain text.
    ...(io === processIo ? { terminal: process.stdout } : {}),
  };
  registerPortsCommand(program, context, setExit);
  registerFlashCommand(program, context, setExit);
  registerProvisionCommand(program, context, setExit);
  registerMonitorCommand(program, context, setExit);
  const port = registerPortCommand(program, context, setExit);
  const serve = port.commands.find((command) => command.name() === 'serve');
  serve
    ?.option(
      '--replica <file>',
      "virtual:NAME runs this replica (`xiaozhi-mcp replica`, hil's <board>/replica.json) instead of its preset",
    )
    .hook('preAction', async (command) => {
      const file = command.opts<{ replica?: string }>().replica;
      if (file === undefined) return;
      const selector = String(command.args[0] ?? '');
      if (!selector.toLowerCase().startsWith('virtual:'))
        throw new CliError(
          `--replica runs on a virtual board (virtual:NAME), not on ${selector}`,
          ExitCode.usage,
        );
      // Read and checked before the port is touched: a bad file is exit 2.
      const replica = await loadReplica(io, file);
      // The stored board (its flash, lock and eFuses) runs the replica from its first boot on,
      // with the replica's MAC when it has one; a board `--create` makes has the replica's
      // flash size unless `--flash-size` says otherwise.
      providers[0] = new VirtualBoardStore({
        dir: defaultVirtualDir(),
        board: replicaBoardOptions(replica),
        onBoard: ({ board, entry }) =>
          io.stdout(
            `${entry.port} runs the replica of ${replica.board.variant} (${replica.tools.length} tools, MAC ${board.mac})\n`,
          ),
      });
    });
}
