import { describe, expect, it } from 'vitest';
import { FlashStorage } from '../flash-storage.js';
import { runSpiFlashCommand, spiFlashId } from './spi-flash.js';

const MB = 1024 * 1024;
const none = new Uint8Array(0);
const bytes = (...values: number[]) => Uint8Array.from(values);

describe('the SPI flash chip behind the user commands', () => {
  it('answers RDID (0x9F) with the JEDEC id: GigaDevice, type 0x40, log2 of its size', () => {
    const flash = new FlashStorage({ size: 16 * MB });
    expect(runSpiFlashCommand(flash, 0x9f, none) & 0xffffff).toBe(0x1840c8);
    expect(spiFlashId(4 * MB)).toBe(0x1640c8);
  });

  it('reads status registers 1..3 with RDSR, RDSR2, RDSR3 (0x05, 0x35, 0x15): QE set by a QIO bootloader', () => {
    const flash = new FlashStorage({ size: 4 * MB });
    expect(runSpiFlashCommand(flash, 0x05, none) & 0xff).toBe(0x00);
    expect(runSpiFlashCommand(flash, 0x35, none) & 0xff).toBe(0x02);
    expect(runSpiFlashCommand(flash, 0x15, none) & 0xff).toBe(0x00);
  });

  it('shows WEL (status bit 1) after WREN (0x06), clears it with WRDI (0x04)', () => {
    const flash = new FlashStorage({ size: 4 * MB });
    runSpiFlashCommand(flash, 0x06, none);
    expect(runSpiFlashCommand(flash, 0x05, none) & 0xff).toBe(0x02);
    runSpiFlashCommand(flash, 0x04, none);
    expect(runSpiFlashCommand(flash, 0x05, none) & 0xff).toBe(0x00);
  });

  it('writes the status only after WREN or WEVSR (0x50); WRSR (0x01) takes 1 or 2 bytes', () => {
    const flash = new FlashStorage({ size: 4 * MB });
    runSpiFlashCommand(flash, 0x01, bytes(0x1c));
    expect(runSpiFlashCommand(flash, 0x05, none) & 0xff).toBe(0x00); // no write enable: ignored
    runSpiFlashCommand(flash, 0x06, none);
    runSpiFlashCommand(flash, 0x01, bytes(0x1f, 0x40));
    // WIP and WEL are read-only, and the write cleared WEL.
    expect(runSpiFlashCommand(flash, 0x05, none) & 0xff).toBe(0x1c);
    expect(runSpiFlashCommand(flash, 0x35, none) & 0xff).toBe(0x40);
    runSpiFlashCommand(flash, 0x50, none);
    runSpiFlashCommand(flash, 0x31, bytes(0x02));
    runSpiFlashCommand(flash, 0x50, none);
    runSpiFlashCommand(flash, 0x11, bytes(0x60));
    expect(runSpiFlashCommand(flash, 0x35, none) & 0xff).toBe(0x02);
    expect(runSpiFlashCommand(flash, 0x15, none) & 0xff).toBe(0x60);
    // The registers are the flash chip's: another look at the same flash sees them.
    expect(runSpiFlashCommand(flash, 0x05, none) & 0xff).toBe(0x1c);
    expect(runSpiFlashCommand(new FlashStorage({ size: 4 * MB }), 0x05, none) & 0xff).toBe(0x00);
  });

  it('reads all ones without a flash chip (MISO pulled up)', () => {
    expect(runSpiFlashCommand(undefined, 0x9f, none) & 0xffffff).toBe(0xffffff);
    expect(runSpiFlashCommand(undefined, 0x05, none) & 0xff).toBe(0xff);
  });
});
