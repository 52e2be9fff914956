/**
 * A board whose port's RFC 2217 server plays resets itself (Espressif's esp_rfc2217_server:
 * `resolvePort` says so as `lineControl: 'resets'`): a BOOT click cannot be expressed there,
 * `DTR on` being a reset into download mode, so an inventory's `boot-click` becomes a prompt.
 * The port here is a virtual board's own, which would pass a click through DTR: the board's
 * record of its lines shows whether the rig tried.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VirtualBus } from '@xiaozhi-mcp/device';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { placeImage } from '@xiaozhi-mcp/serial';
import { XiaozhiServer } from '@xiaozhi-mcp/server';
import { afterEach, describe, expect, it } from 'vitest';
import { BoardRunner } from './board-runner.js';
import { ConsoleReporter } from './reporters/console.js';
import { rigServerOptions } from './rig.js';
import { VIRTUAL_RIG_TIMING } from './virtual-rig.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

describe('boot-click on a port whose RFC 2217 server plays resets itself', () => {
  it('prompts for the press instead of clicking through DTR, saying why', {
    timeout: 120_000,
  }, async () => {
    const server = await XiaozhiServer.start(rigServerOptions('127.0.0.1', 0, undefined, 0));
    cleanup.push(() => server.stop());
    const bus = new VirtualBus(VIRTUAL_RIG_TIMING);
    cleanup.push(() => bus.close());
    const port = bus.plug({ preset: 'bread-compact-wifi', flashSizeMb: 16 }, 'virtual:far');
    const built = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '2.4.2',
      board: 'bread-compact-wifi',
    });
    let pressed = 0;
    const log: string[] = [];
    const report = await new BoardRunner({
      config: {
        name: 'far',
        port: 'rfc2217://127.0.0.1:2217',
        chip: 'esp32s3',
        variant: 'bread-compact-wifi',
        session: 'boot-click',
      },
      port: async () => ({
        ...port,
        lineControl: 'resets' as const,
        // The virtual rig's operator, whom the prompt asks.
        pressBoot: () => {
          pressed++;
          port.board.click();
        },
      }),
      server,
      outDir: mkdtempSync(join(tmpdir(), 'hil-resets-')),
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
      reporter: new ConsoleReporter({ write: (text) => log.push(text), live: false }),
      signal: new AbortController().signal,
    }).run();
    expect(report.failure).toBeUndefined();
    expect(report.status).toBe('passed');
    expect(log.join('')).toMatch(
      /its port's RFC 2217 server plays esptool's resets itself .*: press the BOOT button on the board to start a session/,
    );
    expect(pressed).toBe(1);
    // Nothing clicked BOOT through DTR.
    expect(port.device.lineEvents.filter((e) => e.kind === 'click')).toEqual([]);
  });
});
