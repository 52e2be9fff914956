import type { BoardTiming } from '../virtual-board/types.js';

/**
 * The firmware's pauses shortened for tests of boards against a backend: boots, Wi-Fi, retries,
 * reboots, activation, the MQTT reconnect and a short audio uplink take milliseconds, while the
 * waits a slow CI machine needs (the hello, the MQTT connect) stay generous. Spread it and
 * override what a test is about: `{ ...FAST_TIMING, otaRetryMs: 50 }`.
 */
export const FAST_TIMING: Readonly<Partial<BoardTiming>> = Object.freeze({
  bootMs: 2,
  wifiConnectMs: 2,
  otaRetryMs: 20,
  helloTimeoutMs: 2000,
  rebootMs: 10,
  panicRebootMs: 10,
  upgradeRebootMs: 10,
  activationRetryMs: 10,
  activationFailMs: 10,
  mqttReconnectMs: 300,
  mqttConnectTimeoutMs: 3000,
  uplinkFrames: 5,
  uplinkFrameMs: 5,
});
