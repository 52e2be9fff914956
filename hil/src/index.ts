// @xiaozhi-mcp/hil: rigs, suites and reports for xiaozhi boards. Named exports only.

export {
  applyBaseline,
  type Baseline,
  type BaselineDeviation,
  BaselineError,
  DEFAULT_BASELINE_PATH,
  FIXED_DEVIATION_NOTE,
  loadBaseline,
  parseBaseline,
} from './baseline.js';
export {
  classifyImage,
  DEFAULT_FLASH_BAUD,
  describeImage,
  type FlashCommandOptions,
  flashCommand,
  type ImageToFlash,
  RETRY_FLASH_BAUD,
  registerFlashCommand,
} from './commands/flash.js';
export {
  ConsolePrinter,
  DEFAULT_MONITOR_BAUD,
  type MonitorCommandOptions,
  monitorCommand,
  type PrintedLine,
  registerMonitorCommand,
  useColor,
} from './commands/monitor.js';
export {
  chooseSelector,
  DEFAULT_FLASH_SIZE_MB,
  DEFAULT_PRESET,
  defaultVirtualDir,
  type FailureKind,
  type FlashSizeMb,
  listVirtualBoards,
  type ResolvedPort,
  type ResolvedVirtual,
  type ResolvePortOptions,
  resolvePort,
  type SerialCommandContext,
  SerialCommandError,
  type VirtualBoardEntry,
  type VirtualBoardSpec,
  virtualMac,
} from './commands/port-resolver.js';
export {
  type PortsCommandOptions,
  portsCommand,
  registerPortsCommand,
  summarizeVirtualFlash,
  type VirtualFlashSummary,
  type VirtualPortListing,
} from './commands/ports.js';
export {
  type ProvisionCommandOptions,
  provisionCommand,
  provisionSettings,
  registerProvisionCommand,
} from './commands/provision.js';
export {
  type BoardConfig,
  boardEntryFor,
  DEFAULT_VIRTUAL_RIG,
  InventoryError,
  type LatencyConfig,
  loadInventory,
  parseInventory,
  type ResetStyle,
  type RigConfig,
  SCHEMA_PATH,
  type SessionStart,
} from './inventory.js';
export {
  type BoardReport,
  type BoardStatus,
  type CheckResult,
  type CheckStatus,
  DEFAULT_SUITES,
  type ExitCode,
  exitCodeFor,
  type LatencyStats,
  type RigStep,
  type RigStepName,
  type RunReport,
  type RunSummary,
  type Severity,
  SUITE_NAMES,
  type SuiteName,
  summarize,
} from './model.js';
export {
  ConsoleReporter,
  type ConsoleReporterOptions,
  isLiveTerminal,
  renderConsoleSummary,
  type StepDetail,
  type StepStatus,
} from './reporters/console.js';
export {
  REPORTER_NAMES,
  REPORTERS,
  type Reporter,
  type ReporterName,
  type WriteReportsOptions,
  writeReports,
} from './reporters/index.js';
export {
  CheckFailure,
  type CheckSpec,
  expectThat,
  type LatencyBudget,
  runCheck,
  type Suite,
  type SuiteBoard,
  type SuiteContext,
  type SuiteOutcome,
} from './suite.js';
export { allCheckIds, SUITE_CHECKS, SUITES } from './suites/index.js';
