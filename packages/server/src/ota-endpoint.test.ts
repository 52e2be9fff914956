/**
 * The OTA endpoint bounded and guarded: the body and every stored field are limited
 * (413 / 400 naming the field), and opt-in activation (docs/protocol.md §7) gives a listed
 * serial its token only after the HMAC of a random challenge under its key.
 */
import { createHmac } from 'node:crypto';
import { Writable } from 'node:stream';
import { VirtualBoard } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { buildAppImage } from '@xiaozhi-mcp/firmware';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { FirmwareStore } from './firmware-store.js';
import { type StartOptions, XiaozhiServer } from './server.js';

const MAC = 'f4:12:fa:40:00:01';
const UUID = '6c1f8f0e-0000-4000-8000-00000000a001';
const SERIAL = 'SN-LAB-0001';
const KEY = '00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff';

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

/** What a 2.4.x board sends (docs/protocol.md §7), with `patch` merged over it. */
function systemInfo(patch: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    version: 2,
    language: 'zh-CN',
    flash_size: 16777216,
    minimum_free_heap_size: '123456',
    mac_address: MAC,
    uuid: UUID,
    chip_model_name: 'esp32s3',
    chip_info: { model: 9, cores: 2, revision: 2, features: 18 },
    application: {
      name: 'xiaozhi',
      version: '2.4.2',
      compile_time: 'Jan  1 2026T00:00:00Z',
      idf_version: 'v5.4.1',
      elf_sha256: 'a'.repeat(64),
    },
    partition_table: [{ label: 'nvs', type: 1, subtype: 2, address: 36864, size: 16384 }],
    ota: { label: 'ota_0' },
    display: { monochrome: false, width: 240, height: 240 },
    board: { type: 'bread-compact-wifi', name: 'bread-compact-wifi', ssid: 'lab', ip: '10.0.0.2' },
    ...patch,
  };
}

function check(
  target: XiaozhiServer,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<Response> {
  return fetch(target.urls.ota, {
    method: 'POST',
    headers: {
      'Device-Id': MAC,
      'Client-Id': UUID,
      'User-Agent': 'bread-compact-wifi/2.4.2',
      'Content-Type': 'application/json',
      ...headers,
    },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

describe('bounded OTA requests', () => {
  it('answers a body over maxOtaBodyBytes with 413, and records nothing', async () => {
    const target = await start({ maxOtaBodyBytes: 4096 });
    const response = await check(
      target,
      systemInfo({ board: { type: 'x', note: 'n'.repeat(8000) } }),
    );
    expect(response.status).toBe(413);
    expect(target.registry.list()).toEqual([]);
  });

  it.each([
    ['application.version', { application: { version: '1'.repeat(200_000 / 1000) } }],
    ['application.elf_sha256', { application: { version: '2.4.2', elf_sha256: 'f'.repeat(129) } }],
    ['board.name', { board: { type: 'x', name: 'n'.repeat(65) } }],
    ['chip_model_name', { chip_model_name: 'c'.repeat(65) }],
    ['uuid', { uuid: 'u'.repeat(65) }],
    ['board.extra', { board: { type: 'x', extra: 'e'.repeat(257) } }],
    ['partition_table', { partition_table: Array.from({ length: 33 }, () => ({ label: 'p' })) }],
    ['partition_table[0].label', { partition_table: [{ label: 'l'.repeat(33) }] }],
    ['display.a.b.c.d.e', { display: { a: { b: { c: { d: { e: { f: 1 } } } } } } }],
  ])('refuses a too-long %s with 400 naming it', async (field, patch) => {
    const target = await start();
    const response = await check(target, systemInfo(patch));
    expect(response.status).toBe(400);
    const answer = (await response.json()) as { field: string; error: string };
    expect(answer.field).toBe(`body.${field}`);
    expect(answer.error).toContain(`body.${field}`);
    expect(target.registry.list()).toEqual([]);
  });

  it('refuses a User-Agent over 256 bytes with 400 naming it', async () => {
    const target = await start();
    const response = await check(target, systemInfo(), {
      'User-Agent': `${'b'.repeat(300)}/2.4.2`,
    });
    expect(response.status).toBe(400);
    expect(((await response.json()) as { field: string }).field).toBe('User-Agent');
  });

  it('takes what real boards send, and keeps it', async () => {
    const target = await start();
    const response = await check(target, systemInfo());
    expect(response.status).toBe(200);
    expect(target.registry.get(MAC)?.lastOtaCheck?.body).toEqual(systemInfo());
  });

  it('keeps what boards of one build send alike once, and what differs per board as sent', async () => {
    const target = await start();
    const other = { mac: 'f4:12:fa:40:00:02', uuid: '6c1f8f0e-0000-4000-8000-00000000a002' };
    const board = (ip: string) => ({
      type: 'bread-compact-wifi',
      name: 'bread-compact-wifi',
      ssid: 'lab',
      ip,
    });
    expect((await check(target, systemInfo({ board: board('10.0.0.2') }))).status).toBe(200);
    const second = systemInfo({
      mac_address: other.mac,
      uuid: other.uuid,
      board: board('10.0.0.3'),
    });
    const answer = await check(target, second, { 'Device-Id': other.mac, 'Client-Id': other.uuid });
    expect(answer.status).toBe(200);
    const one = target.registry.get(MAC)?.lastOtaCheck?.body as Record<string, unknown>;
    const two = target.registry.get(other.mac)?.lastOtaCheck?.body as Record<string, unknown>;
    expect(two).toEqual(second);
    expect(two.application).toBe(one.application);
    expect(two.partition_table).toBe(one.partition_table);
    expect(Object.isFrozen(one.application)).toBe(true);
    expect(two.board).not.toBe(one.board);
    expect(one.board).toEqual(board('10.0.0.2'));
  });
});

describe('firmware for some devices only', () => {
  it('offers an image with an audience to the devices it names; another gets no firmware section, logged', async () => {
    const firmware = new FirmwareStore();
    firmware.add(buildAppImage({ chip: 'esp32s3', version: '2.5.0' }), {
      name: 'candidate-desk.bin',
      board: 'bread-compact-wifi',
      audience: { deviceIds: [MAC] },
    });
    const log: string[] = [];
    const target = await start({
      firmware,
      logger: pino(
        { level: 'info' },
        new Writable({
          write(chunk: Buffer, _encoding, done) {
            log.push(chunk.toString());
            done();
          },
        }),
      ),
    });
    const named = (await (await check(target, systemInfo())).json()) as Record<string, unknown>;
    expect(named.firmware).toEqual({
      version: '2.5.0',
      url: expect.stringMatching(/\/firmware\/candidate-desk\.bin$/),
    });
    const stranger = 'f4:12:fa:40:00:99';
    const response = await check(
      target,
      systemInfo({ mac_address: stranger, uuid: '6c1f8f0e-0000-4000-8000-00000000a099' }),
      { 'Device-Id': stranger, 'Client-Id': '6c1f8f0e-0000-4000-8000-00000000a099' },
    );
    expect(response.status).toBe(200);
    const reply = (await response.json()) as Record<string, unknown>;
    expect(reply).not.toHaveProperty('firmware');
    expect(reply).toHaveProperty('websocket');
    expect(target.registry.get(stranger)?.lastOtaCheck?.offered).toBeUndefined();
    const warned = log
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .find((entry) => entry.deviceId === stranger && entry.withheld !== undefined);
    expect(warned).toMatchObject({
      level: 40,
      withheld: 'candidate-desk.bin',
      msg: 'firmware 2.5.0 (candidate-desk.bin) not offered: it is for other devices',
    });
  });
});

describe('opt-in activation', () => {
  const activationKeys = { [SERIAL]: KEY };
  const hmacOf = (challenge: string, key = KEY) =>
    createHmac('sha256', Buffer.from(key, 'hex')).update(challenge).digest('hex');

  async function challenged(target: XiaozhiServer): Promise<string> {
    const response = await check(target, systemInfo(), {
      'Serial-Number': SERIAL,
      'Activation-Version': '2',
    });
    expect(response.status).toBe(200);
    const reply = (await response.json()) as {
      activation?: { message: string; code: string; challenge: string; timeout_ms: number };
      websocket?: unknown;
    };
    expect(reply.websocket).toBeUndefined();
    expect(reply.activation).toEqual({
      message: expect.any(String),
      code: expect.stringMatching(/^\d{6}$/),
      challenge: expect.stringMatching(/^[0-9a-f]{64}$/),
      timeout_ms: expect.any(Number),
    });
    return reply.activation?.challenge ?? '';
  }

  function activate(
    target: XiaozhiServer,
    payload: unknown,
    headers: Record<string, string> = {},
  ): Promise<Response> {
    return fetch(`${target.urls.ota}activate`, {
      method: 'POST',
      headers: {
        'Device-Id': MAC,
        'Client-Id': UUID,
        'Activation-Version': '2',
        'Serial-Number': SERIAL,
        'Content-Type': 'application/json',
        ...headers,
      },
      body: typeof payload === 'string' ? payload : JSON.stringify(payload),
    });
  }

  it('challenges a listed serial and gives its token only after the right HMAC', async () => {
    const target = await start({ activationKeys });
    const challenge = await challenged(target);
    expect(target.tokenFor(MAC)).toBeUndefined();
    const payload = (hmac: string, extra: Record<string, unknown> = {}) => ({
      algorithm: 'hmac-sha256',
      serial_number: SERIAL,
      challenge,
      hmac,
      ...extra,
    });

    // A wrong HMAC, another key's, an empty one: 403 (the firmware's failure), still no token.
    expect((await activate(target, payload('0'.repeat(64)))).status).toBe(403);
    expect((await activate(target, payload(hmacOf(challenge, 'ff'.repeat(32))))).status).toBe(403);
    expect((await activate(target, payload(''))).status).toBe(403);
    // The right HMAC from another device, or under another serial: 403.
    expect(
      (await activate(target, payload(hmacOf(challenge)), { 'Device-Id': 'f4:12:fa:40:00:99' }))
        .status,
    ).toBe(403);
    expect(
      (await activate(target, payload(hmacOf(challenge), { serial_number: 'SN-OTHER' }))).status,
    ).toBe(403);
    // Unknown challenge: 404; malformed: 400.
    expect(
      (await activate(target, { ...payload(hmacOf('f'.repeat(64))), challenge: 'f'.repeat(64) }))
        .status,
    ).toBe(404);
    expect((await activate(target, 'not json')).status).toBe(400);
    expect((await activate(target, payload(hmacOf(challenge), { algorithm: 'md5' }))).status).toBe(
      400,
    );
    expect((await activate(target, { challenge })).status).toBe(400);
    expect((await activate(target, payload('a'.repeat(10_000)))).status).toBe(413);
    expect(target.tokenFor(MAC)).toBeUndefined();
    expect(target.registry.get(MAC)?.activatedSerial).toBeUndefined();

    const right = await activate(target, payload(hmacOf(challenge)));
    expect(right.status).toBe(200);
    expect(target.registry.get(MAC)?.activatedSerial).toBe(SERIAL);
    // The challenge is spent.
    expect((await activate(target, payload(hmacOf(challenge)))).status).toBe(404);

    const next = await check(target, systemInfo(), { 'Serial-Number': SERIAL });
    const reply = (await next.json()) as { activation?: unknown; websocket?: { token: string } };
    expect(reply.activation).toBeUndefined();
    expect(reply.websocket?.token).toMatch(/^[0-9a-f]{32}$/);
    expect(target.tokenFor(MAC)).toBe(reply.websocket?.token);
  });

  it('a new OTA check replaces the pending challenge', async () => {
    const target = await start({ activationKeys });
    const first = await challenged(target);
    const second = await challenged(target);
    expect(second).not.toBe(first);
    const payload = (challenge: string) => ({
      algorithm: 'hmac-sha256',
      serial_number: SERIAL,
      challenge,
      hmac: hmacOf(challenge),
    });
    expect((await activate(target, payload(first))).status).toBe(404);
    expect((await activate(target, payload(second))).status).toBe(200);
  });

  it('leaves unknown serials and boards without a serial as before', async () => {
    const target = await start({ activationKeys });
    const unknown = (await (
      await check(target, systemInfo(), { 'Serial-Number': 'SN-UNLISTED' })
    ).json()) as { activation?: unknown; websocket?: { token: string } };
    expect(unknown.activation).toBeUndefined();
    expect(unknown.websocket?.token).toBeDefined();
    const plain = (await (
      await check(target, systemInfo({ mac_address: 'f4:12:fa:40:00:02' }), {
        'Device-Id': 'f4:12:fa:40:00:02',
        'Client-Id': '6c1f8f0e-0000-4000-8000-00000000a002',
      })
    ).json()) as { activation?: unknown; websocket?: { token: string } };
    expect(plain.activation).toBeUndefined();
    expect(plain.websocket?.token).toBeDefined();
  });

  it('answers /activate with 200 when activation is not configured (it never challenges)', async () => {
    const target = await start();
    const response = await fetch(`${target.urls.ota}activate`, { method: 'POST', body: '{}' });
    expect(response.status).toBe(200);
  });

  it('a virtual board with the key activates, then connects with its token', async () => {
    const target = await start({ activationKeys });
    const board = new VirtualBoard({
      mac: 'f4:12:fa:40:00:10',
      wifi: { ssid: 'lab' },
      otaUrl: target.urls.ota,
      timing: FAST_TIMING,
      serialNumber: SERIAL,
      activationKey: KEY,
    });
    boards.push(board);
    board.powerOn();
    await board.waitForState('idle', 5000);
    expect(target.registry.get(board.mac)?.activatedSerial).toBe(SERIAL);
    board.click();
    const record = await target.registry.waitForReady(board.mac, 5000);
    expect(record.tools.length).toBeGreaterThan(0);
    expect(board.storage.open('websocket').getString('token')).toBe(target.tokenFor(board.mac));
  });

  it('a board with the wrong key gets no token', async () => {
    const target = await start({ activationKeys });
    const board = new VirtualBoard({
      mac: 'f4:12:fa:40:00:11',
      wifi: { ssid: 'lab' },
      otaUrl: target.urls.ota,
      timing: FAST_TIMING,
      serialNumber: SERIAL,
      activationKey: 'ee'.repeat(32),
    });
    boards.push(board);
    board.powerOn();
    await board.waitForLine(/Failed to activate, code: 403/, 5000);
    expect(target.tokenFor(board.mac)).toBeUndefined();
    expect(target.registry.get(board.mac)?.activatedSerial).toBeUndefined();
    expect(board.storage.open('websocket').getString('token')).toBe('');
  });
});
