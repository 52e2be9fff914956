/**
 * What a board's tools can reach: its hardware state and the firmware's application services
 * (schedule on the main loop, reboot, upgrade). A preset registers its tools against this,
 * so the same tool code runs in a virtual board and in a Node device.
 */
import type { ChipName } from '@xiaozhi-mcp/firmware';
import type {
  DeviceHello,
  JsonValue,
  OtaRequestBody,
  VisionCapability,
} from '@xiaozhi-mcp/protocol';
import type { LogLevel } from './console.js';
import type { McpServer } from './mcp-server.js';
import type { NvsStorage } from './nvs-storage.js';

/** A board's chip: a name of the firmware package's chip table (`CHIPS`). */
export type ChipModel = ChipName;

export interface DisplayInfo {
  readonly width: number;
  readonly height: number;
  readonly monochrome: boolean;
}

/** The hardware a board's tools read and change. */
export interface BoardHardware {
  /** Speaker volume, 0..100. */
  volume: number;
  /** Backlight brightness, 0..100 (boards with a backlight). */
  brightness: number;
  theme: 'light' | 'dark';
  /** The desk lamp of boards that have one. */
  lamp: boolean;
  battery: { level: number; charging: boolean } | undefined;
  /** Free-form state of board-specific hardware (servos, LEDs...), keyed by the tool family. */
  readonly extra: Record<string, JsonValue>;
}

export interface BoardApi {
  readonly hardware: BoardHardware;
  readonly storage: NvsStorage;
  /** `Application::Schedule`: runs a task on the main loop, after what is queued. */
  schedule(task: () => unknown): void;
  /** `Application::Reboot`: closes the channel and restarts; what is queued is lost. */
  reboot(): void;
  /** Downloads the app image at `url`, installs it and reboots; false when it fails. */
  upgradeFirmware(url: string): Promise<boolean>;
  /** The system-info JSON, the same body the OTA check posts. */
  systemInfo(): OtaRequestBody;
  /** The JSON `self.get_device_status` returns. */
  deviceStatus(): JsonValue;
  /** Restarts into Wi-Fi configuration mode (the setup portal). */
  enterWifiConfigMode(): void;
  /** The vision endpoint the backend gave in `initialize`, if any. */
  vision(): VisionCapability | undefined;
  /** Identification the vision and upload requests carry. */
  readonly deviceId: string;
  readonly clientId: string;
  log(level: LogLevel, tag: string, text: string): void;
}

/**
 * Memory inside the chip's package, which the chip's eFuse records (esptool's `get_flash_cap`,
 * `get_psram_cap` and their vendors) and esptool lists among the chip's features: an ESP32-S3R8
 * carries 8 MB of PSRAM at 3.3 V (`AP_3v3`). Flash and PSRAM beside the chip on the module leave
 * no trace in eFuse. Vendor names are esptool's.
 */
export interface InPackageMemory {
  readonly flash?: { readonly sizeMb: number; readonly vendor: string };
  readonly psram?: { readonly sizeMb: number; readonly vendor: string };
}

/** A board variant: its identity, hardware and tools. */
export interface BoardPreset {
  /** `BOARD_NAME`, e.g. `bread-compact-wifi`; what `initialize` reports as serverInfo.name. */
  readonly name: string;
  readonly chip: ChipModel;
  readonly flashSizeMb: 4 | 8 | 16 | 32;
  /** What the chip's package holds besides the chip (see {@link InPackageMemory}); default none. */
  readonly inPackage?: InPackageMemory;
  readonly display: DisplayInfo | undefined;
  readonly camera: boolean;
  readonly backlight: boolean;
  /** Initial hardware state. */
  readonly hardware: () => BoardHardware;
  /** Registers the board's tools: common, board-specific and user-only, as the firmware does. */
  readonly registerTools: (server: McpServer, board: BoardApi) => void;
  /**
   * The hello this board sends (a replica's recorded one), used for a session of its
   * `transport` (and, on WebSocket, its `version`); any other session sends the build's own.
   */
  readonly hello?: DeviceHello;
}
