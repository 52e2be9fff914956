// @xiaozhi-mcp/serial: the serial operations layer both CLIs stand on, and what a Node script
// needs to find, reset, flash, provision and watch a board, here or on another host. Named
// exports only, grouped by who uses them; README.md lists them and every error code. What a
// port provider needs, without the native binding, is `@xiaozhi-mcp/serial/provider`; the
// commands each CLI registers are `@xiaozhi-mcp/serial/commands`.

// Errors of every operation here (everyone):

export { SERIAL_ERROR_CODES, SerialError, type SerialErrorCode } from './errors.js';

// Ports: listing, selectors, and resolving one to a port to open, real, remote or a provider's
// board (hil, scripts; device's tests):

export { type PortInfo, type PortKind, portInfoFromBinding } from './port-info.js';
export { type OpenSafelyOptions, openSafely } from './port-open.js';
export type { PortProvider, ProviderRequest, ResolvedPort } from './port-provider.js';
export { reopenPort } from './port-reopen.js';
export {
  type FindPortOptions,
  findPort,
  formatPortSelector,
  type PortSelector,
  parsePortSelector,
  portIdentity,
} from './port-selector.js';
export { type ListPortsOptions, listPorts } from './ports.js';
export { chooseSelector, isBoardPort, type ResolvePortOptions, resolvePort } from './resolve.js';
export {
  NodeWebSerialPort,
  type NodeWebSerialPortOptions,
  type SerialBinding,
} from './web-serial.js';

// DTR and RTS: the reset sequences and the BOOT click as data, and their player (hil's board
// runner, scripts; device's tests):

export {
  type LineSetter,
  type LineState,
  type LineStep,
  lineSetterFor,
  runLineSteps,
} from './line-steps.js';
export {
  BOOT_CLICK,
  defaultResetSequence,
  RESET_SEQUENCES,
  type ResetSequenceName,
} from './reset/sequences.js';

// Flashing with esptool-js, and where an image goes (hil, scripts; device's tests and bench):

export type { FlashPart } from './compressed-write.js';
export {
  type FlashImageResult,
  flasherFor,
  flashImage,
  type ImageToFlash,
  placeImage,
} from './flash-image.js';
export type { FlasherTimeouts } from './flash-timing.js';
export {
  type ConnectedChip,
  Flasher,
  type FlasherOptions,
  type FlashOptions,
  type FlashProgress,
  type FlashResult,
} from './flasher.js';

// Provisioning Wi-Fi and the OTA URL into the board's own NVS partition (hil, scripts):

export {
  type ProvisionResult,
  type ProvisionSettings,
  type ProvisionTarget,
  provisionBoard,
} from './provision.js';

// The console: ESP-IDF lines, panics, boot loops and expect-style waits (hil, scripts):

export {
  ConsoleExpect,
  type ConsoleExpectOptions,
  ExpectError,
  type ExpectMatch,
  type ExpectOptions,
} from './console-expect.js';
export {
  BootLoopDetector,
  type BootLoopOptions,
  type BootLoopReport,
  ConsoleLineSplitter,
  type ConsoleRecord,
  type LineSplitterOptions,
  PanicDetector,
  type PanicDetectorOptions,
  type PanicReport,
  parseConsoleLine,
} from './console-log.js';

// RFC 2217: a port another host shares, and sharing one (hil's rig, scripts; device's tests):

export {
  probeRfc2217,
  Rfc2217Binding,
  type Rfc2217BindingOptions,
  type Rfc2217Probe,
} from './rfc2217/client.js';
export { Rfc2217Server, type Rfc2217ServerOptions } from './rfc2217/server.js';
export { formatRfc2217Url, parseRfc2217Url, type Rfc2217Url } from './rfc2217/url.js';
