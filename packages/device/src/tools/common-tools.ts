/**
 * The firmware's built-in tools (docs/protocol.md §3.4): the common tools, listed first, and the
 * user-only tools, listed last and hidden from plain `tools/list` pages. Each tool that needs
 * hardware is registered only when the preset has it, as `McpServer::AddCommonTools` and
 * `AddUserOnlyTools` do. Names and schemas are the firmware's; the descriptions are ours.
 */
import { type JsonValue, Prop, printCJson } from '@xiaozhi-mcp/protocol';
import type { BoardApi, BoardHardware, BoardPreset } from '../board-api.js';
import type { McpServer, ToolHandler } from '../mcp-server.js';

/**
 * A valid 8x8 grey baseline JPEG (159 bytes): what the virtual camera and screen "capture".
 * One quantisation table, one-code Huffman tables and a single all-zero block keep it tiny.
 */
export const TINY_JPEG: Uint8Array = Uint8Array.from(
  [
    'ffd8', // SOI
    'ffe0 0010 4a464946 00 0101 00 0001 0001 00 00', // APP0: JFIF 1.1, no thumbnail
    `ffdb 0043 00 ${'01'.repeat(64)}`, // DQT: table 0, 8-bit, all ones
    'ffc0 000b 08 0008 0008 01 01 11 00', // SOF0: 8x8, one component, 1x1 sampling
    `ffc4 0014 00 01 ${'00'.repeat(15)} 00`, // DHT DC 0: one 1-bit code, category 0
    `ffc4 0014 10 01 ${'00'.repeat(15)} 00`, // DHT AC 0: one 1-bit code, end of block
    'ffda 0008 01 01 00 00 3f 00', // SOS
    '3f', // the scan: DC "0", EOB "0", padded with ones
    'ffd9', // EOI
  ]
    .join('')
    .replace(/\s/g, '')
    .match(/../g) ?? [],
  (hex) => Number.parseInt(hex, 16),
);

/**
 * The firmware declares `self.upgrade_firmware`'s `url` with this sentence as its default, so
 * the property is not `required`; a call without `url` tries to download from the sentence.
 */
export const UPGRADE_FIRMWARE_URL_DEFAULT =
  'The URL of the firmware binary file to download and install';

/** How long the device waits for an HTTP answer before giving up (the firmware's 30 s socket timeout). */
const HTTP_TIMEOUT_MS = 30_000;

function jpegBlob(): Blob {
  // A copy into a plain ArrayBuffer: Blob parts must not be views over shared memory.
  return new Blob([TINY_JPEG.slice().buffer], { type: 'image/jpeg' });
}

/**
 * `self.get_device_status`'s JSON the way the firmware builds it (`GetDeviceStatusJson`):
 * speaker, then screen (boards with a display or backlight), battery (boards with one),
 * network and chip. The board owns the shape; this is a convenience for boards that want it.
 */
export function defaultDeviceStatus(
  hardware: BoardHardware,
  extra: {
    readonly screen?: boolean;
    readonly network?: JsonValue;
    readonly chipTemperature?: number;
  } = {},
): JsonValue {
  const status: { [key: string]: JsonValue } = { audio_speaker: { volume: hardware.volume } };
  if (extra.screen === true) {
    status.screen = { brightness: hardware.brightness, theme: hardware.theme };
  }
  if (hardware.battery !== undefined) {
    status.battery = { level: hardware.battery.level, charging: hardware.battery.charging };
  }
  status.network = extra.network ?? { type: 'wifi', ssid: '', signal: 'unknown' };
  if (extra.chipTemperature !== undefined) status.chip = { temperature: extra.chipTemperature };
  return status;
}

/**
 * Posts the camera's JPEG and the question to the vision endpoint `initialize` gave, as the
 * firmware's `Esp32Camera::Explain` does, and returns the endpoint's answer text.
 */
async function explainPhoto(board: BoardApi, question: string): Promise<string> {
  const vision = board.vision();
  if (vision === undefined || vision.url === '') {
    throw new Error('Image explain URL or token is not set');
  }
  const form = new FormData();
  form.append('question', question);
  form.append('file', jpegBlob(), 'camera.jpg');
  const headers: Record<string, string> = {
    'Device-Id': board.deviceId,
    'Client-Id': board.clientId,
  };
  if (vision.token !== undefined && vision.token !== '') {
    headers.Authorization = `Bearer ${vision.token}`;
  }
  let response: Response;
  try {
    response = await fetch(vision.url, {
      method: 'POST',
      headers,
      body: form,
      signal: AbortSignal.timeout(HTTP_TIMEOUT_MS),
    });
  } catch (error) {
    board.log('E', 'Esp32Camera', `Failed to connect to explain URL: ${String(error)}`);
    throw new Error('Failed to connect to explain URL');
  }
  if (response.status !== 200) {
    await response.body?.cancel();
    board.log('E', 'Esp32Camera', `Failed to upload photo, status code: ${response.status}`);
    throw new Error(`Failed to upload photo, status code: ${response.status}`);
  }
  return await response.text();
}

/** One HTTP exchange for the screen tools, with the firmware's error texts. */
async function screenRequest(url: string, init: RequestInit): Promise<Response> {
  let response: Response;
  try {
    response = await fetch(url, { ...init, signal: AbortSignal.timeout(HTTP_TIMEOUT_MS) });
  } catch {
    throw new Error(`Failed to open URL: ${url}`);
  }
  if (response.status !== 200) {
    await response.body?.cancel();
    throw new Error(`Unexpected status code: ${response.status}`);
  }
  return response;
}

/**
 * The common tools, in the firmware's order: device status, volume, then brightness (with a
 * backlight), theme (with a display) and the camera (with a camera).
 */
export function registerCommonTools(server: McpServer, board: BoardApi, preset: BoardPreset): void {
  server.addCommonTool(
    {
      name: 'self.get_device_status',
      description:
        'Returns the live state of this device as JSON: speaker volume, screen brightness and ' +
        'theme, battery level and charging, network, and chip temperature. Call it before ' +
        'adjusting a setting (for example to raise the volume by a step) or to answer ' +
        'questions about the device itself.',
    },
    () => ({ json: board.deviceStatus() }),
  );

  server.addCommonTool(
    {
      name: 'self.audio_speaker.set_volume',
      description:
        'Sets the speaker volume, from 0 (muted) to 100 (loudest). For relative requests ' +
        '("a bit louder"), read the current volume with self.get_device_status first.',
      properties: [Prop.integer('volume', { min: 0, max: 100 })],
    },
    (args) => {
      board.hardware.volume = args.integer('volume');
      return true;
    },
  );

  if (preset.backlight) {
    server.addCommonTool(
      {
        name: 'self.screen.set_brightness',
        description: 'Sets the screen backlight brightness, from 0 (dark) to 100 (brightest).',
        properties: [Prop.integer('brightness', { min: 0, max: 100 })],
      },
      (args) => {
        board.hardware.brightness = args.integer('brightness');
        return true;
      },
    );
  }

  if (preset.display !== undefined) {
    server.addCommonTool(
      {
        name: 'self.screen.set_theme',
        description:
          'Switches the screen theme. `theme` is "light" or "dark"; returns false for any other name.',
        properties: [Prop.string('theme')],
      },
      (args) => {
        const theme = args.string('theme');
        // Only the themes the firmware ships are known; others are a plain `false`, not an error.
        if (theme !== 'light' && theme !== 'dark') return false;
        board.hardware.theme = theme;
        return true;
      },
    );
  }

  if (preset.camera) {
    server.addCommonTool(
      {
        name: 'self.camera.take_photo',
        description:
          'Takes a photo with the device camera and has it described by the vision service; ' +
          'returns the answer as text. Use it when the user asks what the device sees or asks ' +
          'about something in front of it. `question` is what to ask about the photo. Takes a ' +
          'few seconds.',
        properties: [Prop.string('question')],
      },
      (args) => explainPhoto(board, args.string('question')),
    );
  }
}

/** `self.reboot`'s callback: the board reboots; the call's reply is lost, as on the firmware. */
export function rebootTool(board: BoardApi): ToolHandler {
  return () => {
    // The reboot is queued ahead of this call's reply, so the reply is lost, as on the firmware.
    board.schedule(() => {
      board.log('W', 'MCP', 'User requested reboot');
      board.reboot();
    });
    return true;
  };
}

/**
 * `self.upgrade_firmware`'s callback: the board downloads and installs the image at `url` and
 * reboots into it. A `url` that is not a string (a replica's tool may declare none) fails.
 */
export function upgradeFirmwareTool(board: BoardApi): ToolHandler {
  return (args) => {
    const url = args.values.get('url');
    board.schedule(async () => {
      board.log('I', 'MCP', `User requested firmware upgrade from URL: ${String(url)}`);
      let ok = false;
      try {
        ok = typeof url === 'string' && (await board.upgradeFirmware(url));
      } catch (error) {
        board.log('E', 'MCP', `Firmware upgrade error: ${String(error)}`);
      }
      if (!ok) board.log('E', 'MCP', 'Failed to upgrade firmware');
    });
    return true;
  };
}

/**
 * The user-only tools, for the device's owner rather than the assistant: system info, reboot,
 * firmware upgrade, the screen tools (with a display) and the assets URL.
 */
export function registerUserOnlyTools(
  server: McpServer,
  board: BoardApi,
  preset: BoardPreset,
): void {
  server.addUserOnlyTool(
    {
      name: 'self.get_system_info',
      description:
        'Returns the system information as JSON: chip, flash, firmware, partitions, board ' +
        'and network (the same document the OTA check sends).',
    },
    // printCJson: the OTA body type is wider than JsonValue; a string `json` is sent as is.
    () => ({ json: printCJson(board.systemInfo()) }),
  );

  server.addUserOnlyTool(
    {
      name: 'self.reboot',
      description: 'Restarts the device. No reply arrives: the device reboots first.',
    },
    rebootTool(board),
  );

  server.addUserOnlyTool(
    {
      name: 'self.upgrade_firmware',
      description:
        'Downloads a firmware image from `url`, installs it and restarts the device. On ' +
        'success no reply arrives, because the device reboots into the new firmware.',
      properties: [Prop.string('url', { default: UPGRADE_FIRMWARE_URL_DEFAULT })],
    },
    upgradeFirmwareTool(board),
  );

  const display = preset.display;
  if (display !== undefined) {
    server.addUserOnlyTool(
      {
        name: 'self.screen.get_info',
        description: 'Returns the screen size in pixels and whether it is monochrome, as JSON.',
      },
      () => ({
        json: { width: display.width, height: display.height, monochrome: display.monochrome },
      }),
    );

    server.addUserOnlyTool(
      {
        name: 'self.screen.snapshot',
        description:
          'Captures the screen as a JPEG of the given `quality` (1-100) and uploads it to ' +
          '`url` with an HTTP POST (multipart/form-data, field `file`).',
        properties: [
          Prop.string('url'),
          Prop.integer('quality', { default: 80, min: 1, max: 100 }),
        ],
      },
      async (args) => {
        const url = args.string('url');
        const quality = args.integer('quality');
        // The virtual screen has no pixels to encode: every quality gives the same tiny JPEG.
        board.log(
          'I',
          'MCP',
          `Upload snapshot ${TINY_JPEG.length} bytes (quality ${quality}) to ${url}`,
        );
        const form = new FormData();
        form.append('file', jpegBlob(), 'screenshot.jpg');
        const response = await screenRequest(url, { method: 'POST', body: form });
        board.log('I', 'MCP', `Snapshot screen result: ${await response.text()}`);
        return true;
      },
    );

    server.addUserOnlyTool(
      {
        name: 'self.screen.preview_image',
        description: 'Downloads the image at `url` and shows it on the screen for a while.',
        properties: [Prop.string('url')],
      },
      async (args) => {
        const url = args.string('url');
        const response = await screenRequest(url, { method: 'GET' });
        const image = new Uint8Array(await response.arrayBuffer());
        board.log('I', 'MCP', `Preview image ${url}: ${image.length} bytes`);
        return true;
      },
    );
  }

  server.addUserOnlyTool(
    {
      name: 'self.assets.set_download_url',
      description:
        'Sets the URL the device downloads its assets (fonts, emoji, wake words) from on the ' +
        'next start.',
      properties: [Prop.string('url')],
    },
    (args) => {
      board.storage.open('assets').setString('download_url', args.string('url'));
      return true;
    },
  );
}
