/**
 * The security guard before a write, as esptool's `write_flash` keeps it (`esptool/cmds.py`):
 * after connecting, the chip's security eFuses and its revision are read (the registers esptool's
 * targets read, `esptool/targets/<chip>.py`; the ROM's GET_SECURITY_INFO, `esptool/loader.py`
 * `get_security_info`, where the ROM has it), and before any byte is written a write the board
 * would not survive is refused:
 *
 * - Secure Boot on: nothing below 0x8000 (the bootloader; "Secure Boot detected, writing to flash
 *   regions < 0x8000 is disabled to protect the bootloader");
 * - flash encryption on with encrypted download disabled (release mode): no plaintext at all
 *   ("Flashing plaintext binary may brick your device!"): the bootloader would decrypt it into
 *   garbage and boot-loop, after an MD5 check that passes;
 * - an image whose header asks for another chip revision (`min_rev_full`..`max_rev_full`, or the
 *   legacy `min_rev`): the bootloader would refuse it, and the board time out at boot.
 *
 * esptool's `--force` skips these checks; this toolkit has no such switch.
 *
 * Also here: the ESP32-S3's stub start under Secure Boot, whose ROM does not run a stub from
 * MEM_END (esptool's `run_stub`, `secure_boot_workflow`).
 */
import {
  type ChipInfo,
  type ChipRevision,
  type ChipSecurity,
  chipRevisionMismatch,
  chipRevisionNumber,
  chipSecurityRegisters,
  decodeChipSecurity,
  encodeWords,
  IMAGE_MAGIC,
  PARTITION_TABLE_MAX_SIZE,
  PARTITION_TABLE_OFFSET,
  PARTITION_TYPE_APP,
  ROM_COMMANDS,
  readImageHeader,
  readPartitionTable,
} from '@xiaozhi-mcp/firmware';
import { type ESPLoader, getStubJsonByChipName } from 'esptool-js';
import type { FlashPart } from './compressed-write.js';

/** Below this, with Secure Boot on, esptool writes nothing: the bootloader's region. */
export const SECURE_BOOT_PROTECTED_END = 0x8000;

/** GET_SECURITY_INFO's flag bits, the ROM's own (esptool's `SECURITY_INFO_FLAG_MAP`). */
const SECURE_BOOT_EN = 1 << 0;

function hex(value: number): string {
  return `0x${value.toString(16)}`;
}

function popcount(value: number): number {
  let count = 0;
  for (let v = value >>> 0; v !== 0; v >>>= 1) count += v & 1;
  return count;
}

/**
 * The chip's security features, read as esptool reads them before it writes: the eFuse
 * registers of `get_secure_boot_enabled`, `get_flash_encryption_enabled` and
 * `get_encrypted_download_disabled`, and where the ROM has GET_SECURITY_INFO (every chip after
 * the ESP32) its flags and `flash_crypt_cnt` too, esptool-js having read them while it detected
 * the chip. The two say the same on silicon; either one saying so is enough.
 */
export async function readChipSecurity(
  loader: ESPLoader,
  chip: ChipInfo,
  revision: ChipRevision,
): Promise<ChipSecurity> {
  const words = new Map<number, number>();
  for (const address of chipSecurityRegisters(chip.rom.efuse))
    words.set(address, (await loader.readReg(address)) >>> 0);
  const efuse = decodeChipSecurity(chip.rom.efuse, words, revision);
  if (chip.rom.securityInfo === 'none') return efuse;
  const info = await loader.getSecurityInfo();
  return {
    ...efuse,
    secureBoot: efuse.secureBoot || (info.flags & SECURE_BOOT_EN) !== 0,
    flashEncryption: efuse.flashEncryption || popcount(info.flashCryptCnt) % 2 === 1,
  };
}

/** An image header in a part: where it starts in flash, and which image it is. */
interface HeaderIn {
  readonly part: number;
  readonly at: number;
  readonly what: string;
  readonly bytes: Uint8Array;
}

const BOOTLOADER_OFFSETS = [0x0, 0x1000, 0x2000];

/**
 * The images a part holds: a bootloader (at 0x0, 0x1000 or 0x2000 of flash) or an app (at a
 * 64 KiB boundary) that starts the part, and in a part written from 0x0 (a merged image) its
 * bootloader and every app its partition table at 0x8000 names.
 */
function imageHeaders(parts: readonly FlashPart[]): HeaderIn[] {
  const found: HeaderIn[] = [];
  parts.forEach((part, i) => {
    const add = (offsetInPart: number, what: string) => {
      if (part.data[offsetInPart] !== IMAGE_MAGIC) return;
      const at = part.offset + offsetInPart;
      if (found.some((h) => h.part === i && h.at === at)) return;
      found.push({ part: i, at, what, bytes: part.data.subarray(offsetInPart) });
    };
    if (BOOTLOADER_OFFSETS.includes(part.offset)) add(0, 'its bootloader');
    else if (part.offset % 0x10000 === 0) add(0, 'its app');
    if (part.offset !== 0) return;
    for (const at of BOOTLOADER_OFFSETS) if (at > 0) add(at, 'its bootloader');
    const table = part.data.subarray(
      PARTITION_TABLE_OFFSET,
      PARTITION_TABLE_OFFSET + PARTITION_TABLE_MAX_SIZE,
    );
    if (table.length === 0) return;
    try {
      for (const p of readPartitionTable(table).partitions) {
        if (p.type === PARTITION_TYPE_APP && p.offset < part.data.length) add(p.offset, p.label);
      }
    } catch {
      // No partition table in it: nothing more to look at.
    }
  });
  return found;
}

/** What the connected board is, for {@link writeRefusal}. */
export interface GuardedChip {
  readonly chip: string;
  readonly revision: ChipRevision;
  readonly security: ChipSecurity;
}

/**
 * Why `parts` must not be written to this board, as one message naming the reason and what to
 * do; undefined when they may be. `port` names the board.
 */
export function writeRefusal(
  parts: readonly FlashPart[],
  chip: GuardedChip,
  port: string,
): string | undefined {
  const where = (i: number) => {
    const part = parts[i];
    return `part ${i + 1} at ${hex(part?.offset ?? 0)}`;
  };
  const { security } = chip;
  if (security.secureBoot) {
    const low = parts.findIndex((p) => p.offset < SECURE_BOOT_PROTECTED_END && p.data.length > 0);
    if (low >= 0)
      return `refusing to flash ${port}: Secure Boot is enabled: the ROM refuses a bootloader written at 0x0..0x7fff (${where(low)} starts there); flash only the app and partition table at their offsets (or use espsecure)`;
  }
  if (security.flashEncryption && security.encryptedDownloadDisabled) {
    return `refusing to flash ${port}: flash encryption is on and encrypted download is disabled: a plaintext image would boot-loop (its MD5 check would still pass); update this board over the air (OTA), which encrypts what it writes`;
  }
  for (const header of imageHeaders(parts)) {
    let mismatch: string | undefined;
    try {
      mismatch = chipRevisionMismatch(readImageHeader(header.bytes), chip.revision);
    } catch {
      continue; // not an image after all (esptool skips a file it cannot load as one)
    }
    if (mismatch !== undefined)
      return `refusing to flash ${port}: ${mismatch} (${where(header.part)}, ${header.what} at ${hex(header.at)}); use a build for this ${chip.chip}'s revision`;
  }
  return undefined;
}

/**
 * esptool's `run_stub` on an ESP32-S3 with Secure Boot (`secure_boot_workflow`, `loader.py`): the
 * stub is uploaded as usual, but MEM_END is told no entry point; the ROM's flash-read function
 * pointer (`hook`) is pointed at the stub's entry, READ_FLASH_SLOW calls it (no reply: the stub
 * answers with `OHAI`), and the pointer is put back.
 */
export async function runStubUnderSecureBoot(
  loader: ESPLoader,
  hook: number,
  revision: ChipRevision,
): Promise<void> {
  const stub = await getStubJsonByChipName(loader.chip.CHIP_NAME, chipRevisionNumber(revision));
  if (stub === undefined)
    throw new Error(`esptool has no flasher stub for ${loader.chip.CHIP_NAME}`);
  const segments: [Uint8Array, number][] = [
    [stub.decodedText, stub.text_start],
    [stub.decodedData, stub.data_start],
  ];
  for (const [data, offset] of segments) {
    if (data.length === 0) continue;
    const blocks = Math.ceil(data.length / loader.ESP_RAM_BLOCK);
    await loader.memBegin(data.length, blocks, loader.ESP_RAM_BLOCK, offset);
    for (let seq = 0; seq < blocks; seq++) {
      const from = seq * loader.ESP_RAM_BLOCK;
      await loader.memBlock(data.slice(from, from + loader.ESP_RAM_BLOCK), seq);
    }
  }
  // MEM_END without an entry point: the upload is done, nothing runs yet.
  await loader.memFinish(0);
  const stored = (await loader.readReg(hook)) >>> 0;
  await loader.writeReg(hook, stub.entry);
  await loader.command(ROM_COMMANDS.READ_FLASH_SLOW, encodeWords(0, 0), 0, false);
  const hello = await loader.transport.read(loader.DEFAULT_TIMEOUT);
  if (String.fromCharCode(...hello) !== 'OHAI')
    throw new Error(
      `the flasher stub did not start through the ROM's flash-read hook (got ${JSON.stringify(String.fromCharCode(...hello))})`,
    );
  loader.IS_STUB = true;
  await loader.writeReg(hook, stored);
}
