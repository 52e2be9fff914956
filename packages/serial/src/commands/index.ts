// @xiaozhi-mcp/serial/commands: the serial commands (`ports`, `flash`, `provision`, `monitor`,
// `port serve`) each CLI registers with its own name and exit codes. The only entry that loads
// commander and cli-progress. Named exports only.

export {
  type FailureKind,
  failureKind,
  type Output,
  openCommandPort,
  type PortOptions,
  parseBaud,
  runReported,
  type SerialCommandContext,
  SerialCommandError,
  usageError,
} from './context.js';
export {
  DEFAULT_FLASH_BAUD,
  type FlashCommandOptions,
  FlashProgressView,
  flashCommand,
  RETRY_FLASH_BAUD,
  registerFlashCommand,
} from './flash.js';
export {
  ConsolePrinter,
  DEFAULT_MONITOR_BAUD,
  type MonitorCommandOptions,
  monitorCommand,
  type PrintedLine,
  registerMonitorCommand,
  useColor,
} from './monitor.js';
export {
  DEFAULT_SERVE_BAUD,
  type PortServeCommandOptions,
  parseListen,
  portServeCommand,
  registerPortCommand,
} from './port-serve.js';
export { type PortsCommandOptions, portsCommand, registerPortsCommand } from './ports.js';
export {
  type ProvisionCommandOptions,
  provisionCommand,
  provisionSettings,
  registerProvisionCommand,
} from './provision.js';
