/**
 * What the board says about itself: the system-info JSON the OTA check posts and
 * `self.get_system_info` returns (docs/protocol.md §7), and the device status of
 * `self.get_device_status`. Pure functions of the board's facts.
 */
import {
  chipByName,
  type Partition,
  type PartitionInput,
  readPartitionTable,
  writePartitionTable,
  XIAOZHI_PARTITIONS_4M,
  XIAOZHI_PARTITIONS_8M,
  XIAOZHI_PARTITIONS_16M,
} from '@xiaozhi-mcp/firmware';
import type { JsonValue, OtaPartitionInfo, OtaRequestBody } from '@xiaozhi-mcp/protocol';
import type { BoardHardware, BoardPreset } from '../board-api.js';
import { appPartitionOf, type FlashFacts } from './bootloader.js';
import type { RunningApp } from './types.js';

const MIB = 1024 * 1024;

/** The layout xiaozhi ships for each flash size (`partitions/v2/<n>m.csv`). */
const XIAOZHI_LAYOUTS: Readonly<Record<number, readonly PartitionInput[]>> = {
  4: XIAOZHI_PARTITIONS_4M,
  8: XIAOZHI_PARTITIONS_8M,
  16: XIAOZHI_PARTITIONS_16M,
};

const nominalTables = new Map<number, readonly Partition[]>();

/**
 * The partition table a board without a modelled flash is taken to have: xiaozhi's layout for
 * its flash size (the 16 MB one for sizes xiaozhi has no layout for).
 */
export function nominalPartitions(flashSizeMb: number): readonly Partition[] {
  let table = nominalTables.get(flashSizeMb);
  if (table === undefined) {
    const layout = XIAOZHI_LAYOUTS[flashSizeMb] ?? XIAOZHI_PARTITIONS_16M;
    table = readPartitionTable(writePartitionTable(layout)).partitions;
    nominalTables.set(flashSizeMb, table);
  }
  return table;
}

/** The flash as the firmware sees it: its size and partition table, and the running partition. */
export interface FlashLayout {
  /** `esp_flash_get_size` of the main flash, in bytes. */
  readonly sizeBytes: number;
  /** The partition table, in table order (what `esp_partition_find` iterates). */
  readonly partitions: readonly Partition[];
  /** `esp_ota_get_running_partition()`'s label. */
  readonly running: string;
}

/**
 * The flash layout a board reports. With a modelled flash: its size, and the partition table
 * and app partition the bootloader found in it (xiaozhi's layout for that size when no valid
 * table is there). Without one: the preset's flash size and xiaozhi's layout for it.
 */
export function flashLayout(
  preset: Pick<BoardPreset, 'flashSizeMb'>,
  flash: FlashFacts | undefined,
): FlashLayout {
  const sizeBytes = flash?.sizeBytes ?? preset.flashSizeMb * MIB;
  const partitions =
    flash?.partitions ?? nominalPartitions(flash ? sizeBytes / MIB : preset.flashSizeMb);
  const running = flash?.running ?? appPartitionOf(partitions);
  return { sizeBytes, partitions, running: running?.label ?? 'ota_0' };
}

/** A partition as the system info lists it. */
function partitionInfo(p: Partition): OtaPartitionInfo {
  return { label: p.label, type: p.type, subtype: p.subtype, address: p.offset, size: p.size };
}

/** A stable made-up IP address from the MAC's last two bytes (the board's DHCP lease). */
export function boardIp(mac: string): string {
  const [a = 0, b = 0] = mac
    .split(':')
    .slice(-2)
    .map((part) => Number.parseInt(part, 16));
  return `192.168.${a % 255}.${(b % 250) + 2}`;
}

export interface SystemInfoFacts {
  readonly preset: BoardPreset;
  readonly mac: string;
  readonly uuid: string;
  readonly language: string;
  readonly ssid: string;
  readonly app: RunningApp;
  readonly flash: FlashLayout;
  /** The board's IP address; by default {@link boardIp} of its MAC. */
  readonly ip?: string;
}

/** The system-info JSON the OTA check posts (and `self.get_system_info` returns). */
export function systemInfo(facts: SystemInfoFacts): OtaRequestBody {
  const { preset, app, flash } = facts;
  const chip = chipByName(preset.chip);
  return {
    version: 2,
    language: facts.language,
    flash_size: flash.sizeBytes,
    minimum_free_heap_size: '98304',
    mac_address: facts.mac,
    uuid: facts.uuid,
    chip_model_name: preset.chip,
    chip_info: {
      model: chip.model,
      cores: chip.cores,
      revision: 2,
      features: 18,
    },
    application: {
      name: app.projectName,
      version: app.version,
      compile_time: app.compileTime,
      idf_version: app.idfVersion,
      elf_sha256: app.elfSha256,
    },
    partition_table: flash.partitions.map(partitionInfo),
    ota: { label: flash.running },
    ...(preset.display ? { display: { ...preset.display } } : {}),
    board: {
      type: 'wifi',
      name: preset.name,
      ssid: facts.ssid,
      rssi: -52,
      channel: 6,
      ip: facts.ip ?? boardIp(facts.mac),
      mac: facts.mac,
    },
  };
}

/** The JSON `self.get_device_status` returns. */
export function deviceStatus(
  preset: BoardPreset,
  hardware: BoardHardware,
  ssid: string,
): JsonValue {
  const status: Record<string, JsonValue> = { audio_speaker: { volume: hardware.volume } };
  if (preset.display) {
    status.screen = preset.backlight
      ? { brightness: hardware.brightness, theme: hardware.theme }
      : { theme: hardware.theme };
  }
  if (hardware.battery) status.battery = { ...hardware.battery };
  status.network = { type: 'wifi', ssid, signal: 'strong' };
  status.chip = { temperature: 41.5 };
  return status;
}
