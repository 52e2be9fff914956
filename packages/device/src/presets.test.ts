import { chipByName } from '@xiaozhi-mcp/firmware';
import { buildToolsPage, type Tool } from '@xiaozhi-mcp/protocol';
import { describe, expect, it } from 'vitest';
import type { BoardApi, BoardPreset } from './board-api.js';
import { McpServer } from './mcp-server.js';
import { NvsStorage } from './nvs-storage.js';
import { BOARD_PRESETS, boardPreset } from './presets.js';

/** A board that records what the tools ask of it; enough to register and list tools. */
function fakeBoard(preset: BoardPreset, server: McpServer): BoardApi {
  return {
    hardware: preset.hardware(),
    storage: new NvsStorage(),
    schedule: (task) => server.loop.schedule(task),
    reboot: () => server.setSender(undefined),
    upgradeFirmware: async () => false,
    systemInfo: () => {
      throw new Error('not used');
    },
    deviceStatus: () => ({ audio_speaker: { volume: 70 } }),
    enterWifiConfigMode: () => undefined,
    vision: () => server.vision,
    deviceId: 'a0:85:e3:f4:12:7c',
    clientId: 'c3a1e2f0-4d5b-4e6a-9b7c-1d2e3f4a5b6c',
    log: () => undefined,
  };
}

function registered(name: string): { server: McpServer; board: BoardApi; replies: string[] } {
  const preset = boardPreset(name);
  const server = new McpServer({
    board: { name: preset.name, version: '2.4.2' },
    profile: 'firmware',
  });
  const replies: string[] = [];
  server.setSender((payload) => replies.push(payload));
  const board = fakeBoard(preset, server);
  preset.registerTools(server, board);
  return { server, board, replies };
}

function pageCount(tools: readonly Tool[], withUserTools: boolean): number {
  let count = 0;
  let cursor: string | undefined;
  do {
    const page = buildToolsPage(tools, { cursor, withUserTools });
    if (!page.ok) throw new Error(page.message);
    count++;
    cursor = page.nextCursor;
  } while (cursor !== undefined && count < 20);
  return count;
}

const USER_ONLY_WITH_DISPLAY = [
  'self.get_system_info',
  'self.reboot',
  'self.upgrade_firmware',
  'self.screen.get_info',
  'self.screen.snapshot',
  'self.screen.preview_image',
  'self.assets.set_download_url',
];

describe('boardPreset', () => {
  it('knows bread-compact-wifi and otto-robot', () => {
    expect(Object.keys(BOARD_PRESETS)).toEqual(['bread-compact-wifi', 'otto-robot']);
    for (const [name, preset] of Object.entries(BOARD_PRESETS)) {
      expect(boardPreset(name)).toBe(preset);
      expect(preset.name).toBe(name);
    }
  });

  it('throws a clear error listing the known presets', () => {
    expect(() => boardPreset('esp-box-3')).toThrow(
      'Unknown board preset "esp-box-3"; known presets: bread-compact-wifi, otto-robot',
    );
    // Names are looked up as own keys only.
    expect(() => boardPreset('toString')).toThrow('Unknown board preset "toString"');
  });

  it("puts every preset on a chip of the firmware's chip table that xiaozhi builds for", () => {
    for (const preset of Object.values(BOARD_PRESETS)) {
      expect([preset.name, chipByName(preset.chip).xiaozhi]).toEqual([preset.name, true]);
    }
  });

  it('gives every board a fresh hardware state', () => {
    for (const preset of Object.values(BOARD_PRESETS)) {
      const a = preset.hardware();
      const b = preset.hardware();
      expect(a).toEqual(b);
      expect(a).not.toBe(b);
      expect(a.extra).not.toBe(b.extra);
    }
  });
});

describe('bread-compact-wifi', () => {
  const preset = boardPreset('bread-compact-wifi');

  it('is an ESP32-S3 with 16 MB flash and a 128x64 OLED, no camera or backlight', () => {
    expect(preset).toMatchObject({
      name: 'bread-compact-wifi',
      chip: 'esp32s3',
      flashSizeMb: 16,
      display: { width: 128, height: 64, monochrome: true },
      camera: false,
      backlight: false,
    });
    expect(preset.hardware()).toEqual({
      volume: 70,
      brightness: 100,
      theme: 'light',
      lamp: false,
      battery: undefined,
      extra: {},
    });
  });

  it('lists common, lamp, Wi-Fi, then user-only tools', () => {
    const { server } = registered('bread-compact-wifi');
    expect(server.tools.map((tool) => tool.name)).toEqual([
      'self.get_device_status',
      'self.audio_speaker.set_volume',
      'self.screen.set_theme',
      'self.lamp.get_state',
      'self.lamp.turn_on',
      'self.lamp.turn_off',
      'self.system.reconfigure_wifi',
      ...USER_ONLY_WITH_DISPLAY,
    ]);
    expect(server.tools.filter((tool) => tool.userOnly).map((tool) => tool.name)).toEqual(
      USER_ONLY_WITH_DISPLAY,
    );
  });

  it('fits on one page, with or without user tools', () => {
    const { server } = registered('bread-compact-wifi');
    expect(pageCount(server.tools, false)).toBe(1);
    expect(pageCount(server.tools, true)).toBe(1);
  });

  it('answers initialize with its name', async () => {
    const { server, replies } = registered('bread-compact-wifi');
    server.handlePayload('{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}');
    await server.idle();
    expect(replies).toEqual([
      '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"bread-compact-wifi","version":"2.4.2"}}}',
    ]);
  });
});

describe('otto-robot', () => {
  const preset = boardPreset('otto-robot');

  it('is an ESP32-S3 robot with a colour LCD, backlight, camera and battery', () => {
    expect(preset).toMatchObject({
      name: 'otto-robot',
      chip: 'esp32s3',
      flashSizeMb: 16,
      display: { width: 240, height: 240, monochrome: false },
      camera: true,
      backlight: true,
    });
    const hardware = preset.hardware();
    expect(hardware.battery).toEqual({ level: 85, charging: false });
    expect(hardware.extra.otto).toMatchObject({ hands: true, last_action: null, action_count: 0 });
  });

  it('lists all common tools, the robot tools, then user-only tools', () => {
    const { server } = registered('otto-robot');
    const names = server.tools.map((tool) => tool.name);
    expect(names.slice(0, 5)).toEqual([
      'self.get_device_status',
      'self.audio_speaker.set_volume',
      'self.screen.set_brightness',
      'self.screen.set_theme',
      'self.camera.take_photo',
    ]);
    expect(names.slice(-7)).toEqual(USER_ONLY_WITH_DISPLAY);
    const board = names.slice(5, -7);
    expect(board).toEqual([
      'self.otto.walk',
      'self.otto.turn',
      'self.otto.jump',
      'self.otto.swing',
      'self.otto.moonwalk',
      'self.otto.bend',
      'self.otto.shake_leg',
      'self.otto.updown',
      'self.otto.tiptoe_swing',
      'self.otto.jitter',
      'self.otto.ascending_turn',
      'self.otto.crusaito',
      'self.otto.flapping',
      'self.otto.kick',
      'self.otto.look_around',
      'self.otto.dance',
      'self.otto.sit',
      'self.otto.hand_wave',
      'self.otto.windmill',
      'self.otto.hands_up',
      'self.otto.hands_down',
      'self.otto.home',
      'self.otto.stop',
      'self.otto.set_trim',
      'self.otto.get_trims',
      'self.otto.servo_sequences',
      'self.otto.get_status',
      'self.battery.get_level',
    ]);
    expect(server.tools.slice(5, -7).every((tool) => !tool.userOnly)).toBe(true);
  });

  it('pages: at least three plain pages, at least as many with user tools', () => {
    const { server } = registered('otto-robot');
    const plain = pageCount(server.tools, false);
    expect(plain).toBeGreaterThanOrEqual(3);
    expect(pageCount(server.tools, true)).toBeGreaterThanOrEqual(plain);
  });

  it('gives the motion tools realistic ranges and defaults', () => {
    const { server } = registered('otto-robot');
    const walk = server.tools.find((tool) => tool.name === 'self.otto.walk');
    expect(walk?.properties).toEqual([
      { name: 'steps', type: 'integer', default: 3, minimum: 1, maximum: 100 },
      { name: 'speed', type: 'integer', default: 1000, minimum: 500, maximum: 1500 },
      { name: 'direction', type: 'integer', default: 1, minimum: -1, maximum: 1 },
      { name: 'arm_swing', type: 'integer', default: 50, minimum: 0, maximum: 170 },
    ]);
  });

  it('keeps robot state per board', async () => {
    const a = registered('otto-robot');
    const b = registered('otto-robot');
    a.server.handlePayload(
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"self.otto.jump"}}',
    );
    await a.server.idle();
    expect(a.board.hardware.extra.otto).toMatchObject({ action_count: 1 });
    expect(b.board.hardware.extra.otto).toMatchObject({ action_count: 0 });
  });
});
