// @xiaozhi-mcp/device/testing: a small OTA + WebSocket backend for tests of boards and tools.
export {
  DeviceConnection,
  type OtaRequestRecord,
  TestBackend,
  type TestBackendOptions,
} from './backend.js';
export { FAST_TIMING } from './timing.js';
