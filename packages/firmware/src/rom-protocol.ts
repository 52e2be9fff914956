/**
 * The serial download protocol of the ESP ROM bootloader and of esptool's flasher stub, as
 * esptool's "Serial Protocol" documentation describes it. Packets travel SLIP-framed
 * (see `slip.ts`); this module encodes and decodes what is inside a frame. A request is
 * `00 op size:u16 checksum:u32 data`; a response is `01 op size:u16 value:u32 data`, where
 * `data` ends with status bytes: 4 from the ROM of every ESP32-family chip (status, error, two
 * reserved), 2 from the flasher stub and from the ESP8266 ROM. esptool's targets say so
 * (`STATUS_BYTES_LENGTH = 4` in `ESP32ROM`, `esptool/targets/esp32.py`, inherited by every later
 * ROM class; `STATUS_BYTES_LENGTH = 2  # same as ESP8266, different to ESP32 ROM` in each stub
 * class), and esptool's `check_command` (`esptool/loader.py`) reads the status right after the
 * expected payload ("ROM bootloaders of the chips (except ESP8266) return another 2 bytes, which
 * are reserved for future use"). The host side and the virtual board's ROM emulator share this
 * code, so both ends agree byte for byte.
 */
import { FirmwareError } from './errors.js';

export const ROM_COMMANDS = {
  FLASH_BEGIN: 0x02,
  FLASH_DATA: 0x03,
  FLASH_END: 0x04,
  MEM_BEGIN: 0x05,
  MEM_END: 0x06,
  MEM_DATA: 0x07,
  SYNC: 0x08,
  WRITE_REG: 0x09,
  READ_REG: 0x0a,
  SPI_SET_PARAMS: 0x0b,
  SPI_ATTACH: 0x0d,
  // esptool's ESP_CMDS: "ROM only, much slower than the stub flash read" (`read_flash --no-stub`).
  READ_FLASH_SLOW: 0x0e,
  CHANGE_BAUDRATE: 0x0f,
  FLASH_DEFL_BEGIN: 0x10,
  FLASH_DEFL_DATA: 0x11,
  FLASH_DEFL_END: 0x12,
  SPI_FLASH_MD5: 0x13,
  GET_SECURITY_INFO: 0x14,
  // The stub's own commands; the ROM answers them as invalid.
  ERASE_FLASH: 0xd0,
  ERASE_REGION: 0xd1,
  READ_FLASH: 0xd2,
  RUN_USER_CODE: 0xd3,
} as const;

export type RomCommandName = keyof typeof ROM_COMMANDS;

/** The name of a command id, or undefined for an id neither the ROM nor the stub has. */
export function romCommandName(op: number): RomCommandName | undefined {
  for (const [name, id] of Object.entries(ROM_COMMANDS))
    if (id === op) return name as RomCommandName;
  return undefined;
}

/** The ROM loader's error byte (the one after a non-zero status byte). */
export const ROM_ERRORS = {
  INVALID_MESSAGE: 0x05,
  FAILED_TO_ACT: 0x06,
  INVALID_CRC: 0x07,
  FLASH_WRITE: 0x08,
  FLASH_READ: 0x09,
  READ_LENGTH: 0x0a,
  DEFLATE: 0x0b,
} as const;

/** The flasher stub's error byte; entirely different from the ROM's. */
export const STUB_ERRORS = {
  BAD_DATA_LEN: 0xc0,
  BAD_DATA_CHECKSUM: 0xc1,
  BAD_BLOCKSIZE: 0xc2,
  INVALID_COMMAND: 0xc3,
  FAILED_SPI_OP: 0xc4,
  FAILED_SPI_UNLOCK: 0xc5,
  NOT_IN_FLASH_MODE: 0xc6,
  INFLATE_ERROR: 0xc7,
  NOT_ENOUGH_DATA: 0xc8,
  TOO_MUCH_DATA: 0xc9,
  CMD_NOT_IMPLEMENTED: 0xff,
} as const;

/** Describes an error byte for a message (`0x07 (invalid CRC in message)`). */
export function romErrorText(error: number, stub: boolean): string {
  const rom: Record<number, string> = {
    5: 'received message is invalid',
    6: 'failed to act on received message',
    7: 'invalid CRC in message',
    8: 'flash write error',
    9: 'flash read error',
    10: 'flash read length error',
    11: 'deflate error',
  };
  const stubTexts: Record<number, string> = {
    192: 'bad data length',
    193: 'bad data checksum',
    194: 'bad block size',
    195: 'invalid command',
    196: 'SPI operation failed',
    197: 'SPI unlock failed',
    198: 'not in flash mode',
    199: 'inflate error',
    200: 'not enough data',
    201: 'too much data',
    255: 'command not implemented',
  };
  const text = (stub ? stubTexts : rom)[error];
  const hex = `0x${error.toString(16).padStart(2, '0')}`;
  return text === undefined ? hex : `${hex} (${text})`;
}

export const REQUEST_DIRECTION = 0x00;
export const RESPONSE_DIRECTION = 0x01;
export const PACKET_HEADER_SIZE = 8;
/** Data blocks (MEM_DATA, FLASH_DATA, FLASH_DEFL_DATA) start with size, seq, 0, 0. */
export const DATA_BLOCK_HEADER_SIZE = 16;
export const CHECKSUM_SEED = 0xef;
/** What the ROM answers a SYNC with in the value field; the stub answers 0. */
export const ROM_SYNC_VALUE = 0x20120707;
/** The stub's first packet, sent when it starts running. */
export const STUB_HELLO = Uint8Array.from([0x4f, 0x48, 0x41, 0x49]); // "OHAI"

/** The checksum of a data block's payload: 0xEF XOR every byte. */
export function romChecksum(data: Uint8Array, seed: number = CHECKSUM_SEED): number {
  let state = seed;
  for (const byte of data) state ^= byte;
  return state & 0xff;
}

/** SYNC's data: 07 07 12 20, then 32 × 0x55 (lets the ROM measure the baud rate). */
export function syncPayload(): Uint8Array {
  const data = new Uint8Array(36).fill(0x55);
  data.set([0x07, 0x07, 0x12, 0x20]);
  return data;
}

export function isSyncPayload(data: Uint8Array): boolean {
  if (data.length !== 36) return false;
  if (data[0] !== 0x07 || data[1] !== 0x07 || data[2] !== 0x12 || data[3] !== 0x20) return false;
  for (let i = 4; i < 36; i++) if (data[i] !== 0x55) return false;
  return true;
}

/** Little-endian u32 words, for command parameters. */
export function encodeWords(...words: readonly number[]): Uint8Array {
  const out = new Uint8Array(words.length * 4);
  const view = new DataView(out.buffer);
  words.forEach((word, i) => {
    view.setUint32(i * 4, word >>> 0, true);
  });
  return out;
}

/** The first `count` little-endian u32 words of `data`, or undefined when it is shorter. */
export function decodeWords(data: Uint8Array, count: number): number[] | undefined {
  if (data.length < count * 4) return undefined;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  return Array.from({ length: count }, (_, i) => view.getUint32(i * 4, true));
}

/** A plain Uint8Array copy (a Buffer's `slice` is a view, and tests compare types). */
function copy(bytes: Uint8Array): Uint8Array {
  return new Uint8Array(bytes);
}

function malformed(message: string): FirmwareError {
  return new FirmwareError('PACKET_INVALID', `serial protocol: ${message}`);
}

export interface RomRequest {
  readonly command: number;
  /** The size field; equal to `data.length` in a well-formed request. */
  readonly size: number;
  readonly checksum: number;
  readonly data: Uint8Array;
}

export function encodeRequest(
  command: number,
  data: Uint8Array = new Uint8Array(0),
  checksum = 0,
): Uint8Array {
  const packet = new Uint8Array(PACKET_HEADER_SIZE + data.length);
  const view = new DataView(packet.buffer);
  view.setUint8(0, REQUEST_DIRECTION);
  view.setUint8(1, command);
  view.setUint16(2, data.length, true);
  view.setUint32(4, checksum >>> 0, true);
  packet.set(data, PACKET_HEADER_SIZE);
  return packet;
}

/** Throws PACKET_INVALID for a packet shorter than a header or not a request. */
export function decodeRequest(packet: Uint8Array): RomRequest {
  if (packet.length < PACKET_HEADER_SIZE)
    throw malformed(`request of ${packet.length} bytes is shorter than its 8-byte header`);
  const view = new DataView(packet.buffer, packet.byteOffset, packet.byteLength);
  if (view.getUint8(0) !== REQUEST_DIRECTION)
    throw malformed(`direction byte 0x${view.getUint8(0).toString(16)} is not a request (0x00)`);
  return {
    command: view.getUint8(1),
    size: view.getUint16(2, true),
    checksum: view.getUint32(4, true),
    data: copy(packet.subarray(PACKET_HEADER_SIZE)),
  };
}

export interface RomResponse {
  readonly command: number;
  readonly value: number;
  /** Payload and status bytes. */
  readonly data: Uint8Array;
}

export function encodeResponse(command: number, value: number, data: Uint8Array): Uint8Array {
  const packet = new Uint8Array(PACKET_HEADER_SIZE + data.length);
  const view = new DataView(packet.buffer);
  view.setUint8(0, RESPONSE_DIRECTION);
  view.setUint8(1, command);
  view.setUint16(2, data.length, true);
  view.setUint32(4, value >>> 0, true);
  packet.set(data, PACKET_HEADER_SIZE);
  return packet;
}

/** Throws PACKET_INVALID for a packet shorter than a header or not a response. */
export function decodeResponse(packet: Uint8Array): RomResponse {
  if (packet.length < PACKET_HEADER_SIZE)
    throw malformed(`response of ${packet.length} bytes is shorter than its 8-byte header`);
  const view = new DataView(packet.buffer, packet.byteOffset, packet.byteLength);
  if (view.getUint8(0) !== RESPONSE_DIRECTION)
    throw malformed(`direction byte 0x${view.getUint8(0).toString(16)} is not a response (0x01)`);
  return {
    command: view.getUint8(1),
    value: view.getUint32(4, true),
    data: copy(packet.subarray(PACKET_HEADER_SIZE)),
  };
}

/** Status bytes: success `00 00`, failure `01 error`; an ESP32-family ROM adds 2 reserved bytes. */
export function encodeStatus(error: number | undefined, length: 2 | 4 = 2): Uint8Array {
  const status = new Uint8Array(length);
  if (error !== undefined) {
    status[0] = 1;
    status[1] = error;
  }
  return status;
}

export interface ResponseStatus {
  readonly ok: boolean;
  /** The error byte when not ok. */
  readonly error: number;
  /** The data before the status bytes. */
  readonly payload: Uint8Array;
}

/** Splits a response's data into payload and status (the last `statusLength` bytes). */
export function readStatus(data: Uint8Array, statusLength: 2 | 4 = 2): ResponseStatus {
  if (data.length < statusLength)
    throw malformed(`response data of ${data.length} bytes has no ${statusLength} status bytes`);
  const at = data.length - statusLength;
  const ok = data[at] === 0;
  return { ok, error: ok ? 0 : (data[at + 1] ?? 0), payload: copy(data.subarray(0, at)) };
}

export interface DataBlock {
  readonly size: number;
  readonly seq: number;
  readonly payload: Uint8Array;
}

/** A data command's body (size, seq, 0, 0, payload) and the checksum its header carries. */
export function encodeDataBlock(
  seq: number,
  payload: Uint8Array,
): { data: Uint8Array; checksum: number } {
  const data = new Uint8Array(DATA_BLOCK_HEADER_SIZE + payload.length);
  data.set(encodeWords(payload.length, seq, 0, 0));
  data.set(payload, DATA_BLOCK_HEADER_SIZE);
  return { data, checksum: romChecksum(payload) };
}

/** Undefined when `data` is shorter than the block header. */
export function decodeDataBlock(data: Uint8Array): DataBlock | undefined {
  const words = decodeWords(data, 2);
  if (words === undefined || data.length < DATA_BLOCK_HEADER_SIZE) return undefined;
  const [size = 0, seq = 0] = words;
  return { size, seq, payload: copy(data.subarray(DATA_BLOCK_HEADER_SIZE)) };
}
