/**
 * Board presets: the variants a virtual board or a Node device can be. Each preset registers
 * its tools in the firmware's order: common tools, the board's own tools, user-only tools.
 */
import type { BoardHardware, BoardPreset, InPackageMemory } from './board-api.js';
import {
  initialOttoState,
  registerLampTools,
  registerOttoTools,
  registerWifiTools,
} from './tools/board-tools.js';
import { registerCommonTools, registerUserOnlyTools } from './tools/common-tools.js';

/**
 * A board's state at power-on when it has no battery and no hardware of its own: the firmware's
 * defaults (volume 70, full brightness, light theme, lamp off).
 */
export const plainHardware = (): BoardHardware => ({
  volume: 70,
  brightness: 100,
  theme: 'light',
  lamp: false,
  battery: undefined,
  extra: {},
});

/**
 * An ESP32-S3 N16R8 module's chip, an ESP32-S3R8: 8 MB of octal PSRAM in the package, at 3.3 V
 * (esptool's vendor `AP_3v3`); its 16 MB flash sits beside it on the module. What xiaozhi's
 * ESP32-S3 builds are made for: octal PSRAM and QIO flash (`CONFIG_SPIRAM_MODE_OCT=y`,
 * `CONFIG_ESPTOOLPY_FLASHMODE_QIO=y` in xiaozhi-esp32's `sdkconfig.defaults.esp32s3`).
 */
const ESP32_S3R8: InPackageMemory = { psram: { sizeMb: 8, vendor: 'AP_3v3' } };

/**
 * The breadboard build with a 128x64 OLED and a lamp on a GPIO: few tools, one
 * `tools/list` page.
 */
const breadCompactWifi: BoardPreset = {
  name: 'bread-compact-wifi',
  chip: 'esp32s3',
  flashSizeMb: 16,
  inPackage: ESP32_S3R8,
  display: { width: 128, height: 64, monochrome: true },
  camera: false,
  backlight: false,
  hardware: plainHardware,
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
  inPackage: ESP32_S3R8,
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
