import { createHash } from 'node:crypto';
import { deflateSync } from 'node:zlib';
import {
  ROM_COMMANDS as C,
  CHIPS,
  decodeRomResponse,
  decodeWords,
  encodeDataBlock,
  encodeRomRequest,
  encodeWords,
  ROM_SYNC_VALUE,
  readStatus,
  SlipDecoder,
  slipEncode,
  syncPayload,
} from '@xiaozhi-mcp/firmware';
import { describe, expect, it, vi } from 'vitest';
import type { ChipModel } from '../board-api.js';
import { FlashStorage } from '../flash-storage.js';
import {
  CHIP_DETECT_MAGIC_REG,
  ROM_CHIPS,
  RomEmulator,
  type RomEmulatorOptions,
} from './rom-emulator.js';

const MAC = 'f4:12:fa:12:34:56';

function harness(chip: ChipModel = 'esp32s3', extra: Partial<RomEmulatorOptions> = {}) {
  const flash = new FlashStorage({ size: 4 * 1024 * 1024 });
  const decoder = new SlipDecoder();
  let frames: Uint8Array[] = [];
  let baud = 115200;
  const reboots: string[] = [];
  const emulator = new RomEmulator({
    chip,
    mac: MAC,
    flash,
    send: (bytes) => frames.push(...decoder.push(bytes)),
    baudRate: () => baud,
    setBaudRate: (b) => {
      baud = b;
    },
    reboot: (how) => reboots.push(how),
    ...extra,
  });
  const raw = async (packet: Uint8Array) => {
    emulator.receive(slipEncode(packet));
    await emulator.idle();
    const out = frames;
    frames = [];
    return out;
  };
  const send = async (op: number, data: Uint8Array = new Uint8Array(0), checksum = 0) =>
    (await raw(encodeRomRequest(op, data, checksum))).map(decodeRomResponse);
  const ok = async (op: number, data: Uint8Array = new Uint8Array(0), checksum = 0) => {
    const [reply] = await send(op, data, checksum);
    if (reply === undefined) throw new Error('no reply');
    const status = readStatus(
      reply.data,
      emulator.stage === 'stub' ? 2 : ROM_CHIPS[chip].romStatusBytes,
    );
    expect(status.ok, `op 0x${op.toString(16)} error 0x${status.error.toString(16)}`).toBe(true);
    return { ...reply, payload: status.payload };
  };
  const block = (op: number, seq: number, payload: Uint8Array) => {
    const { data, checksum } = encodeDataBlock(seq, payload);
    return send(op, data, checksum);
  };
  const runStub = async () => {
    await ok(C.MEM_BEGIN, encodeWords(64, 1, 0x1800, 0x40380000));
    await block(C.MEM_DATA, 0, new Uint8Array(64).fill(0x13));
    const frames = await raw(encodeRomRequest(C.MEM_END, encodeWords(0, 0x40380004)));
    expect(frames.map((f) => Buffer.from(f).toString('latin1')).at(-1)).toBe('OHAI');
    expect(emulator.stage).toBe('stub');
  };
  return { emulator, flash, send, ok, raw, block, runStub, reboots, baud: () => baud };
}

describe('ROM emulator: the ROM bootloader', () => {
  it('answers SYNC eight times with a non-zero value and 2 status bytes (ESP32-S3)', async () => {
    const { send } = harness();
    const replies = await send(C.SYNC, syncPayload());
    expect(replies).toHaveLength(8);
    for (const r of replies) {
      expect(r.command).toBe(C.SYNC);
      expect(r.value).toBe(ROM_SYNC_VALUE);
      expect([...r.data]).toEqual([0, 0]);
    }
  });

  it('uses 4 status bytes on the ESP32 ROM', async () => {
    const { send } = harness('esp32');
    const [reply] = await send(C.READ_REG, encodeWords(CHIP_DETECT_MAGIC_REG));
    expect(reply?.value).toBe(0x00f01d83);
    expect([...(reply?.data ?? [])]).toEqual([0, 0, 0, 0]);
  });

  it('reads the detect magic, the eFuse MAC (as esptool assembles it) and the UART divider', async () => {
    const { ok } = harness();
    expect((await ok(C.READ_REG, encodeWords(CHIP_DETECT_MAGIC_REG))).value).toBe(0x9);
    const mac0 = (await ok(C.READ_REG, encodeWords(0x60007044))).value;
    const mac1 = (await ok(C.READ_REG, encodeWords(0x60007048))).value;
    const bytes = [
      (mac1 >> 8) & 0xff,
      mac1 & 0xff,
      mac0 >>> 24,
      (mac0 >> 16) & 0xff,
      (mac0 >> 8) & 0xff,
      mac0 & 0xff,
    ];
    expect(bytes.map((b) => b.toString(16).padStart(2, '0')).join(':')).toBe(MAC);
    const div = (await ok(C.READ_REG, encodeWords(0x60000014))).value;
    expect(Math.round((div * 115200) / 1e6)).toBe(40);
  });

  it('reports the image chip id in GET_SECURITY_INFO', async () => {
    const { ok } = harness('esp32c3');
    const reply = await ok(C.GET_SECURITY_INFO);
    expect(reply.payload).toHaveLength(20);
    expect(decodeWords(reply.payload.subarray(12), 1)).toEqual([5]);
  });

  it('answers GET_SECURITY_INFO without a chip id on the ESP32-S2, as its ROM does', async () => {
    const { ok } = harness('esp32s2');
    expect((await ok(C.GET_SECURITY_INFO)).payload).toEqual(new Uint8Array(12));
  });

  it("emulates every chip of the firmware's chip table with that table's ROM facts", async () => {
    for (const chip of CHIPS) {
      const { ok } = harness(chip.name);
      const profile = ROM_CHIPS[chip.name];
      expect(profile).toMatchObject({ ...chip.rom, name: chip.description, imageChipId: chip.id });
      const magic = (await ok(C.READ_REG, encodeWords(CHIP_DETECT_MAGIC_REG))).value;
      // A chip esptool knows only by GET_SECURITY_INFO reads 0 there.
      expect([chip.name, magic]).toEqual([chip.name, chip.rom.detectMagic ?? 0]);
      const mac0 = (await ok(C.READ_REG, encodeWords(chip.rom.macEfuse))).value;
      expect([chip.name, mac0]).toEqual([chip.name, 0xfa123456]);
      const div = (await ok(C.READ_REG, encodeWords(chip.rom.uartClkdivReg))).value;
      expect(Math.round((div * 115200) / 1e6)).toBe(profile.xtalMhz);
      if (chip.rom.securityInfo === 'with-chip-id') {
        const info = await ok(C.GET_SECURITY_INFO);
        expect(decodeWords(info.payload.subarray(12), 1)).toEqual([chip.id]);
      }
    }
  });

  it("answers commands it does not have like the ROM: another op, status 01 05, repeated (ESP32's GET_SECURITY_INFO)", async () => {
    const { send } = harness('esp32');
    await send(C.SYNC, syncPayload());
    const replies = await send(C.GET_SECURITY_INFO);
    expect(replies).toHaveLength(8);
    for (const r of replies) {
      expect(r.command).not.toBe(C.GET_SECURITY_INFO);
      expect([...r.data.subarray(0, 2)]).toEqual([1, 5]);
    }
    // Stub-only commands are unknown to the ROM too.
    expect((await send(C.READ_FLASH, encodeWords(0, 16, 16, 1)))[0]?.data[1]).toBe(5);
  });

  it('runs the SPI flash RDID command through the SPI registers (esptool readFlashId)', async () => {
    const { ok } = harness();
    const base = 0x60002000;
    await ok(C.WRITE_REG, encodeWords(base + 0x28, 23, 0xffffffff, 0));
    await ok(C.WRITE_REG, encodeWords(base + 0x18, 0x80000000, 0xffffffff, 0));
    await ok(C.WRITE_REG, encodeWords(base + 0x20, ((7 << 28) | 0x9f) >>> 0, 0xffffffff, 0));
    await ok(C.WRITE_REG, encodeWords(base + 0x58, 0, 0xffffffff, 0));
    await ok(C.WRITE_REG, encodeWords(base, 1 << 18, 0xffffffff, 0));
    expect((await ok(C.READ_REG, encodeWords(base))).value & (1 << 18)).toBe(0);
    expect((await ok(C.READ_REG, encodeWords(base + 0x58))).value).toBe(0x1640c8);
  });

  it('writes plain FLASH_DATA blocks, checks their checksum, and answers MD5 in hex', async () => {
    const { ok, send, block, flash } = harness();
    const data = Uint8Array.from({ length: 0x600 }, (_, i) => i & 0xff);
    await ok(C.FLASH_BEGIN, encodeWords(data.length, 2, 0x400, 0x10000, 0));
    const padded = new Uint8Array(0x400).fill(0xff);
    padded.set(data.subarray(0x400));
    const bad = encodeDataBlock(0, data.subarray(0, 0x400));
    const [rejected] = await send(C.FLASH_DATA, bad.data, bad.checksum ^ 1);
    expect([...(rejected?.data ?? [])]).toEqual([1, 0x07]);
    expect(
      readStatus(
        (await block(C.FLASH_DATA, 0, data.subarray(0, 0x400)))[0]?.data ?? new Uint8Array(2),
      ).ok,
    ).toBe(true);
    await block(C.FLASH_DATA, 1, padded);
    expect(flash.read(0x10000, data.length)).toEqual(data);
    const md5 = await ok(C.SPI_FLASH_MD5, encodeWords(0x10000, data.length, 0, 0));
    expect(Buffer.from(md5.payload).toString('latin1')).toBe(
      createHash('md5').update(data).digest('hex'),
    );
  });

  it('changes its rate after answering CHANGE_BAUDRATE', async () => {
    const h = harness();
    await h.ok(C.CHANGE_BAUDRATE, encodeWords(460800, 0));
    expect(h.baud()).toBe(460800);
  });
});

describe('ROM emulator: the flasher stub', () => {
  it('starts after MEM_END with an entry point: OHAI, then stub replies', async () => {
    const h = harness('esp32');
    await h.runStub();
    const replies = await h.send(C.SYNC, syncPayload());
    expect(replies.every((r) => r.value === 0)).toBe(true);
    const [reg] = await h.send(C.READ_REG, encodeWords(CHIP_DETECT_MAGIC_REG));
    expect(reg?.data).toHaveLength(2);
    const [unknown] = await h.send(0x42);
    expect(unknown?.command).toBe(0x42);
    expect([...(unknown?.data ?? [])]).toEqual([1, 0xff]);
  });

  it('inflates FLASH_DEFL_DATA block by block and answers MD5 as 16 raw bytes', async () => {
    const h = harness();
    await h.runStub();
    const image = new Uint8Array(300_000).fill(0xff);
    for (let i = 0; i < 40_000; i++) image[i] = (i * 31) & 0xff;
    const compressed = deflateSync(image, { level: 9 });
    const blocks = Math.ceil(compressed.length / 0x4000);
    await h.ok(C.FLASH_DEFL_BEGIN, encodeWords(image.length, blocks, 0x4000, 0x20000));
    for (let seq = 0; seq < blocks; seq++) {
      const [r] = await h.block(
        C.FLASH_DEFL_DATA,
        seq,
        compressed.subarray(seq * 0x4000, (seq + 1) * 0x4000),
      );
      expect(readStatus(r?.data ?? new Uint8Array(2)).ok).toBe(true);
    }
    await h.ok(C.FLASH_DEFL_END, encodeWords(1));
    expect(h.flash.md5(0x20000, image.length)).toBe(createHash('md5').update(image).digest('hex'));
    const md5 = await h.ok(C.SPI_FLASH_MD5, encodeWords(0x20000, image.length, 0, 0));
    expect(Buffer.from(md5.payload).toString('hex')).toBe(
      createHash('md5').update(image).digest('hex'),
    );
    expect(h.reboots).toEqual([]);
  });

  it('streams READ_FLASH packets against acks, then sends the MD5', async () => {
    const h = harness();
    await h.runStub();
    const data = Uint8Array.from({ length: 0x1800 }, (_, i) => (i * 7) & 0xff);
    h.flash.program(0x8000, data);
    const first = await h.raw(
      encodeRomRequest(C.READ_FLASH, encodeWords(0x8000, data.length, 0x1000, 1024)),
    );
    expect(first).toHaveLength(2); // the reply, then the first packet
    const received = [...(first[1] ?? [])];
    const second = await h.raw(encodeWords(received.length));
    received.push(...(second[0] ?? []));
    const last = await h.raw(encodeWords(received.length));
    expect(Uint8Array.from(received)).toEqual(data);
    expect(Buffer.from(last[0] ?? []).toString('hex')).toBe(
      createHash('md5').update(data).digest('hex'),
    );
  });

  it('erases a region and the whole chip', async () => {
    const h = harness();
    await h.runStub();
    h.flash.program(0x1000, new Uint8Array(0x2000));
    await h.ok(C.ERASE_REGION, encodeWords(0x2000, 0x1000));
    expect(h.flash.read(0x1000, 1)[0]).toBe(0);
    expect(h.flash.read(0x2000, 1)[0]).toBe(0xff);
    const [unaligned] = await h.send(C.ERASE_REGION, encodeWords(0x2001, 0x1000));
    expect([...(unaligned?.data ?? [])]).toEqual([1, 0xc0]);
    await h.ok(C.ERASE_FLASH);
    expect(h.flash.read(0x1000, 1)[0]).toBe(0xff);
  });

  it('leaves download mode on FLASH_END asking to reboot, and on RUN_USER_CODE', async () => {
    const h = harness();
    await h.runStub();
    await h.ok(C.FLASH_END, encodeWords(0));
    expect(h.reboots).toEqual(['reset']);
    const h2 = harness();
    await h2.runStub();
    expect(await h2.send(C.RUN_USER_CODE)).toEqual([]);
    expect(h2.reboots).toEqual(['run']);
  });

  it('hangs on request: no reply to the block or to anything after it', async () => {
    const h = harness('esp32s3', { faults: { flashBlock: () => 'hang' } });
    await h.runStub();
    const data = new Uint8Array(0x400).fill(0x5a);
    await h.ok(C.FLASH_BEGIN, encodeWords(data.length, 1, 0x400, 0x30000));
    expect(await h.block(C.FLASH_DATA, 0, data)).toEqual([]);
    expect(await h.send(C.READ_REG, encodeWords(CHIP_DETECT_MAGIC_REG))).toEqual([]);
    expect(await h.send(C.SYNC, syncPayload())).toEqual([]);
    expect(h.flash.read(0x30000, 1)[0]).toBe(0xff);
  });

  it('injects faults: fail and drop leave the block unwritten, corrupt flips a bit in flash', async () => {
    const faults: string[] = ['fail', 'drop', 'corrupt'];
    const h = harness('esp32s3', {
      faults: { flashBlock: () => faults.shift() as 'fail' | 'drop' | 'corrupt' | undefined },
    });
    await h.runStub();
    const data = new Uint8Array(0x400).fill(0x5a);
    await h.ok(C.FLASH_BEGIN, encodeWords(data.length, 1, 0x400, 0x30000));
    const [failed] = await h.block(C.FLASH_DATA, 0, data);
    expect([...(failed?.data ?? [])]).toEqual([1, 0xc4]);
    expect(await h.block(C.FLASH_DATA, 0, data)).toEqual([]);
    await h.block(C.FLASH_DATA, 0, data);
    const written = h.flash.read(0x30000, data.length);
    expect(written.filter((b, i) => b !== data[i])).toHaveLength(1);
  });
});

describe('ROM emulator: the watchdogs a reset over the USB-Serial-JTAG leaves running', () => {
  const facts = (chip: 'esp32s3' | 'esp32c3' | 'esp32c6') => {
    const usb = ROM_CHIPS[chip].usbJtagSerial;
    if (usb === undefined) throw new Error(`${chip} has no USB-Serial-JTAG facts`);
    return usb;
  };
  const write = (address: number, value: number) => encodeWords(address, value, 0xffffffff, 0);

  it("says which console it talks on in UARTDEV_BUF_NO, as esptool's get_uart_no() reads it", async () => {
    const usb = facts('esp32s3');
    const uart = harness('esp32s3');
    expect((await uart.ok(C.READ_REG, encodeWords(usb.uartDevBufNo))).value & 0xff).toBe(0);
    const native = harness('esp32s3', { console: 'usb-jtag-serial' });
    expect((await native.ok(C.READ_REG, encodeWords(usb.uartDevBufNo))).value & 0xff).toBe(4);
  });

  it('resets the chip when their time is up, unless the host tamed both in time', async () => {
    const armed = harness('esp32s3', { watchdogs: {} });
    expect(armed.emulator.watchdogs).toEqual({
      armed: true,
      rtcWdtEnabled: true,
      swdAutoFeed: false,
    });
    expect(armed.emulator.expireWatchdogs()).toBe('rtc-wdt');
    expect(armed.reboots).toEqual(['watchdog']);
    expect(await armed.send(C.SYNC, syncPayload())).toEqual([]);

    // The RTC watchdog alone disabled: the super watchdog still bites.
    const half = harness('esp32c3', { watchdogs: {} });
    const c3 = facts('esp32c3');
    await half.ok(C.WRITE_REG, write(c3.rtcWdtWprotect, c3.rtcWdtKey));
    await half.ok(C.WRITE_REG, write(c3.rtcWdtConfig0, 0));
    await half.ok(C.WRITE_REG, write(c3.rtcWdtWprotect, 0));
    expect(half.emulator.expireWatchdogs()).toBe('swd');
    expect(half.reboots).toEqual(['watchdog']);
  });

  it.each(['esp32s3', 'esp32c3', 'esp32c6'] as const)(
    "%s: esptool's disable_watchdogs sequence tames them",
    async (chip) => {
      const usb = facts(chip);
      const h = harness(chip, { watchdogs: {}, console: 'usb-jtag-serial' });
      await h.ok(C.WRITE_REG, write(usb.rtcWdtWprotect, usb.rtcWdtKey));
      await h.ok(C.WRITE_REG, write(usb.rtcWdtConfig0, 0));
      await h.ok(C.WRITE_REG, write(usb.rtcWdtWprotect, 0));
      await h.ok(C.WRITE_REG, write(usb.swdWprotect, usb.swdKey));
      const swd = (await h.ok(C.READ_REG, encodeWords(usb.swdConf))).value;
      await h.ok(C.WRITE_REG, write(usb.swdConf, (swd | usb.swdAutoFeedEn) >>> 0));
      await h.ok(C.WRITE_REG, write(usb.swdWprotect, 0));
      expect(h.emulator.watchdogs).toMatchObject({ rtcWdtEnabled: false, swdAutoFeed: true });
      expect(h.emulator.expireWatchdogs()).toBeUndefined();
      expect(h.reboots).toEqual([]);
    },
  );

  it('ignores writes to a watchdog whose protect register does not hold the key', async () => {
    const usb = facts('esp32s3');
    const h = harness('esp32s3', { watchdogs: {} });
    await h.ok(C.WRITE_REG, write(usb.rtcWdtConfig0, 0));
    await h.ok(C.WRITE_REG, write(usb.swdConf, usb.swdAutoFeedEn));
    expect(h.emulator.watchdogs).toMatchObject({ rtcWdtEnabled: true, swdAutoFeed: false });
    expect(h.emulator.expireWatchdogs()).toBe('rtc-wdt');
  });

  it('bites on its own after timeoutMs', async () => {
    vi.useFakeTimers();
    try {
      const h = harness('esp32c6', { watchdogs: { timeoutMs: 9000 } });
      vi.advanceTimersByTime(8999);
      expect(h.reboots).toEqual([]);
      vi.advanceTimersByTime(1);
      expect(h.reboots).toEqual(['watchdog']);
    } finally {
      vi.useRealTimers();
    }
  });

  it('has no watchdogs to arm on a chip without a USB-Serial-JTAG', () => {
    const h = harness('esp32', { watchdogs: {} });
    expect(h.emulator.watchdogs.armed).toBe(false);
    expect(h.emulator.expireWatchdogs()).toBeUndefined();
  });
});
