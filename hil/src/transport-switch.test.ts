/**
 * The rig offers each board its transport by our OTA reply, from the inventory: MQTT to a board on
 * `session: mqtt`, WebSocket to every other. A board keeps what its NVS holds and MQTT wins while
 * `mqtt/endpoint` is set (docs/protocol.md §5, §7), so a board an earlier run put on MQTT must be
 * given `"mqtt":{"endpoint":""}` to come back: two runs on one virtual board, as two `hil run`s
 * against the same rig would be, the first over MQTT, the second saying boot-click.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VirtualBus } from '@xiaozhi-mcp/device';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { placeImage } from '@xiaozhi-mcp/serial';
import { XiaozhiServer } from '@xiaozhi-mcp/server';
import { afterEach, describe, expect, it } from 'vitest';
import { BoardRunner, type BoardRunOptions } from './board-runner.js';
import type { BoardConfig } from './inventory.js';
import { ConsoleReporter } from './reporters/console.js';
import { rigServerOptions } from './rig.js';
import { VIRTUAL_RIG_TIMING } from './virtual-rig.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

describe('a board switched back to WebSocket by our OTA reply', () => {
  it('qualifies over MQTT, then ends up on WebSocket when the next run says boot-click', {
    timeout: 120_000,
  }, async () => {
    const server = await XiaozhiServer.start(rigServerOptions('127.0.0.1', 0, undefined, 0));
    cleanup.push(() => server.stop());
    const bus = new VirtualBus(VIRTUAL_RIG_TIMING);
    cleanup.push(() => bus.close());
    const port = bus.plug({ preset: 'bread-compact-wifi', flashSizeMb: 16 }, 'virtual:switch');
    const { board } = port;
    const built = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '2.4.2',
      board: 'bread-compact-wifi',
    });
    const outDir = mkdtempSync(join(tmpdir(), 'hil-switch-'));
    const base = {
      name: 'switch',
      port: 'virtual:switch',
      chip: 'esp32s3',
      variant: 'bread-compact-wifi',
    } as const satisfies BoardConfig;
    const options = (config: BoardConfig): BoardRunOptions => ({
      config,
      // The same board both times: its flash (and NVS) outlives the first run.
      port: async () => port,
      server,
      outDir,
      firmware: undefined,
      provision: undefined,
      candidateImage: undefined,
      suites: ['session', 'initialize', 'audio'],
      latency: {},
      baseline: { deviations: [] },
      reporter: new ConsoleReporter({ write: () => {}, live: false }),
      signal: new AbortController().signal,
    });

    // The first run flashes and provisions it (the identify step reads its MAC) and offers MQTT.
    const first = await new BoardRunner({
      ...options({ ...base, session: 'mqtt' }),
      firmware: {
        image: placeImage('virtual firmware', built.merged, 0),
        version: built.version,
        chip: built.chip,
      },
      provision: { ssid: 'lab', password: 'lab-password' },
    }).run();
    expect(first.failure).toBeUndefined();
    expect(first.status).toBe('passed');
    expect(first.transport).toBe('mqtt');
    expect(first.checks.find((c) => c.id === 'audio.uplink')?.status).toBe('passed');
    expect(server.registry.get(board.mac)?.transport).toBe('mqtt');
    expect(board.transport).toBe('mqtt');
    // The board stored our broker: by itself it would stay on MQTT at every boot.
    expect(board.storage.open('mqtt').getString('endpoint')).toMatch(/^127\.0\.0\.1:\d+$/);

    // The second run says boot-click: no flash, no provision, the MAC from the inventory.
    const second = await new BoardRunner(
      options({ ...base, session: 'boot-click', deviceId: board.mac.toUpperCase() }),
    ).run();
    expect(second.failure).toBeUndefined();
    expect(second.status).toBe('passed');
    expect(second.steps.find((s) => s.step === 'flash')?.status).toBe('skipped');
    // Our reply blanked the endpoint next to the WebSocket URL, and the board took WebSocket.
    expect(board.storage.open('mqtt').getString('endpoint')).toBe('');
    expect(board.transport).toBe('websocket');
    expect(second.transport).toBe('websocket');
    expect(server.registry.get(board.mac)?.transport).toBe('websocket');
    expect(second.checks.find((c) => c.id === 'session.hello-transport')).toMatchObject({
      status: 'passed',
      message: 'transport websocket',
    });
    expect(second.checks.find((c) => c.id === 'audio.uplink')).toMatchObject({
      status: 'skipped',
      message: 'audio over WebSocket is not judged',
    });
  });
});
