import {
  buildAppImage,
  buildVirtualFirmware,
  type Partition,
  readNvsPartition,
  readPartitionTable,
  writePartitionTable,
  XIAOZHI_PARTITIONS_4M,
  XIAOZHI_PARTITIONS_16M,
} from '@xiaozhi-mcp/firmware';
import { describe, expect, it } from 'vitest';
import { BoardConsole } from '../console.js';
import { DeviceError } from '../errors.js';
import { FlashStorage } from '../flash-storage.js';
import { NvsStorage } from '../nvs-storage.js';
import {
  appPartitionOf,
  Bootloader,
  bootFailureLine,
  checkAppImage,
  partitionListing,
  romBanner,
} from './bootloader.js';

const MIB = 1024 * 1024;

function partitions(layout: typeof XIAOZHI_PARTITIONS_16M): Partition[] {
  return readPartitionTable(writePartitionTable(layout)).partitions;
}

function rig(flashSizeMb: 4 | 16, board = 'bread-compact-wifi') {
  const flash = new FlashStorage({ size: flashSizeMb * MIB });
  const firmware = buildVirtualFirmware({ chip: 'esp32s3', version: '3.0.1', board, flashSizeMb });
  flash.program(0, firmware.merged);
  const console = new BoardConsole();
  const storage = new NvsStorage();
  const bootloader = new Bootloader({
    flash,
    storage,
    console,
    chip: 'esp32s3',
    board: 'bread-compact-wifi',
  });
  return { flash, firmware, console, storage, bootloader };
}

function errorOf(run: () => unknown): DeviceError {
  try {
    run();
  } catch (error) {
    if (error instanceof DeviceError) return error;
    throw error;
  }
  throw new Error('expected a DeviceError');
}

describe('the ROM banner', () => {
  it('prints the reset reason and hands over to the bootloader when booting from flash', () => {
    expect(romBanner('esp32s3', 'RTC_SW_CPU_RST', false, 'v5.5.2')).toEqual([
      { raw: 'ESP-ROM:esp32s3-20210327' },
      { raw: 'Build:Mar 27 2021' },
      { raw: 'rst:0xc (RTC_SW_CPU_RST),boot:0x8 (SPI_FAST_FLASH_BOOT)' },
      { raw: 'SPIWP:0xee' },
      { raw: 'mode:DIO, clock div:1' },
      { raw: 'entry 0x403c8924' },
      { level: 'I', tag: 'boot', text: 'ESP-IDF v5.5.2 2nd stage bootloader' },
    ]);
  });

  it('waits for a flasher in download mode', () => {
    expect(romBanner('esp32', 'POWERON', true, 'v5.5.2').map((l) => 'raw' in l && l.raw)).toEqual([
      'ESP-ROM:esp32-20210327',
      'Build:Mar 27 2021',
      'rst:0x1 (POWERON),boot:0x0 (DOWNLOAD(USB/UART0))',
      'waiting for download',
    ]);
  });
});

describe('the partition table', () => {
  it("lists partitions as the bootloader's log does", () => {
    expect(partitionListing(partitions(XIAOZHI_PARTITIONS_4M))).toEqual([
      'Partition Table:',
      ' 0 nvs              data nvs      00009000 00004000',
      ' 1 otadata          data ota      0000d000 00002000',
      ' 2 phy_init         data phy      0000f000 00001000',
      ' 3 factory          app  factory  00010000 002f0000',
      ' 4 assets           data spiffs   00300000 00100000',
    ]);
  });

  it('starts the app from factory or ota_0, never from ota_1', () => {
    expect(appPartitionOf(partitions(XIAOZHI_PARTITIONS_4M))?.label).toBe('factory');
    expect(appPartitionOf(partitions(XIAOZHI_PARTITIONS_16M))?.label).toBe('ota_0');
    const onlyOta1 = partitions(XIAOZHI_PARTITIONS_16M).filter((p) => p.label !== 'ota_0');
    expect(appPartitionOf(onlyOta1)).toBeUndefined();
  });
});

describe('boot failures and image checks', () => {
  it('prints a bad header as the ROM does and anything else as a boot error', () => {
    expect(bootFailureLine(new Error('invalid header: 0xffffffff'))).toBe(
      'invalid header: 0xffffffff',
    );
    expect(bootFailureLine(new Error('no app partition in the partition table'))).toBe(
      'E boot: no app partition in the partition table',
    );
  });

  it('accepts an image for its chip and refuses a corrupted one or one for another chip', () => {
    const image = buildAppImage({ chip: 'esp32s3', version: '2.6.0' });
    expect(checkAppImage(image, 'esp32s3')).toMatchObject({ version: '2.6.0' });
    expect(errorOf(() => checkAppImage(image, 'esp32c3')).message).toBe(
      'the image is built for esp32s3, this board is esp32c3',
    );
    const corrupted = image.slice();
    corrupted[corrupted.length - 40] = (corrupted[corrupted.length - 40] ?? 0) ^ 0xff;
    expect(errorOf(() => checkAppImage(corrupted, 'esp32s3'))).toMatchObject({
      code: 'OTA_DOWNLOAD_FAILED',
    });
  });
});

describe('Bootloader', () => {
  it('loads the app, the partition table and NVS from flash, and knows the flash it has', () => {
    const { bootloader, console } = rig(4);
    expect(bootloader.load()).toMatchObject({ projectName: 'xiaozhi', version: '3.0.1' });
    expect(
      console.history.some((l) =>
        /boot: Loaded app from partition at offset 0x10000$/.test(l.text),
      ),
    ).toBe(true);
    expect(bootloader.flashFacts()).toEqual({
      sizeBytes: 4 * MIB,
      partitions: partitions(XIAOZHI_PARTITIONS_4M),
      running: expect.objectContaining({ label: 'factory', offset: 0x10000 }),
    });
  });

  it('reads the table in flash before the first boot, and none from an erased flash', () => {
    const { bootloader } = rig(16);
    expect(bootloader.partitionTable()?.partitions).toEqual(partitions(XIAOZHI_PARTITIONS_16M));
    expect(bootloader.runningPartition()?.label).toBe('ota_0');
    const empty = new Bootloader({
      flash: new FlashStorage({ size: 4 * MIB }),
      storage: new NvsStorage(),
      console: new BoardConsole(),
      chip: 'esp32s3',
      board: 'bread-compact-wifi',
    });
    expect(empty.flashFacts()).toEqual({
      sizeBytes: 4 * MIB,
      partitions: undefined,
      running: undefined,
    });
    expect(errorOf(() => empty.load()).message).toBe('invalid header: 0xffffffff');
  });

  it('warns when the firmware was built for another board', () => {
    const { bootloader, console } = rig(16, 'otto-robot');
    bootloader.load();
    expect(console.history.at(-1)?.text).toMatch(
      /W \(\d+\) Board: this firmware was built for otto-robot, not bread-compact-wifi/,
    );
  });

  it('installs an app into the app partition, refusing one that does not fit', () => {
    const { flash, bootloader } = rig(4);
    const image = buildAppImage({ chip: 'esp32s3', version: '4.0.0' });
    expect(bootloader.install(image).version).toBe('4.0.0');
    expect(flash.read(0x10000, image.length)).toEqual(image);
    const huge = buildAppImage({ chip: 'esp32s3', version: '4.0.1', padTo: 0x300000 });
    expect(errorOf(() => bootloader.install(huge)).message).toBe(
      `the image (${0x300000} bytes) does not fit factory`,
    );
  });

  it('loads nothing without a modelled flash', () => {
    const bootloader = new Bootloader({
      flash: undefined,
      storage: new NvsStorage(),
      console: new BoardConsole(),
      chip: 'esp32s3',
      board: 'bread-compact-wifi',
    });
    expect(bootloader.load()).toBeUndefined();
    expect(bootloader.flashFacts()).toBeUndefined();
  });

  it('writes NVS back after a change, once it has loaded the NVS partition', () => {
    const { flash, bootloader, storage } = rig(4);
    storage.open('wifi').setString('ssid', 'before-boot');
    bootloader.persistNvs();
    expect(flash.read(0x9000, 4).every((b) => b === 0xff)).toBe(true);
    bootloader.load();
    storage.open('wifi').setString('ssid', 'lab');
    bootloader.persistNvs();
    expect(readNvsPartition(flash.read(0x9000, 0x4000))).toEqual(
      expect.arrayContaining([expect.objectContaining({ key: 'ssid', value: 'lab' })]),
    );
  });
});
