import { closeSync, mkdtempSync, openSync, readSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ResolvedVirtual, VirtualBoardStore } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { buildVirtualFirmware, readNvsPartition } from '@xiaozhi-mcp/firmware';
import {
  flashCommand,
  provisionCommand,
  provisionSettings,
  type SerialCommandContext,
} from '@xiaozhi-mcp/serial/commands';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { main } from '../cli.js';

let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'hil-provision-'));
});

afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

function capture() {
  const out = { stdout: '', stderr: '' };
  const context: SerialCommandContext = {
    program: 'xiaozhi-mcp',
    out: { stdout: (t) => (out.stdout += t), stderr: (t) => (out.stderr += t) },
    env: {},
    lister: async () => [],
    providers: [new VirtualBoardStore({ dir: join(dir, 'virtual'), timing: FAST_TIMING })],
  };
  return { context, out };
}

/** The NVS entries in a virtual board's flash file (the xiaozhi 16 MB table: 0x9000, 16 KiB). */
function nvsOf(name: string): Record<string, unknown> {
  const fd = openSync(join(dir, 'virtual', `${name}.flash`), 'r');
  try {
    const bytes = new Uint8Array(0x4000);
    readSync(fd, bytes, 0, bytes.length, 0x9000);
    return Object.fromEntries(
      readNvsPartition(bytes).map((e) => [`${e.namespace}/${e.key}`, e.value]),
    );
  } finally {
    closeSync(fd);
  }
}

/** Flashes the virtual firmware and boots it once, so the board has made its `board/uuid`. */
async function flashedBoard(name: string): Promise<string> {
  const file = join(dir, 'merged.bin');
  writeFileSync(
    file,
    buildVirtualFirmware({ chip: 'esp32s3', version: '2.7.0', board: 'bread-compact-wifi' }).merged,
  );
  const { context, out } = capture();
  expect(await flashCommand(context, file, { create: true, port: `virtual:${name}` })).toBe(0);
  expect(out.stderr).toBe('');
  // The next process plugs the board in: it boots what the flash file holds.
  let virtual: ResolvedVirtual | undefined;
  const store = new VirtualBoardStore({
    dir: join(dir, 'virtual'),
    timing: FAST_TIMING,
    onBoard: (v) => {
      virtual = v;
    },
  });
  const port = await store.resolve(`virtual:${name}`);
  try {
    const line = await virtual?.board.waitForLine(/Board: UUID=\S+/, 10_000);
    const uuid = /UUID=(\S+)/.exec(line ?? '')?.[1];
    if (uuid === undefined) throw new Error('no uuid');
    return uuid;
  } finally {
    port.dispose();
  }
}

describe('provision against a virtual port', () => {
  it('writes Wi-Fi, the OTA and WebSocket URLs into NVS, keeps board/uuid, and resets', {
    timeout: 60_000,
  }, async () => {
    const uuid = await flashedBoard('desk');
    expect(nvsOf('desk')['board/uuid']).toBe(uuid);
    const { context, out } = capture();
    const code = await provisionCommand(context, {
      port: 'virtual:desk',
      ssid: 'lab',
      password: 'secret-pw',
      otaUrl: 'http://127.0.0.1:9/xiaozhi/ota/',
      wsUrl: 'ws://127.0.0.1:9/xiaozhi/v1/',
      wsToken: 'tok-123',
    });
    expect(out.stderr).toBe('');
    expect(code).toBe(0);
    expect(out.stdout).toMatch(/^virtual:desk: ESP32-S3 .*, MAC f4:12:fa/m);
    expect(out.stdout).toMatch(
      /^nvs partition 'nvs' at 0x9000 \(16384 bytes\): wrote wifi\/ssid=lab, wifi\/password \(set\), wifi\/ota_url=http:\/\/127\.0\.0\.1:9\/xiaozhi\/ota\/, websocket\/url=ws:\/\/127\.0\.0\.1:9\/xiaozhi\/v1\/, websocket\/token \(set\)$/m,
    );
    expect(out.stdout).toMatch(/^kept 2 existing entries: board\/uuid, wifi\/force_ap$/m);
    expect(out.stdout).toMatch(/^virtual:desk: hard reset; the board joins lab and checks /m);
    // Secrets are never printed.
    expect(out.stdout).not.toMatch(/secret-pw|tok-123/);
    expect(nvsOf('desk')).toMatchObject({
      'wifi/ssid': 'lab',
      'wifi/password': 'secret-pw',
      'wifi/ota_url': 'http://127.0.0.1:9/xiaozhi/ota/',
      'websocket/url': 'ws://127.0.0.1:9/xiaozhi/v1/',
      'websocket/token': 'tok-123',
      'board/uuid': uuid,
    });

    // Provisioning again replaces our entries and still keeps the identity.
    const again = capture();
    expect(
      await provisionCommand(again.context, {
        port: 'virtual:desk',
        ssid: 'lab2',
        password: '',
        otaUrl: 'http://127.0.0.1:9/ota2/',
      }),
    ).toBe(0);
    expect(again.out.stdout).toMatch(/wifi\/password \(empty\)/);
    expect(nvsOf('desk')).toMatchObject({
      'wifi/ssid': 'lab2',
      'wifi/ota_url': 'http://127.0.0.1:9/ota2/',
      'board/uuid': uuid,
    });
  });

  it('says to flash a firmware first on an erased board', { timeout: 60_000 }, async () => {
    const { context, out } = capture();
    const code = await provisionCommand(context, {
      create: true,
      port: 'virtual:blank',
      ssid: 'lab',
      password: 'pw',
      otaUrl: 'http://127.0.0.1:9/xiaozhi/ota/',
    });
    expect(code).toBe(1);
    expect(out.stderr).toMatch(
      /^xiaozhi-mcp: provision virtual:blank: the board has no valid partition table at 0x8000 \(.*\); flash a firmware first\n$/,
    );
  });

  it('checks the settings before touching a board (exit 2)', async () => {
    expect(() =>
      provisionSettings({ ssid: 'x', password: 'p', otaUrl: 'http://h/ota/', wsToken: 't' }),
    ).toThrow(/--ws-token needs --ws-url/);
    const bad: [Parameters<typeof provisionCommand>[1], RegExp][] = [
      [{ ssid: '', password: 'p', otaUrl: 'http://127.0.0.1/ota/' }, /ssid must be 1 to 32 bytes/],
      [{ ssid: 'a', password: 'p', otaUrl: 'ftp://x/ota/' }, /ota url must be http/],
      [{ ssid: 'a', password: 'p', otaUrl: 'http://x' }, /too short/],
      [
        { ssid: 'a', password: 'p', otaUrl: 'http://127.0.0.1/ota/', wsUrl: 'http://x/' },
        /websocket url must be ws/,
      ],
      [{ ssid: 'a', password: 'p' }, /--ota-url is required/],
    ];
    for (const [options, message] of bad) {
      const { context, out } = capture();
      expect(await provisionCommand(context, { port: 'virtual:never', ...options })).toBe(2);
      expect(out.stderr).toMatch(message);
    }
  });

  it('is registered in the hil CLI with its required options', async () => {
    const out = { stdout: '', stderr: '' };
    const io = {
      stdout: (t: string) => (out.stdout += t),
      stderr: (t: string) => (out.stderr += t),
    };
    expect(await main(['provision', '--ssid', 'lab', '--port', 'virtual:x'], io)).toBe(2);
    expect(out.stderr).toMatch(/^hil: required option '--password <password>' not specified/);
  });
});
