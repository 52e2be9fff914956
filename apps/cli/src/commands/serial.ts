import {
  registerFlashCommand,
  registerMonitorCommand,
  registerPortsCommand,
  registerProvisionCommand,
  type SerialCommandContext,
} from '@xiaozhi-mcp/hil';
import type { Command } from 'commander';
import { type CliIo, processIo } from '../io.js';

/**
 * `ports`, `flash`, `provision` and `monitor`: implemented once in the hil package (real and
 * virtual boards alike); here they only get xiaozhi-mcp's name and output.
 */
export function registerSerial(program: Command, io: CliIo, setExit: (code: number) => void): void {
  const context: SerialCommandContext = {
    program: 'xiaozhi-mcp',
    out: { stdout: (text) => io.stdout(text), stderr: (text) => io.stderr(text) },
    // Only the real stdout gets a progress bar and colour; tests capture plain text.
    ...(io === processIo ? { terminal: process.stdout } : {}),
  };
  registerPortsCommand(program, context, setExit);
  registerFlashCommand(program, context, setExit);
  registerProvisionCommand(program, context, setExit);
  registerMonitorCommand(program, context, setExit);
}
