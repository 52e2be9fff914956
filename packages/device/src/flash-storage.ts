/**
 * A board's SPI flash: erased bytes are 0xFF, writes can only clear bits (NOR flash), erases
 * work on 4 KiB sectors. Optionally backed by a file, so a virtual board keeps its firmware
 * and NVS across processes, as a real board keeps them across power cycles.
 */
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync, writeSync } from 'node:fs';
import { DeviceError } from './errors.js';

export const FLASH_SECTOR_SIZE = 0x1000;

export interface FlashStorageOptions {
  /** Size in bytes (4, 8 or 16 MiB on xiaozhi boards). */
  readonly size: number;
  /** A file that holds the flash contents; created erased when missing. */
  readonly path?: string;
  /**
   * Writes program bits 1 → 0 only, as NOR flash does, so writing without an erase leaves
   * the AND of old and new data. The ROM's flash writer erases first, so flashing is exact.
   */
  readonly nor?: boolean;
}

export class FlashStorage {
  readonly size: number;
  readonly path: string | undefined;
  readonly #bytes: Uint8Array;
  readonly #nor: boolean;

  constructor(options: FlashStorageOptions) {
    if (
      !Number.isInteger(options.size) ||
      options.size <= 0 ||
      options.size % FLASH_SECTOR_SIZE !== 0
    ) {
      throw new DeviceError(
        'FLASH_OUT_OF_RANGE',
        `flash size must be a positive multiple of 4 KiB, got ${options.size}`,
      );
    }
    this.size = options.size;
    this.path = options.path;
    this.#nor = options.nor ?? true;
    this.#bytes = new Uint8Array(options.size).fill(0xff);
    if (options.path !== undefined && existsSync(options.path)) {
      const stored = readFileSync(options.path);
      this.#bytes.set(stored.subarray(0, options.size));
    } else if (options.path !== undefined) {
      this.#persist(0, this.size);
    }
  }

  read(offset: number, length: number): Uint8Array {
    this.#check(offset, length);
    return this.#bytes.slice(offset, offset + length);
  }

  /** Programs bytes; with NOR semantics only 1 → 0 transitions happen. */
  write(offset: number, data: Uint8Array): void {
    this.#check(offset, data.length);
    if (this.#nor) {
      for (let i = 0; i < data.length; i++)
        this.#bytes[offset + i] = (this.#bytes[offset + i] ?? 0xff) & (data[i] ?? 0xff);
    } else {
      this.#bytes.set(data, offset);
    }
    this.#persist(offset, data.length);
  }

  /** Erases whole sectors covering [offset, offset + length) back to 0xFF. */
  erase(offset: number, length: number): void {
    const start = Math.floor(offset / FLASH_SECTOR_SIZE) * FLASH_SECTOR_SIZE;
    const end = Math.ceil((offset + length) / FLASH_SECTOR_SIZE) * FLASH_SECTOR_SIZE;
    this.#check(start, end - start);
    this.#bytes.fill(0xff, start, end);
    this.#persist(start, end - start);
  }

  /** Erases then writes: what the ROM and the flasher stub do for each region they flash. */
  program(offset: number, data: Uint8Array): void {
    this.erase(offset, data.length);
    this.write(offset, data);
  }

  eraseAll(): void {
    this.erase(0, this.size);
  }

  md5(offset: number, length: number): string {
    this.#check(offset, length);
    return createHash('md5')
      .update(this.#bytes.subarray(offset, offset + length))
      .digest('hex');
  }

  #check(offset: number, length: number): void {
    if (
      !Number.isInteger(offset) ||
      !Number.isInteger(length) ||
      offset < 0 ||
      length < 0 ||
      offset + length > this.size
    ) {
      throw new DeviceError(
        'FLASH_OUT_OF_RANGE',
        `flash access 0x${offset.toString(16)}+0x${length.toString(16)} is outside the ${this.size / 1024 / 1024} MiB flash`,
      );
    }
  }

  #persist(offset: number, length: number): void {
    if (this.path === undefined || length === 0) return;
    const fd = openSync(this.path, existsSync(this.path) ? 'r+' : 'w+');
    try {
      writeSync(fd, this.#bytes, offset, length, offset);
    } finally {
      closeSync(fd);
    }
  }
}
