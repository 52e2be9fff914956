import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FlasherOptions } from '@xiaozhi-mcp/serial';
import { describe, expect, it } from 'vitest';
import {
  boardEntryFor,
  DEFAULT_VIRTUAL_RIG,
  InventoryError,
  loadInventory,
  macOfSerialNumber,
  parseInventory,
  type ResetStyle,
  sessionStartFor,
} from './inventory.js';

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;

const dir = mkdtempSync(join(tmpdir(), 'hil-inv-'));
const good = {
  wifi: { ssid: 'rig' },
  boards: [
    {
      name: 'desk-s3',
      port: 'serial:0001',
      chip: 'esp32s3',
      variant: 'bread-compact-wifi',
      session: 'boot-click',
      reset: 'classic',
    },
    {
      name: 'robot',
      port: 'virtual:robot',
      virtual: { preset: 'otto-robot' },
      latency: { calls: 20, p50Ms: 50 },
    },
  ],
};

describe('inventory', () => {
  it('accepts a valid inventory and the default virtual rig', () => {
    expect(parseInventory(good).boards).toHaveLength(2);
    expect(parseInventory(DEFAULT_VIRTUAL_RIG).boards.map((b) => b.name)).toEqual([
      'bread-compact-wifi',
      'otto-robot',
    ]);
  });

  it.each([
    [{ boards: [] }, 'boards', /boards must NOT have fewer than 1 items/],
    // A board may leave out its port (met at its OTA check), not give an empty one.
    [
      { boards: [{ name: 'a', port: '' }] },
      'boards[0].port',
      /boards\[0\]\.port must NOT have fewer than 1/,
    ],
    [
      { boards: [{ name: 'a', port: 'x', chip: 'esp8266' }] },
      'boards[0].chip',
      /must be one of "esp32"/,
    ],
    [
      { boards: [{ name: 'a', port: 'x', session: 'press' }] },
      'boards[0].session',
      /boards\[0\]\.session must be one of/,
    ],
    [
      { boards: [{ name: 'a', port: 'x', colour: 'red' }] },
      'boards[0].colour',
      /is not a known setting/,
    ],
    [{ boards: [{ name: 'a b', port: 'x' }] }, 'boards[0].name', /must match pattern/],
    [
      {
        boards: [
          { name: 'a', port: 'x' },
          { name: 'a', port: 'y' },
        ],
      },
      'boards[1].name',
      /used twice/,
    ],
    [
      { boards: [{ name: 'a', port: '/dev/ttyUSB0', virtual: {} }] },
      'boards[0].virtual',
      /only for virtual/,
    ],
    [
      { suites: ['initialize', 'fuzz'], boards: [{ name: 'a', port: 'x' }] },
      'suites[1]',
      /must be one of/,
    ],
    [
      { boards: [{ name: 'a', port: 'x', latency: { p50Ms: -1 } }] },
      'boards[0].latency.p50Ms',
      /must be > 0/,
    ],
  ])('refuses %j naming %s', (value, field, message) => {
    try {
      parseInventory(value);
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(InventoryError);
      expect((error as InventoryError).field).toBe(field);
      expect((error as InventoryError).message).toMatch(message);
    }
  });

  it("takes every reset strategy the flasher has, and a board's baud ladder", () => {
    // The inventory's reset styles are the flasher's strategies (`auto` is leaving it unset).
    const same: Same<ResetStyle, Exclude<NonNullable<FlasherOptions['reset']>, 'auto'>> = true;
    expect(same).toBe(true);
    const styles: ResetStyle[] = ['classic', 'tight', 'usb-jtag', 'none'];
    for (const reset of styles)
      expect(parseInventory({ boards: [{ name: 'a', port: 'x', reset }] }).boards[0]?.reset).toBe(
        reset,
      );
    const ch340 = { name: 'ch340', port: 'x', flashBauds: [460_800, 115_200] };
    expect(parseInventory({ boards: [ch340] }).boards[0]?.flashBauds).toEqual([460_800, 115_200]);
    for (const [flashBauds, message] of [
      [[], /boards\[0\]\.flashBauds must NOT have fewer than 1 items/],
      [[460_800, 460_800], /must NOT have duplicate items/],
      [[460_801], /boards\[0\]\.flashBauds\[0\] must be one of/],
    ] as const) {
      expect(() => parseInventory({ boards: [{ name: 'a', port: 'x', flashBauds }] })).toThrow(
        message,
      );
    }
  });

  it("takes a virtual native-USB board's re-enumeration time, and only for native USB", () => {
    const native = (virtual: Record<string, unknown>) => ({
      boards: [{ name: 'a', port: 'virtual:a', virtual }],
    });
    expect(
      parseInventory(native({ usb: 'native', reenumerateMs: 2000 })).boards[0]?.virtual,
    ).toEqual({ usb: 'native', reenumerateMs: 2000 });
    for (const [virtual, field, message] of [
      [
        { reenumerateMs: 2000 },
        'boards[0].virtual.reenumerateMs',
        /is for a board on native USB, which re-enumerates on reset: add "usb": "native"/,
      ],
      [{ usb: 'native', reenumerateMs: -1 }, 'boards[0].virtual.reenumerateMs', />= 0/],
      [{ usb: 'native', reenumerateMs: 1.5 }, 'boards[0].virtual.reenumerateMs', /integer/],
    ] as const) {
      try {
        parseInventory(native(virtual));
        expect.unreachable();
      } catch (error) {
        expect(error).toBeInstanceOf(InventoryError);
        expect((error as InventoryError).field).toBe(field);
        expect((error as InventoryError).message).toMatch(message);
      }
    }
  });

  it('refuses a virtual board of a variant no virtual board stands in for, naming the field and the known ones', () => {
    const virtualBoard = (extra: Record<string, unknown>) => ({
      boards: [
        { name: 'a', port: 'virtual:a' },
        { name: 'b', port: 'virtual:b', ...extra },
      ],
    });
    const refusal = (value: unknown): InventoryError => {
      try {
        parseInventory(value);
      } catch (error) {
        if (error instanceof InventoryError) return error;
        throw error;
      }
      throw new Error('accepted');
    };
    const wrong = refusal(virtualBoard({ variant: 'bread-compact' }));
    expect(wrong.field).toBe('boards[1].variant');
    expect(wrong.message).toMatch(
      /boards\[1\]\.variant "bread-compact" is not a virtual board's; known variants: bread-compact-wifi, otto-robot/,
    );
    // The preset named picks the virtual board: a variant of its own is the build's to prove.
    expect(
      parseInventory(virtualBoard({ variant: 'my-board', virtual: { preset: 'otto-robot' } }))
        .boards,
    ).toHaveLength(2);
    const preset = refusal(virtualBoard({ virtual: { preset: 'otto' } }));
    expect(preset.field).toBe('boards[1].virtual.preset');
    expect(preset.message).toMatch(/"bread-compact-wifi", "otto-robot"/);
    // A real board's variant is whatever its build says.
    expect(
      parseInventory({ boards: [{ name: 'c', port: '/dev/ttyUSB0', variant: 'my-board' }] }).boards,
    ).toHaveLength(1);
  });

  it('loads a file, naming the file in errors', () => {
    const path = join(dir, 'hil.config.json');
    writeFileSync(path, JSON.stringify(good));
    expect(loadInventory(path).boards[0]?.name).toBe('desk-s3');
    writeFileSync(path, '{ nope');
    expect(() => loadInventory(path)).toThrow(/hil\.config\.json is not valid JSON/);
    expect(() => loadInventory(join(dir, 'missing.json'))).toThrow(/no such file/);
  });

  it('prints entries for attached ports: native USB boards cannot be clicked, so they run over MQTT', () => {
    expect(
      boardEntryFor({ path: '/dev/ttyUSB0', serialNumber: 'A1', kind: 'usb-uart' }, 0),
    ).toEqual({
      // No reset: the flasher's own plan for a bridge on this host, as esptool's.
      name: 'board-1',
      port: 'serial:A1',
      baud: 115200,
      session: 'boot-click',
    });
    expect(
      boardEntryFor(
        { path: '/dev/ttyACM0', vendorId: '303a', productId: '1001', kind: 'usb-serial-jtag' },
        1,
      ),
    ).toMatchObject({
      port: 'usb:303a:1001',
      reset: 'usb-jtag',
      session: 'mqtt',
    });
    // The ROM's USB-Serial-JTAG names the chip's MAC as its serial number: the entry's deviceId.
    expect(
      boardEntryFor(
        {
          path: '/dev/ttyACM0',
          vendorId: '303a',
          productId: '1001',
          serialNumber: 'F4:12:FA:43:3B:E4',
          kind: 'usb-serial-jtag',
        },
        0,
      ),
    ).toEqual({
      name: 'board-1',
      port: 'serial:F4:12:FA:43:3B:E4',
      deviceId: 'f4:12:fa:43:3b:e4',
      baud: 115200,
      reset: 'usb-jtag',
      session: 'mqtt',
    });
    expect(macOfSerialNumber('0001')).toBeUndefined();
    expect(macOfSerialNumber(undefined)).toBeUndefined();
  });

  it('takes session mqtt, the default on native USB; elsewhere boot-click, none without port', () => {
    const config = parseInventory({
      boards: [
        { name: 'box', port: 'serial:F4:12:FA:43:3B:E4', session: 'mqtt' },
        { name: 'far', deviceId: 'aa:bb:cc:dd:ee:ff', session: 'mqtt' },
      ],
    });
    expect(config.boards.map((b) => sessionStartFor(b))).toEqual(['mqtt', 'mqtt']);
    const board = (extra: object) => ({ name: 'b', port: '/dev/ttyACM0', ...extra });
    expect(sessionStartFor(board({ reset: 'usb-jtag' }))).toBe('mqtt');
    expect(sessionStartFor(board({}), 'usb-serial-jtag')).toBe('mqtt');
    expect(
      sessionStartFor({
        name: 'v',
        port: 'virtual:v',
        virtual: { preset: 'bread-compact-wifi', usb: 'native' },
      }),
    ).toBe('mqtt');
    // What the inventory says wins; a bridge board is clicked; a board without port opens its own.
    expect(sessionStartFor(board({ reset: 'usb-jtag', session: 'manual' }))).toBe('manual');
    expect(sessionStartFor(board({}), 'usb-uart')).toBe('boot-click');
    expect(sessionStartFor({ name: 'far' })).toBe('none');
  });

  it('refuses session mqtt on a board without port that has no deviceId: MQTT is offered by MAC', () => {
    expect(() =>
      parseInventory({ boards: [{ name: 'far', clientId: 'uuid-1', session: 'mqtt' }] }),
    ).toThrowError(
      expect.objectContaining({
        field: 'boards[0].deviceId',
        message: expect.stringMatching(
          /boards\[0\]\.session mqtt needs the board's MAC before its OTA check.*give its deviceId/,
        ),
      }),
    );
  });

  it('takes the audio suite and a fixed MQTT port, but not 8883 (TLS)', () => {
    const boards = [{ name: 'a', port: 'x' }];
    expect(parseInventory({ suites: ['audio'], boards }).suites).toEqual(['audio']);
    expect(parseInventory({ server: { mqttPort: 1883 }, boards }).server?.mqttPort).toBe(1883);
    expect(() => parseInventory({ server: { mqttPort: 8883 }, boards })).toThrow(
      /server\.mqttPort 8883 is where boards speak TLS/,
    );
  });

  it('runs the default virtual rig over both transports: MQTT direct, WebSocket through RFC 2217', () => {
    expect(
      DEFAULT_VIRTUAL_RIG.boards.map((b) => [b.name, sessionStartFor(b), b.virtual?.via]),
    ).toEqual([
      ['bread-compact-wifi', 'mqtt', undefined],
      ['otto-robot', 'boot-click', 'rfc2217'],
    ]);
  });
});
