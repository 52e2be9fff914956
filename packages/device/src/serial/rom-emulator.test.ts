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
    // esptool's targets: 4 status bytes from every ESP32-family ROM, 2 from the stub.
    const status = readStatus(reply.data, emulator.stage === 'stub' ? 2 : 4);
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
  it('answers SYNC eight times with a non-zero value and 4 status bytes (ESP32-S3)', async () => {
    const { send } = harness();
    const replies = await send(C.SYNC, syncPayload());
    expect(replies).toHaveLength(8);
    for (const r of replies) {
      expect(r.command).toBe(C.SYNC);
      expect(r.value).toBe(ROM_SYNC_VALUE);
      expect([...r.data]).toEqual([0, 0, 0, 0]);
    }
  });

  it('ends every ROM reply with 4 status bytes on every chip, and every stub reply with 2', async () => {
    for (const chip of CHIPS) {
      const h = harness(chip.name);
      const [reg] = await h.send(C.READ_REG, encodeWords(CHIP_DETECT_MAGIC_REG));
      expect([chip.name, ...(reg?.data ?? [])]).toEqual([chip.name, 0, 0, 0, 0]);
      // An error: status 1, the ROM's error byte, 2 reserved bytes.
      const [bad] = await h.send(C.READ_REG, new Uint8Array(3));
      expect([chip.name, ...(bad?.data ?? [])]).toEqual([chip.name, 1, 0x05, 0, 0]);
      await h.runStub();
      const [stubReg] = await h.send(C.READ_REG, encodeWords(CHIP_DETECT_MAGIC_REG));
      expect([chip.name, ...(stubReg?.data ?? [])]).toEqual([chip.name, 0, 0]);
      const [stubBad] = await h.send(C.READ_REG, new Uint8Array(3));
      expect([chip.name, ...(stubBad?.data ?? [])]).toEqual([chip.name, 1, 0xc0]);
    }
  });

  it("passes esptool 4.9's check_command (status in the last 4 bytes) and esptool 4.10's (after the payload)", async () => {
    const h = harness();
    // esptool <= 4.9 (loader.py): `if len(data) < self.STATUS_BYTES_LENGTH: raise FatalError("Failed
    // to %s. Only got %d byte status response.")`, status_bytes = data[-STATUS_BYTES_LENGTH:], the
    // rest is the result. STATUS_BYTES_LENGTH is 4 for the ESP32-S3 ROM.
    const esptool49 = (data: Uint8Array) => {
      if (data.length < 4) throw new Error(`Only got ${data.length} byte status response.`);
      if (data[data.length - 4] !== 0) throw new Error('status');
      return data.subarray(0, data.length - 4);
    };
    // esptool >= 4.10: status_bytes = data[resp_data_len : resp_data_len + 2].
    const esptool410 = (data: Uint8Array, respDataLen: number) => {
      if (data.length < respDataLen + 2) throw new Error('short');
      if (data[respDataLen] !== 0) throw new Error('status');
      return data.subarray(0, respDataLen);
    };
    const [memBegin] = await h.send(C.MEM_BEGIN, encodeWords(64, 1, 0x1800, 0x40380000));
    expect(esptool49(memBegin?.data ?? new Uint8Array(0))).toHaveLength(0);
    const data = Uint8Array.from({ length: 0x1000 }, (_, i) => i & 0xff);
    h.flash.program(0x1000, data);
    const [md5] = await h.send(C.SPI_FLASH_MD5, encodeWords(0x1000, data.length, 0, 0));
    const hexDigest = createHash('md5').update(data).digest('hex');
    expect(Buffer.from(esptool49(md5?.data ?? new Uint8Array(0))).toString('latin1')).toBe(
      hexDigest,
    );
    expect(Buffer.from(esptool410(md5?.data ?? new Uint8Array(0), 32)).toString('latin1')).toBe(
      hexDigest,
    );
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

  it("keeps the MAC beside the ESP32-C2's revision, which shares its eFuse word", async () => {
    const { ok } = harness('esp32c2');
    // esp32c2.py: MAC_EFUSE_REG 0x60008840; word 1 (0x60008844) holds the MAC's top bytes in
    // bits 0..15 and the major revision in bits 20..21 (v1.0).
    expect((await ok(C.READ_REG, encodeWords(0x60008844))).value).toBe(0x0010f412);
  });

  it('reports the image chip id in GET_SECURITY_INFO', async () => {
    const { ok } = harness('esp32c3');
    const reply = await ok(C.GET_SECURITY_INFO);
    expect(reply.payload).toHaveLength(20);
    expect(decodeWords(reply.payload.subarray(12), 1)).toEqual([5]);
  });

  it('reports Secure Boot and flash encryption in GET_SECURITY_INFO as esptool reads it', async () => {
    const plain = harness('esp32c3');
    expect([...(await plain.ok(C.GET_SECURITY_INFO)).payload.subarray(0, 12)]).toEqual(
      new Array(12).fill(0),
    );
    const secured = harness('esp32c3', { silicon: { secureBoot: true, flashEncryption: true } });
    const info = (await secured.ok(C.GET_SECURITY_INFO)).payload;
    // esptool v4.12 loader.py:1123 "<IBBBBBBBBII": flags, flash_crypt_cnt, 7 key purposes,
    // chip_id, api_version; :1095 SECURE_BOOT_EN = 1 << 0; esp32c3.py:124 SECURE_BOOT_DIGEST0 =
    // 9, :119 XTS_AES_128_KEY = 4.
    expect(decodeWords(info, 1)).toEqual([0b1]);
    expect(info[4]).toBe(1);
    expect([...info.subarray(5, 12)]).toEqual([9, 4, 0, 0, 0, 0, 0]);
    expect(decodeWords(info.subarray(12), 1)).toEqual([5]);
    // The ESP32-S2's 12 bytes carry the same, without the chip id.
    const s2 = harness('esp32s2', { silicon: { secureBoot: true } });
    const s2Info = (await s2.ok(C.GET_SECURITY_INFO)).payload;
    expect(s2Info).toHaveLength(12);
    expect(decodeWords(s2Info, 1)).toEqual([1]);
  });

  it('refuses a flash write or erase below 0x8000 with Secure Boot on, in the ROM and the stub', async () => {
    const h = harness('esp32c3', { silicon: { secureBoot: true } });
    const [refused] = await h.send(C.FLASH_BEGIN, encodeWords(0x1000, 1, 0x400, 0x0));
    // Status 1, error 0x06: the ROM failed to act on the message.
    expect([...(refused?.data ?? [])].slice(0, 2)).toEqual([1, 0x06]);
    // Nothing below 0x8000, an empty begin (esptool's soft reset) and what lies above are fine.
    await h.ok(C.FLASH_BEGIN, encodeWords(0, 0, 0x400, 0x0));
    await h.ok(C.FLASH_BEGIN, encodeWords(0x1000, 1, 0x400, 0x8000));
    await h.runStub();
    const [stubRefused] = await h.send(C.FLASH_DEFL_BEGIN, encodeWords(0x1000, 1, 0x4000, 0x7000));
    expect([...(stubRefused?.data ?? [])]).toEqual([1, 0xc4]);
    const [erase] = await h.send(C.ERASE_REGION, encodeWords(0x0, 0x1000));
    expect([...(erase?.data ?? [])]).toEqual([1, 0xc4]);
    const [all] = await h.send(C.ERASE_FLASH);
    expect([...(all?.data ?? [])]).toEqual([1, 0xc4]);
    await h.ok(C.ERASE_REGION, encodeWords(0x9000, 0x1000));
  });

  it('answers GET_SECURITY_INFO without a chip id on the ESP32-S2, as its ROM does', async () => {
    const { ok } = harness('esp32s2');
    expect((await ok(C.GET_SECURITY_INFO)).payload).toEqual(new Uint8Array(12));
  });

  it("emulates every chip of the firmware's chip table, its own copy of the facts agreeing with the table", async () => {
    for (const chip of CHIPS) {
      const { ok } = harness(chip.name);
      const profile = ROM_CHIPS[chip.name];
      // Two copies written apart (the flasher reads the table, the emulator its own): a wrong
      // fact in either shows here.
      const {
        efuse: _revision,
        usbJtagSerial,
        ...rom
      } = chip.rom as typeof chip.rom & {
        usbJtagSerial?: { hardResetUsesUsb: boolean };
      };
      const { hardResetUsesUsb: _reset, ...usb } = usbJtagSerial ?? { hardResetUsesUsb: false };
      expect({ ...profile, xtalMhz: undefined, romStatusBytes: undefined }).toEqual({
        ...rom,
        name: chip.description,
        imageChipId: chip.id,
        ...(usbJtagSerial === undefined ? {} : { usbJtagSerial: usb }),
        xtalMhz: undefined,
        romStatusBytes: undefined,
      });
      const magic = (await ok(C.READ_REG, encodeWords(CHIP_DETECT_MAGIC_REG))).value;
      // A chip esptool knows only by GET_SECURITY_INFO reads 0 there.
      expect([chip.name, magic]).toEqual([chip.name, chip.rom.detectMagic ?? 0]);
      const mac0 = (await ok(C.READ_REG, encodeWords(chip.rom.macEfuse))).value;
      expect([chip.name, mac0]).toEqual([chip.name, 0xfa123456]);
      // The MAC's top bytes are the low half of the next word (esptool keeps `mac1 & 0xFFFF`).
      const mac1 = (await ok(C.READ_REG, encodeWords(chip.rom.macEfuse + 4))).value;
      expect([chip.name, mac1 & 0xffff]).toEqual([chip.name, 0xf412]);
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
    // SPI_USR_COMMAND (bit 31) and SPI_USR_MISO (bit 28), as run_spiflash_command sets them.
    await ok(C.WRITE_REG, encodeWords(base + 0x18, 0x90000000, 0xffffffff, 0));
    await ok(C.WRITE_REG, encodeWords(base + 0x20, ((7 << 28) | 0x9f) >>> 0, 0xffffffff, 0));
    await ok(C.WRITE_REG, encodeWords(base + 0x58, 0, 0xffffffff, 0));
    await ok(C.WRITE_REG, encodeWords(base, 1 << 18, 0xffffffff, 0));
    expect((await ok(C.READ_REG, encodeWords(base))).value & (1 << 18)).toBe(0);
    expect((await ok(C.READ_REG, encodeWords(base + 0x58))).value).toBe(0x1640c8);
  });

  it("reads and writes the flash status as esptool's read_status and write_status do", async () => {
    const h = harness();
    // esptool's run_spiflash_command on the ESP32-S3 (SPI_REG_BASE 0x60002000, USR 0x18, USR2
    // 0x20, MOSI_DLEN 0x24, MISO_DLEN 0x28, W0 0x58), one WRITE_REG per register.
    const base = 0x60002000;
    const write = (offset: number, value: number) =>
      h.ok(C.WRITE_REG, encodeWords(base + offset, value >>> 0, 0xffffffff, 0));
    const run = async (command: number, data: number[] = [], readBits = 0) => {
      const usr = (1 << 31) | (readBits > 0 ? 1 << 28 : 0) | (data.length > 0 ? 1 << 27 : 0);
      if (data.length > 0) await write(0x24, data.length * 8 - 1);
      if (readBits > 0) await write(0x28, readBits - 1);
      await write(0x18, usr);
      await write(0x20, (7 << 28) | command);
      if (data.length === 0) await write(0x58, 0);
      else
        await write(
          0x58,
          data.reduce((word, byte, i) => word | (byte << (8 * i)), 0),
        );
      await write(0x00, 1 << 18);
      return (await h.ok(C.READ_REG, encodeWords(base + 0x58))).value;
    };
    const readStatus2 = async () =>
      ((await run(0x05, [], 8)) & 0xff) | (((await run(0x35, [], 8)) & 0xff) << 8);
    expect(await readStatus2()).toBe(0x0200);
    // write_status(0x021c, num_bytes=2): WEVSR + 16-bit WRSR, then WEVSR + WRSR and WEVSR +
    // WRSR2 with a byte each, then WRDI.
    await run(0x50);
    await run(0x01, [0x1c, 0x02]);
    await run(0x50);
    await run(0x01, [0x1c]);
    await run(0x50);
    await run(0x31, [0x02]);
    await run(0x04);
    expect(await readStatus2()).toBe(0x021c);
    // Without an enable the write is ignored.
    await run(0x01, [0x00, 0x00]);
    expect(await readStatus2()).toBe(0x021c);
    // Read-ID still answers, 24 bits.
    expect(await run(0x9f, [], 24)).toBe(0x1640c8);
  });

  it('writes plain FLASH_DATA blocks, checks their checksum, and answers MD5 in hex', async () => {
    const { ok, send, block, flash } = harness();
    const data = Uint8Array.from({ length: 0x600 }, (_, i) => i & 0xff);
    await ok(C.FLASH_BEGIN, encodeWords(data.length, 2, 0x400, 0x10000, 0));
    const padded = new Uint8Array(0x400).fill(0xff);
    padded.set(data.subarray(0x400));
    const bad = encodeDataBlock(0, data.subarray(0, 0x400));
    const [rejected] = await send(C.FLASH_DATA, bad.data, bad.checksum ^ 1);
    expect([...(rejected?.data ?? [])]).toEqual([1, 0x07, 0, 0]);
    expect(
      readStatus(
        (await block(C.FLASH_DATA, 0, data.subarray(0, 0x400)))[0]?.data ?? new Uint8Array(4),
        4,
      ).ok,
    ).toBe(true);
    await block(C.FLASH_DATA, 1, padded);
    expect(flash.read(0x10000, data.length)).toEqual(data);
    const md5 = await ok(C.SPI_FLASH_MD5, encodeWords(0x10000, data.length, 0, 0));
    expect(Buffer.from(md5.payload).toString('latin1')).toBe(
      createHash('md5').update(data).digest('hex'),
    );
  });

  it("reads flash 64 bytes a command with READ_FLASH_SLOW (0x0E), as esptool's read_flash_slow asks", async () => {
    const h = harness();
    const data = Uint8Array.from({ length: 150 }, (_, i) => (i * 13 + 5) & 0xff);
    h.flash.program(0x9000, data);
    // esptool's loop: struct.pack("<II", offset + len(data), min(64, length - len(data))); the
    // reply's data is always a 64-byte buffer, then the status; keep r[:block_len].
    const read: number[] = [];
    while (read.length < data.length) {
      const blockLen = Math.min(64, data.length - read.length);
      const reply = await h.ok(C.READ_FLASH_SLOW, encodeWords(0x9000 + read.length, blockLen));
      expect(reply.payload).toHaveLength(64);
      read.push(...reply.payload.subarray(0, blockLen));
    }
    expect(Uint8Array.from(read)).toEqual(data);
    const [tooLong] = await h.send(C.READ_FLASH_SLOW, encodeWords(0x9000, 65));
    expect([...(tooLong?.data ?? [])]).toEqual([1, 0x0a, 0, 0]);
    const [outside] = await h.send(C.READ_FLASH_SLOW, encodeWords(4 * 1024 * 1024 - 16, 64));
    expect([...(outside?.data ?? [])]).toEqual([1, 0x09, 0, 0]);
    // The stub has no such command.
    await h.runStub();
    const [stub] = await h.send(C.READ_FLASH_SLOW, encodeWords(0x9000, 64));
    expect([stub?.command, ...(stub?.data ?? [])]).toEqual([0x0e, 1, 0xff]);
  });

  it('sends its FLASH_END reply before it asks for the reboot', async () => {
    const events: string[] = [];
    const decoder = new SlipDecoder();
    const h = harness('esp32s3', {
      send: (bytes) => {
        for (const frame of decoder.push(bytes))
          events.push(`reply ${[...decodeRomResponse(frame).data].join(' ')}`);
      },
      reboot: (how) => events.push(how),
    });
    h.emulator.receive(slipEncode(encodeRomRequest(C.FLASH_END, encodeWords(0))));
    await h.emulator.idle();
    expect(events).toEqual(['reply 0 0 0 0', 'reset']);
  });

  it('changes its rate after answering CHANGE_BAUDRATE', async () => {
    const h = harness();
    await h.ok(C.CHANGE_BAUDRATE, encodeWords(460800, 0));
    expect(h.baud()).toBe(460800);
  });
});

describe('ROM emulator: an ESP32-S3 with Secure Boot does not start a stub from MEM_END', () => {
  it('stays in the ROM after MEM_END with an entry point', async () => {
    const h = harness('esp32s3', { silicon: { secureBoot: true } });
    await h.ok(C.MEM_BEGIN, encodeWords(64, 1, 0x1800, 0x40380000));
    await h.block(C.MEM_DATA, 0, new Uint8Array(64).fill(0x13));
    const frames = await h.raw(encodeRomRequest(C.MEM_END, encodeWords(0, 0x40380004)));
    expect(frames.map((f) => Buffer.from(f).toString('latin1'))).not.toContain('OHAI');
    expect(h.emulator.stage).toBe('rom');
  });

  it("starts it through the ROM's flash-read pointer and READ_FLASH_SLOW, as esptool's run_stub does", async () => {
    const h = harness('esp32s3', { silicon: { secureBoot: true } });
    // esptool v4.12 loader.py:1246 rom_spiflash_legacy_funcs_read_ptr = 0x3FCEF688
    const hook = 0x3fcef688;
    await h.ok(C.MEM_BEGIN, encodeWords(64, 1, 0x1800, 0x40380000));
    await h.block(C.MEM_DATA, 0, new Uint8Array(64).fill(0x13));
    await h.ok(C.MEM_END, encodeWords(1, 0)); // mem_finish(0): no entry
    const stored = (await h.ok(C.READ_REG, encodeWords(hook))).value;
    expect(stored).not.toBe(0);
    await h.ok(C.WRITE_REG, encodeWords(hook, 0x40380004, 0xffffffff, 0));
    const frames = await h.raw(encodeRomRequest(C.READ_FLASH_SLOW, encodeWords(0, 0)));
    expect(frames.map((f) => Buffer.from(f).toString('latin1'))).toEqual(['OHAI']);
    expect(h.emulator.stage).toBe('stub');
    await h.ok(C.WRITE_REG, encodeWords(hook, stored, 0xffffffff, 0));
  });

  it("reads flash as ever while the pointer is the ROM's own, and starts stubs as ever without Secure Boot", async () => {
    const h = harness('esp32s3', { silicon: { secureBoot: true } });
    const [read] = await h.send(C.READ_FLASH_SLOW, encodeWords(0, 64));
    expect(read?.data).toHaveLength(64 + 4);
    await harness('esp32s3').runStub();
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

  it("keeps the stub's read window: packets while fewer than max_in_flight bytes are unacknowledged", async () => {
    const h = harness();
    await h.runStub();
    const data = Uint8Array.from({ length: 0x400 }, (_, i) => (i * 11) & 0xff);
    h.flash.program(0x4000, data);
    // 64-byte packets, 256 bytes in flight: 4 packets out before any ack.
    const first = await h.raw(encodeRomRequest(C.READ_FLASH, encodeWords(0x4000, 0x400, 64, 256)));
    expect(first.map((f) => f.length)).toEqual([10, 64, 64, 64, 64]);
    // An ack of 128 bytes opens the window by two more packets.
    const second = await h.raw(encodeWords(128));
    expect(second.map((f) => f.length)).toEqual([64, 64]);
    // esptool's own request (4096-byte packets, 64 in flight) gets one packet at a time.
    const h2 = harness();
    await h2.runStub();
    h2.flash.program(0x8000, new Uint8Array(0x3000).fill(0x5a));
    const one = await h2.raw(
      encodeRomRequest(C.READ_FLASH, encodeWords(0x8000, 0x3000, 0x1000, 64)),
    );
    expect(one.map((f) => f.length)).toEqual([10, 0x1000]);
    expect((await h2.raw(encodeWords(0x1000))).map((f) => f.length)).toEqual([0x1000]);
  });

  it('ends a read with the MD5 of what was sent when the host sends anything but an ack', async () => {
    const h = harness();
    await h.runStub();
    const data = Uint8Array.from({ length: 0x2000 }, (_, i) => (i * 3) & 0xff);
    h.flash.program(0x6000, data);
    const first = await h.raw(
      encodeRomRequest(C.READ_FLASH, encodeWords(0x6000, 0x2000, 0x1000, 64)),
    );
    expect(first).toHaveLength(2);
    const [digest] = await h.raw(Uint8Array.of(1, 2, 3));
    expect(Buffer.from(digest ?? []).toString('hex')).toBe(
      createHash('md5').update(data.subarray(0, 0x1000)).digest('hex'),
    );
    // Back to commands.
    expect(await h.ok(C.READ_REG, encodeWords(CHIP_DETECT_MAGIC_REG))).toMatchObject({ value: 9 });
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
  const facts = (chip: 'esp32s3' | 'esp32c3' | 'esp32c6' | 'esp32c5') => {
    const usb = ROM_CHIPS[chip].usbJtagSerial;
    const first = usb?.consoles[0];
    if (usb === undefined || first === undefined)
      throw new Error(`${chip} has no USB-Serial-JTAG facts`);
    return { ...usb, uartDevBufNo: first.uartDevBufNo };
  };
  const write = (address: number, value: number) => encodeWords(address, value, 0xffffffff, 0);

  it("says which console it talks on in UARTDEV_BUF_NO, as esptool's get_uart_no() reads it", async () => {
    const usb = facts('esp32s3');
    const uart = harness('esp32s3');
    expect((await uart.ok(C.READ_REG, encodeWords(usb.uartDevBufNo))).value & 0xff).toBe(0);
    const native = harness('esp32s3', { console: 'usb-jtag-serial' });
    expect((await native.ok(C.READ_REG, encodeWords(usb.uartDevBufNo))).value & 0xff).toBe(4);
  });

  it('keeps UARTDEV_BUF_NO where the chip revision puts it (the ESP32-C3 moved it at v1.1)', async () => {
    // esptool v4.12 targets/esp32c3.py:83 BSS_UART_DEV_ADDR = 0x3FCDF064 if rev < 101 else 0x3FCDF060
    const byRevision = async (major: number, minor: number) => {
      const h = harness('esp32c3', {
        console: 'usb-jtag-serial',
        silicon: { revision: { major, minor } },
      });
      const read = async (address: number) =>
        (await h.ok(C.READ_REG, encodeWords(address))).value & 0xff;
      return [await read(0x3fcd_f07c), await read(0x3fcd_f078)];
    };
    expect(await byRevision(0, 4)).toEqual([3, 0]);
    expect(await byRevision(1, 0)).toEqual([3, 0]);
    expect(await byRevision(1, 1)).toEqual([0, 3]);
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

  it.each(['esp32s3', 'esp32c3', 'esp32c6', 'esp32c5'] as const)(
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
