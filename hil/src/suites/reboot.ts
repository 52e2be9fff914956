/**
 * `reboot` (opt-in): `self.reboot` never answers, the board reboots first (docs/protocol.md §3.4);
 * it must boot, check OTA and come back, and answer `initialize` on the new session.
 */
import type { Suite, SuiteContext, SuiteOutcome } from '../suite.js';
import { type CheckSpec, expectThat } from '../suite.js';
import {
  REBOOT_TOOL,
  RECONNECT_TIMEOUT_MS,
  type RebootOutcome,
  requestOptions,
  requestReboot,
  SuiteChecks,
  skip,
} from './support.js';

export const REBOOT_CHECKS = {
  replyLost: {
    id: 'reply-lost',
    description: `${REBOOT_TOOL} gets no reply: the request fails with DEVICE_DISCONNECTED`,
    severity: 'major',
  },
  back: {
    id: 'back',
    description: 'the board boots and is ready again (time to ready recorded)',
    severity: 'critical',
  },
  initialize: {
    id: 'initialize',
    description: 'initialize works on the new session',
    severity: 'critical',
  },
} as const satisfies Record<string, CheckSpec>;

export const rebootSuite: Suite = {
  name: 'reboot',
  description: 'reboot: the reply is lost, the board comes back and answers',
  async run(context: SuiteContext): Promise<SuiteOutcome> {
    const run = new SuiteChecks('reboot', context);
    const versionBefore = context.record().version;
    let started = 0;
    let outcome: RebootOutcome | undefined;
    let back = false;

    await run.check(REBOOT_CHECKS.replyLost, async () => {
      started = performance.now();
      outcome = await requestReboot(context);
      if (outcome.via === 'system') {
        skip(`the board lists no ${REBOOT_TOOL}; rebooted with the system reboot message`);
      }
      expectThat(
        outcome.lost,
        `expected the reply to ${REBOOT_TOOL} to be lost (DEVICE_DISCONNECTED), got ${outcome.lost ? '' : outcome.actual}`,
        'DEVICE_DISCONNECTED',
        outcome.lost ? undefined : outcome.actual,
      );
      return 'reply lost: the board dropped the connection';
    });

    await run.check(REBOOT_CHECKS.back, async () => {
      const current = outcome;
      if (current === undefined || !current.lost) {
        skip('the board did not go down (see reboot.reply-lost)');
      }
      context.log('reboot: waiting for the board to come back');
      const record = await context.reconnect(RECONNECT_TIMEOUT_MS);
      back = true;
      const readyMs = Math.round(performance.now() - started);
      return {
        note: `ready ${readyMs} ms after the reboot request (session ${record.sessions})`,
        data: { readyMs },
      };
    });

    await run.check(REBOOT_CHECKS.initialize, async () => {
      if (!back) skip('the board did not come back (see reboot.back)');
      const result = await context.session().initialize(undefined, requestOptions(context));
      const { name, version } = result.serverInfo;
      return `${name} ${version}${version === versionBefore ? '' : ` (was ${versionBefore})`}`;
    });

    return { checks: run.checks };
  },
};
