/**
 * The candidate at the rig's OTA endpoint (the server as the rig starts it): the inventory
 * board checking in is offered it; a device of the same variant that is not in the inventory
 * gets no firmware section. The requests are what a 2.4.x board sends (docs/protocol.md §7),
 * written out here, not built by the device SDK.
 */
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildAppImage } from '@xiaozhi-mcp/firmware';
import { XiaozhiServer } from '@xiaozhi-mcp/server';
import { afterEach, describe, expect, it } from 'vitest';
import { main } from './cli.js';
import type { RunReport } from './model.js';
import { candidateAudience, offerCandidate } from './ota-offers.js';
import { rigServerOptions } from './rig.js';

const BOARD = { mac: 'f4:12:fa:50:00:01', uuid: '0b7d3c9e-0000-4000-8000-00000000b001' };
const STRANGER = { mac: 'f4:12:fa:50:00:99', uuid: '0b7d3c9e-0000-4000-8000-00000000b099' };

let server: XiaozhiServer | undefined;
afterEach(async () => {
  await server?.stop();
  server = undefined;
});

/** One OTA check of a bread-compact-wifi board running 2.4.2 (at `target`): the reply's JSON. */
async function otaCheck(
  target: XiaozhiServer | string,
  device: { mac: string; uuid: string },
): Promise<Record<string, unknown>> {
  const response = await fetch(typeof target === 'string' ? target : target.urls.ota, {
    method: 'POST',
    headers: {
      'Device-Id': device.mac,
      'Client-Id': device.uuid,
      'User-Agent': 'bread-compact-wifi/2.4.2',
      'Content-Type': 'application/json',
    },
    body: JSON.stringify({
      version: 2,
      mac_address: device.mac,
      uuid: device.uuid,
      chip_model_name: 'esp32s3',
      application: { name: 'xiaozhi', version: '2.4.2', elf_sha256: 'b'.repeat(64) },
      ota: { label: 'ota_0' },
      board: { type: 'bread-compact-wifi', name: 'bread-compact-wifi', ssid: 'lab' },
    }),
  });
  expect(response.status).toBe(200);
  return (await response.json()) as Record<string, unknown>;
}

describe("the ota-upgrade candidate at the rig's OTA endpoint", () => {
  it('goes to the inventory board that checked in, never to another device of its variant', async () => {
    server = await XiaozhiServer.start(rigServerOptions('127.0.0.1', 0, undefined));
    // The board checks in and its session opens; then the suite offers the candidate.
    await otaCheck(server, BOARD);
    offerCandidate(server.firmware, buildAppImage({ chip: 'esp32s3', version: '2.4.3' }), {
      config: { name: 'desk', variant: 'bread-compact-wifi' },
      deviceId: BOARD.mac,
      clientId: server.registry.get(BOARD.mac)?.clientId,
    });

    const board = await otaCheck(server, BOARD);
    expect(board.firmware).toEqual({
      version: '2.4.3',
      url: expect.stringMatching(/\/firmware\/candidate-desk\.bin$/),
    });
    // A device not in the inventory (a simulator, a lab board on the network): no offer.
    const stranger = await otaCheck(server, STRANGER);
    expect(stranger).not.toHaveProperty('firmware');
    expect(stranger).toHaveProperty('websocket');
    expect(server.registry.get(STRANGER.mac)?.lastOtaCheck?.offered).toBeUndefined();
  });

  it("names the board by the MAC and Client-Id it checked in with, and its inventory entry's", () => {
    expect(
      candidateAudience({
        config: { name: 'far', deviceId: 'F4:12:FA:50:00:02', clientId: 'uuid-far' },
        deviceId: 'F4:12:FA:50:00:01',
        clientId: 'uuid-seen',
      }),
    ).toEqual({
      deviceIds: ['f4:12:fa:50:00:01', 'f4:12:fa:50:00:02'],
      clientIds: ['uuid-seen', 'uuid-far'],
    });
    expect(candidateAudience({ config: { name: 'desk' }, deviceId: 'f4:12:fa:50:00:01' })).toEqual({
      deviceIds: ['f4:12:fa:50:00:01'],
      clientIds: [],
    });
  });
});

async function freePort(): Promise<number> {
  const listener = createServer();
  listener.listen(0, '127.0.0.1');
  await once(listener, 'listening');
  const { port } = listener.address() as { port: number };
  await new Promise<void>((done) => listener.close(() => done()));
  return port;
}

describe('hil run --listen with ota-upgrade', () => {
  it('upgrades its board, while a device not in the inventory checking in meanwhile is offered nothing', {
    timeout: 120_000,
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-ota-offers-'));
    try {
      const config = join(dir, 'hil.config.json');
      writeFileSync(
        config,
        JSON.stringify({
          wifi: { ssid: 'lab' },
          boards: [
            {
              name: 'desk',
              port: 'virtual:desk',
              chip: 'esp32s3',
              variant: 'bread-compact-wifi',
              virtual: { preset: 'bread-compact-wifi' },
            },
          ],
        }),
      );
      const port = await freePort();
      const ota = `http://127.0.0.1:${port}/xiaozhi/ota/`;
      const out = join(dir, 'out');
      // Once the candidate is on offer (the board is rebooting to take it), a stranger of the
      // board's variant checks in at the rig's endpoint.
      let stdout = '';
      let stranger: Promise<Record<string, unknown>> | undefined;
      const code = await main(
        ['run', '--config', config, '--out', out, '--listen', `127.0.0.1:${port}`],
        {
          stdout: (text) => {
            stdout += text;
            if (stranger === undefined && /ota-upgrade: rebooted/.test(stdout))
              stranger = otaCheck(ota, STRANGER);
          },
          stderr: () => {},
        },
      );
      expect(stranger, stdout).toBeDefined();
      expect(await stranger).not.toHaveProperty('firmware');
      const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
      const [board] = report.boards;
      expect(board?.checks.find((c) => c.id === 'ota-upgrade.version')).toMatchObject({
        status: 'passed',
      });
      expect(code).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
