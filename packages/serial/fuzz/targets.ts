// The serial package's hostile-input target, against the real thing: a real Rfc2217Server on
// 127.0.0.1:0 sharing a fake port (a binding that takes every write and echoes nothing back
// unless asked), attacked with Telnet/RFC 2217 byte streams over TCP. After every case: nothing
// uncaught in this process, the server ended the connection once we ended ours, answered our
// SIGNATURE request or dropped us before that, holds none of the client's bytes, and a fresh,
// well-behaved client connects, negotiates and gets the signature. The protocol's bytes are
// literals here from the RFCs (854/855 Telnet, 2217 COM-PORT), not the server's codec.
import { connect, type Socket } from 'node:net';
import {
  type AnyTarget,
  CaseFailure,
  cutFractions,
  erase,
  type FuzzTarget,
  ProcessWatch,
  splitAtCuts,
} from '@xiaozhi-mcp/fuzz-kit';
import { type ResolvedPort, Rfc2217Server, type SerialBinding } from '@xiaozhi-mcp/serial';
import fc from 'fast-check';

// RFC 854: the Telnet command bytes.
const IAC = 255;
const SB = 250;
const SE = 240;
const WILL = 251;
const WONT = 252;
const DO = 253;
const DONT = 254;
// RFC 856/857/858 and RFC 2217's option numbers.
const BINARY = 0;
const ECHO = 1;
const SGA = 3;
const COM_PORT = 44;
/** What pyserial's client sends as it opens (`serial/rfc2217.py` `open`): DO ECHO, WILL/DO SGA, WILL/DO COM-PORT. */
const PYSERIAL_OPEN: readonly number[] = [
  IAC,
  DO,
  ECHO,
  IAC,
  WILL,
  SGA,
  IAC,
  DO,
  SGA,
  IAC,
  WILL,
  COM_PORT,
  IAC,
  DO,
  COM_PORT,
];
/** RFC 2217: the server's answer codes are the client's plus 100; SIGNATURE is 0. */
const SIGNATURE_ANSWER = 100;

const LABEL = 'fuzz:board';
/** What the server answers a SIGNATURE request with (server.ts `serveSignature`, held as a literal). */
const SIGNATURE = `xiaozhi-mcp port serve port=${LABEL} kind=usb-uart`;
/** How long anything the server owes (an answer, a close) may take before it is a stall. */
const ANSWER_TIMEOUT_MS = 5000;
/** The most client bytes the server may hold for the port (server.ts lets a client go at 1 MiB). */
const HELD_MAX_BYTES = 1024 * 1024 + 64 * 1024;

// --- a fake port -------------------------------------------------------------------------------------

/** A serial device behind a fake binding: writes are taken at once; its reads wait for `emit`. */
class FakeDevice {
  readonly path = '/dev/ttyFUZZ0';
  written = 0;
  /** Each write takes this long (a slow port: the client's bytes are held meanwhile). */
  writeMs = 0;
  /** While set, writes wait for it (a port that takes nothing). */
  gate: Promise<void> | undefined;
  #pending: ((r: { buffer: Buffer; bytesRead: number }) => void) | undefined;
  #pendingReject: ((e: Error) => void) | undefined;
  #pendingBuffer: { buffer: Buffer; offset: number; length: number } | undefined;

  binding(): SerialBinding {
    const device = this;
    const binding = {
      list: async () => [{ path: device.path }],
      async open(options: { path: string; baudRate: number }) {
        let open = true;
        return {
          openOptions: options,
          get isOpen() {
            return open;
          },
          async close() {
            open = false;
            const reject = device.#pendingReject;
            device.#pending = undefined;
            device.#pendingReject = undefined;
            reject?.(Object.assign(new Error('Canceled'), { canceled: true }));
          },
          read(buffer: Buffer, offset: number, length: number) {
            return new Promise<{ buffer: Buffer; bytesRead: number }>((resolve, reject) => {
              device.#pending = resolve;
              device.#pendingReject = reject;
              device.#pendingBuffer = { buffer, offset, length };
            });
          },
          async write(buffer: Buffer) {
            if (device.writeMs > 0)
              await new Promise((resolve) => setTimeout(resolve, device.writeMs));
            device.written += buffer.length;
            // The chip answers some of what it is sent (a sync): a line back, with a 0xFF in it.
            if (buffer.includes(0x55)) device.emit(Buffer.from([0x0d, 0x0a, 0xff, 0x55, 0xff]));
          },
          async update() {},
          async set() {},
          async get() {
            return { cts: true, dsr: false, dcd: false };
          },
          async getBaudRate() {
            return { baudRate: 115200 };
          },
          async flush() {},
          async drain() {},
        };
      },
    };
    return binding as unknown as SerialBinding;
  }

  emit(bytes: Buffer): void {
    const resolve = this.#pending;
    const target = this.#pendingBuffer;
    if (resolve === undefined || target === undefined) return;
    this.#pending = undefined;
    this.#pendingReject = undefined;
    const n = Math.min(target.length, bytes.length);
    bytes.copy(target.buffer, target.offset, 0, n);
    resolve({ buffer: target.buffer, bytesRead: n });
  }

  port(): ResolvedPort {
    return {
      binding: this.binding(),
      path: this.path,
      info: { path: this.path, kind: 'usb-uart' },
      label: LABEL,
      present: async () => true,
      refind: async () => ({ path: this.path, info: { path: this.path, kind: 'usb-uart' } }),
      dispose() {},
    } as unknown as ResolvedPort;
  }
}

// --- arbitraries ----------------------------------------------------------------------------------

/** IAC SB option payload [IAC SE]: the payload's 255s doubled or not, the end there or not. */
function subnegotiation(
  option: number,
  payload: readonly number[],
  doubled: boolean,
  terminated: boolean,
): number[] {
  const body = doubled ? payload.flatMap((b) => (b === IAC ? [IAC, IAC] : [b])) : [...payload];
  return [IAC, SB, option, ...body, ...(terminated ? [IAC, SE] : [])];
}

const byte = fc.integer({ min: 0, max: 255 });

/** One piece of a client's stream. */
const segment: fc.Arbitrary<readonly number[]> = fc.oneof(
  {
    // pyserial's negotiation (serial/rfc2217.py `open`), so what follows is read as RFC 2217.
    weight: 2,
    arbitrary: fc.constant(PYSERIAL_OPEN),
  },
  {
    weight: 3,
    arbitrary: fc
      .tuple(
        fc.constantFrom(WILL, WONT, DO, DONT),
        fc.oneof(fc.constantFrom(BINARY, ECHO, SGA, COM_PORT, 24, 31, 255), byte),
      )
      .map(([verb, option]) => [IAC, verb, option]),
  },
  {
    // COM-PORT commands (RFC 2217 codes 0-12, and others) with values of any length.
    weight: 6,
    arbitrary: fc
      .record({
        code: fc.oneof(
          { weight: 4, arbitrary: fc.integer({ min: 0, max: 12 }) },
          fc.constantFrom(100, 101, 105, 112, 255),
          byte,
        ),
        value: fc.oneof(
          { weight: 3, arbitrary: fc.array(byte, { maxLength: 4 }) },
          {
            weight: 1,
            arbitrary: fc.constantFrom(
              [0, 0, 0, 0],
              [0xff, 0xff, 0xff, 0xff],
              [0x7f, 0xff, 0xff, 0xff],
            ),
          },
          { weight: 1, arbitrary: fc.array(byte, { maxLength: 64 }) },
        ),
        escape: fc.oneof({ weight: 5, arbitrary: fc.constant(true) }, fc.constant(false)),
        terminated: fc.oneof({ weight: 8, arbitrary: fc.constant(true) }, fc.constant(false)),
      })
      .map((c) => subnegotiation(COM_PORT, [c.code, ...c.value], c.escape, c.terminated)),
  },
  {
    // SET-CONTROL (code 5) with DTR/RTS/BREAK values: resets a recognizer may play.
    weight: 3,
    arbitrary: fc
      .array(fc.integer({ min: 0, max: 19 }), { minLength: 1, maxLength: 6 })
      .map((values) => values.flatMap((v) => subnegotiation(COM_PORT, [5, v], true, true))),
  },
  {
    // A subnegotiation of another option, of any length (past the decoder's 4 KiB cap), ended or not.
    weight: 2,
    arbitrary: fc
      .record({
        option: byte,
        size: fc.oneof(fc.integer({ min: 0, max: 64 }), fc.constantFrom(4095, 4096, 4097, 70_000)),
        fill: byte,
        terminated: fc.boolean(),
      })
      .map((s) =>
        subnegotiation(s.option, new Array<number>(s.size).fill(s.fill), true, s.terminated),
      ),
  },
  {
    // Serial data with 255s, doubled as RFC 854 says or not.
    weight: 4,
    arbitrary: fc
      .tuple(
        fc.array(fc.oneof(byte, fc.constant(IAC), fc.constant(0x55)), { maxLength: 200 }),
        fc.boolean(),
      )
      .map(([data, doubled]) =>
        doubled ? data.flatMap((b) => (b === IAC ? [IAC, IAC] : [b])) : data,
      ),
  },
  {
    // Bulk data: up to past the server's 256 KiB hold mark.
    weight: 1,
    arbitrary: fc.constantFrom(4096, 65_536, 300_000).map((n) => new Array<number>(n).fill(0x41)),
  },
  { weight: 2, arbitrary: fc.array(byte, { minLength: 1, maxLength: 32 }) },
  {
    // A lone IAC, IAC SB, IAC SB option: cut off anywhere.
    weight: 1,
    arbitrary: fc.constantFrom(
      [IAC],
      [IAC, SB],
      [IAC, SB, COM_PORT],
      [IAC, SB, COM_PORT, 0, IAC],
      [IAC, SE],
      [IAC, 241],
    ),
  },
);

export interface Rfc2217Case {
  readonly segments: readonly (readonly number[])[];
  /**
   * Milliseconds each write to the port takes (0 mostly; a slow port holds the client's bytes),
   * or 'stuck': the port takes nothing until the client has gone.
   */
  readonly writeMs: number | 'stuck';
  /** Cut points (fractions of the stream) where the bytes go out as separate writes. */
  readonly cuts: readonly number[];
}

export const rfc2217Case: fc.Arbitrary<Rfc2217Case> = fc.record({
  segments: fc.array(segment, { minLength: 1, maxLength: 8 }),
  writeMs: fc.oneof(
    { weight: 12, arbitrary: fc.constant(0) },
    { weight: 2, arbitrary: fc.constantFrom(1, 20) },
    { weight: 1, arbitrary: fc.constant('stuck' as const) },
  ),
  cuts: cutFractions,
});

// --- a client that speaks bytes -------------------------------------------------------------------

function indexOf(haystack: Buffer, needle: Buffer): number {
  return haystack.indexOf(needle);
}

class RawClient {
  received = Buffer.alloc(0);
  readonly closed: Promise<void>;
  #waiters = new Set<() => void>();

  private constructor(readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      // Kept small: only what a signature answer needs to be found.
      this.received = Buffer.concat([this.received, chunk]).subarray(-4096);
      for (const waiter of this.#waiters) waiter();
    });
    this.closed = new Promise((resolve) => socket.once('close', () => resolve()));
    socket.on('close', () => {
      for (const waiter of this.#waiters) waiter();
    });
    socket.on('error', () => {});
  }

  static open(port: number): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const socket = connect({ host: '127.0.0.1', port }, () => resolve(new RawClient(socket)));
      socket.once('error', reject);
    });
  }

  /** Resolves 'found' once `needle` arrived, 'closed' when the connection ended first, or 'timeout'. */
  waitFor(needle: Buffer, ms = ANSWER_TIMEOUT_MS): Promise<'found' | 'closed' | 'timeout'> {
    return new Promise((resolve) => {
      const check = () => {
        if (indexOf(this.received, needle) >= 0) finish('found');
        else if (this.socket.destroyed || this.socket.readableEnded) finish('closed');
      };
      const finish = (outcome: 'found' | 'closed' | 'timeout') => {
        clearTimeout(timer);
        this.#waiters.delete(check);
        resolve(outcome);
      };
      const timer = setTimeout(() => finish('timeout'), ms);
      this.#waiters.add(check);
      check();
    });
  }
}

/** Ends whatever state the stream left the server's Telnet reader in (any of RFC 854's), then asks for the signature. */
const RESYNC_AND_ASK = Buffer.from([IAC, SE, IAC, SE, IAC, SB, COM_PORT, 0, IAC, SE]);
const SIGNATURE_REPLY = Buffer.from([
  IAC,
  SB,
  COM_PORT,
  SIGNATURE_ANSWER,
  ...Buffer.from(SIGNATURE),
  IAC,
  SE,
]);

// --- the world ------------------------------------------------------------------------------------

export class SerialFuzzWorld {
  private constructor(
    readonly server: Rfc2217Server,
    readonly device: FakeDevice,
    readonly watch: ProcessWatch,
  ) {}

  static async start(watch = new ProcessWatch().start()): Promise<SerialFuzzWorld> {
    const device = new FakeDevice();
    const server = await Rfc2217Server.start({
      port: device.port(),
      host: '127.0.0.1',
      listenPort: 0,
      negotiationTimeoutMs: 3000,
    });
    return new SerialFuzzWorld(server, device, watch);
  }

  get port(): number {
    return this.server.address.port;
  }

  /** The last client has gone, and nothing of its is held. */
  async checkReleased(): Promise<void> {
    for (let i = 0; i < ANSWER_TIMEOUT_MS / 10 && this.server.client !== undefined; i++)
      await new Promise((resolve) => setTimeout(resolve, 10));
    if (this.server.client !== undefined)
      throw new CaseFailure(`the server still holds the client ${this.server.client}`);
    if (this.server.heldBytes !== 0)
      throw new CaseFailure(
        `the server holds ${this.server.heldBytes} bytes of a client that left`,
      );
  }

  /** A well-behaved client connects, negotiates as pyserial does, and gets the signature. */
  async checkLegitimate(): Promise<void> {
    const client = await RawClient.open(this.port);
    try {
      client.socket.write(Buffer.from(PYSERIAL_OPEN));
      client.socket.write(Buffer.from([IAC, SB, COM_PORT, 0, IAC, SE]));
      const outcome = await client.waitFor(SIGNATURE_REPLY);
      if (outcome !== 'found')
        throw new CaseFailure(
          `a legitimate client got no signature (${outcome}): ${client.received.subarray(0, 120).toString('latin1')}`,
        );
    } finally {
      client.socket.destroy();
      await client.closed;
    }
    await this.checkReleased();
  }

  async close(): Promise<void> {
    await this.server.close();
    this.watch.stop();
  }
}

// --- the target -----------------------------------------------------------------------------------

export function describeRfc2217Case(c: Rfc2217Case): string {
  const total = c.segments.reduce((n, s) => n + s.length, 0);
  return `${c.writeMs === 'stuck' ? 'a stuck port, ' : c.writeMs > 0 ? `a port taking ${c.writeMs} ms a write, ` : ''}${c.segments.length} segments (${total} bytes: ${c.segments.map((s) => Buffer.from(s.slice(0, 6)).toString('hex')).join(' ')}…), ${c.cuts.length} cuts`;
}

/**
 * rfc2217: a hostile client's Telnet/RFC 2217 stream over a real TCP connection, cut at random
 * points. The process lives; held bytes stay under the bound; a SIGNATURE request after the
 * stream is answered or the client is dropped within 5 s; after our FIN the server ends the
 * connection within 5 s and holds nothing; a legitimate client then gets the signature.
 */
export function rfc2217Target(world: SerialFuzzWorld): FuzzTarget<Rfc2217Case> {
  return {
    name: 'rfc2217',
    summary:
      'Telnet/RFC 2217 streams over TCP to the RFC 2217 server; it lives, answers or drops, holds nothing, serves the next client',
    arbitrary: rfc2217Case,
    describe: describeRfc2217Case,
    async run(c) {
      let unstick = () => {};
      world.device.writeMs = c.writeMs === 'stuck' ? 0 : c.writeMs;
      if (c.writeMs === 'stuck')
        world.device.gate = new Promise((resolve) => {
          unstick = resolve;
        });
      const client = await RawClient.open(world.port);
      let ms = 0;
      try {
        const bytes = Buffer.concat(c.segments.map((s) => Buffer.from(s)));
        for (const chunk of splitAtCuts(bytes, c.cuts)) {
          if (client.socket.destroyed) break;
          client.socket.write(chunk);
          await new Promise((resolve) => setImmediate(resolve));
          if (world.server.heldBytes > HELD_MAX_BYTES)
            throw new CaseFailure(`the server holds ${world.server.heldBytes} bytes of the client`);
        }
        if (!client.socket.destroyed) client.socket.write(RESYNC_AND_ASK);
        // A stuck port answers nothing queued behind the client's bytes: only the end is owed.
        const answered = c.writeMs === 'stuck' ? 'skipped' : await client.waitFor(SIGNATURE_REPLY);
        if (answered === 'timeout')
          throw new CaseFailure(
            `a stall: no signature and no close within ${ANSWER_TIMEOUT_MS} ms of the request`,
          );
        const started = performance.now();
        client.socket.end();
        const closed = await Promise.race([
          client.closed.then(() => true),
          new Promise<boolean>((resolve) => setTimeout(() => resolve(false), ANSWER_TIMEOUT_MS)),
        ]);
        ms = performance.now() - started;
        if (!closed)
          throw new CaseFailure(
            `a stall: the server kept the connection ${ANSWER_TIMEOUT_MS} ms after our FIN`,
          );
      } finally {
        client.socket.destroy();
        world.device.gate = undefined;
        unstick();
      }
      await world.checkReleased();
      world.device.writeMs = 0;
      await world.checkLegitimate();
      return ms;
    },
  };
}

/** Every serial target, with its share of a fuzz run. */
export function serialTargets(world: SerialFuzzWorld): { target: AnyTarget; share: number }[] {
  return [{ target: erase(rfc2217Target(world)), share: 1 }];
}
