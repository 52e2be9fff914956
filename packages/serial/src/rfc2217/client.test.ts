/**
 * The RFC 2217 client against a minimal RFC 2217 server written here from the RFC's text
 * (RFC 854 framing, RFC 2217 codes), sharing no code with the client: every byte it sends or
 * expects is a literal.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SerialError } from '../errors.js';
import { resolvePort } from '../resolve.js';
import { NodeWebSerialPort } from '../web-serial.js';
import { probeRfc2217, Rfc2217Binding, type Rfc2217Event, type Rfc2217Port } from './client.js';

// RFC 854: IAC 255, SB 250, SE 240, WILL 251, WONT 252, DO 253, DONT 254.
const IAC = 255;
const SB = 250;
const SE = 240;
const WILL = 251;
const WONT = 252;
const DO = 253;
const DONT = 254;

interface Command {
  readonly code: number;
  readonly value: number[];
}

interface Connection {
  readonly socket: Socket;
  /** Every byte the client sent, as it came. */
  readonly raw: number[];
  /** Serial data, IAC IAC undone. */
  readonly data: number[];
  /** COM-PORT-OPTION (44) commands, in order. */
  readonly commands: Command[];
  /** [verb, option] as the client negotiated. */
  readonly negotiations: [number, number][];
}

interface MiniServerOptions {
  /**
   * Text answered to SIGNATURE (default {@link MINI_SIGNATURE}: a server that passes line
   * changes, as ser2net signs); null: no answer, as pyserial's PortManager and
   * esp_rfc2217_server.
   */
  signature?: string | null;
  /** Answer SET-CONTROL (code 5); default true. */
  ackControl?: boolean;
  /** Replaces the answer to a command; return the bytes to send, or undefined for the usual one. */
  answer?: (command: Command, connection: Connection) => number[] | undefined | 'none';
  /** Run when a command arrives, before it is answered. */
  onCommand?: (command: Command, connection: Connection) => void;
  /** Bytes sent as soon as a client connects, before any negotiation. */
  greeting?: number[];
}

/** Doubles 255 in serial data (RFC 854). */
function escapeIac(bytes: readonly number[]): number[] {
  return bytes.flatMap((b) => (b === IAC ? [IAC, IAC] : [b]));
}

/** IAC SB 44 code value IAC SE, a 255 in the value doubled. */
function comPort(code: number, value: readonly number[]): number[] {
  return [IAC, SB, 44, code, ...escapeIac(value), IAC, SE];
}

/**
 * A minimal RFC 2217 access server: agrees to COM-PORT-OPTION (44), BINARY (0) and SGA (3) on
 * both sides, answering each request once; answers each COM-PORT command with its code plus 100
 * and the value it took (RFC 2217, "the access server ... replies with the value"); keeps
 * what it received for the test to check.
 */
class MiniServer {
  readonly connections: Connection[] = [];
  readonly #server: Server;
  readonly #options: MiniServerOptions;
  port = 0;

  constructor(options: MiniServerOptions = {}) {
    this.#options = options;
    this.#server = createServer((socket) => this.#accept(socket));
  }

  async start(port = 0): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(port, '127.0.0.1', resolve));
    const address = this.#server.address();
    if (address === null || typeof address === 'string') throw new Error('no port');
    this.port = address.port;
    return this;
  }

  get url(): string {
    return `rfc2217://127.0.0.1:${this.port}`;
  }

  get last(): Connection {
    const connection = this.connections.at(-1);
    if (connection === undefined) throw new Error('no connection yet');
    return connection;
  }

  /** Raw bytes to the last client. */
  send(bytes: readonly number[]): void {
    this.last.socket.write(Uint8Array.from(bytes));
  }

  sendData(bytes: readonly number[]): void {
    this.send(escapeIac(bytes));
  }

  /** Cuts the last client off, as a network failure would. */
  drop(): void {
    this.last.socket.destroy();
  }

  async stop(): Promise<void> {
    for (const c of this.connections) c.socket.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #accept(socket: Socket): void {
    const connection: Connection = { socket, raw: [], data: [], commands: [], negotiations: [] };
    this.connections.push(connection);
    socket.on('error', () => {});
    if (this.#options.greeting !== undefined) socket.write(Uint8Array.from(this.#options.greeting));
    const answered = new Set<string>();
    let state: 'data' | 'iac' | 'verb' | 'sb' | 'sb-iac' = 'data';
    let verb = 0;
    let sb: number[] = [];
    socket.on('data', (chunk: Buffer) => {
      for (const byte of chunk) {
        connection.raw.push(byte);
        if (state === 'data') {
          if (byte === IAC) state = 'iac';
          else connection.data.push(byte);
        } else if (state === 'iac') {
          if (byte === IAC) {
            connection.data.push(IAC);
            state = 'data';
          } else if (byte >= WILL && byte <= DONT) {
            verb = byte;
            state = 'verb';
          } else if (byte === SB) {
            sb = [];
            state = 'sb';
          } else state = 'data';
        } else if (state === 'verb') {
          connection.negotiations.push([verb, byte]);
          this.#negotiate(socket, verb, byte, answered);
          state = 'data';
        } else if (state === 'sb') {
          if (byte === IAC) state = 'sb-iac';
          else sb.push(byte);
        } else {
          if (byte === SE) {
            if (sb[0] === 44 && sb.length >= 2) {
              const command = { code: sb[1] as number, value: sb.slice(2) };
              connection.commands.push(command);
              this.#options.onCommand?.(command, connection);
              this.#answer(socket, command, connection);
            }
            state = 'data';
          } else {
            sb.push(byte); // IAC IAC in a subnegotiation: one 255
            state = 'sb';
          }
        }
      }
    });
  }

  #negotiate(socket: Socket, verb: number, option: number, answered: Set<string>): void {
    const known = option === 44 || option === 0 || option === 3;
    const reply =
      verb === WILL ? (known ? DO : DONT) : verb === DO ? (known ? WILL : WONT) : undefined;
    if (reply === undefined) return;
    const key = `${reply}:${option}`;
    if (answered.has(key)) return;
    answered.add(key);
    socket.write(Uint8Array.of(IAC, reply, option));
  }

  #answer(socket: Socket, command: Command, connection: Connection): void {
    const custom = this.#options.answer?.(command, connection);
    if (custom === 'none') return;
    if (custom !== undefined) {
      socket.write(Uint8Array.from(custom));
      return;
    }
    if (command.code === 0) {
      const signature =
        this.#options.signature === undefined ? MINI_SIGNATURE : this.#options.signature;
      if (command.value.length === 0 && signature !== null)
        socket.write(Uint8Array.from(comPort(100, [...Buffer.from(signature, 'latin1')])));
      return;
    }
    if (command.code === 5 && this.#options.ackControl === false) return;
    if ([1, 2, 3, 4, 5, 12].includes(command.code))
      socket.write(Uint8Array.from(comPort(command.code + 100, command.value)));
  }
}

/** What {@link MiniServer} answers SIGNATURE with unless told otherwise. */
const MINI_SIGNATURE = 'mini server 1.0';

const servers: MiniServer[] = [];
const ports: Rfc2217Port[] = [];
const cleanups: (() => Promise<void>)[] = [];

async function serve(options: MiniServerOptions = {}): Promise<MiniServer> {
  const server = await new MiniServer(options).start();
  servers.push(server);
  return server;
}

async function openPort(
  url: string,
  options: ConstructorParameters<typeof Rfc2217Binding>[0] = {},
  baudRate = 115_200,
): Promise<Rfc2217Port> {
  const port = await new Rfc2217Binding(options).open({ path: url, baudRate });
  ports.push(port);
  return port;
}

/** A plain TCP server (not RFC 2217) whose connections all end with the test. */
async function rawServer(onSocket: (socket: Socket) => void): Promise<string> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    onSocket(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return `rfc2217://127.0.0.1:${(server.address() as { port: number }).port}`;
}

/** A port that was just freed: nothing listens there. */
async function freePort(): Promise<number> {
  const server = await new MiniServer().start();
  const { port } = server;
  await server.stop();
  return port;
}

afterEach(async () => {
  for (const port of ports.splice(0)) await port.close().catch(() => {});
  for (const server of servers.splice(0)) await server.stop();
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

const codes = (connection: Connection) => connection.commands.map((c) => c.code);
const controls = (connection: Connection) =>
  connection.commands.filter((c) => c.code === 5).map((c) => c.value[0]);

async function readSome(port: Rfc2217Port, length = 256): Promise<number[]> {
  const { buffer, bytesRead } = await port.read(Buffer.alloc(length), 0, length);
  return [...buffer.subarray(0, bytesRead)];
}

async function readExactly(port: Rfc2217Port, count: number): Promise<number[]> {
  const out: number[] = [];
  while (out.length < count) out.push(...(await readSome(port, count - out.length)));
  return out;
}

async function rejection(work: Promise<unknown>): Promise<SerialError> {
  const error = await work.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(SerialError);
  return error as SerialError;
}

describe('Rfc2217Binding: open', () => {
  it('negotiates COM-PORT-OPTION, asks the signature, then sets the port up, touching no line', async () => {
    const server = await serve();
    const port = await openPort(server.url, {}, 115_200);
    const connection = server.last;
    // IAC WILL 44 and IAC DO 44 (RFC 2217 "Negotiation"), with BINARY and SGA.
    expect(connection.negotiations).toEqual(
      expect.arrayContaining([
        [WILL, 44],
        [DO, 44],
        [WILL, 0],
        [DO, 0],
        [WILL, 3],
        [DO, 3],
      ]),
    );
    expect(connection.commands).toEqual([
      { code: 0, value: [] }, // SIGNATURE, empty: a request
      { code: 1, value: [0, 1, 0xc2, 0] }, // SET-BAUDRATE 115200, network order
      { code: 2, value: [8] }, // SET-DATASIZE 8
      { code: 3, value: [1] }, // SET-PARITY NONE
      { code: 4, value: [1] }, // SET-STOPSIZE 1
      { code: 5, value: [1] }, // SET-CONTROL: no flow control
    ]);
    expect(await port.getBaudRate()).toEqual({ baudRate: 115_200 });
  });

  it('asks for hardware flow control, even parity and two stop bits when opened so', async () => {
    const server = await serve();
    const port = await new Rfc2217Binding().open({
      path: server.url,
      baudRate: 9600,
      dataBits: 7,
      parity: 'even',
      stopBits: 2,
      rtscts: true,
    });
    ports.push(port);
    expect(server.last.commands.slice(1)).toEqual([
      { code: 1, value: [0, 0, 0x25, 0x80] },
      { code: 2, value: [7] },
      { code: 3, value: [3] },
      { code: 4, value: [2] },
      { code: 5, value: [3] },
    ]);
  });

  it('answers a server that keeps asking without ever looping, and refuses ECHO', async () => {
    // WILL ECHO three times, DO COM-PORT twice: each asked again after it was settled.
    const greeting = [IAC, WILL, 1, IAC, WILL, 1, IAC, DO, 44, IAC, DO, 44, IAC, WILL, 1];
    const server = await serve({ greeting });
    await openPort(server.url);
    const sent = server.last.negotiations;
    expect(sent.filter(([v, o]) => v === DONT && o === 1)).toHaveLength(1);
    expect(sent.filter(([v, o]) => v === WILL && o === 44)).toHaveLength(1);
    expect(sent.filter(([v, o]) => v === DO && o === 1)).toHaveLength(0);
  });

  it('reports the signature the server sends', async () => {
    const server = await serve({ signature: 'some server 1.0' });
    const events: Rfc2217Event[] = [];
    const port = await openPort(server.url, { onEvent: (e) => events.push(e) });
    await until(() => {
      expect(port.signature).toBe('some server 1.0');
      return true;
    });
    expect(events).toContainEqual({
      kind: 'signature',
      url: server.url,
      signature: 'some server 1.0',
    });
  });
});

describe('Rfc2217Binding: the port', () => {
  it('changes the baud rate with SET-BAUDRATE and waits for the answer', async () => {
    const server = await serve();
    const port = await openPort(server.url);
    await port.update({ baudRate: 921_600 });
    expect(server.last.commands.at(-1)).toEqual({ code: 1, value: [0, 0x0e, 0x10, 0] });
    expect(await port.getBaudRate()).toEqual({ baudRate: 921_600 });
  });

  it('fails a baud rate the server did not take, keeping the old one', async () => {
    const server = await serve({
      // Answers every SET-BAUDRATE with 115200.
      answer: (c) => (c.code === 1 ? comPort(101, [0, 1, 0xc2, 0]) : undefined),
    });
    const port = await openPort(server.url);
    await expect(port.update({ baudRate: 3_000_000 })).rejects.toThrow(
      /did not take 3000000 baud: the server answered 115200/,
    );
    expect(await port.getBaudRate()).toEqual({ baudRate: 115_200 });
  });

  it('sets RTS before DTR, the DTR change only once RTS was answered, and only lines that changed', async () => {
    let rtsAnswered = false;
    const dtrBeforeRtsAnswer: boolean[] = [];
    const server = await serve({
      answer: (c, connection) => {
        if (c.code !== 5 || (c.value[0] !== 11 && c.value[0] !== 12)) return undefined;
        // Answer RTS a moment later: DTR must wait for it.
        rtsAnswered = false;
        setTimeout(() => {
          rtsAnswered = true;
          connection.socket.write(Uint8Array.from(comPort(105, c.value)));
        }, 30);
        return 'none';
      },
      onCommand: (c) => {
        if (c.code === 5 && (c.value[0] === 8 || c.value[0] === 9))
          dtrBeforeRtsAnswer.push(!rtsAnswered);
      },
    });
    const port = await openPort(server.url);
    const connection = server.last;
    await port.set({ dtr: false, rts: false, brk: false });
    // The first call sends both: RTS off (12), then DTR off (9).
    expect(controls(connection).slice(1)).toEqual([12, 9]);
    await port.set({ dtr: true, rts: false, brk: false });
    expect(controls(connection).slice(3)).toEqual([8]); // DTR on only
    await port.set({ dtr: false, rts: true, brk: false });
    expect(controls(connection).slice(4)).toEqual([11, 9]); // RTS on, then DTR off
    await port.set({ dtr: false, rts: true, brk: false });
    expect(controls(connection)).toHaveLength(6); // nothing changed: nothing sent
    await port.set({ brk: true });
    expect(controls(connection).slice(6)).toEqual([5]); // BREAK-ON; the lines keep their state
    expect(dtrBeforeRtsAnswer).toEqual([false, false, false]);
  });

  it('fails a line change the server never answers, saying how to tell it not to wait', async () => {
    const server = await serve({
      answer: (c) => (c.code === 5 && c.value[0] !== 1 ? 'none' : undefined),
    });
    const port = await openPort(server.url, { ackTimeoutMs: 1000 });
    const error = await rejection(port.set({ dtr: false, rts: true }));
    expect(error.code).toBe('PORT_NOT_FOUND');
    expect(error.message).toBe(
      `${server.url} did not acknowledge SET-CONTROL (RTS on) within 1000 ms; a server that acknowledges no line change (esp_rfc2217_server) needs ${server.url}?ign_set_control`,
    );
  });

  it('reports CTS, DSR and DCD from the last NOTIFY-MODEMSTATE', async () => {
    const server = await serve();
    const port = await openPort(server.url);
    expect(await port.get()).toEqual({ cts: false, dsr: false, dcd: false });
    server.send(comPort(107, [0x10 | 0x80])); // CTS and CD
    await port.set({ rts: false }); // a round trip: the notification came before its answer
    expect(await port.get()).toEqual({ cts: true, dsr: false, dcd: true });
  });

  it('purges both buffers with PURGE-DATA 3, dropping what was received before the answer', async () => {
    const server = await serve({
      answer: (c) => {
        if (c.code !== 12) return undefined;
        // Bytes in flight before the purge took effect arrive ahead of its answer.
        return [...escapeIac([...Buffer.from('in flight')]), ...comPort(112, c.value)];
      },
    });
    const port = await openPort(server.url);
    server.sendData([...Buffer.from('old')]);
    await port.set({ rts: false }); // a round trip: 'old' has arrived
    await port.flush();
    expect(server.last.commands.at(-1)).toEqual({ code: 12, value: [3] });
    server.sendData([...Buffer.from('new')]);
    expect(Buffer.from(await readExactly(port, 3)).toString()).toBe('new');
  });

  it('passes 255 both ways, doubled on the wire', async () => {
    const server = await serve();
    const port = await openPort(server.url);
    await port.write(Buffer.from([0, 255, 1, 255, 255]));
    await until(() => {
      expect(server.last.data).toEqual([0, 255, 1, 255, 255]);
      return true;
    });
    const raw = server.last.raw;
    // The bytes after the last command's IAC SE: the data as sent.
    expect(raw.slice(raw.lastIndexOf(SE) + 1)).toEqual([0, 255, 255, 1, 255, 255, 255, 255]);
    server.send([IAC, IAC, 7, IAC, IAC]);
    expect(await readExactly(port, 3)).toEqual([255, 7, 255]);
  });

  it('stops writing on FLOWCONTROL-SUSPEND and goes on at RESUME (pyserial codes 8/9, RFC 108/109)', async () => {
    for (const [suspend, resume] of [
      [8, 9],
      [108, 109],
    ] as const) {
      const server = await serve();
      const port = await openPort(server.url);
      server.send(comPort(suspend, []));
      await port.set({ rts: false }); // a round trip: the suspension has arrived
      let written = false;
      const writing = port.write(Buffer.from('abc')).then(() => {
        written = true;
      });
      // A command after the write still makes its round trip: the data, sent first on the same
      // connection, would be there by now had it not been held.
      await port.set({ rts: true });
      expect(written).toBe(false);
      expect(server.last.data).toEqual([]);
      server.send(comPort(resume, []));
      await writing;
      await until(() => {
        expect(Buffer.from(server.last.data).toString()).toBe('abc');
        return true;
      });
    }
  });

  it('keeps at most receiveBufferBytes unread, dropping the rest', async () => {
    const server = await serve();
    const port = await openPort(server.url, { receiveBufferBytes: 1000 });
    const sent = Array.from({ length: 3000 }, (_, i) => i % 251);
    server.sendData(sent);
    await until(async () => {
      await port.set({ rts: false });
      expect(port.overruns).toBe(2000);
      return true;
    });
    expect(await readExactly(port, 1000)).toEqual(sent.slice(0, 1000));
  });

  it('drain resolves once the writes reached the OS; close fails a pending read as cancelled', async () => {
    const server = await serve();
    const port = await openPort(server.url);
    await port.write(Buffer.from('x'));
    await port.drain();
    const reading = expect(port.read(Buffer.alloc(8), 0, 8)).rejects.toMatchObject({
      canceled: true,
    });
    await port.close();
    await reading;
    expect(port.isOpen).toBe(false);
  });
});

describe('Rfc2217Binding: errors', () => {
  it('a refused connection is PORT_NOT_FOUND, naming the server to start', async () => {
    const url = `rfc2217://127.0.0.1:${await freePort()}`;
    const error = await rejection(openPort(url));
    expect(error.code).toBe('PORT_NOT_FOUND');
    expect(error.message).toBe(
      `${url} refused the connection; is \`xiaozhi-mcp port serve\` (or another RFC 2217 server) running there?`,
    );
  });

  it('a server that accepts and never answers is PORT_NOT_FOUND after negotiationTimeoutMs', async () => {
    const url = await rawServer(() => {});
    const error = await rejection(openPort(url, { negotiationTimeoutMs: 300 }));
    expect(error.code).toBe('PORT_NOT_FOUND');
    expect(error.message).toBe(
      `${url} accepted the connection but did not answer within 300 ms; is it an RFC 2217 server?`,
    );
  });

  it('an HTTP server is not an RFC 2217 server, and the message quotes it', async () => {
    const url = await rawServer((socket) => {
      socket.once('data', () =>
        socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n'),
      );
    });
    const error = await rejection(openPort(url));
    expect(error.code).toBe('PORT_NOT_FOUND');
    expect(error.message).toBe(
      `${url} is not an RFC 2217 server: it closed the connection before negotiating, having sent "HTTP/1.1 400 Bad Request Connection: close"`,
    );
  });

  it('a server that says something and never negotiates is quoted after negotiationTimeoutMs', async () => {
    // An SSH server ignores our offer: it refuses nothing and agrees to nothing.
    const url = await rawServer((socket) => socket.write('SSH-2.0-OpenSSH_9.6\r\n'));
    const error = await rejection(openPort(url, { negotiationTimeoutMs: 300 }));
    expect(error.code).toBe('PORT_NOT_FOUND');
    expect(error.message).toBe(
      `${url} is not an RFC 2217 server: it did not agree to COM-PORT-OPTION within 300 ms, having sent "SSH-2.0-OpenSSH_9.6"`,
    );
  });

  it('a Telnet server that refuses COM-PORT-OPTION says so', async () => {
    const server = await serve({ greeting: [IAC, DONT, 44] });
    const error = await rejection(openPort(server.url));
    expect(error.code).toBe('PORT_NOT_FOUND');
    expect(error.message).toBe(
      `${server.url} is a Telnet server without RFC 2217: it refused COM-PORT-OPTION`,
    );
  });

  it("`xiaozhi-mcp port serve`'s refusal of a second client is PORT_BUSY, quoting it", async () => {
    const line = 'xiaozhi-mcp port serve: busy: serving 10.0.0.7:51514 since 12:00:01';
    const url = await rawServer((socket) => socket.end(`${line}\r\n`));
    const error = await rejection(openPort(url));
    expect(error.code).toBe('PORT_BUSY');
    expect(error.message).toBe(`${url} is in use: ${line}`);
  });

  it("`xiaozhi-mcp port serve`'s other refusals are PORT_NOT_FOUND, quoting them", async () => {
    const line = 'xiaozhi-mcp port serve: unavailable: /dev/ttyUSB0: it went away';
    const url = await rawServer((socket) => socket.end(`${line}\r\n`));
    const error = await rejection(openPort(url));
    expect(error.code).toBe('PORT_NOT_FOUND');
    expect(error.message).toBe(`${url} refused the connection: ${line}`);
  });

  it('a bad URL is OPTION_INVALID before anything connects', async () => {
    const error = await rejection(openPort('rfc2217://127.0.0.1'));
    expect(error.code).toBe('OPTION_INVALID');
  });
});

describe('Rfc2217Binding: reconnect', () => {
  it('reconnects after the connection drops, applies baud and lines again, and data flows', async () => {
    const server = await serve();
    const events: Rfc2217Event[] = [];
    const port = await openPort(server.url, { onEvent: (e) => events.push(e) });
    await port.set({ dtr: true, rts: false });
    await port.update({ baudRate: 460_800 });
    const reading = readExactly(port, 4);
    server.drop();
    await until(
      () => {
        expect(server.connections).toHaveLength(2);
        return true;
      },
      { timeoutMs: 10_000 },
    );
    await until(
      () => {
        expect(events.map((e) => e.kind)).toContain('reconnected');
        return true;
      },
      {
        timeoutMs: 10_000,
      },
    );
    const again = server.last;
    expect(again.commands).toEqual([
      { code: 0, value: [] },
      { code: 1, value: [0, 7, 0x08, 0] }, // 460800
      { code: 2, value: [8] },
      { code: 3, value: [1] },
      { code: 4, value: [1] },
      { code: 5, value: [1] },
      { code: 5, value: [12] }, // RTS off, as last set
      { code: 5, value: [8] }, // DTR on, as last set
    ]);
    server.sendData([...Buffer.from('back')]);
    expect(Buffer.from(await reading).toString()).toBe('back');
    await port.write(Buffer.from('ok'));
    await until(() => {
      expect(Buffer.from(again.data).toString()).toBe('ok');
      return true;
    });
    expect(events.map((e) => e.kind).filter((k) => k !== 'signature')).toEqual([
      'lost',
      'reconnected',
    ]);
  });

  it('a line change under way when the connection drops completes on the new one', async () => {
    let dropped = false;
    const server = await serve({
      answer: (c, connection) => {
        if (c.code === 5 && c.value[0] === 11 && !dropped) {
          dropped = true;
          connection.socket.destroy(); // gone before answering RTS on
          return 'none';
        }
        return undefined;
      },
    });
    const port = await openPort(server.url);
    await port.set({ dtr: false, rts: true });
    expect(controls(server.last)).toEqual([1, 11, 9]);
  });

  it('fails a pending read and later calls when the server does not come back in time', async () => {
    const server = await serve();
    const events: Rfc2217Event[] = [];
    const port = await openPort(server.url, { reconnectMs: 500, onEvent: (e) => events.push(e) });
    const reading = port.read(Buffer.alloc(8), 0, 8);
    await server.stop();
    servers.splice(servers.indexOf(server), 1);
    const error = await rejection(reading);
    expect(error.code).toBe('PORT_NOT_FOUND');
    expect(error.message).toMatch(
      new RegExp(
        `^${server.url.replace(/[.]/g, '\\.')}: the connection was lost \\(.+\\) and could not be made again within 0\\.5 s: .*refused the connection`,
      ),
    );
    expect((error as SerialError & { canceled?: boolean }).canceled).toBeUndefined();
    await expect(port.set({ rts: false })).rejects.toBe(error);
    expect(events.map((e) => e.kind).filter((k) => k !== 'signature')).toEqual(['lost', 'failed']);
  });
});

describe('probeRfc2217', () => {
  it("reads `xiaozhi-mcp port serve`'s signature, touching no line and no setting", async () => {
    const server = await serve({
      signature: 'xiaozhi-mcp port serve port=/dev/ttyACM0 kind=usb-serial-jtag',
    });
    const probe = await probeRfc2217(server.url);
    expect(probe).toEqual({
      signature: 'xiaozhi-mcp port serve port=/dev/ttyACM0 kind=usb-serial-jtag',
      lineControl: 'lines',
      kind: 'usb-serial-jtag',
      label: '/dev/ttyACM0',
    });
    await until(() => {
      expect(server.last.socket.closed).toBe(true);
      return true;
    });
    // SIGNATURE, then SET-BAUDRATE 0: a query of the rate, which changes nothing.
    expect(server.last.commands).toEqual([
      { code: 0, value: [] },
      { code: 1, value: [0, 0, 0, 0] },
    ]);
  });

  it('a server without a signature (pyserial) is of unknown kind, and plays resets itself', async () => {
    const server = await serve({ signature: null });
    expect(await probeRfc2217(server.url, { timeoutMs: 500 })).toEqual({
      signature: '',
      lineControl: 'resets',
      kind: 'unknown',
    });
    expect(codes(server.last)).toEqual([0, 1]);
  });

  it('fails as open does: refused, busy', async () => {
    const url = `rfc2217://127.0.0.1:${await freePort()}`;
    expect((await rejection(probeRfc2217(url))).code).toBe('PORT_NOT_FOUND');
  });
});

describe('Rfc2217Binding: a server that plays resets itself (esp_rfc2217_server)', () => {
  /** As esp_rfc2217_server: no SIGNATURE, and no answer to a DTR or RTS change. */
  const espLike = () =>
    serve({
      signature: null,
      answer: (c) =>
        c.code === 5 && c.value[0] !== undefined && c.value[0] >= 8 && c.value[0] <= 12
          ? 'none'
          : undefined,
    });
  // SET-CONTROL values (RFC 2217): DTR on 8, off 9; RTS on 11, off 12.

  it('opens and releases the lines without one line command: each would reset the board there', async () => {
    const server = await espLike();
    const port = new NodeWebSerialPort({ binding: new Rfc2217Binding(), path: server.url });
    await port.open({ baudRate: 115_200 });
    try {
      await port.setSignals({ dataTerminalReady: false, requestToSend: false });
      expect(controls(server.last)).toEqual([1]); // flow control only
    } finally {
      await port.close();
    }
  });

  it('sends ClassicReset as D0 R1, D1 R0, and a hard reset as D0 R1, R0, waiting for no answer', async () => {
    const server = await espLike();
    const port = await openPort(server.url, { ackTimeoutMs: 500 });
    expect(port.lineControl).toBe('resets');
    const lines = (dtr: boolean, rts: boolean) => port.set({ dtr, rts });
    // esptool ClassicReset (0,0) (0,1) (1,1) (1,0) (0,0), as runLineSteps plays it here.
    for (const [dtr, rts] of [
      [false, false],
      [false, true],
      [true, true],
      [true, false],
      [false, false],
    ] as const)
      await lines(dtr, rts);
    // esptool HardReset (0,1) (0,0).
    await lines(false, true);
    await lines(false, false);
    await until(() => {
      expect(controls(server.last)).toEqual([1, 9, 11, 8, 12, 9, 11, 12]);
      return true;
    });
  });

  it('a BREAK still passes', async () => {
    const server = await espLike();
    const port = await openPort(server.url);
    await port.set({ brk: true });
    await until(() => {
      expect(controls(server.last)).toEqual([1, 5]);
      return true;
    });
  });

  it('?ign_set_control says so of a server that signs, unless it is `xiaozhi-mcp port serve`', async () => {
    const signing = await serve({ ackControl: false });
    expect((await openPort(`${signing.url}?ign_set_control`)).lineControl).toBe('resets');
    expect((await openPort((await serve()).url)).lineControl).toBe('lines');
    const ours = await serve({
      ackControl: false,
      signature: 'xiaozhi-mcp port serve port=/dev/ttyUSB0 kind=usb-uart',
    });
    const port = await openPort(`${ours.url}?ign_set_control`);
    expect(port.lineControl).toBe('lines');
    // Passed as they change, without waiting for answers that never come.
    await port.set({ dtr: true, rts: false });
    await until(() => {
      expect(controls(ours.last)).toEqual([1, 12, 8]);
      return true;
    });
  });

  it('resolvePort says a BOOT click cannot go through it', async () => {
    const server = await espLike();
    const resolved = await resolvePort(server.url);
    expect(resolved.lineControl).toBe('resets');
    resolved.dispose();
    const passing = await serve();
    const other = await resolvePort(passing.url);
    expect(other.lineControl).toBeUndefined();
    other.dispose();
  });
});

describe('one connection per command, and no wait for a SIGNATURE that never comes', () => {
  it('resolves and opens through a server that never answers SIGNATURE with no timer running out', async () => {
    // pyserial's PortManager, and esp_rfc2217_server built on it, never answer SIGNATURE: a
    // wait for it cost seconds per command. The answer to the rate asked right after it
    // bounds it instead: one round trip. With the clock faked, a wait on a timer never ends.
    const server = await serve({ signature: null });
    const realSetTimeout = globalThis.setTimeout;
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval'] });
    try {
      const hang = new Promise<never>((_, reject) =>
        realSetTimeout(() => reject(new Error('it waited on a timer')), 10_000),
      );
      const resolved = await Promise.race([resolvePort(server.url), hang]);
      const port = await Promise.race([
        resolved.binding.open({ path: resolved.path, baudRate: 115_200 }),
        hang,
      ]);
      await Promise.race([port.close(), hang]);
      resolved.dispose();
      expect(resolved.info.kind).toBe('unknown');
    } finally {
      vi.useRealTimers();
    }
  });

  it('resolvePort and the open after it use one TCP connection', async () => {
    const server = await serve({
      signature: 'xiaozhi-mcp port serve port=virtual:a kind=usb-uart',
    });
    const resolved = await resolvePort(server.url);
    expect(resolved.info.kind).toBe('usb-uart');
    const port = await resolved.binding.open({ path: resolved.path, baudRate: 115_200 });
    await port.set({ dtr: false, rts: false });
    await port.write(Buffer.from('hi'));
    await until(() => {
      expect(Buffer.from(server.last.data).toString()).toBe('hi');
      return true;
    });
    await port.close();
    resolved.dispose();
    expect(server.connections).toHaveLength(1);
    // Learned on it first (SIGNATURE, the rate asked), then the port's own settings.
    expect(codes(server.last).slice(0, 3)).toEqual([0, 1, 1]);
    expect(server.last.commands[2]).toEqual({ code: 1, value: [0, 1, 0xc2, 0] });
  });

  it('a resolved port that is never opened closes its connection on dispose', async () => {
    const server = await serve({ signature: 'some server 1.0' });
    const resolved = await resolvePort(server.url);
    resolved.dispose();
    await until(() => {
      expect(server.last.socket.closed).toBe(true);
      return true;
    });
    expect(server.connections).toHaveLength(1);
  });
});

describe('NodeWebSerialPort over Rfc2217Binding', () => {
  it('opens with both lines released, changes lines and baud, and moves bytes both ways', async () => {
    const server = await serve();
    const binding = new Rfc2217Binding();
    const port = new NodeWebSerialPort({ binding, path: server.url });
    await port.open({ baudRate: 115_200 });
    try {
      const connection = server.last;
      // releaseLinesOnOpen: one set() of both lines, RTS first.
      expect(controls(connection)).toEqual([1, 12, 9]);
      await port.setSignals({ dataTerminalReady: true });
      expect(controls(connection)).toEqual([1, 12, 9, 8]);
      await port.setBaudRate(921_600);
      expect(connection.commands.at(-1)).toEqual({ code: 1, value: [0, 0x0e, 0x10, 0] });
      const writer = port.writable?.getWriter();
      await writer?.write(Uint8Array.of(0xc0, 255, 0xc0));
      writer?.releaseLock();
      await until(() => {
        expect(connection.data).toEqual([0xc0, 255, 0xc0]);
        return true;
      });
      server.sendData([0xc0, 255, 0xdb, 0xc0]);
      const reader = port.readable?.getReader();
      const got: number[] = [];
      while (got.length < 4) {
        const { value } = (await reader?.read()) ?? {};
        if (value === undefined) break;
        got.push(...value);
      }
      reader?.releaseLock();
      expect(got).toEqual([0xc0, 255, 0xdb, 0xc0]);
    } finally {
      await port.close();
    }
  });

  it('an open that fails keeps the RFC 2217 error as it is', async () => {
    // Not reworded as a local port's trouble ("close the other program", "list the ports again").
    const line = 'xiaozhi-mcp port serve: busy: serving 10.0.0.7:51514';
    const busy = await rawServer((socket) => socket.end(`${line}\r\n`));
    const port = new NodeWebSerialPort({ binding: new Rfc2217Binding(), path: busy });
    const error = await rejection(port.open({ baudRate: 115_200 }));
    expect(error.code).toBe('PORT_BUSY');
    expect(error.message).toBe(`${busy} is in use: ${line}`);
    const notFound = await rawServer((socket) =>
      socket.once('data', () => socket.end('HTTP/1.1 404 Not Found\r\n\r\n')),
    );
    const other = new NodeWebSerialPort({ binding: new Rfc2217Binding(), path: notFound });
    expect((await rejection(other.open({ baudRate: 115_200 }))).message).toBe(
      `${notFound} is not an RFC 2217 server: it closed the connection before negotiating, having sent "HTTP/1.1 404 Not Found"`,
    );
  });
});
