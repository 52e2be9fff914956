// @xiaozhi-mcp/serial/provider: what a port provider (the device SDK's virtual boards) needs of
// the serial layer, and nothing that loads serialport's native binding, esptool-js or the
// commands' commander and cli-progress: importing it costs a board provider none of them.
// Named exports only; README.md lists them.

// For port providers (device's virtual boards): the contract `resolvePort` and the commands call,
// the errors a provider throws, and the pieces a provided port is built from:

export {
  PortProviderError,
  type ProviderFailureKind,
  SerialError,
} from './errors.js';
export { BoardLockError, type LockOptions, lockBoard } from './lock.js';
export { portInfoFromBinding } from './port-info.js';
export type {
  PortProvider,
  ProvidedBoard,
  ProviderListing,
  ProviderRequest,
  ResolvedPort,
} from './port-provider.js';
export { findPort } from './port-selector.js';
export { ReceiveQueue } from './receive-queue.js';
