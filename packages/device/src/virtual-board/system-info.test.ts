import {
  type Partition,
  readPartitionTable,
  writePartitionTable,
  XIAOZHI_PARTITIONS_4M,
  XIAOZHI_PARTITIONS_8M,
} from '@xiaozhi-mcp/firmware';
import { describe, expect, it } from 'vitest';
import { boardPreset } from '../presets.js';
import {
  boardIp,
  deviceStatus,
  flashLayout,
  nominalPartitions,
  systemInfo,
} from './system-info.js';

const MIB = 1024 * 1024;
const APP = {
  projectName: 'xiaozhi',
  version: '2.4.2',
  idfVersion: 'v5.5.2',
  elfSha256: 'ab'.repeat(32),
  compileTime: 'Aug 20 2026T10:12:03Z',
};

describe('the flash layout', () => {
  it("is xiaozhi's 16 MB table for a board without a modelled flash", () => {
    expect(
      nominalPartitions(16).map((p) => [p.label, p.type, p.subtype, p.offset, p.size]),
    ).toEqual([
      ['nvs', 1, 2, 0x9000, 0x4000],
      ['otadata', 1, 0, 0xd000, 0x2000],
      ['phy_init', 1, 1, 0xf000, 0x1000],
      ['ota_0', 0, 0x10, 0x20000, 0x3f0000],
      ['ota_1', 0, 0x11, 0x410000, 0x3f0000],
      ['assets', 1, 0x82, 0x800000, 0x800000],
    ]);
    expect(nominalPartitions(32)).toEqual(nominalPartitions(16));
    expect(flashLayout({ flashSizeMb: 16 }, undefined)).toEqual({
      sizeBytes: 16 * MIB,
      partitions: nominalPartitions(16),
      running: 'ota_0',
    });
  });

  it('is the flash size and the table the bootloader found, whatever the preset says', () => {
    const table = readPartitionTable(writePartitionTable(XIAOZHI_PARTITIONS_4M)).partitions;
    const running = table.find((p) => p.label === 'factory') as Partition;
    expect(
      flashLayout({ flashSizeMb: 16 }, { sizeBytes: 4 * MIB, partitions: table, running }),
    ).toEqual({ sizeBytes: 4 * MIB, partitions: table, running: 'factory' });
  });

  it("falls back to xiaozhi's table for the flash's size when no table is in it", () => {
    const layout = flashLayout(
      { flashSizeMb: 16 },
      { sizeBytes: 8 * MIB, partitions: undefined, running: undefined },
    );
    expect(layout.sizeBytes).toBe(8 * MIB);
    expect(layout.partitions).toEqual(
      readPartitionTable(writePartitionTable(XIAOZHI_PARTITIONS_8M)).partitions,
    );
  });
});

describe('systemInfo', () => {
  it('reports the chip from the chip table, the app, the flash and the board', () => {
    const preset = { ...boardPreset('bread-compact-wifi'), chip: 'esp32' as const };
    const partitions = readPartitionTable(writePartitionTable(XIAOZHI_PARTITIONS_4M)).partitions;
    const info = systemInfo({
      preset,
      mac: 'f4:12:fa:00:01:02',
      uuid: 'u-1',
      language: 'en-US',
      ssid: 'lab',
      app: APP,
      flash: { sizeBytes: 4 * MIB, partitions, running: 'factory' },
    });
    expect(info).toMatchObject({
      version: 2,
      language: 'en-US',
      flash_size: 4 * MIB,
      mac_address: 'f4:12:fa:00:01:02',
      uuid: 'u-1',
      chip_model_name: 'esp32',
      // esp_chip_model_t: CHIP_ESP32 is 1, though its image chip id is 0.
      chip_info: { model: 1, cores: 2 },
      application: { name: 'xiaozhi', version: '2.4.2', elf_sha256: APP.elfSha256 },
      ota: { label: 'factory' },
      display: { width: 128, height: 64, monochrome: true },
      board: { type: 'wifi', name: 'bread-compact-wifi', ssid: 'lab', ip: '192.168.1.4' },
    });
    expect(info.partition_table[3]).toEqual({
      label: 'factory',
      type: 0,
      subtype: 0,
      address: 0x10000,
      size: 0x2f0000,
    });
    expect(Object.keys(info.partition_table[0] ?? {})).toEqual([
      'label',
      'type',
      'subtype',
      'address',
      'size',
    ]);
  });

  it('makes a stable address from the MAC', () => {
    expect(boardIp('f4:12:fa:00:01:02')).toBe('192.168.1.4');
    expect(boardIp('f4:12:fa:00:ff:ff')).toBe('192.168.0.7');
  });
});

describe('deviceStatus', () => {
  it('shows the screen, battery and network the preset has', () => {
    const otto = boardPreset('otto-robot');
    expect(deviceStatus(otto, otto.hardware(), 'lab')).toEqual({
      audio_speaker: { volume: 70 },
      screen: { brightness: 100, theme: 'light' },
      battery: { level: 85, charging: false },
      network: { type: 'wifi', ssid: 'lab', signal: 'strong' },
      chip: { temperature: 41.5 },
    });
    const bread = boardPreset('bread-compact-wifi');
    expect(deviceStatus(bread, bread.hardware(), '')).toMatchObject({
      screen: { theme: 'light' },
    });
  });
});
