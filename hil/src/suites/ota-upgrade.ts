/**
 * `ota-upgrade` (opt-in, release qualification): the OTA endpoint offers the candidate app
 * image, the board reboots, finds it at its OTA check (docs/protocol.md §7), upgrades, reboots
 * again and must report the candidate's version in `initialize`.
 */
import { readAppImage } from '@xiaozhi-mcp/firmware';
import { compareFirmwareVersions, parseFirmwareVersion } from '@xiaozhi-mcp/protocol';
import type { Suite, SuiteContext, SuiteOutcome } from '../suite.js';
import { CheckFailure, type CheckSpec, expectThat } from '../suite.js';
import {
  describeError,
  RECONNECT_TIMEOUT_MS,
  requestOptions,
  requestReboot,
  SuiteChecks,
  skip,
} from './support.js';

/** Booting, downloading and writing an image, and booting again, on a real board. */
export const UPGRADE_TIMEOUT_MS = 2 * RECONNECT_TIMEOUT_MS;

export const OTA_UPGRADE_CHECKS = {
  candidate: {
    id: 'candidate',
    description: 'the candidate app image has an app description with a version boards can parse',
    severity: 'critical',
  },
  offer: {
    id: 'offer',
    description: 'the OTA endpoint offers the candidate, newer than what the board runs',
    severity: 'critical',
  },
  reboot: {
    id: 'reboot',
    description: 'the board reboots, upgrades and is ready again (time to ready recorded)',
    severity: 'critical',
  },
  version: {
    id: 'version',
    description: "initialize reports the candidate's version after the upgrade",
    severity: 'critical',
  },
} as const satisfies Record<string, CheckSpec>;

export const otaUpgradeSuite: Suite = {
  name: 'ota-upgrade',
  description: 'ota-upgrade: the board takes the candidate image over OTA and reports its version',
  async run(context: SuiteContext): Promise<SuiteOutcome> {
    const run = new SuiteChecks('ota-upgrade', context);
    const image = context.candidateImage;
    let candidate: string | undefined;
    let offered = false;
    let back = false;
    const noImage = 'the run has no candidate image to offer';

    await run.check(OTA_UPGRADE_CHECKS.candidate, async () => {
      if (image === undefined) skip(noImage);
      let version: string | undefined;
      try {
        version = readAppImage(image).appDescription?.version;
      } catch (error) {
        throw new CheckFailure(`expected an ESP app image, got: ${describeError(error)}`);
      }
      if (version === undefined) {
        throw new CheckFailure(
          'expected an app image with an app description (xiaozhi.bin), got none (a merged image or a bootloader?)',
        );
      }
      try {
        parseFirmwareVersion(version);
      } catch (error) {
        throw new CheckFailure(
          `expected a version boards can parse, got "${version}": ${describeError(error)}`,
        );
      }
      candidate = version;
      return `candidate ${version}`;
    });

    await run.check(OTA_UPGRADE_CHECKS.offer, async () => {
      const version = candidate;
      if (image === undefined) skip(noImage);
      if (version === undefined) skip('no candidate version (see ota-upgrade.candidate)');
      const record = context.record();
      const running = record.initialize?.serverInfo.version ?? record.version;
      if (running !== undefined) {
        // The board takes only a newer version: an older or equal one would pass unnoticed.
        expectThat(
          compareFirmwareVersions(version, running) > 0,
          `expected a candidate newer than the running ${running}, got ${version}`,
          `newer than ${running}`,
          version,
        );
      }
      context.offerFirmware(image);
      offered = true;
      return `offering ${version} to a board running ${running ?? 'an unknown version'}`;
    });

    await run.check(OTA_UPGRADE_CHECKS.reboot, async () => {
      if (!offered) skip('nothing was offered (see ota-upgrade.offer)');
      const started = performance.now();
      const outcome = await requestReboot(context);
      expectThat(
        outcome.lost,
        `expected the board to reboot (reply lost), got ${outcome.lost ? '' : outcome.actual}`,
        'DEVICE_DISCONNECTED',
        outcome.lost ? undefined : outcome.actual,
      );
      context.log(`ota-upgrade: rebooted via ${outcome.via}, waiting for the upgrade`);
      await context.reconnect(UPGRADE_TIMEOUT_MS);
      back = true;
      const readyMs = Math.round(performance.now() - started);
      return { note: `ready ${readyMs} ms after the reboot request`, data: { readyMs } };
    });

    await run.check(OTA_UPGRADE_CHECKS.version, async () => {
      if (!back) skip('the board did not come back (see ota-upgrade.reboot)');
      const result = await context.session().initialize(undefined, requestOptions(context));
      const actual = result.serverInfo.version;
      if (actual !== candidate) {
        const check = context.registry
          .otaChecks()
          .filter((c) => c.deviceId === context.deviceId)
          .at(-1);
        const seen =
          check === undefined
            ? 'the OTA endpoint saw no check from the board'
            : `its last OTA check ran ${check.version} and was offered ${check.offered ?? 'nothing'}`;
        throw new CheckFailure(
          `expected the board to report the candidate's version ${candidate} after the upgrade, got ${actual} (${seen})`,
          candidate,
          actual,
        );
      }
      return `runs ${actual}`;
    });

    return { checks: run.checks };
  },
};
