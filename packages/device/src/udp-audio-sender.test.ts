import { createDecipheriv } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import { afterEach, describe, expect, it } from 'vitest';
import {
  decodeHexLax,
  sealUdpAudioPacket,
  UdpAudioSender,
  udpAudioHeader,
} from './udp-audio-sender.js';

// What a server hello's `udp` member carries (docs/protocol.md §5): 32 hex characters each.
const KEY_HEX = '000102030405060708090a0b0c0d0e0f';
const NONCE_HEX = '01aa0000deadbeef0000000000000000';
const KEY = Buffer.from(KEY_HEX, 'hex');
const NONCE = Buffer.from(NONCE_HEX, 'hex');

/** The receiving side, written from the wire format alone. */
function open(packet: Buffer): {
  header: Buffer;
  length: number;
  ssrc: number;
  timestamp: number;
  sequence: number;
  payload: Buffer;
} {
  const header = packet.subarray(0, 16);
  const decipher = createDecipheriv('aes-128-ctr', KEY, header);
  const payload = Buffer.concat([decipher.update(packet.subarray(16)), decipher.final()]);
  return {
    header,
    length: header.readUInt16BE(2),
    ssrc: header.readUInt32BE(4),
    timestamp: header.readUInt32BE(8),
    sequence: header.readUInt32BE(12),
    payload,
  };
}

describe('udpAudioHeader', () => {
  it('keeps type, flags and ssrc from the nonce and writes length, timestamp and sequence big-endian', () => {
    const header = Buffer.from(udpAudioHeader(NONCE, 0x0102, 0x0a0b0c0d, 7));
    expect(header.toString('hex')).toBe('01aa0102deadbeef0a0b0c0d00000007');
  });
});

describe('sealUdpAudioPacket', () => {
  it('encrypts the payload with AES-128-CTR under the header', () => {
    const payload = Buffer.from('hello opus frame, longer than one AES block');
    const packet = Buffer.from(
      sealUdpAudioPacket(KEY, NONCE, { payload, timestamp: 60, sequence: 1 }),
    );
    expect(packet).toHaveLength(16 + payload.length);
    expect(packet.subarray(16).equals(payload)).toBe(false);
    const read = open(packet);
    expect(read.payload.equals(payload)).toBe(true);
    expect([read.length, read.ssrc, read.timestamp, read.sequence]).toEqual([
      payload.length,
      0xdeadbeef,
      60,
      1,
    ]);
  });
});

describe('decodeHexLax (DecodeHexString)', () => {
  it('reads hex digits of either case and anything else as 0', () => {
    expect([...decodeHexLax('0aFFzz1')]).toEqual([0x0a, 0xff, 0x00, 0x10]);
  });
});

describe('UdpAudioSender', () => {
  let receiver: Socket | undefined;
  afterEach(() => {
    receiver?.close();
    receiver = undefined;
  });

  it('sends sequence 1, 2, 3 ... to the server, each packet decrypting to its payload', async () => {
    receiver = createSocket('udp4');
    const packets: Buffer[] = [];
    const got = new Promise<void>((resolve) => {
      receiver?.on('message', (data) => {
        packets.push(data);
        if (packets.length === 3) resolve();
      });
    });
    await new Promise<void>((resolve) => receiver?.bind(0, '127.0.0.1', resolve));
    const port = receiver.address().port;
    const sender = await UdpAudioSender.open({
      server: '127.0.0.1',
      port,
      key: decodeHexLax(KEY_HEX),
      nonce: decodeHexLax(NONCE_HEX),
    });
    const frames = [Buffer.from([0x58, 1, 2, 3]), Buffer.from([0x58, 4, 5]), Buffer.from([0x58])];
    frames.forEach((frame, i) => {
      expect(sender.send(frame, i * 60)).toBe(true);
    });
    await got;
    sender.close();
    expect(sender.send(Buffer.from([1]), 0)).toBe(false);
    const read = packets.map(open).sort((a, b) => a.sequence - b.sequence);
    expect(read.map((r) => r.sequence)).toEqual([1, 2, 3]);
    expect(read.map((r) => r.timestamp)).toEqual([0, 60, 120]);
    expect(read.map((r) => r.payload.toString('hex'))).toEqual(
      frames.map((f) => f.toString('hex')),
    );
    for (const r of read) {
      expect(r.header[0]).toBe(0x01);
      expect(r.header[1]).toBe(0xaa);
      expect(r.ssrc).toBe(0xdeadbeef);
    }
    expect([sender.packets, sender.bytes, sender.sequence]).toEqual([3, 8, 3]);
  });

  it('refuses a key or nonce that is not 16 bytes', async () => {
    await expect(
      UdpAudioSender.open({ server: '127.0.0.1', port: 9, key: KEY.subarray(0, 8), nonce: NONCE }),
    ).rejects.toThrow(/16 bytes/);
  });
});
