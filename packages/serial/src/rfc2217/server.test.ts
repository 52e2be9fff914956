import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { SerialError } from '../errors.js';
import { lockPath } from '../lock.js';
import type { PortKind } from '../port-info.js';
import type { ResolvedPort } from '../port-provider.js';
import { resolvePort } from '../resolve.js';
import type { SerialBinding } from '../web-serial.js';
import { isLoopbackHost, Rfc2217Server } from './server.js';

// The protocol's bytes as the RFCs give them, held here as literals: the server's codec is
// not used to check the server.
const IAC = 255;
const SB = 250;
const SE = 240;
const WILL = 251;
const WONT = 252;
const DO = 253;
const DONT = 254;
const ECHO = 1;
const SGA = 3;
const COM_PORT = 44;

/** IAC SB 44 code value... IAC SE, a 255 in the value doubled (RFC 855). */
function sb(code: number, ...value: number[]): number[] {
  return [
    IAC,
    SB,
    COM_PORT,
    code,
    ...value.flatMap((b) => (b === IAC ? [IAC, IAC] : [b])),
    IAC,
    SE,
  ];
}

// SET-CONTROL values (RFC 2217).
const DTR_ON = 8;
const DTR_OFF = 9;
const RTS_ON = 11;
const RTS_OFF = 12;

type Event = string;

/**
 * A serial device behind a fake binding: it records, in order, what reaches it (`set d,r`,
 * `brk`, `update`, `write <hex>`, `flush`, `drain`), can echo, hold writes, send bytes, and vanish.
 */
class FakeDevice {
  readonly path = '/dev/ttyFAKE0';
  readonly events: Event[] = [];
  readonly written: number[] = [];
  echo = false;
  present = true;
  opens = 0;
  closes = 0;
  /** While set, writes wait for it. */
  gate: Promise<void> | undefined;
  #incoming: Buffer[] = [];
  #pending:
    | {
        buffer: Buffer;
        offset: number;
        length: number;
        resolve: (r: { buffer: Buffer; bytesRead: number }) => void;
        reject: (e: Error) => void;
      }
    | undefined;
  #open = false;

  get sets(): string[] {
    return this.events.filter((e) => e.startsWith('set ')).map((e) => e.slice(4));
  }

  /** Bytes from the device to the host. */
  emit(bytes: Buffer): void {
    this.#incoming.push(bytes);
    this.#deliver();
  }

  /** Unplugged: the pending read fails (not cancelled), opening fails with ENOENT. */
  vanish(): void {
    this.present = false;
    const pending = this.#pending;
    this.#pending = undefined;
    pending?.reject(new Error('EIO: the device is gone'));
  }

  #deliver(): void {
    const pending = this.#pending;
    const next = this.#incoming[0];
    if (pending === undefined || next === undefined) return;
    const n = Math.min(pending.length, next.length);
    next.copy(pending.buffer, pending.offset, 0, n);
    if (n === next.length) this.#incoming.shift();
    else this.#incoming[0] = next.subarray(n);
    this.#pending = undefined;
    pending.resolve({ buffer: pending.buffer, bytesRead: n });
  }

  binding(): SerialBinding {
    const device = this;
    const binding = {
      list: async () => [{ path: device.path }],
      async open(options: { path: string; baudRate: number; hupcl?: boolean }) {
        if (!device.present || options.path !== device.path)
          throw new Error(`Error: No such file or directory, cannot open ${options.path}`);
        device.opens++;
        device.events.push(`open ${options.baudRate} hupcl=${String(options.hupcl)}`);
        device.#open = true;
        const port = {
          openOptions: options,
          get isOpen() {
            return device.#open;
          },
          async close() {
            device.#open = false;
            device.closes++;
            const pending = device.#pending;
            device.#pending = undefined;
            pending?.reject(Object.assign(new Error('Canceled'), { canceled: true }));
          },
          read(buffer: Buffer, offset: number, length: number) {
            return new Promise<{ buffer: Buffer; bytesRead: number }>((resolve, reject) => {
              if (!device.present) {
                reject(new Error('EIO: the device is gone'));
                return;
              }
              device.#pending = { buffer, offset, length, resolve, reject };
              device.#deliver();
            });
          },
          async write(buffer: Buffer) {
            if (device.gate !== undefined) await device.gate;
            if (!device.present) throw new Error('EIO: the device is gone');
            device.events.push(`write ${Buffer.from(buffer).toString('hex')}`);
            device.written.push(...buffer);
            if (device.echo) device.emit(Buffer.from(buffer));
          },
          async update(options: { baudRate: number }) {
            device.events.push(`update ${options.baudRate}`);
          },
          async set(flags: { dtr?: boolean; rts?: boolean; brk?: boolean }) {
            if (!device.present) throw new Error('EIO: the device is gone');
            device.events.push(`set ${Number(flags.dtr)},${Number(flags.rts)}`);
            if (flags.brk === true) device.events.push('brk');
          },
          async get() {
            return { cts: true, dsr: false, dcd: false };
          },
          async getBaudRate() {
            return { baudRate: 115200 };
          },
          async flush() {
            device.events.push('flush');
            // tcflush: what the device sent and nobody read yet is gone.
            device.#incoming = [];
          },
          async drain() {
            device.events.push('drain');
          },
        };
        return port;
      },
    };
    return binding as unknown as SerialBinding;
  }

  port(
    kind: PortKind = 'usb-uart',
    extra: Partial<ResolvedPort> = {},
  ): ResolvedPort & {
    disposed: number;
  } {
    const port = {
      binding: this.binding(),
      path: this.path,
      info: { path: this.path, kind },
      label: 'fake:board',
      disposed: 0,
      present: async () => this.present,
      refind: async (timeoutMs: number) => {
        await until(() => this.present, { what: 'fake:board to come back', timeoutMs }).catch(
          () => {
            throw new SerialError('PORT_NOT_FOUND', 'fake:board did not come back');
          },
        );
        return { path: this.path, info: { path: this.path, kind } };
      },
      dispose() {
        port.disposed++;
      },
      ...extra,
    };
    return port;
  }
}

/** A TCP client that speaks bytes: what it sends and receives, as numbers. */
class RawClient {
  readonly received: number[] = [];
  readonly closed: Promise<void>;
  #waiters = new Set<() => void>();

  private constructor(readonly socket: Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.received.push(...chunk);
      for (const waiter of this.#waiters) waiter();
    });
    this.closed = new Promise((resolve) => socket.on('close', () => resolve()));
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

  send(bytes: readonly number[] | Buffer): void {
    this.socket.write(Buffer.from(bytes));
  }

  /** Negotiates as pyserial's client does, and waits for the answer it needs (DO COM-PORT). */
  async negotiate(): Promise<void> {
    this.send([
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
    ]);
    await this.waitFor([IAC, DO, COM_PORT]);
  }

  /** Resolves with the index after `sequence`'s first occurrence from `from` on. */
  waitFor(sequence: readonly number[], from = 0, timeoutMs = 15_000): Promise<number> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const at = indexOf(this.received, sequence, from);
        if (at >= 0) {
          done();
          resolve(at + sequence.length);
        } else if (this.socket.destroyed) {
          done();
          reject(
            new Error(
              `closed before ${JSON.stringify(sequence)}; got ${JSON.stringify(this.received)}`,
            ),
          );
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`no ${JSON.stringify(sequence)} in ${JSON.stringify(this.received)}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        this.#waiters.delete(check);
      };
      this.#waiters.add(check);
      check();
    });
  }

  count(sequence: readonly number[]): number {
    let n = 0;
    for (
      let at = indexOf(this.received, sequence, 0);
      at >= 0;
      at = indexOf(this.received, sequence, at + 1)
    )
      n++;
    return n;
  }

  close(): Promise<void> {
    this.socket.end();
    return this.closed;
  }
}

function indexOf(haystack: readonly number[], needle: readonly number[], from: number): number {
  outer: for (let i = from; i + needle.length <= haystack.length; i++) {
    for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

const servers: Rfc2217Server[] = [];
const clients: RawClient[] = [];
afterEach(async () => {
  for (const client of clients.splice(0)) client.socket.destroy();
  for (const server of servers.splice(0)) await server.close();
});

async function serve(
  device: FakeDevice,
  options: { kind?: PortKind; negotiationTimeoutMs?: number; refindMs?: number } = {},
) {
  const log: string[] = [];
  const port = device.port(options.kind);
  const server = await Rfc2217Server.start({
    port,
    listenPort: 0,
    log: (line) => log.push(line),
    ...(options.negotiationTimeoutMs === undefined
      ? {}
      : { negotiationTimeoutMs: options.negotiationTimeoutMs }),
    ...(options.refindMs === undefined ? {} : { refindMs: options.refindMs }),
  });
  servers.push(server);
  return { server, log, port };
}

async function client(server: Rfc2217Server): Promise<RawClient> {
  const c = await RawClient.open(server.address.port);
  clients.push(c);
  return c;
}

describe('Rfc2217Server: opening and listening', () => {
  it('opens the port safely, listens on loopback with an OS-chosen port, and says where', async () => {
    const device = new FakeDevice();
    const { server } = await serve(device);
    expect(server.address.host).toBe('127.0.0.1');
    expect(server.address.port).toBeGreaterThan(0);
    expect(server.url).toBe(`rfc2217://127.0.0.1:${server.address.port}`);
    // hupcl off, then both lines released first thing (port-open.ts openSafely).
    expect(device.events.slice(0, 2)).toEqual(['open 115200 hupcl=false', 'set 0,0']);
  });

  it('warns when listening where other hosts reach it', async () => {
    const device = new FakeDevice();
    const log: string[] = [];
    const server = await Rfc2217Server.start({
      port: device.port(),
      host: '0.0.0.0',
      listenPort: 0,
      log: (line) => log.push(line),
    });
    servers.push(server);
    expect(log.join('\n')).toMatch(
      /^warning: listening on 0\.0\.0\.0, reachable from other hosts/m,
    );
  });

  it('isLoopbackHost', () => {
    for (const host of ['127.0.0.1', '127.1.2.3', '::1', 'localhost', 'LOCALHOST'])
      expect(isLoopbackHost(host), host).toBe(true);
    for (const host of ['0.0.0.0', '::', '192.168.1.20', '10.0.0.1', 'example.com'])
      expect(isLoopbackHost(host), host).toBe(false);
  });

  it('refuses an address in use, and closes the port it opened', async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const taken = (blocker.address() as { port: number }).port;
    const device = new FakeDevice();
    try {
      await expect(Rfc2217Server.start({ port: device.port(), listenPort: taken })).rejects.toThrow(
        `cannot listen on 127.0.0.1:${taken}: the address is in use`,
      );
      expect(device.closes).toBe(device.opens);
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });

  it('refuses a listen port out of range before opening anything', async () => {
    const device = new FakeDevice();
    await expect(
      Rfc2217Server.start({ port: device.port(), listenPort: 70_000 }),
    ).rejects.toMatchObject({
      code: 'OPTION_INVALID',
    });
    expect(device.opens).toBe(0);
  });

  it('close() closes the client and the port but leaves the ResolvedPort to its owner', async () => {
    const device = new FakeDevice();
    const { server, port } = await serve(device);
    const c = await client(server);
    await c.negotiate();
    await server.close();
    await c.closed;
    await server.closed;
    expect(device.closes).toBe(1);
    expect(port.disposed).toBe(0);
  });

  it('an aborted signal closes it', async () => {
    const device = new FakeDevice();
    const abort = new AbortController();
    const server = await Rfc2217Server.start({
      port: device.port(),
      listenPort: 0,
      signal: abort.signal,
    });
    servers.push(server);
    abort.abort();
    await server.closed;
    expect(device.closes).toBe(1);
  });
});

describe('Rfc2217Server: Telnet negotiation', () => {
  it("answers pyserial's requests once each, and refuses options it does not know", async () => {
    const device = new FakeDevice();
    const { server } = await serve(device);
    const c = await client(server);
    c.send([IAC, DO, ECHO, IAC, WILL, SGA, IAC, DO, SGA, IAC, WILL, COM_PORT, IAC, DO, COM_PORT]);
    // Terminal type (24) asked of us, window size (31) offered: neither is ours.
    c.send([IAC, DO, 24, IAC, WILL, 31]);
    await c.waitFor([IAC, DONT, 31]);
    const replies = [
      [IAC, WILL, ECHO],
      [IAC, DO, SGA],
      [IAC, WILL, SGA],
      [IAC, DO, COM_PORT],
      [IAC, WILL, COM_PORT],
      [IAC, WONT, 24],
      [IAC, DONT, 31],
    ];
    for (const reply of replies) expect(c.count(reply), JSON.stringify(reply)).toBe(1);
    // Asked again: the options are already in that state, so nothing is answered (RFC 1143).
    c.send([IAC, DO, ECHO, IAC, WILL, SGA, IAC, DO, SGA, IAC, WILL, COM_PORT, IAC, DO, COM_PORT]);
    c.send(sb(0)); // and a signature request, to know the above was read
    await c.waitFor([IAC, SB, COM_PORT, 100]);
    for (const reply of replies.slice(0, 5)) expect(c.count(reply), JSON.stringify(reply)).toBe(1);
    // Turned off, each side answers once.
    c.send([IAC, DONT, ECHO, IAC, DONT, ECHO]);
    c.send(sb(0));
    await c.waitFor([IAC, SB, COM_PORT, 100], c.received.length);
    expect(c.count([IAC, WONT, ECHO])).toBe(1);
  });

  it('tells a client that never negotiates what this is, then lets it go', async () => {
    const device = new FakeDevice();
    const { server, log } = await serve(device, { negotiationTimeoutMs: 200 });
    const c = await client(server);
    c.send(Buffer.from('hello\r\n'));
    await c.closed;
    expect(Buffer.from(c.received).toString()).toMatch(
      /^xiaozhi-mcp port serve: fake:board is shared over RFC 2217 \(Telnet COM-PORT-OPTION\), which this client did not negotiate within 0\.2 s/,
    );
    await until(() => log.some((l) => l.includes('let go')), { what: 'the log' });
    // The next client is served.
    const next = await client(server);
    await next.negotiate();
  });
});

describe('Rfc2217Server: COM-PORT-OPTION', () => {
  it('answers SIGNATURE with the port and its kind', async () => {
    const device = new FakeDevice();
    const { server } = await serve(device, { kind: 'usb-serial-jtag' });
    const c = await client(server);
    await c.negotiate();
    c.send(sb(0));
    const text = 'xiaozhi-mcp port serve port=fake:board kind=usb-serial-jtag';
    await c.waitFor([IAC, SB, COM_PORT, 100, ...Buffer.from(text), IAC, SE]);
  });

  it('changes the baud rate in place and answers the rate in effect; 8N1 is all it does', async () => {
    const device = new FakeDevice();
    const { server } = await serve(device);
    const c = await client(server);
    await c.negotiate();
    // 460800 = 0x00070800, network order.
    c.send(sb(1, 0x00, 0x07, 0x08, 0x00));
    await c.waitFor([IAC, SB, COM_PORT, 101, 0x00, 0x07, 0x08, 0x00, IAC, SE]);
    expect(device.events).toContain('update 460800');
    expect(device.opens).toBe(1); // never by reopening
    // 0 asks for the rate in effect.
    const from = c.received.length;
    c.send(sb(1, 0, 0, 0, 0));
    await c.waitFor([IAC, SB, COM_PORT, 101, 0x00, 0x07, 0x08, 0x00, IAC, SE], from);
    // Data size 7, even parity, 2 stop bits: answered with 8, none, 1 (refused).
    c.send([...sb(2, 7), ...sb(3, 3), ...sb(4, 2)]);
    await c.waitFor([...sb(102, 8), ...sb(103, 1), ...sb(104, 1)]);
    // As pyserial's open asks: 8, none, 1 are answered as they were sent.
    const again = c.received.length;
    c.send([...sb(2, 8), ...sb(3, 1), ...sb(4, 1)]);
    await c.waitFor([...sb(102, 8), ...sb(103, 1), ...sb(104, 1)], again);
  });

  it('answers flow control with none (RTS is the reset line), and break and purge as applied', async () => {
    const device = new FakeDevice();
    const { server } = await serve(device);
    const c = await client(server);
    await c.negotiate();
    c.send(sb(5, 3)); // hardware flow control: refused, none in effect
    await c.waitFor(sb(105, 1));
    c.send(sb(5, 1));
    await c.waitFor(sb(105, 1), c.received.length - 7);
    c.send(sb(5, 5)); // break on
    await c.waitFor(sb(105, 5));
    expect(device.events).toContain('brk');
    c.send(sb(5, 4)); // which break state?
    await c.waitFor(sb(105, 5), indexOf(c.received, sb(105, 5), 0) + 1);
    c.send(sb(5, 6));
    await c.waitFor(sb(105, 6));
    c.send(sb(12, 3)); // purge both
    await c.waitFor(sb(112, 3));
    expect(device.events).toContain('flush');
    c.send([...sb(12, 1), ...sb(12, 2)]);
    await c.waitFor([...sb(112, 1), ...sb(112, 2)]);
  });

  it("drops the port's input on PURGE-DATA 1 as pyserial's server does, after what was written before it", async () => {
    // pyserial's `reset_input_buffer()` sends PURGE-DATA 1; its PortManager answers it with
    // `serial.reset_input_buffer()` (tcflush TCIFLUSH). esptool (Python) purges so before each
    // command: an answer left in the tty would be read as the next command's.
    const device = new FakeDevice();
    const { server } = await serve(device);
    const c = await client(server);
    await c.negotiate();
    c.send([0x61, 0x62]);
    c.send(sb(12, 1));
    await c.waitFor(sb(112, 1));
    const tail = device.events.slice(device.events.indexOf('write 6162'));
    // Written, drained (nothing sent is lost), then flushed; answered after.
    expect(tail).toEqual(['write 6162', 'drain', 'flush']);
  });

  it('passes data both ways with 255 doubled on the wire', async () => {
    const device = new FakeDevice();
    const { server } = await serve(device);
    const c = await client(server);
    await c.negotiate();
    c.send([0x01, IAC, IAC, 0x02]);
    await until(() => device.written.length >= 3, { what: 'the bytes at the device' });
    expect(device.written).toEqual([0x01, 0xff, 0x02]);
    device.emit(Buffer.from([0xff, 0x03, 0xff]));
    await c.waitFor([IAC, IAC, 0x03, IAC, IAC]);
  });
});

describe('Rfc2217Server: DTR and RTS', () => {
  it('answers each line command at once and passes plain changes in order', async () => {
    const device = new FakeDevice();
    const { server, log } = await serve(device);
    const c = await client(server);
    await c.negotiate();
    const base = device.sets.length;
    // A BOOT click, then a hard reset (esptool HardReset), one line at a time.
    for (const value of [DTR_ON, DTR_OFF, RTS_ON, RTS_OFF]) {
      const from = c.received.length;
      c.send(sb(5, value));
      await c.waitFor(sb(105, value), from);
    }
    await until(() => device.sets.length >= base + 4, { what: 'the line changes' });
    expect(device.sets.slice(base)).toEqual(['1,0', '0,0', '0,1', '0,0']);
    await until(() => log.some((l) => /hard reset/.test(l)), { what: 'the hard reset in the log' });
    expect(log.join('\n')).toMatch(/BOOT click \(a DTR pulse\) passed through/);
  });

  it('plays ClassicReset sent one line at a time as one local download reset, bytes after it', async () => {
    const device = new FakeDevice();
    const { server, log } = await serve(device);
    const c = await client(server);
    await c.negotiate();
    const base = device.sets.length;
    const start = device.events.length;
    // D0|R1|W0.1|D1|R0|W0.05|D0, each answered before the next is sent (as pyserial waits);
    // then esptool's SYNC-like bytes at once.
    for (const value of [DTR_OFF, RTS_ON, DTR_ON, RTS_OFF, DTR_OFF]) {
      const from = c.received.length;
      c.send(sb(5, value));
      await c.waitFor(sb(105, value), from);
    }
    c.send([0xc0, 0x00, 0x08, 0xc0]);
    await until(() => device.written.length >= 4, { what: 'the bytes after the reset' });
    const lines = device.events
      .slice(start)
      .filter((e) => e.startsWith('set') || e.startsWith('write'));
    // D0 and R1 pass; D1 is held and R0 after it starts the local reset (esptool
    // UnixTightReset on Linux: (0,0) (1,1) (0,1) wait (1,0) wait (0,0)); D0 is absorbed; the
    // bytes come after.
    const tight = ['set 0,0', 'set 1,1', 'set 0,1', 'set 1,0', 'set 0,0'];
    const classic = ['set 0,0', 'set 0,1', 'set 1,1', 'set 1,0', 'set 0,0'];
    const played = process.platform === 'win32' ? classic : tight;
    expect(lines).toEqual(['set 0,0', 'set 0,1', ...played, 'write c00008c0']);
    expect(device.sets.length - base).toBe(2 + played.length);
    await until(() => log.some((l) => /download mode recognised/.test(l)), { what: 'the log' });
    expect(log.join('\n')).toMatch(
      /client 127\.0\.0\.1:\d+: reset into download mode recognised \(ClassicReset order\); played (tight|classic) 50 ms locally/,
    );
  });

  it('answers the line command that started a download reset once the reset has played', async () => {
    // A client that waits for each answer (ours, pyserial's) must not send its next line change
    // or its SYNC while the chip is still being reset here: its SYNC would time out behind the
    // play and the ROM's banner would reach it mid-sync (esptool-js then failed its first
    // connect attempt through RFC 2217).
    const device = new FakeDevice();
    const { server } = await serve(device);
    const c = await client(server);
    await c.negotiate();
    const base = device.sets.length;
    for (const value of [DTR_OFF, RTS_ON, DTR_ON, RTS_OFF]) {
      const from = c.received.length;
      c.send(sb(5, value));
      await c.waitFor(sb(105, value), from);
    }
    // The moment R0 is answered (D1 before it was held), the whole local reset (its two waits
    // included) is done.
    const tight = ['0,0', '1,1', '0,1', '1,0', '0,0'];
    const classic = ['0,0', '0,1', '1,1', '1,0', '0,0'];
    const played = process.platform === 'win32' ? classic : tight;
    expect(device.sets.slice(base)).toEqual(['0,0', '0,1', ...played]);
    // The rest of the client's sequence is absorbed and answered at once.
    for (const value of [DTR_OFF]) {
      const from = c.received.length;
      c.send(sb(5, value));
      await c.waitFor(sb(105, value), from);
    }
    expect(device.sets.slice(base)).toEqual(['0,0', '0,1', ...played]);
  });

  it('plays the USB-Serial-JTAG reset for a USB-Serial-JTAG port', async () => {
    const device = new FakeDevice();
    const { server } = await serve(device, { kind: 'usb-serial-jtag' });
    const c = await client(server);
    await c.negotiate();
    const base = device.sets.length;
    // esptool USBJTAGSerialReset R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|W0.1|R0|D0.
    for (const value of [
      RTS_OFF,
      DTR_OFF,
      DTR_ON,
      RTS_OFF,
      RTS_ON,
      DTR_OFF,
      RTS_ON,
      RTS_OFF,
      DTR_OFF,
    ]) {
      const from = c.received.length;
      c.send(sb(5, value));
      await c.waitFor(sb(105, value), from);
    }
    // Passed: R0 D0 D1 R0 R1; the D0 after R1 starts reset/sequences.ts usbJtag; the rest is absorbed
    // but for the last D0 (the client is released by then), which changes nothing.
    const usbJtag = ['0,0', '0,0', '1,0', '1,0', '1,1', '0,1', '0,1', '0,0', '0,0'];
    const expected = ['0,0', '0,0', '1,0', '1,0', '1,1', ...usbJtag];
    await until(() => device.sets.length - base >= expected.length, { what: 'the reset' });
    expect(device.sets.slice(base, base + expected.length)).toEqual(expected);
  });

  it('alternates the reset delay between plays, as esptool does between attempts', async () => {
    const device = new FakeDevice();
    const { server, log } = await serve(device);
    const c = await client(server);
    await c.negotiate();
    // Each attempt after the last one's play (esptool waits for its SYNC to time out first).
    for (let attempt = 1; attempt <= 3; attempt++) {
      for (const value of [DTR_OFF, RTS_ON, DTR_ON, RTS_OFF, DTR_OFF]) {
        const from = c.received.length;
        c.send(sb(5, value));
        await c.waitFor(sb(105, value), from);
      }
      await until(() => log.filter((l) => /played/.test(l)).length === attempt, {
        what: 'the play',
      });
    }
    await until(() => log.filter((l) => /played/.test(l)).length === 3, { what: 'three plays' });
    expect(log.filter((l) => /played/.test(l)).map((l) => /(\d+) ms locally/.exec(l)?.[1])).toEqual(
      ['50', '550', '50'],
    );
  });

  it('releases the lines when the client leaves holding the board in reset', async () => {
    const device = new FakeDevice();
    const { server, log } = await serve(device);
    const c = await client(server);
    await c.negotiate();
    c.send(sb(5, RTS_ON));
    await c.waitFor(sb(105, RTS_ON));
    await until(() => device.sets.at(-1) === '0,1', { what: 'EN held low' });
    await c.close();
    await until(() => log.some((l) => /disconnected/.test(l)), { what: 'the goodbye' });
    expect(device.sets.at(-1)).toBe('0,0');
    expect(log.join('\n')).toMatch(
      /client 127\.0\.0\.1:\d+ disconnected \(\d+ bytes in, \d+ out\); DTR and RTS released/,
    );
  });

  it('gives the baud rate back between clients', async () => {
    const device = new FakeDevice();
    const { server } = await serve(device);
    const c = await client(server);
    await c.negotiate();
    c.send(sb(1, 0x00, 0x07, 0x08, 0x00));
    await c.waitFor(sb(101, 0x00, 0x07, 0x08, 0x00));
    await c.close();
    await until(() => device.events.at(-1) === 'update 115200', { what: 'the rate back' });
  });
});

describe('Rfc2217Server: one client at a time', () => {
  it('refuses a second client with one line naming the first, and serves the next one after', async () => {
    const device = new FakeDevice();
    const { server, log } = await serve(device);
    const first = await client(server);
    await first.negotiate();
    const firstPeer = `127.0.0.1:${first.socket.localPort}`;
    expect(server.client).toBe(firstPeer);
    const second = await client(server);
    const secondPeer = `127.0.0.1:${second.socket.localPort}`;
    second.send([IAC, WILL, COM_PORT]);
    await second.closed;
    expect(Buffer.from(second.received).toString()).toBe(
      `xiaozhi-mcp port serve: busy: fake:board is in use by ${firstPeer}; one client at a time\r\n`,
    );
    expect(log.join('\n')).toContain(`refused ${secondPeer}`);
    // The first is unaffected.
    first.send(sb(0));
    await first.waitFor([IAC, SB, COM_PORT, 100]);
    await first.close();
    const third = await client(server);
    await third.negotiate();
    expect(server.client).toBe(`127.0.0.1:${third.socket.localPort}`);
  });
});

describe('Rfc2217Server: hostile input', () => {
  it('survives garbage, an endless subnegotiation and unknown commands, and serves the next client', async () => {
    const device = new FakeDevice();
    const { server } = await serve(device);
    // A fixed pseudo-random stream (xorshift), IACs and SBs among it.
    let seed = 0x2217;
    const random = () => {
      seed ^= seed << 13;
      seed ^= seed >>> 17;
      seed ^= seed << 5;
      return (seed >>> 0) & 0xff;
    };
    const c = await client(server);
    await c.negotiate();
    for (let round = 0; round < 20; round++) {
      const chunk = Buffer.alloc(4096, 0);
      for (let i = 0; i < chunk.length; i++) chunk[i] = i % 37 === 0 ? IAC : random();
      c.send(chunk);
    }
    // COM-PORT commands with no value, bad values and unknown codes.
    c.send([...sb(1), ...sb(1, 1, 2), ...sb(5), ...sb(5, 200), ...sb(12, 9), ...sb(77, 1, 2, 3)]);
    // A subnegotiation that never ends.
    c.send([IAC, SB, COM_PORT, 0, ...Buffer.alloc(100_000, 0x41)]);
    await c.close();
    const next = await client(server);
    await next.negotiate();
    next.send(sb(0));
    await next.waitFor([IAC, SB, COM_PORT, 100]);
  });

  it('stops reading a client whose bytes the port has not taken, and loses none of them', async () => {
    const device = new FakeDevice();
    let open: () => void = () => {};
    device.gate = new Promise((resolve) => {
      open = resolve;
    });
    const { server } = await serve(device);
    const c = await client(server);
    await c.negotiate();
    const payload = Buffer.alloc(2 * 1024 * 1024);
    for (let i = 0; i < payload.length; i++) payload[i] = (i * 7) & 0x7f;
    c.send(payload);
    await until(() => server.heldBytes >= 256 * 1024, {
      what: 'the held bytes to reach the high mark',
    });
    // Paused: while the port takes nothing, the server holds no more than its bound. A window
    // over a real TCP connection (no fake clock moves a socket): a busy machine only makes it
    // weaker, never falsely red.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(server.heldBytes).toBeLessThan(1024 * 1024);
    expect(server.client).toBeDefined();
    device.gate = undefined;
    open();
    await until(() => device.written.length >= payload.length, {
      what: 'every byte at the device',
      timeoutMs: 30_000,
    });
    expect(Buffer.from(device.written).equals(payload)).toBe(true);
  });
});

describe('Rfc2217Server: the local port going away', () => {
  it('holds what the client sends while the port is away and writes it when it is back', async () => {
    const device = new FakeDevice();
    const { server, log } = await serve(device, { refindMs: 10_000 });
    const c = await client(server);
    await c.negotiate();
    device.vanish();
    await until(() => log.some((l) => /waiting up to 10 s for it to come back/.test(l)), {
      what: 'the loss',
    });
    c.send(Buffer.from('after'));
    // The server reads in order: once it answers the SIGNATURE sent after them, it has the bytes.
    const from = c.received.length;
    c.send(sb(0));
    await c.waitFor([IAC, SB, COM_PORT, 100], from);
    expect(device.written).toEqual([]);
    device.present = true;
    await until(() => Buffer.from(device.written).toString() === 'after', {
      what: 'the held bytes',
    });
    expect(log.join('\n')).toContain('fake:board: back on /dev/ttyFAKE0');
    expect(device.opens).toBe(2);
  });

  it('answers a download reset that waits for its port within the time clients wait for answers', {
    timeout: 60_000,
  }, async () => {
    const device = new FakeDevice();
    const { server, log } = await serve(device, { refindMs: 60_000 });
    const c = await client(server);
    await c.negotiate();
    device.vanish();
    await until(() => log.some((l) => /waiting up to 60 s/.test(l)), { what: 'the loss' });
    // ClassicReset's R0 after D1 starts a play that waits for the port: answered all the same
    // while the port is still away (after a bound within the 3 s pyserial's client and ours wait).
    for (const value of [DTR_OFF, RTS_ON, DTR_ON, RTS_OFF]) {
      const from = c.received.length;
      c.send(sb(5, value));
      await c.waitFor(sb(105, value), from, 20_000);
    }
    expect(log.some((l) => /download mode recognised/.test(l))).toBe(false);
    device.present = true;
    await until(() => log.some((l) => /download mode recognised/.test(l)), { what: 'the play' });
  });

  it('lets the client go when the port does not come back, and refuses new ones while it is away', async () => {
    const device = new FakeDevice();
    const { server } = await serve(device, { refindMs: 100 });
    const c = await client(server);
    await c.negotiate();
    device.vanish();
    await c.closed;
    const next = await client(server);
    await next.closed;
    expect(Buffer.from(next.received).toString()).toMatch(
      /^xiaozhi-mcp port serve: unavailable: fake:board: it went away and did not come back within 0\.1 s/,
    );
    device.present = true;
    await until(() => server.heldBytes === 0 && device.opens === 2, { what: 'the port back' });
    const last = await client(server);
    await last.negotiate();
  });
});

describe('two runs on one served board: the second waits for it (lockWaitMs)', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });
  /** A lock directory of its own: one per host the test plays. */
  const host = (): string => {
    const dir = mkdtempSync(join(tmpdir(), 'serial-rfc2217-wait-'));
    dirs.push(dir);
    return dir;
  };
  /** Whether `promise` has settled, without waiting for it. */
  const watch = <T>(promise: Promise<T>) => {
    const state = { settled: false };
    promise.then(
      () => {
        state.settled = true;
      },
      () => {
        state.settled = true;
      },
    );
    return state;
  };

  it('on one host: waits for the first run, through its reconnects, then has the board', async () => {
    const { server } = await serve(new FakeDevice());
    const locks = host();
    const first = await resolvePort(server.url, { lockDir: locks });
    // Without a wait: refused at once, naming the run that holds it.
    await expect(resolvePort(server.url, { lockDir: locks })).rejects.toMatchObject({
      code: 'PORT_BUSY',
      message: expect.stringMatching(
        new RegExp(`^${server.url} is in use by another run \\(pid ${process.pid}, this process`),
      ),
    });
    const waiting = resolvePort(server.url, { lockDir: locks, lockWaitMs: 60_000 });
    const second = watch(waiting);
    // It is in line for the board: its ticket is in the host's lock.
    const key = lockPath(`rfc2217:${server.url}`, locks);
    await until(() => readdirSync(key).filter((f) => f.startsWith('t.')).length === 2, {
      what: 'a ticket',
    });
    // The first run's connection closes and is made again (the console after flashing): the
    // waiting run does not slip in between.
    const port = await first.binding.open({ path: first.path, baudRate: 115_200 });
    await port.close();
    const again = await first.binding.open({ path: first.path, baudRate: 115_200 });
    expect(second.settled).toBe(false);
    await again.close();
    first.dispose();
    const next = await waiting;
    try {
      const opened = await next.binding.open({ path: next.path, baudRate: 115_200 });
      await opened.close();
    } finally {
      next.dispose();
    }
  });

  it('from another host: asks the busy server again until the board is free', async () => {
    const { server, log } = await serve(new FakeDevice());
    const first = await resolvePort(server.url, { lockDir: host() });
    const waiting = resolvePort(server.url, { lockDir: host(), lockWaitMs: 60_000 });
    const second = watch(waiting);
    // Refused by the server (twice: a busy refusal is asked once more at once) and still waiting.
    await until(() => log.filter((l) => l.startsWith('refused ')).length >= 3, {
      what: 'a third refusal',
    });
    expect(second.settled).toBe(false);
    first.dispose();
    const next = await waiting;
    next.dispose();
  });

  it('from another host: fails once the wait is over, saying who holds the board', async () => {
    const { server } = await serve(new FakeDevice());
    const first = await resolvePort(server.url, { lockDir: host() });
    try {
      await expect(
        resolvePort(server.url, { lockDir: host(), lockWaitMs: 1000 }),
      ).rejects.toMatchObject({
        code: 'PORT_BUSY',
        message: expect.stringMatching(
          new RegExp(
            `^${server.url} is in use: xiaozhi-mcp port serve: busy: fake:board is in use by 127\\.0\\.0\\.1:\\d+; one client at a time \\(still after waiting 1 s, asked \\d+ times\\)$`,
          ),
        ),
      });
    } finally {
      first.dispose();
    }
  });
});
