import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VirtualBus, type VirtualBusBoard } from '@xiaozhi-mcp/device';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { placeImage } from '@xiaozhi-mcp/serial';
import { XiaozhiServer } from '@xiaozhi-mcp/server';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BoardRunner, type RunnerTimeouts } from './board-runner.js';
import { exitCodeFor } from './model.js';
import { ConsoleReporter } from './reporters/console.js';
import { rigServerOptions } from './rig.js';
import { VIRTUAL_RIG_TIMING } from './virtual-rig.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const step of cleanup.splice(0).reverse()) await step();
});

/**
 * One virtual board through a BoardRunner, flashed and provisioned as the virtual rig does.
 * `refuseOtaChecks`: our endpoint refuses every OTA check (403), as a board meets a check that
 * did not get through; the firmware logs the failure and retries on its own schedule.
 */
async function runBoard(
  spec: VirtualBusBoard & { readonly preset: 'bread-compact-wifi' | 'otto-robot' },
  options: {
    readonly timing?: Record<string, number>;
    readonly timeouts?: Partial<RunnerTimeouts>;
    readonly refuseOtaChecks?: boolean;
  } = {},
) {
  const server = await XiaozhiServer.start(rigServerOptions('127.0.0.1', 0, undefined, 0));
  cleanup.push(() => server.stop());
  if (options.refuseOtaChecks === true)
    vi.spyOn(server.registry, 'acceptsClient').mockReturnValue(false);
  const bus = new VirtualBus({ ...VIRTUAL_RIG_TIMING, ...options.timing });
  cleanup.push(() => bus.close());
  const port = bus.plug(spec, 'virtual:desk');
  const built = buildVirtualFirmware({ chip: 'esp32s3', version: '2.4.2', board: spec.preset });
  const outDir = mkdtempSync(join(tmpdir(), 'hil-waits-'));
  const report = await new BoardRunner({
    config: {
      name: 'desk',
      port: 'virtual:desk',
      chip: 'esp32s3',
      variant: spec.preset,
      virtual: {
        preset: spec.preset,
        ...(spec.usb === undefined ? {} : { usb: spec.usb }),
        ...(spec.reenumerateMs === undefined ? {} : { reenumerateMs: spec.reenumerateMs }),
      },
    },
    port: async () => ({ ...port, pressBoot: () => port.board.click() }),
    server,
    outDir,
    firmware: {
      image: placeImage('virtual firmware', built.merged, 0),
      version: built.version,
      chip: built.chip,
    },
    provision: { ssid: 'lab', password: 'lab-password' },
    candidateImage: undefined,
    suites: ['session', 'initialize'],
    latency: {},
    baseline: { deviations: [] },
    reporter: new ConsoleReporter({ write: () => {}, live: false }),
    signal: new AbortController().signal,
    ...(options.timeouts === undefined ? {} : { timeouts: options.timeouts }),
  }).run();
  return {
    report,
    step: (name: string) => report.steps.find((s) => s.step === name),
    exitCode: exitCodeFor([report], false),
    console: () => readFileSync(join(outDir, 'desk', 'console.log'), 'utf8'),
  };
}

describe("the boot wait, where the console lost the app's first lines", () => {
  it('passes boot by the first app line after the console came back when the OTA check does not get through, and the ota-check timeout says what it saw last', {
    timeout: 120_000,
  }, async () => {
    // A native-USB board re-enumerates in 2 s after the reset, losing its app_init and Board
    // lines; its OTA check is refused, so the next sign on the firmware's schedule is its log
    // of the failure and retry. The boot step's own default wait is used.
    const { report, step, exitCode } = await runBoard(
      { preset: 'bread-compact-wifi', usb: 'native', reenumerateMs: 2000 },
      {
        // The firmware's retry schedule, shortened so each retry logs a line within the run.
        timing: { otaRetryMs: 500 },
        timeouts: { otaMs: 3000 },
        refuseOtaChecks: true,
      },
    );
    expect(step('boot')).toMatchObject({
      status: 'passed',
      message: expect.stringMatching(
        /^booted: "[IWE] \(\d+\) (Ota|Application): .*" on its console, the first line of the app since the console came back/,
      ),
    });
    // The check never got through: a rig failure at ota-check, saying what the rig saw last.
    expect(exitCode).toBe(3);
    expect(report.failure?.step).toBe('ota-check');
    expect(report.failure?.reason).toMatch(/within 3 s/);
    expect(report.failure?.reason).toMatch(
      /last console line: ".*(Failed to check version|Check new version failed).*"; the board's last OTA check: none$/,
    );
  });

  it('names the last console line and the last OTA check when no sign of a boot comes', {
    timeout: 120_000,
  }, async () => {
    // The board's OTA checks are refused and its console's lines come too late for a boot wait
    // of 1 ms: the step fails saying what it saw last, not only that it waited.
    const { report, exitCode } = await runBoard(
      { preset: 'bread-compact-wifi', usb: 'native', reenumerateMs: 2000 },
      { timeouts: { bootMs: 1 }, refuseOtaChecks: true },
    );
    expect(exitCode).toBe(3);
    expect(report.failure?.step).toBe('boot');
    expect(report.failure?.reason).toMatch(
      /^no sign that desk booted within 0\.001 s: no boot line on its console and no OTA check from f4:12:fa:[0-9a-f:]+ at http:\/\/127\.0\.0\.1:\d+\/xiaozhi\/ota\/; last console line: (none|".*")( \(the console has been away since \S+\))?; the board's last OTA check: none$/,
    );
  });

  it('follows a board off the bus as long as its inventory says (virtual.reenumerateMs 10 s): the console found again, the boot seen', {
    timeout: 120_000,
  }, async () => {
    // The inventory's longest re-enumeration: a console wait as long as the board is away would
    // give up as it comes back. The waits follow the board's own figure, with their margin.
    const { report, step, exitCode, console } = await runBoard({
      preset: 'bread-compact-wifi',
      usb: 'native',
      reenumerateMs: 10_000,
    });
    // Looked for three times as long as the board is away, not for exactly as long.
    expect(console()).toMatch(/closed; looking for the board again \(30 s\)/);
    expect(report.failure).toBeUndefined();
    expect(step('boot')?.status).toBe('passed');
    expect(exitCode).toBe(0);
  });
});
