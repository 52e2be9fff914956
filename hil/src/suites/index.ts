// Every suite by name, and the checks each one runs (for listings and baseline validation).
import type { SuiteName } from '../model.js';
import type { CheckSpec, Suite } from '../suite.js';
import { AUDIO_CHECKS, audioSuite } from './audio.js';
import { BRIDGE_CHECKS, bridgeSuite } from './bridge.js';
import { INITIALIZE_CHECKS, initializeSuite } from './initialize.js';
import { LATENCY_CHECKS, latencySuite } from './latency.js';
import { OTA_UPGRADE_CHECKS, otaUpgradeSuite } from './ota-upgrade.js';
import { REBOOT_CHECKS, rebootSuite } from './reboot.js';
import { ROBUSTNESS_CHECKS, robustnessSuite } from './robustness.js';
import { SESSION_CHECKS, sessionSuite } from './session.js';
import { TOOLS_CALL_CHECKS, toolsCallSuite } from './tools-call.js';
import { TOOLS_LIST_CHECKS, toolsListSuite } from './tools-list.js';

export const SUITES: Record<SuiteName, Suite> = {
  session: sessionSuite,
  initialize: initializeSuite,
  'tools-list': toolsListSuite,
  'tools-call': toolsCallSuite,
  robustness: robustnessSuite,
  latency: latencySuite,
  audio: audioSuite,
  reboot: rebootSuite,
  'ota-upgrade': otaUpgradeSuite,
  bridge: bridgeSuite,
};

/** The checks of each suite, in the order they run; ids are `<suite>.<id>`. */
export const SUITE_CHECKS: Record<SuiteName, readonly CheckSpec[]> = {
  session: Object.values(SESSION_CHECKS),
  initialize: Object.values(INITIALIZE_CHECKS),
  'tools-list': Object.values(TOOLS_LIST_CHECKS),
  'tools-call': Object.values(TOOLS_CALL_CHECKS),
  robustness: Object.values(ROBUSTNESS_CHECKS),
  latency: Object.values(LATENCY_CHECKS),
  audio: Object.values(AUDIO_CHECKS),
  reboot: Object.values(REBOOT_CHECKS),
  'ota-upgrade': Object.values(OTA_UPGRADE_CHECKS),
  bridge: Object.values(BRIDGE_CHECKS),
};

/** Every check id, `<suite>.<check>`. */
export function allCheckIds(): string[] {
  return Object.entries(SUITE_CHECKS).flatMap(([suite, checks]) =>
    checks.map((check) => `${suite}.${check.id}`),
  );
}

export { AUDIO_CHECKS, audioSuite, uplinkProblems } from './audio.js';
export { BRIDGE_CHECKS, bridgeSuite } from './bridge.js';
export { FIRMWARE_PROTOCOL_VERSION, initializeSuite } from './initialize.js';
export { latencyStats, latencySuite } from './latency.js';
export { otaUpgradeSuite } from './ota-upgrade.js';
export { rebootSuite } from './reboot.js';
export { QUOTED_TOOL_NAME, robustnessSuite } from './robustness.js';
export {
  judgeSession,
  SESSION_CHECKS,
  type SessionObservation,
  SessionWatch,
  sessionSuite,
} from './session.js';
export { STATUS_TOOL, toolsCallSuite, VOLUME_TOOL } from './tools-call.js';
export { schemaProblems, toolsListSuite } from './tools-list.js';
