import { defaultVirtualDir, VirtualBoardStore } from '@xiaozhi-mcp/device';
import {
  registerFlashCommand,
  registerMonitorCommand,
  registerPortCommand,
  registerPortsCommand,
  registerProvisionCommand,
  type SerialCommandContext,
} from '@xiaozhi-mcp/serial/commands';
import type { Command } from 'commander';
import { type CliIo, processIo } from '../io.js';

/**
 * `ports`, `flash`, `provision`, `monitor` and `port serve`: the serial operations layer's
 * commands (real and virtual boards alike), with xiaozhi-mcp's name and output. Virtual boards
 * come from the device SDK's store, registered here as a port provider.
 */
export function registerSerial(program: Command, io: CliIo, setExit: (code: number) => void): void {
  const context: SerialCommandContext = {
    program: 'xiaozhi-mcp',
    out: { stdout: (text) => io.stdout(text), stderr: (text) => io.stderr(text) },
    providers: [new VirtualBoardStore({ dir: defaultVirtualDir() })],
    // Only the real stdout gets a progress bar and colour; tests capture plain text.
    ...(io === processIo ? { terminal: process.stdout } : {}),
  };
  registerPortsCommand(program, context, setExit);
  registerFlashCommand(program, context, setExit);
  registerProvisionCommand(program, context, setExit);
  registerMonitorCommand(program, context, setExit);
  registerPortCommand(program, context, setExit);
}
