// @xiaozhi-mcp/serial: the serial operations layer. Named exports only; see README.md for
// every error code. The commands both CLIs register are `@xiaozhi-mcp/serial/commands`, and what
// a port provider needs, without the native binding, is `@xiaozhi-mcp/serial/provider`.

export type { FlashPart } from './compressed-write.js';
export { connectAdvice } from './connect-advice.js';
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
export {
  PortProviderError,
  type ProviderFailureKind,
  SERIAL_ERROR_CODES,
  SerialError,
  type SerialErrorCode,
} from './errors.js';
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
  DEFAULT_FLASHER_TIMEOUTS,
  FLASH_BAUD_LADDER,
  type FlasherTimeouts,
  flashBaudLadder,
  timeoutPerMb,
} from './flash-timing.js';
export {
  type ConnectedChip,
  Flasher,
  type FlasherOptions,
  type FlashOptions,
  type FlashProgress,
  type FlashResult,
} from './flasher.js';
export {
  type LinePlatform,
  type LineSetter,
  type LineState,
  type LineStep,
  lineSetterFor,
  lineWriteOrder,
  MAX_LINE_WAIT_MS,
  pinEffect,
  planLineChange,
  planLineSteps,
  runLineSteps,
  SAFE_LINES,
  safeIntermediate,
} from './line-steps.js';
export { BoardLockError, lockBoard, lockPath } from './lock.js';
export {
  type ByIdDescriptor,
  type PortInfo,
  type PortInfoLike,
  type PortKind,
  parseByIdName,
  portInfoFromBinding,
  portKind,
} from './port-info.js';
export { OPEN_RETRY_MS, type OpenSafelyOptions, openSafely } from './port-open.js';
export type {
  PortProvider,
  ProvidedBoard,
  ProviderListing,
  ProviderRequest,
  ResolvedPort,
} from './port-provider.js';
export {
  describePorts,
  type FindPortOptions,
  findPort,
  formatPortSelector,
  isGenericSerialNumber,
  matchPorts,
  type PortLister,
  type PortSelector,
  parsePortSelector,
  portIdentity,
} from './port-selector.js';
export { type ListPortsOptions, listPorts, usbLocationOf } from './ports.js';
export {
  buildProvisionImage,
  mergeNvsEntries,
  type ProvisionResult,
  type ProvisionSettings,
  type ProvisionTarget,
  provisionBoard,
  provisionEntries,
} from './provision.js';
export { ReceiveQueue } from './receive-queue.js';
export { type ResetStep, type ResetStrategy, resetPlan } from './reset/plan.js';
export {
  BOOT_CLICK,
  defaultResetSequence,
  parseResetSequence,
  RESET_SEQUENCES,
  type ResetSequenceName,
} from './reset/sequences.js';
export { ESPRESSIF_VID, USB_SERIAL_JTAG_PID } from './reset/usb.js';
export {
  chooseSelector,
  isBoardPort,
  nativeBinding,
  providerFor,
  type ResolvePortOptions,
  resolvePort,
} from './resolve.js';
export {
  probeRfc2217,
  RFC2217_DEFAULTS,
  Rfc2217Binding,
  type Rfc2217BindingOptions,
  type Rfc2217Event,
  Rfc2217Port,
  type Rfc2217Probe,
  rfc2217Reachable,
} from './rfc2217/client.js';
export {
  DOWNLOAD_TRIGGERS,
  type DownloadTrigger,
  type DownloadTriggerRule,
  INITIAL_RECOGNIZER_STATE,
  type LineCommand,
  playFinished,
  type RecognizerAction,
  type RecognizerPhase,
  type RecognizerState,
  ResetRecognizer,
  recognizeLineCommand,
} from './rfc2217/reset-recognizer.js';
export {
  busyLine,
  DEFAULT_RFC2217_PORT,
  isLoopbackHost,
  NEGOTIATION_TIMEOUT_MS,
  Rfc2217Server,
  type Rfc2217ServerOptions,
  serveSignature,
} from './rfc2217/server.js';
export {
  BUSY_REFUSAL_PREFIX,
  formatRfc2217Url,
  isRfc2217Url,
  parseRfc2217Signature,
  parseRfc2217Url,
  RFC2217_SCHEME,
  type Rfc2217Url,
  SERVE_REFUSAL_PREFIX,
  SERVE_SIGNATURE_PREFIX,
} from './rfc2217/url.js';
export { type RomBootLine, romBootLine } from './rom-boot-line.js';
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
