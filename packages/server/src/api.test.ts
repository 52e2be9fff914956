/**
 * The API's device routes under load and misuse: `/devices` is paginated by id with
 * an opaque cursor, `DELETE /devices/:id` forgets a device, and a call's `timeoutMs` must be an
 * integer 1..600000 (a 1e10 timeout used to overflow Node's timer).
 */
import { VirtualBoard } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { type StartOptions, XiaozhiServer } from './server.js';

let server: XiaozhiServer | undefined;
const boards: VirtualBoard[] = [];

afterEach(async () => {
  for (const board of boards.splice(0)) board.powerOff();
  await server?.stop();
  server = undefined;
});

async function start(options: StartOptions = {}): Promise<XiaozhiServer> {
  server = await XiaozhiServer.start({ port: 0, logLevel: 'silent', ...options });
  return server;
}

const mac = (i: number) =>
  `f4:12:fa:70:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`;

function seen(target: XiaozhiServer, deviceId: string): void {
  target.registry.recordOtaCheck({
    at: new Date().toISOString(),
    deviceId,
    clientId: `6c1f8f0e-0000-4000-8000-${deviceId.replaceAll(':', '')}`,
    board: 'bread-compact-wifi',
    version: '2.4.2',
    elfSha256: undefined,
    remoteAddress: undefined,
    offered: undefined,
    body: { application: { version: '2.4.2' } },
  });
}

interface Page {
  devices: { deviceId: string }[];
  nextCursor?: string;
}

describe('GET /devices', () => {
  it('pages by device id: 100 by default, nextCursor until the last page', async () => {
    const target = await start();
    // Seen in an order that is not the id order.
    const ids = Array.from({ length: 250 }, (_, i) => mac((i * 97) % 250));
    for (const id of ids) seen(target, id);
    const api = (query: string) => fetch(`${target.urls.api}/devices${query}`);

    const first = (await (await api('')).json()) as Page;
    expect(first.devices).toHaveLength(100);
    expect(first.nextCursor).toBe(first.devices.at(-1)?.deviceId);

    const all: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = (await (
        await api(`?limit=60${cursor === undefined ? '' : `&cursor=${encodeURIComponent(cursor)}`}`)
      ).json()) as Page;
      all.push(...page.devices.map((d) => d.deviceId));
      cursor = page.nextCursor;
      pages++;
    } while (cursor !== undefined);
    expect(pages).toBe(5);
    expect(all).toEqual([...ids].sort());

    const one = (await (await api('?limit=1000')).json()) as Page;
    expect(one.devices).toHaveLength(250);
    expect(one.nextCursor).toBeUndefined();
  });

  it.each(['0', '1001', '-1', '1.5', 'abc', ''])(
    'answers limit=%s with 400 naming it',
    async (limit) => {
      const target = await start();
      const response = await fetch(`${target.urls.api}/devices?limit=${limit}`);
      expect(response.status).toBe(400);
      expect(((await response.json()) as { error: { message: string } }).error.message).toMatch(
        /^limit /,
      );
    },
  );
});

describe('DELETE /devices/:id', () => {
  it('forgets a known device (200), and 404 for an unknown one', async () => {
    const target = await start();
    seen(target, mac(1));
    const remove = (id: string) =>
      fetch(`${target.urls.api}/devices/${encodeURIComponent(id)}`, { method: 'DELETE' });
    const response = await remove(mac(1));
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ forgotten: mac(1) });
    expect(target.registry.get(mac(1))).toBeUndefined();
    const again = await remove(mac(1));
    expect(again.status).toBe(404);
    expect(((await again.json()) as { error: { code: string } }).error.code).toBe(
      'DEVICE_NOT_FOUND',
    );
  });
});

describe('POST /devices/:id/call timeoutMs', () => {
  it.each([
    ['1e10', 1e10],
    ['600001', 600_001],
    ['0', 0],
    ['1.5', 1.5],
    ['"100"', '100'],
    ['null', null],
  ])('answers %s with 400 naming timeoutMs, and sends nothing', async (_, timeoutMs) => {
    const target = await start();
    const board = new VirtualBoard({
      mac: mac(9),
      wifi: { ssid: 'lab' },
      otaUrl: target.urls.ota,
      timing: FAST_TIMING,
    });
    boards.push(board);
    board.powerOn();
    await board.waitForState('idle', 5000);
    board.click();
    await target.registry.waitForReady(board.mac, 5000);
    const requests = target.registry.session(board.mac).stats.requests;
    const response = await fetch(
      `${target.urls.api}/devices/${encodeURIComponent(board.mac)}/call`,
      {
        method: 'POST',
        body: JSON.stringify({
          name: 'self.audio_speaker.set_volume',
          arguments: { volume: 10 },
          timeoutMs,
        }),
      },
    );
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { message: string } }).error.message).toMatch(
      /timeoutMs/,
    );
    expect(target.registry.session(board.mac).stats.requests).toBe(requests);
  });
});

describe('request paths', () => {
  it('reads a path with `//` after the prefix as a path, never a 500 Invalid URL', async () => {
    const target = await start();
    for (const [method, path] of [
      ['PUT', '//%2F'],
      ['GET', '//devices'],
      ['GET', '//f4:12:fa:00:00:01/tools'],
    ] as const) {
      const res = await fetch(`${target.urls.api}${path}`, { method });
      expect(res.status).not.toBe(500);
      expect(await res.json()).toBeTypeOf('object');
    }
  });
});
