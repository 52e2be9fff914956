// @xiaozhi-mcp/serial: the serial operations layer. Named exports only; see README.md for
// every error code.

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
} from './commands/context.js';
export {
  DEFAULT_FLASH_BAUD,
  type FlashCommandOptions,
  FlashProgressView,
  flashCommand,
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
export { type PortsCommandOptions, portsCommand, registerPortsCommand } from './commands/ports.js';
export {
  type ProvisionCommandOptions,
  provisionCommand,
  provisionSettings,
  registerProvisionCommand,
} from './commands/provision.js';
export {
  ConsoleExpect,
  type ConsoleExpectOptions,
  ExpectError,
  type ExpectErrorCode,
  type ExpectErrorDetails,
  type ExpectMatch,
  type ExpectOptions,
  type Forbidden,
  type Timers,
} from './console-expect.js';
export {
  BootLoopDetector,
  type BootLoopOptions,
  type BootLoopReport,
  ConsoleLineSplitter,
  type ConsoleRecord,
  DEFAULT_HEALTHY_LINES,
  type KnownLine,
  knownLine,
  type LineSplitterOptions,
  type LogLevel,
  PanicDetector,
  type PanicDetectorOptions,
  type PanicKind,
  type PanicReport,
  parseConsoleLine,
  type RomField,
  stripAnsi,
} from './console-log.js';
export { SERIAL_ERROR_CODES, SerialError, type SerialErrorCode } from './errors.js';
export {
  describeChip,
  describeImage,
  type FlashImageResult,
  flasherFor,
  flashImage,
  formatBytes,
  hex,
  type ImageToFlash,
  parseOffset,
  placeImage,
} from './flash-image.js';
export {
  type ConnectedChip,
  DEFAULT_FLASHER_TIMEOUTS,
  Flasher,
  type FlasherOptions,
  type FlasherTimeouts,
  type FlashOptions,
  type FlashPart,
  type FlashProgress,
  type FlashResult,
} from './flasher.js';
export {
  BOOT_CLICK,
  type LineSetter,
  type LineState,
  type LineStep,
  lineSetterFor,
  MAX_LINE_WAIT_MS,
  openSafely,
  parseResetSequence,
  pinEffect,
  RESET_SEQUENCES,
  type ResetSequenceName,
  runLineSteps,
  SAFE_LINES,
} from './lines.js';
export { BoardLockError, lockBoard, lockPath } from './lock.js';
export {
  type ByIdDescriptor,
  describePorts,
  ESPRESSIF_VID,
  type FindPortOptions,
  findPort,
  formatPortSelector,
  type ListPortsOptions,
  listPorts,
  matchPorts,
  type PortInfo,
  type PortInfoLike,
  type PortKind,
  type PortLister,
  type PortSelector,
  parseByIdName,
  parsePortSelector,
  portInfoFromBinding,
  portKind,
  USB_SERIAL_JTAG_PID,
} from './ports.js';
export {
  buildProvisionImage,
  mergeNvsEntries,
  type ProvisionResult,
  type ProvisionSettings,
  type ProvisionTarget,
  provisionBoard,
  provisionEntries,
} from './provision.js';
export {
  chooseSelector,
  isBoardPort,
  nativeBinding,
  type PortProvider,
  type ProvidedBoard,
  type ProviderListing,
  type ProviderRequest,
  providerFor,
  type ResolvedPort,
  type ResolvePortOptions,
  resolvePort,
} from './resolve.js';
export { abortableWait, abortReason } from './wait.js';
export {
  NodeWebSerialPort,
  type NodeWebSerialPortOptions,
  type SerialBinding,
  type SerialLines,
  type SerialPortInfo,
  type WebSerialOpenOptions,
  type WebSerialPortInfo,
  type WebSerialSignals,
} from './web-serial.js';
