/**
 * Board presets: the variants a virtual board or a Node device can be. Each preset registers
 * its tools in the firmware's order: common tools, the board's own tools, user-only tools.
 */
import type { BoardPreset } from './board-api.js';
import {
  initialOttoState,
  registerLampTools,
  registerOttoTools,
  registerWifiTools,
} from './tools/board-tools.js';
import { registerCommonTools, registerUserOnlyTools } from './tools/common-tools.js';

/**
 * The breadboard build with a 128x64 OLED and a lamp on a GPIO: few tools, one
 * `tools/list` page.
 */
const breadCompactWifi: BoardPreset = {
  name: 'bread-compact-wifi',
  chip: 'esp32s3',
  flashSizeMb: 16,
  display: { width: 128, height: 64, monochrome: true },
  camera: false,
  backlight: false,
  hardware: () => ({
    volume: 70,
    brightness: 100,
    theme: 'light',
    lamp: false,
    battery: undefined,
    extra: {},
  }),
  registerTools: (server, board) => {
    registerCommonTools(server, board, breadCompactWifi);
    registerLampTools(server, board);
    registerWifiTools(server, board);
    registerUserOnlyTools(server, board, breadCompactWifi);
  },
};

/**
 * The Otto two-legged robot with arms, a 240x240 colour LCD with backlight, a camera
 * module and a battery. Its many robot tools make `tools/list` span three pages without
 * user tools, so it is the preset that exercises paging. The camera is on so that every
 * common tool is present on at least one preset.
 */
const ottoRobot: BoardPreset = {
  name: 'otto-robot',
  chip: 'esp32s3',
  flashSizeMb: 16,
  display: { width: 240, height: 240, monochrome: false },
  camera: true,
  backlight: true,
  hardware: () => ({
    volume: 70,
    brightness: 100,
    theme: 'light',
    lamp: false,
    battery: { level: 85, charging: false },
    extra: { otto: initialOttoState({ hands: true }) },
  }),
  registerTools: (server, board) => {
    registerCommonTools(server, board, ottoRobot);
    registerOttoTools(server, board, { hands: true });
    registerUserOnlyTools(server, board, ottoRobot);
  },
};

export const BOARD_PRESETS: Record<string, BoardPreset> = Object.freeze({
  [breadCompactWifi.name]: breadCompactWifi,
  [ottoRobot.name]: ottoRobot,
});

/** The preset called `name`; an unknown name throws, listing the known ones. */
export function boardPreset(name: string): BoardPreset {
  const preset = Object.hasOwn(BOARD_PRESETS, name) ? BOARD_PRESETS[name] : undefined;
  if (preset === undefined) {
    throw new Error(
      `Unknown board preset "${name}"; known presets: ${Object.keys(BOARD_PRESETS).join(', ')}`,
    );
  }
  return preset;
}
