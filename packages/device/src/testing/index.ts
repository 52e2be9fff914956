// @xiaozhi-mcp/device/testing: what tests of boards, backends and tools need beside the device
// SDK, kept out of its main entry so that a device built on the SDK carries none of it. Named
// exports only, grouped by who uses them; README.md lists them.

// A small OTA + WebSocket backend boards connect to (cli's and hil's tests, device's fuzzing):

export {
  DeviceConnection,
  type OtaRequestRecord,
  TestBackend,
  type TestBackendOptions,
} from './backend.js';

// The firmware's delays shortened, for a virtual board's `timing` (server's tests):

export { FAST_TIMING } from './timing.js';

// Fault injection: what a virtual board is built with to misbehave, so that a test or an HIL
// inventory can show the misbehaviour is caught (hil, server's tests):

export type { RomBlockFault, RomBlockInfo, RomFaults } from '../serial/rom-emulator.js';
export type { OpenFault } from '../serial/usb-device.js';
export {
  REGRESSION_NAMES,
  REGRESSIONS,
  type RegressionName,
} from '../virtual-board/regressions.js';
export type { FaultKnobs } from '../virtual-board/types.js';
