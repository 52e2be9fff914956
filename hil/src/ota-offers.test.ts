/**
 * The candidate at the rig's OTA endpoint (the server as the rig starts it): the inventory
 * board checking in is offered it; a device of the same variant that is not in the inventory
 * gets no firmware section. The requests are what a 2.4.x board sends (docs/protocol.md §7),
 * written out here, not built by the device SDK.
 */
import { buildAppImage } from '@xiaozhi-mcp/firmware';
import { XiaozhiServer } from '@xiaozhi-mcp/server';
import { afterEach, describe, expect, it } from 'vitest';
import { candidateAudience, offerCandidate } from './ota-offers.js';
import { rigServerOptions } from './rig.js';

const BOARD = { mac: 'f4:12:fa:50:00:01', uuid: '0b7d3c9e-0000-4000-8000-00000000b001' };
const STRANGER = { mac: 'f4:12:fa:50:00:99', uuid: '0b7d3c9e-0000-4000-8000-00000000b099' };

let server: XiaozhiServer | undefined;
afterEach(async () => {
  await server?.stop();
  server = undefined;
});

/** One OTA check of a bread-compact-wifi board running 2.4.2: the reply's JSON. */
async function otaCheck(
  target: XiaozhiServer,
  device: { mac: string; uuid: string },
): Promise<Record<string, unknown>> {
  const response = await fetch(target.urls.ota, {
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
