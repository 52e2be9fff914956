// @xiaozhi-mcp/serial/commands: the serial commands (`ports`, `flash`, `provision`, `monitor`,
// `port serve`) each CLI registers with its own name and exit codes. The only entry that loads
// commander and cli-progress. Named exports only, grouped by who uses them; README.md lists
// them.

// The operations both CLIs stand on, registered on their own commander program (hil, apps/cli):

export {
  type FailureKind,
  failureKind,
  type Output,
  runReported,
  type SerialCommandContext,
} from './context.js';
export { registerFlashCommand } from './flash.js';
export { registerMonitorCommand } from './monitor.js';
export { registerPortCommand } from './port-serve.js';
export { registerPortsCommand } from './ports.js';
export { registerProvisionCommand } from './provision.js';

// A command run from code, without commander, as a CLI runs it (the CLIs' tests, scripts):

export { type FlashCommandOptions, flashCommand } from './flash.js';
export {
  ConsolePrinter,
  type MonitorCommandOptions,
  monitorCommand,
  type PrintedLine,
  useColor,
} from './monitor.js';
export { type PortsCommandOptions, portsCommand } from './ports.js';
export {
  type ProvisionCommandOptions,
  provisionCommand,
  provisionSettings,
} from './provision.js';
