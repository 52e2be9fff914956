import { createCipheriv } from 'node:crypto';
import dgram from 'node:dgram';
import { parseDeviceHello, parseServerHello } from '@xiaozhi-mcp/protocol';
import { until } from '@xiaozhi-mcp/test-kit';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { ServerError } from './errors.js';
import {
  answerUdpHello,
  inspectDatagram,
  type SequenceState,
  trackSequence,
  UdpAudioEndpoint,
  type UdpAudioEndpointOptions,
  type UdpAudioLogger,
  type UdpAudioPacket,
} from './udp-audio.js';

// Wire facts held here as literals (xiaozhi-esp32 main/protocols/mqtt_protocol.cc, docs/protocol.md §5):
// header `u8 type(=0x01), u8 flags, u16 payload_len, u32 ssrc, u32 timestamp, u32 sequence`, all
// big-endian, which is also the AES-128-CTR IV; the board numbers packets 1, 2, 3, ...

/** NIST SP 800-38A's AES-128 example key, handed out by a fake random source. */
const KEY_HEX = '2b7e151628aed2a6abf7158809cf4f3c';
const SSRC_HEX = 'deadbeef';
/** The nonce the endpoint must hand out for that ssrc: type 1, flags 0, len 0, ssrc, ts 0, seq 0. */
const NONCE_HEX = `01000000${SSRC_HEX}0000000000000000`;
/** `openssl enc -aes-128-ctr -K <KEY_HEX> -iv 01000012deadbeef000003e800000001` of the text. */
const KNOWN = {
  header: '01000012deadbeef000003e800000001',
  ciphertext: 'f85874eda889c917ee9f6f213d0b2119b9f5',
  plaintext: 'hello opus frame!!',
};
/** The same with sequence 0xffffffff: the counter carries from byte 15 into byte 11 (ts). */
const KNOWN_CARRY = {
  header: '01000014deadbeef000003e8ffffffff',
  ciphertext: 'ef404d40140d33b62fe450c8594e06487ce18601',
  plaintext: 'carry across block!!',
};

const endpoints: UdpAudioEndpoint[] = [];
const sockets: dgram.Socket[] = [];

afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.close();
  await Promise.all(endpoints.splice(0).map((e) => e.stop()));
});

interface Logged {
  readonly level: 'info' | 'warn' | 'error';
  readonly message: string;
}

function recordingLog(): { log: UdpAudioLogger; lines: Logged[] } {
  const lines: Logged[] = [];
  return {
    lines,
    log: {
      info: (_o, message) => lines.push({ level: 'info', message }),
      warn: (_o, message) => lines.push({ level: 'warn', message }),
      error: (_o, message) => lines.push({ level: 'error', message }),
    },
  };
}

async function start(options: Partial<UdpAudioEndpointOptions> = {}): Promise<UdpAudioEndpoint> {
  const endpoint = await UdpAudioEndpoint.start({ host: '127.0.0.1', port: 0, ...options });
  endpoints.push(endpoint);
  return endpoint;
}

/** A random source that gives these byte strings in turn (ssrc, then key, per open). */
function scripted(...hex: string[]): (size: number) => Uint8Array {
  return (size) => {
    const next = hex.shift();
    if (next === undefined) throw new Error('scripted random source ran out');
    const bytes = Buffer.from(next, 'hex');
    expect(bytes.length).toBe(size);
    return bytes;
  };
}

function client(): dgram.Socket {
  const socket = dgram.createSocket('udp4');
  sockets.push(socket);
  return socket;
}

/** Sends one datagram and waits until the endpoint has counted it (so order is ours). */
async function send(
  endpoint: UdpAudioEndpoint,
  socket: dgram.Socket,
  bytes: Uint8Array,
): Promise<void> {
  const before = endpoint.counters().datagrams;
  await new Promise<void>((resolve, reject) =>
    socket.send(bytes, endpoint.address.port, '127.0.0.1', (error) =>
      error ? reject(error) : resolve(),
    ),
  );
  await until(() => endpoint.counters().datagrams > before, { what: 'the datagram to arrive' });
}

/** A board's packet, built here from the nonce with node:crypto (not with the code under test). */
function boardPacket(
  keyHex: string,
  nonceHex: string,
  packet: { sequence: number; timestamp?: number; payload: Uint8Array; payloadLen?: number },
): Buffer {
  const header = Buffer.from(nonceHex, 'hex');
  header.writeUInt16BE(packet.payloadLen ?? packet.payload.length, 2);
  header.writeUInt32BE(packet.timestamp ?? 0, 8);
  header.writeUInt32BE(packet.sequence, 12);
  const cipher = createCipheriv('aes-128-ctr', Buffer.from(keyHex, 'hex'), header);
  return Buffer.concat([header, cipher.update(packet.payload), cipher.final()]);
}

const HEX32 = /^[0-9a-f]{32}$/;

describe('UdpAudioEndpoint sessions', () => {
  it('binds an OS-chosen port and hands out a fresh key and a nonce shaped like the header', async () => {
    const endpoint = await start();
    expect(endpoint.address.host).toBe('127.0.0.1');
    expect(endpoint.address.port).toBeGreaterThan(0);
    const seen = new Set<string>();
    for (let i = 0; i < 64; i++) {
      const channel = endpoint.open(`aa:bb:cc:dd:ee:${i.toString(16).padStart(2, '0')}`, `s${i}`);
      expect(channel.server).toBe('127.0.0.1');
      expect(channel.port).toBe(endpoint.address.port);
      expect(channel.key).toMatch(HEX32);
      expect(channel.nonce).toMatch(HEX32);
      // byte 0 type 0x01, byte 1 flags 0, bytes 2..3 length 0, bytes 8..15 timestamp and sequence 0
      expect(channel.nonce.slice(0, 8)).toBe('01000000');
      expect(channel.nonce.slice(16)).toBe('0000000000000000');
      seen.add(channel.nonce.slice(8, 16));
      seen.add(channel.key);
    }
    expect(seen.size).toBe(128); // every ssrc and key distinct
    expect(endpoint.sessions).toBe(64);
  });

  it('names publicHost as the server when given', async () => {
    const endpoint = await start({ publicHost: 'audio.example.test' });
    expect(endpoint.open('aa:bb:cc:dd:ee:01', 's1').server).toBe('audio.example.test');
  });

  it('uses the given random bytes as key and ssrc, and never repeats an ssrc in use', async () => {
    const endpoint = await start({
      random: scripted(SSRC_HEX, KEY_HEX, SSRC_HEX, '00000001', KEY_HEX),
    });
    expect(endpoint.open('aa:bb:cc:dd:ee:01', 's1')).toEqual({
      server: '127.0.0.1',
      port: endpoint.address.port,
      key: KEY_HEX,
      nonce: NONCE_HEX,
    });
    // The second session draws deadbeef again: taken, so the next draw is used.
    expect(endpoint.open('aa:bb:cc:dd:ee:02', 's2').nonce).toBe(
      '0100000000000001' + '0000000000000000',
    );
  });

  it('a device has one session at a time; stats stay readable after close', async () => {
    const endpoint = await start();
    endpoint.open('aa:bb:cc:dd:ee:01', 'first');
    endpoint.open('aa:bb:cc:dd:ee:01', 'second');
    expect(endpoint.sessions).toBe(1);
    expect(endpoint.stats('first')).toMatchObject({ open: false, sessionId: 'first' });
    expect(endpoint.stats('first')?.closedAt).toEqual(expect.any(String));
    expect(endpoint.statsForDevice('aa:bb:cc:dd:ee:01')).toMatchObject({
      sessionId: 'second',
      open: true,
      packets: 0,
      firstSequence: null,
      lastSequence: null,
    });
    expect(endpoint.statsForDevice('aa:bb:cc:dd:ee:01')).not.toHaveProperty('closedAt');
    const closed = endpoint.close('second');
    expect(closed).toMatchObject({ open: false, deviceId: 'aa:bb:cc:dd:ee:01' });
    expect(endpoint.close('second')).toBeUndefined();
    expect(endpoint.statsForDevice('aa:bb:cc:dd:ee:01')).toEqual(closed);
    expect(endpoint.stats('nope')).toBeUndefined();
    expect(endpoint.statsForDevice('nope')).toBeUndefined();
  });

  it('holds at most maxSessions open (closing the idlest) and maxClosedSessions closed', async () => {
    const { log, lines } = recordingLog();
    const endpoint = await start({ maxSessions: 3, maxClosedSessions: 2, log });
    const channels = [0, 1, 2].map((i) => endpoint.open(`dev${i}`, `s${i}`));
    // s0 gets a packet, so s1 is now the idlest.
    const c0 = channels[0];
    if (c0 === undefined) throw new Error('no channel');
    await send(
      endpoint,
      client(),
      boardPacket(c0.key, c0.nonce, { sequence: 1, payload: Buffer.from('x') }),
    );
    endpoint.open('dev3', 's3');
    expect(endpoint.sessions).toBe(3);
    expect(endpoint.stats('s1')?.open).toBe(false);
    expect(endpoint.stats('s0')?.open).toBe(true);
    expect(lines.some((l) => l.level === 'warn' && /too many audio sessions/.test(l.message))).toBe(
      true,
    );
    endpoint.open('dev4', 's4'); // closes s2
    endpoint.open('dev5', 's5'); // closes s0; s1 falls out of the kept closed sessions
    expect(endpoint.sessions).toBe(3);
    expect(endpoint.stats('s1')).toBeUndefined();
    expect(endpoint.statsForDevice('dev1')).toBeUndefined();
    expect(endpoint.stats('s2')?.open).toBe(false);
    expect(endpoint.stats('s0')).toMatchObject({ open: false, packets: 1 });
  });

  it('stop() ends every session, refuses new ones and is idempotent', async () => {
    const endpoint = await start();
    endpoint.open('aa:bb:cc:dd:ee:01', 's1');
    await Promise.all([endpoint.stop(), endpoint.stop()]);
    expect(endpoint.sessions).toBe(0);
    expect(endpoint.stats('s1')).toMatchObject({ open: false });
    expect(() => endpoint.open('aa:bb:cc:dd:ee:01', 's2')).toThrow(ServerError);
    // The port is free again.
    const again = await start({ port: endpoint.address.port });
    expect(again.address.port).toBe(endpoint.address.port);
  });

  it('a port in use is LISTEN_FAILED', async () => {
    const endpoint = await start();
    await expect(start({ port: endpoint.address.port })).rejects.toMatchObject({
      name: 'ServerError',
      code: 'LISTEN_FAILED',
    });
  });

  it('refuses nonsense limits as CONFIG_INVALID', async () => {
    await expect(start({ maxSessions: 0 })).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    await expect(start({ maxDatagramBytes: 15 })).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
    });
  });
});

describe('UdpAudioEndpoint packets', () => {
  it('decrypts known-answer packets: the header as received is the AES-128-CTR IV', async () => {
    const endpoint = await start({ random: scripted(SSRC_HEX, KEY_HEX) });
    endpoint.open('aa:bb:cc:dd:ee:01', 's1');
    const packets: UdpAudioPacket[] = [];
    endpoint.onPacket((p) => packets.push(p));
    const socket = client();
    for (const known of [KNOWN, KNOWN_CARRY]) {
      await send(endpoint, socket, Buffer.from(known.header + known.ciphertext, 'hex'));
    }
    expect(packets.map((p) => Buffer.from(p.payload).toString())).toEqual([
      KNOWN.plaintext,
      KNOWN_CARRY.plaintext,
    ]);
    expect(packets[0]).toMatchObject({
      deviceId: 'aa:bb:cc:dd:ee:01',
      sessionId: 's1',
      sequence: 1,
      timestamp: 1000,
      flags: 0,
      late: false,
      remote: { address: '127.0.0.1', port: socket.address().port },
    });
    expect(endpoint.stats('s1')).toMatchObject({
      packets: 2,
      bytes: KNOWN.plaintext.length + KNOWN_CARRY.plaintext.length,
      firstSequence: 1,
      lastSequence: 0xffffffff,
      gaps: 0xffffffff - 2,
      rejected: 0,
    });
  });

  it('counts sequence gaps, late and repeated packets, keeping first and last', async () => {
    const endpoint = await start();
    const channel = endpoint.open('aa:bb:cc:dd:ee:01', 's1');
    const socket = client();
    const late: boolean[] = [];
    endpoint.onPacket((p) => late.push(p.late));
    for (const sequence of [2, 3, 6, 5, 6, 7, 1]) {
      const payload = Buffer.from(`frame ${sequence}`);
      await send(endpoint, socket, boardPacket(channel.key, channel.nonce, { sequence, payload }));
    }
    expect(late).toEqual([false, false, false, true, true, false, true]);
    expect(endpoint.stats('s1')).toMatchObject({
      packets: 7,
      gaps: 3, // 1 (before the first), 4 and 5 (skipped by 6)
      outOfOrder: 3, // 5 after 6, 6 again, 1 after 7
      firstSequence: 2,
      lastSequence: 7,
      rejected: 0,
    });
  });

  it('tells sessions apart by ssrc and decrypts each with its own key', async () => {
    const endpoint = await start();
    const a = endpoint.open('aa:bb:cc:dd:ee:01', 'a');
    const b = endpoint.open('aa:bb:cc:dd:ee:02', 'b');
    const got: string[] = [];
    endpoint.onPacket((p) => got.push(`${p.sessionId}:${Buffer.from(p.payload).toString()}`));
    const socket = client();
    await send(
      endpoint,
      socket,
      boardPacket(a.key, a.nonce, { sequence: 1, payload: Buffer.from('A1') }),
    );
    await send(
      endpoint,
      socket,
      boardPacket(b.key, b.nonce, { sequence: 1, payload: Buffer.from('B1') }),
    );
    expect(got).toEqual(['a:A1', 'b:B1']);
  });

  it('drops bad datagrams without throwing, counting them for the session they name', async () => {
    const { log, lines } = recordingLog();
    const endpoint = await start({ log });
    const channel = endpoint.open('aa:bb:cc:dd:ee:01', 's1');
    const socket = client();
    const good = (sequence: number, payload = Buffer.from('opus')) =>
      boardPacket(channel.key, channel.nonce, { sequence, payload });
    const wrongType = good(1);
    wrongType[0] = 0x02;
    const unknown = Buffer.from(good(1));
    unknown.writeUInt32BE((unknown.readUInt32BE(4) + 1) >>> 0, 4);
    const badLength = boardPacket(channel.key, channel.nonce, {
      sequence: 1,
      payload: Buffer.from('opus'),
      payloadLen: 5,
    });
    const oversized = boardPacket(channel.key, channel.nonce, {
      sequence: 1,
      payload: Buffer.alloc(1500 - 16 + 1),
    });
    const justFits = boardPacket(channel.key, channel.nonce, {
      sequence: 2,
      payload: Buffer.alloc(1500 - 16),
    });
    for (const bytes of [
      Buffer.alloc(0),
      Buffer.from('0100', 'hex'),
      good(1).subarray(0, 15), // short, but names the ssrc
      wrongType,
      unknown,
      badLength,
      oversized,
    ]) {
      await send(endpoint, socket, bytes);
    }
    expect(endpoint.counters()).toEqual({
      datagrams: 7,
      accepted: 0,
      rejected: { oversized: 1, short: 3, type: 1, length: 1, 'unknown-ssrc': 1 },
    });
    expect(endpoint.stats('s1')).toMatchObject({ packets: 0, rejected: 4 });
    await send(endpoint, socket, good(1));
    await send(endpoint, socket, justFits);
    expect(endpoint.stats('s1')).toMatchObject({ packets: 2, bytes: 4 + 1484, lastSequence: 2 });
    expect(lines.filter((l) => l.level === 'error')).toEqual([]);
  });

  it('a packet for a closed session counts nowhere but the endpoint', async () => {
    const endpoint = await start();
    const channel = endpoint.open('aa:bb:cc:dd:ee:01', 's1');
    endpoint.close('s1');
    await send(
      endpoint,
      client(),
      boardPacket(channel.key, channel.nonce, { sequence: 1, payload: Buffer.from('late') }),
    );
    expect(endpoint.stats('s1')).toMatchObject({ packets: 0, rejected: 0, open: false });
    expect(endpoint.counters().rejected['unknown-ssrc']).toBe(1);
  });

  it('a listener that throws is logged, not thrown, and the others still run', async () => {
    const { log, lines } = recordingLog();
    const endpoint = await start({ log });
    const channel = endpoint.open('aa:bb:cc:dd:ee:01', 's1');
    let seen = 0;
    endpoint.onPacket(() => {
      throw new Error('listener bug');
    });
    const off = endpoint.onPacket(() => {
      seen += 1;
    });
    const socket = client();
    await send(
      endpoint,
      socket,
      boardPacket(channel.key, channel.nonce, { sequence: 1, payload: Buffer.from('x') }),
    );
    off();
    await send(
      endpoint,
      socket,
      boardPacket(channel.key, channel.nonce, { sequence: 2, payload: Buffer.from('y') }),
    );
    expect(seen).toBe(1);
    expect(endpoint.stats('s1')?.packets).toBe(2);
    expect(lines.filter((l) => l.level === 'error').map((l) => l.message)).toEqual([
      'a UDP audio packet listener threw',
      'a UDP audio packet listener threw',
    ]);
  });

  // A generous timeout: 300 round trips over loopback, ten times slower on a loaded CI host.
  it('random datagrams never throw, never open state, and are all counted', {
    timeout: 180_000,
  }, async () => {
    const { log, lines } = recordingLog();
    const endpoint = await start({ log, maxClosedSessions: 4 });
    const channel = endpoint.open('aa:bb:cc:dd:ee:01', 's1');
    const ssrc = Buffer.from(channel.nonce, 'hex').subarray(4, 8);
    const socket = client();
    // Raw bytes, and packets that look right (type 1, this session's ssrc or another) with
    // random lengths, length fields and sequence numbers.
    const datagram = fc.oneof(
      fc.uint8Array({ maxLength: 1600 }),
      fc
        .record({
          ours: fc.boolean(),
          flags: fc.integer({ min: 0, max: 255 }),
          len: fc.integer({ min: 0, max: 0xffff }),
          seq: fc.integer({ min: 0, max: 0xffffffff }),
          body: fc.uint8Array({ maxLength: 1600 }),
        })
        .map(({ ours, flags, len, seq, body }) => {
          const header = Buffer.alloc(16);
          header[0] = 0x01;
          header[1] = flags;
          header.writeUInt16BE(len, 2);
          if (ours) header.set(ssrc, 4);
          else header.writeUInt32BE(0x12345678, 4);
          header.writeUInt32BE(seq, 12);
          return Buffer.concat([header, body]);
        }),
    );
    await fc.assert(
      fc.asyncProperty(datagram, async (bytes) => {
        await send(endpoint, socket, bytes);
      }),
      { numRuns: 300 },
    );
    const counters = endpoint.counters();
    const rejected = Object.values(counters.rejected).reduce((a, b) => a + b, 0);
    expect(counters.datagrams).toBe(counters.accepted + rejected);
    expect(endpoint.sessions).toBe(1);
    const stats = endpoint.stats('s1');
    expect(stats?.packets).toBe(counters.accepted);
    expect(lines.filter((l) => l.level === 'error')).toEqual([]);
  });
});

describe('inspectDatagram and trackSequence (the decisions)', () => {
  it('inspectDatagram never throws, whatever the bytes', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 2000 }),
        fc.integer({ min: 16, max: 2000 }),
        (b, max) => {
          const verdict = inspectDatagram(b, max);
          expect(['reject', 'packet']).toContain(verdict.kind);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('reads the header fields at the firmware offsets', () => {
    const bytes = Buffer.from(`${KNOWN.header}${KNOWN.ciphertext}`, 'hex');
    expect(inspectDatagram(bytes, 1500)).toEqual({
      kind: 'packet',
      header: { flags: 0, payloadLength: 18, ssrc: 0xdeadbeef, timestamp: 1000, sequence: 1 },
    });
  });

  it('a first packet numbered 1 has no gap; the board never sends 0', () => {
    const state: SequenceState = { last: 0, first: null, gaps: 0, outOfOrder: 0 };
    expect(trackSequence(state, 1)).toBe(false);
    expect(trackSequence(state, 0)).toBe(true);
    expect(state).toEqual({ last: 1, first: 1, gaps: 0, outOfOrder: 1 });
  });
});

describe('answerUdpHello', () => {
  /** The MQTT build's hello, as the firmware writes it (transport before features). */
  const FIRMWARE_HELLO =
    '{"type":"hello","version":3,"transport":"udp","features":{"mcp":true},"audio_params":' +
    '{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}';

  it('opens a session and answers with the udp channel and 24 kHz Opus at the device frame duration', async () => {
    const endpoint = await start({ random: scripted(SSRC_HEX, KEY_HEX) });
    const answer = answerUdpHello(endpoint, 'aa:bb:cc:dd:ee:01', parseDeviceHello(FIRMWARE_HELLO));
    expect(answer.session_id).toMatch(
      /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    );
    const wire = JSON.stringify(answer);
    expect(wire).toBe(
      `{"type":"hello","transport":"udp","session_id":"${answer.session_id}",` +
        '"audio_params":{"format":"opus","sample_rate":24000,"channels":1,"frame_duration":60},' +
        `"udp":{"server":"127.0.0.1","port":${endpoint.address.port},"key":"${KEY_HEX}","nonce":"${NONCE_HEX}"}}`,
    );
    expect(parseServerHello(wire)).toEqual(answer);
    expect(endpoint.stats(answer.session_id)).toMatchObject({
      deviceId: 'aa:bb:cc:dd:ee:01',
      open: true,
    });
  });

  it('echoes another frame duration and takes a given session id', async () => {
    const endpoint = await start();
    const hello = parseDeviceHello(
      FIRMWARE_HELLO.replace('"frame_duration":60', '"frame_duration":20'),
    );
    const answer = answerUdpHello(endpoint, 'aa:bb:cc:dd:ee:01', hello, { sessionId: 'S-1' });
    expect(answer.session_id).toBe('S-1');
    expect(answer.audio_params?.frame_duration).toBe(20);
    expect(endpoint.stats('S-1')?.open).toBe(true);
  });

  it('refuses a hello that does not ask for udp, opening nothing', async () => {
    const endpoint = await start();
    const hello = parseDeviceHello(FIRMWARE_HELLO.replace('"udp"', '"websocket"'));
    expect(() => answerUdpHello(endpoint, 'aa:bb:cc:dd:ee:01', hello)).toThrow(
      expect.objectContaining({ code: 'SESSION_FAILED' }),
    );
    expect(endpoint.sessions).toBe(0);
  });
});
