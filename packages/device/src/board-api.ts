/**
 * What a board's tools can reach: its hardware state and the firmware's application services
 * (schedule on the main loop, reboot, upgrade). A preset registers its tools against this,
 * so the same tool code runs in a virtual board and in a Node device.
 */
import type { ChipName } from '@xiaozhi-mcp/firmware';
import type { JsonValue, OtaRequestBody, VisionCapability } from '@xiaozhi-mcp/protocol';
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

/** A board variant: its identity, hardware and tools. */
export interface BoardPreset {
  /** `BOARD_NAME`, e.g. `bread-compact-wifi`; what `initialize` reports as serverInfo.name. */
  readonly name: string;
  readonly chip: ChipModel;
  readonly flashSizeMb: 4 | 8 | 16 | 32;
  readonly display: DisplayInfo | undefined;
  readonly camera: boolean;
  readonly backlight: boolean;
  /** Initial hardware state. */
  readonly hardware: () => BoardHardware;
  /** Registers the board's tools: common, board-specific and user-only, as the firmware does. */
  readonly registerTools: (server: McpServer, board: BoardApi) => void;
}
