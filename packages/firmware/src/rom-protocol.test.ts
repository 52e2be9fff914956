import { describe, expect, it } from 'vitest';
import { FirmwareError } from './errors.js';
import {
  decodeDataBlock,
  decodeRequest,
  decodeResponse,
  decodeWords,
  encodeDataBlock,
  encodeRequest,
  encodeResponse,
  encodeStatus,
  encodeWords,
  isSyncPayload,
  ROM_COMMANDS,
  readStatus,
  romChecksum,
  romCommandName,
  romErrorText,
  syncPayload,
} from './rom-protocol.js';
import { slipEncode } from './slip.js';

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString('hex');

describe('ROM serial protocol', () => {
  it('has the command ids esptool uses', () => {
    expect(ROM_COMMANDS).toMatchObject({
      SYNC: 0x08,
      READ_REG: 0x0a,
      WRITE_REG: 0x09,
      SPI_ATTACH: 0x0d,
      SPI_SET_PARAMS: 0x0b,
      READ_FLASH_SLOW: 0x0e,
      MEM_BEGIN: 0x05,
      MEM_DATA: 0x07,
      MEM_END: 0x06,
      FLASH_BEGIN: 0x02,
      FLASH_DATA: 0x03,
      FLASH_END: 0x04,
      FLASH_DEFL_BEGIN: 0x10,
      FLASH_DEFL_DATA: 0x11,
      FLASH_DEFL_END: 0x12,
      SPI_FLASH_MD5: 0x13,
      GET_SECURITY_INFO: 0x14,
      CHANGE_BAUDRATE: 0x0f,
      READ_FLASH: 0xd2,
      ERASE_FLASH: 0xd0,
      ERASE_REGION: 0xd1,
      RUN_USER_CODE: 0xd3,
    });
    expect(romCommandName(0x13)).toBe('SPI_FLASH_MD5');
    expect(romCommandName(0x0e)).toBe('READ_FLASH_SLOW');
    expect(romCommandName(0x42)).toBeUndefined();
  });

  it('encodes SYNC byte for byte as esptool writes it on the wire', () => {
    const wire = slipEncode(encodeRequest(ROM_COMMANDS.SYNC, syncPayload()));
    expect(hex(wire)).toBe(`c0000824000000000007071220${'55'.repeat(32)}c0`);
    expect(isSyncPayload(syncPayload())).toBe(true);
    expect(isSyncPayload(new Uint8Array(36))).toBe(false);
  });

  it('decodes an ESP32 ROM READ_REG reply (value field, 4 status bytes)', () => {
    const response = decodeResponse(Buffer.from('010a0400831df00000000000', 'hex'));
    expect(response.command).toBe(0x0a);
    expect(response.value).toBe(0x00f01d83);
    expect(readStatus(response.data, 4)).toEqual({
      ok: true,
      error: 0,
      payload: new Uint8Array(0),
    });
  });

  it('round-trips requests and responses', () => {
    const data = encodeWords(0x40001000);
    const request = decodeRequest(encodeRequest(ROM_COMMANDS.READ_REG, data, 0x12345678));
    expect(request).toEqual({ command: 0x0a, size: 4, checksum: 0x12345678, data });
    const payload = Uint8Array.from([9, 8, 7]);
    const body = Uint8Array.from([...payload, ...encodeStatus(undefined)]);
    const response = decodeResponse(encodeResponse(0x13, 0, body));
    expect(readStatus(response.data).payload).toEqual(payload);
  });

  it('reports failure status and error texts', () => {
    const status = readStatus(Uint8Array.from([...encodeStatus(0x07)]));
    expect(status).toMatchObject({ ok: false, error: 0x07 });
    expect([...encodeStatus(0x05, 4)]).toEqual([1, 5, 0, 0]);
    expect(romErrorText(0x07, false)).toBe('0x07 (invalid CRC in message)');
    expect(romErrorText(0xc1, true)).toBe('0xc1 (bad data checksum)');
    expect(romErrorText(0x42, true)).toBe('0x42');
  });

  it('computes the 0xEF XOR checksum of a data block payload', () => {
    expect(romChecksum(new Uint8Array(0))).toBe(0xef);
    expect(romChecksum(Uint8Array.from([0xef]))).toBe(0);
    const { data, checksum } = encodeDataBlock(3, Uint8Array.from([1, 2, 3]));
    expect(checksum).toBe(0xef ^ 1 ^ 2 ^ 3);
    expect(decodeDataBlock(data)).toEqual({ size: 3, seq: 3, payload: Uint8Array.from([1, 2, 3]) });
    expect(decodeDataBlock(new Uint8Array(8))).toBeUndefined();
  });

  it('reads little-endian parameter words', () => {
    expect(decodeWords(encodeWords(1, 0xffffffff, 0x1000), 3)).toEqual([1, 0xffffffff, 0x1000]);
    expect(decodeWords(new Uint8Array(7), 2)).toBeUndefined();
  });

  it('refuses packets that are too short or have the wrong direction', () => {
    expect(() => decodeRequest(new Uint8Array(4))).toThrow(FirmwareError);
    expect(() => decodeRequest(encodeResponse(8, 0, new Uint8Array(2)))).toThrow(/not a request/);
    expect(() => decodeResponse(encodeRequest(8))).toThrow(/not a response/);
    expect(() => readStatus(new Uint8Array(1))).toThrow(/status bytes/);
  });
});
