import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { summarizeVirtualFlash, VirtualBoardStore, virtualMac } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import type { PortInfo } from '@xiaozhi-mcp/serial';
import {
  flashCommand,
  portsCommand,
  provisionCommand,
  type SerialCommandContext,
} from '@xiaozhi-mcp/serial/commands';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

let dir: string;

const cp2102: PortInfo = {
  path: '/dev/ttyUSB0',
  byIdPath:
    '/dev/serial/by-id/usb-Silicon_Labs_CP2102_USB_to_UART_Bridge_Controller_0001-if00-port0',
  serialNumber: '0001',
  vendorId: '10c4',
  productId: 'ea60',
  manufacturer: 'Silicon Labs',
  product: 'CP2102 USB to UART Bridge Controller',
  kind: 'usb-uart',
};
const builtIn: PortInfo = { path: '/dev/ttyS0', kind: 'unknown' };

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'hil-ports-'));
});

afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

function capture(lister: () => Promise<PortInfo[]> = async () => []) {
  const out = { stdout: '', stderr: '' };
  const context: SerialCommandContext = {
    program: 'xiaozhi-mcp',
    out: { stdout: (t) => (out.stdout += t), stderr: (t) => (out.stderr += t) },
    env: {},
    lister,
    providers: [new VirtualBoardStore({ dir: join(dir, 'virtual'), timing: FAST_TIMING })],
  };
  return { context, out };
}

describe('ports', () => {
  it('lists USB ports and the virtual boards with what their flash holds', {
    timeout: 60_000,
  }, async () => {
    const file = join(dir, 'merged.bin');
    writeFileSync(
      file,
      buildVirtualFirmware({ chip: 'esp32s3', version: '2.7.0', board: 'bread-compact-wifi' })
        .merged,
    );
    const setup = capture();
    expect(await flashCommand(setup.context, file, { create: true, port: 'virtual:desk' })).toBe(0);
    expect(
      await provisionCommand(setup.context, {
        port: 'virtual:desk',
        ssid: 'lab',
        password: 'pw',
        otaUrl: 'http://127.0.0.1:9/xiaozhi/ota/',
      }),
    ).toBe(0);
    const blank = await new VirtualBoardStore({ dir: join(dir, 'virtual') }).resolve(
      'virtual:blank',
      { create: { board: 'otto-robot', flashSize: '8' } },
    );
    blank.dispose();

    const { context, out } = capture(async () => [cp2102, builtIn]);
    expect(await portsCommand(context, {})).toBe(0);
    expect(out.stderr).toBe('');
    const lines = out.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^PORT +USB ID +KIND +SERIAL\/MAC +DESCRIPTION$/);
    expect(lines[1]).toMatch(
      /^\/dev\/ttyUSB0 +10c4:ea60 +usb-uart +0001 +Silicon Labs CP2102 USB to UART Bridge Controller$/,
    );
    expect(lines[2]).toMatch(
      new RegExp(
        `^virtual:blank +virtual +esp32s3/8MB +${virtualMac('blank')} +otto-robot: flash erased \\(no firmware\\)$`,
      ),
    );
    expect(lines[3]).toMatch(
      new RegExp(
        `^virtual:desk +virtual +esp32s3/16MB +${virtualMac('desk')} +bread-compact-wifi: firmware 2\\.7\\.0, wifi lab, ota http://127\\.0\\.0\\.1:9/xiaozhi/ota/$`,
      ),
    );
    expect(lines[4]).toBe('(1 serial port without a USB id not shown; --all shows them)');

    const all = capture(async () => [cp2102, builtIn]);
    expect(await portsCommand(all.context, { all: true })).toBe(0);
    expect(all.out.stdout).toMatch(/^\/dev\/ttyS0 +- +unknown/m);

    const json = capture(async () => [cp2102]);
    expect(await portsCommand(json.context, { json: true })).toBe(0);
    const parsed = JSON.parse(json.out.stdout);
    expect(parsed.ports).toEqual([cp2102]);
    expect(parsed.virtualDir).toBe(join(dir, 'virtual'));
    expect(parsed.virtual).toMatchObject([
      { port: 'virtual:blank', preset: 'otto-robot', flashSizeMb: 8 },
      {
        port: 'virtual:desk',
        firmware: '2.7.0',
        ssid: 'lab',
        otaUrl: 'http://127.0.0.1:9/xiaozhi/ota/',
      },
    ]);
    expect(parsed.virtual[0].firmware).toBeUndefined();
  });

  it('says what to do when there is nothing, and survives a failing port listing', async () => {
    const empty = capture();
    expect(await portsCommand(empty.context, {})).toBe(0);
    expect(empty.out.stdout).toMatch(
      /^no board attached and no virtual board in .*virtual; `flash <image> --port virtual:<name> --create` makes one$/m,
    );
    const failing = capture(async () => {
      throw new Error('udevadm: not found');
    });
    expect(await portsCommand(failing.context, {})).toBe(0);
    expect(failing.out.stderr).toBe(
      'xiaozhi-mcp: note: cannot list serial ports (udevadm: not found); showing virtual boards only\n',
    );
  });

  it('summarizes a missing or foreign flash file as nothing', () => {
    expect(summarizeVirtualFlash(join(dir, 'none.flash'))).toEqual({});
    writeFileSync(join(dir, 'junk.flash'), new Uint8Array(0x10000).fill(0x5a));
    expect(summarizeVirtualFlash(join(dir, 'junk.flash'))).toEqual({});
  });
});
