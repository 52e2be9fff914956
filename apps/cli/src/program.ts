import { Command, CommanderError } from 'commander';
import { registerBridge } from './commands/bridge.js';
import { registerCheckOta } from './commands/check-ota.js';
import { registerClient } from './commands/client.js';
import { registerImage } from './commands/image.js';
import { registerPage } from './commands/page.js';
import { registerReplica } from './commands/replica.js';
import { registerSerial } from './commands/serial.js';
import { registerServe } from './commands/serve.js';
import { registerSim } from './commands/sim.js';
import { CliError, type CliIo, ExitCode, processIo } from './io.js';

export const VERSION = '0.1.0';

/** Builds the `xiaozhi-mcp` program. Output goes through `io`, so tests run it in-process. */
export function createProgram(io: CliIo, setExit: (code: number) => void): Command {
  const program = new Command('xiaozhi-mcp')
    .description('Toolkit for ESP32 boards running the xiaozhi firmware (MCP over WebSocket/MQTT)')
    .version(VERSION)
    // The program's options (--version, --help) only before the command: after it they are the
    // command's own (`sim --version V` was the tool's version, not the boards').
    .enablePositionalOptions()
    .exitOverride()
    .showHelpAfterError(false)
    .configureOutput({
      writeOut: (text) => io.stdout(text),
      writeErr: (text) => io.stderr(text),
      outputError: (text, write) => write(text.replace(/^error: /, 'xiaozhi-mcp: ')),
    });
  registerPage(program, io, setExit);
  registerCheckOta(program, io, setExit);
  registerSim(program, io, setExit);
  registerReplica(program, io, setExit);
  registerImage(program, io, setExit);
  registerServe(program, io, setExit);
  registerClient(program, io, setExit);
  registerBridge(program, io, setExit);
  registerSerial(program, io, setExit);
  return program;
}

/** Runs the CLI with `argv` (without node and script) and resolves with the exit code. */
export async function run(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  let exitCode: number = ExitCode.ok;
  const program = createProgram(io, (code) => {
    exitCode = code;
  });
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return exitCode;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Help and version exit 0; usage errors were already printed by commander.
      return error.exitCode === 0 ? ExitCode.ok : ExitCode.usage;
    }
    if (error instanceof CliError) {
      io.stderr(`xiaozhi-mcp: ${error.message}\n`);
      return error.exitCode;
    }
    io.stderr(`xiaozhi-mcp: ${error instanceof Error ? error.message : String(error)}\n`);
    return ExitCode.failed;
  }
}
