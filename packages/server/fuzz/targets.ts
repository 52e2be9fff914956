// The server's hostile-input targets, each against the real thing: a real XiaozhiServer on
// 127.0.0.1:0 with a real virtual board (the control board) connected throughout, attacked
// through its WebSocket gateway, its OTA endpoint and its API, and a DeviceSession fed frames
// directly. After every case the server must still be alive (nothing uncaught in this process,
// which hosts it), the control board must still answer a tools/call through the API, and the
// target's own property must hold.
import { EventEmitter } from 'node:events';
import http from 'node:http';
import { type BoardTiming, VirtualBoard } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import {
  type AnyTarget,
  badUtf8,
  binaryBytes,
  CaseFailure,
  capped,
  describeError,
  erase,
  type FuzzTarget,
  fragment,
  objectText,
  ProcessWatch,
  preview,
  scalarText,
} from '@xiaozhi-mcp/fuzz-kit';
import { validateOtaReply } from '@xiaozhi-mcp/protocol';
import { DeviceSession, XiaozhiServer } from '@xiaozhi-mcp/server';
import fc from 'fast-check';
import { pino } from 'pino';
import WebSocket from 'ws';
import {
  bodyText,
  DEVICE_HELLO,
  deviceFrameText,
  deviceIdHeader,
  headerValue,
  helloText,
  pathSegment,
  REAL_ID,
} from './arbitraries.js';

/** The API's Bearer token in this world (the API must accept it whatever else changes). */
export const API_TOKEN = 'fuzz-api-token-0123456789';
const CONTROL_MAC = 'f4:12:fa:c0:00:01';
const FUZZ_DEVICE_MAC = 'fa:22:00:00:20:01';
/** Statuses the OTA endpoint may answer (README: 400 names the field; 403 another device's id; 413 too big; 431 Node's own). */
export const OTA_STATUSES = [200, 202, 400, 403, 405, 409, 413, 431];
/** `/activate` also answers 404 for an unknown or expired challenge (README). */
const ACTIVATE_STATUSES = [...OTA_STATUSES, 404];
/** The serial number with an activation key in this world. */
const FUZZ_SERIAL = 'SN-FUZZ-0001';
/** Statuses the API and the router may answer (README's table, plus 401/403 of the front door, 413/431). */
export const API_STATUSES = [200, 204, 400, 401, 403, 404, 405, 409, 413, 414, 431, 499, 502, 504];
/** The control board answers in a millisecond or two; a call this slow went somewhere else. */
const CONTROL_CALL_TIMEOUT_MS = 2000;
/** A case that waits this long for an answer has stalled the server. */
const ANSWER_TIMEOUT_MS = 5000;

const FAST: Partial<BoardTiming> = {
  ...FAST_TIMING,
  // The control board must not drop its channel on its own during a long run.
  channelIdleMs: 24 * 3600_000,
};

// --- HTTP with a keep-alive agent ------------------------------------------------------------------

export interface HttpAnswer {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: string;
}

export interface HttpAsk {
  readonly method: string;
  readonly path: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly body?: string | undefined;
}

/**
 * One request; resolves with the whole answer, rejects when there is none (a reset, a hang-up,
 * no answer in time). An error after the answer has fully arrived is not the answer's. A reset
 * of a kept-alive socket the server had closed meanwhile is the agent's race, not an answer:
 * that request is sent again once, on a new connection (Node's documented remedy).
 */
export async function httpRequest(
  agent: http.Agent,
  port: number,
  ask: HttpAsk,
): Promise<HttpAnswer> {
  try {
    return await requestOnce(agent, port, ask);
  } catch (error) {
    if (!(error instanceof StaleSocketError)) throw error;
    return requestOnce(agent, port, ask);
  }
}

class StaleSocketError extends Error {}

function requestOnce(agent: http.Agent, port: number, ask: HttpAsk): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    let done = false;
    const finish = (error: Error | undefined, answer?: HttpAnswer) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (error) reject(error);
      else resolve(answer as HttpAnswer);
    };
    const timer = setTimeout(() => {
      finish(new Error(`no answer within ${ANSWER_TIMEOUT_MS} ms`));
      request.destroy();
    }, ANSWER_TIMEOUT_MS);
    const body = ask.body === undefined ? undefined : Buffer.from(ask.body);
    const request = http.request(
      {
        host: '127.0.0.1',
        port,
        method: ask.method,
        path: ask.path,
        // Node's client sends a GET's body with no length at all: say it, or the server reads
        // the body as the next request.
        headers: {
          ...ask.headers,
          ...(body === undefined ? {} : { 'Content-Length': body.length }),
        },
        agent,
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('error', (error) => finish(new Error(`answer cut off: ${error.message}`)));
        response.on('end', () =>
          finish(undefined, {
            status: response.statusCode ?? 0,
            headers: response.headers,
            body: Buffer.concat(chunks).toString('utf8'),
          }),
        );
      },
    );
    request.on('error', (error) => {
      const code = (error as NodeJS.ErrnoException).code ?? error.message;
      finish(
        request.reusedSocket && (code === 'ECONNRESET' || code === 'EPIPE')
          ? new StaleSocketError(code)
          : new Error(`no answer: ${code}`),
      );
    });
    request.end(body);
  });
}

// --- the world: a server and its control board ----------------------------------------------------

export interface WorldOptions {
  /**
   * The control board's tools/call goes through the HTTP API every this many checks, and
   * in-process through the registry in between (the fuzz runner's economy; 1 in tests).
   */
  readonly apiCheckEvery?: number;
}

export class FuzzWorld {
  readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  #volume = 0;
  #checks = 0;

  private constructor(
    readonly server: XiaozhiServer,
    readonly control: VirtualBoard,
    readonly watch: ProcessWatch,
    readonly options: WorldOptions,
  ) {}

  static async start(options: WorldOptions = {}): Promise<FuzzWorld> {
    const watch = new ProcessWatch().start();
    const server = await XiaozhiServer.start({
      host: '127.0.0.1',
      port: 0,
      auth: 'off',
      apiTokens: [API_TOKEN],
      // Opt-in activation for one serial number, so its challenge path is attacked too.
      activationKeys: { [FUZZ_SERIAL]: '00112233445566778899aabbccddeeff' },
      logger: pino({ level: 'silent' }),
    });
    const control = new VirtualBoard({
      mac: CONTROL_MAC,
      wifi: { ssid: 'lab' },
      otaUrl: server.urls.ota,
      timing: FAST,
    });
    const world = new FuzzWorld(server, control, watch, options);
    await world.healControl();
    return world;
  }

  get port(): number {
    return this.server.port;
  }

  /** An API request as a well-behaved client makes it. */
  api(method: string, path: string, body?: unknown): Promise<HttpAnswer> {
    return httpRequest(this.agent, this.port, {
      method,
      path: `${this.server.config.apiPrefix}${path}`,
      headers: {
        Authorization: `Bearer ${API_TOKEN}`,
        ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  }

  /** The control board answers a tools/call (through the API, or the registry), and the call reached it. */
  async checkControl(): Promise<void> {
    this.#volume = (this.#volume + 7) % 101;
    const volume = this.#volume;
    const viaApi = this.#checks++ % (this.options.apiCheckEvery ?? 1) === 0;
    let status = 200;
    let text = '';
    try {
      if (viaApi) {
        const answer = await this.api('POST', `/devices/${CONTROL_MAC}/call`, {
          name: 'self.audio_speaker.set_volume',
          arguments: { volume },
          timeoutMs: CONTROL_CALL_TIMEOUT_MS,
        });
        status = answer.status;
        text = answer.body;
      } else {
        await this.server.registry.callTool(
          CONTROL_MAC,
          'self.audio_speaker.set_volume',
          { volume },
          { timeoutMs: CONTROL_CALL_TIMEOUT_MS },
        );
      }
    } catch (error) {
      if (viaApi) throw new CaseFailure(`the API no longer answers: ${(error as Error).message}`);
      status = 0;
      text = describeError(error);
    }
    if (status !== 200 || this.control.hardware.volume !== volume) {
      throw new CaseFailure(
        `the control board no longer answers tools/call${viaApi ? ' through the API' : ''}: ${status === 0 ? '' : `HTTP ${status} `}${text.slice(0, 200)} (its volume ${this.control.hardware.volume}, expected ${volume})`,
      );
    }
  }

  /** Brings the control board back after a case broke it, so the next case starts clean. */
  async healControl(): Promise<void> {
    const ready = () => {
      const record = this.server.registry.get(CONTROL_MAC);
      return record?.ready === true && record.session !== undefined && !record.session.closed;
    };
    if (ready()) return;
    const board = this.control;
    if (board.state === 'connecting' || board.state === 'listening' || board.state === 'speaking') {
      // A session on its way up, or one the server dropped while the board still holds it.
      await this.server.registry.waitForReady(CONTROL_MAC, 2000).catch(() => {});
      if (ready()) return;
    }
    // Power-cycle: whatever state a case left the board in, a reset is the way back.
    board.powerOff();
    board.powerOn();
    await board.waitForState('idle', 10_000);
    board.click();
    await this.server.registry.waitForReady(CONTROL_MAC, 10_000);
  }

  async close(): Promise<void> {
    this.control.powerOff();
    this.agent.destroy();
    await this.server.stop();
    this.watch.stop();
  }
}

// --- a. the WebSocket gateway and DeviceSession, over the wire ------------------------------------

export type GatewayOp =
  | { readonly kind: 'text'; readonly text: string }
  | { readonly kind: 'bytes'; readonly bytes: Uint8Array; readonly binary: boolean }
  | { readonly kind: 'reconnect'; readonly hello: string };

type Barrier = 'pong' | 'closed' | 'crashed' | 'timeout';

/**
 * A WebSocket round trip after the frames sent: the server reads a connection's frames in
 * order and answers a ping after the frames before it, so the pong means they were handled.
 */
function barrier(ws: WebSocket, watch: ProcessWatch, timeoutMs = 2000): Promise<Barrier> {
  if (ws.readyState !== WebSocket.OPEN) return Promise.resolve('closed');
  return new Promise((resolve) => {
    const done = (outcome: Barrier) => {
      clearTimeout(timer);
      ws.off('pong', onPong);
      ws.off('close', onClose);
      watch.off('event', onCrash);
      resolve(outcome);
    };
    const onPong = () => done('pong');
    const onClose = () => done('closed');
    const onCrash = () => done('crashed');
    const timer = setTimeout(() => done('timeout'), timeoutMs);
    ws.on('pong', onPong);
    ws.on('close', onClose);
    watch.on('event', onCrash);
    ws.ping();
  });
}

/** A hostile device: connects with a valid upgrade, then sends whatever the case says. */
class FuzzDevice {
  ws: WebSocket | undefined;
  /** Ids of the requests the server sent on the current connection, newest last. */
  requestIds: number[] = [];
  closeCode: number | undefined;

  constructor(
    readonly url: string,
    readonly mac: string,
    readonly clientId: string,
    readonly watch: ProcessWatch,
  ) {}

  get open(): boolean {
    return this.ws?.readyState === WebSocket.OPEN;
  }

  get realId(): number {
    return this.requestIds.at(-1) ?? 1;
  }

  /** Opens a connection; resolves false when the upgrade was refused (never throws). */
  async connect(): Promise<boolean> {
    this.ws?.terminate();
    this.requestIds = [];
    this.closeCode = undefined;
    const ws = new WebSocket(this.url, {
      headers: { 'Device-Id': this.mac, 'Client-Id': this.clientId, 'Protocol-Version': '1' },
      perMessageDeflate: false,
      maxPayload: 64 * 1024 * 1024,
    });
    this.ws = ws;
    ws.on('error', () => {});
    ws.on('close', (code) => {
      this.closeCode = code;
    });
    ws.on('message', (data, isBinary) => {
      if (isBinary) return;
      try {
        const frame = JSON.parse(data.toString()) as { type?: unknown; payload?: { id?: unknown } };
        const id = frame.payload?.id;
        if (frame.type === 'mcp' && typeof id === 'number') {
          this.requestIds.push(id);
          if (this.requestIds.length > 8) this.requestIds.shift();
        }
      } catch {
        // the server's frames are JSON; nothing to learn from one that is not
      }
    });
    const outcome = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), ANSWER_TIMEOUT_MS);
      ws.once('open', () => {
        clearTimeout(timer);
        resolve(true);
      });
      ws.once('unexpected-response', (_request, response) => {
        clearTimeout(timer);
        response.resume();
        resolve(false);
      });
      ws.once('close', () => {
        clearTimeout(timer);
        resolve(false);
      });
    });
    return outcome;
  }

  /** Sends one frame and waits until the server has handled it (or closed the connection). */
  async send(data: string | Uint8Array, binary: boolean): Promise<Barrier> {
    const ws = this.ws;
    if (ws === undefined || ws.readyState !== WebSocket.OPEN) return 'closed';
    ws.send(data, { binary });
    return barrier(ws, this.watch);
  }

  close(): void {
    this.ws?.terminate();
    this.ws = undefined;
  }
}

export function gatewayOps(maxBytes: number): fc.Arbitrary<GatewayOp[]> {
  const op: fc.Arbitrary<GatewayOp> = fc.oneof(
    {
      weight: 14,
      arbitrary: deviceFrameText(maxBytes).map((text) => ({ kind: 'text' as const, text })),
    },
    {
      weight: 1,
      arbitrary: binaryBytes(maxBytes).map((bytes) => ({
        kind: 'bytes' as const,
        bytes,
        binary: true,
      })),
    },
    {
      weight: 1,
      arbitrary: badUtf8.map((bytes) => ({ kind: 'bytes' as const, bytes, binary: false })),
    },
    {
      weight: 1,
      arbitrary: helloText(maxBytes).map((hello) => ({ kind: 'reconnect' as const, hello })),
    },
  );
  return fc.array(op, { minLength: 1, maxLength: 3 });
}

function describeOps(ops: readonly GatewayOp[]): string {
  return ops
    .map((op) => {
      switch (op.kind) {
        case 'text':
          return `text ${preview(op.text)}`;
        case 'bytes':
          return `${op.binary ? 'binary' : 'text (bad UTF-8)'} frame of ${op.bytes.length} bytes`;
        case 'reconnect':
          return `reconnect, hello ${preview(op.hello)}`;
      }
      return '';
    })
    .join(' then ');
}

/**
 * a. Hostile frames through the real gateway into a real DeviceSession and registry. A case is
 * one to three frames on one fuzz connection (reconnected when the server closed it); after it
 * the control board must still answer.
 */
export function gatewayTarget(world: FuzzWorld): FuzzTarget<GatewayOp[]> {
  const maxBytes = world.server.config.maxFrameBytes - 256;
  const device = new FuzzDevice(
    world.server.urls.websocket,
    FUZZ_DEVICE_MAC,
    '6c1f8f0e-0000-4000-8000-00000000f001',
    world.watch,
  );
  return {
    name: 'gateway',
    summary:
      'frames from a hostile device over a real WebSocket; the server lives and the control board answers',
    arbitrary: gatewayOps(maxBytes),
    describe: describeOps,
    async run(ops) {
      await world.healControl();
      let ms = 0;
      for (const op of ops) {
        if (op.kind === 'reconnect') {
          if (!(await device.connect())) continue;
        } else if (!device.open && (await device.connect())) {
          await device.send(DEVICE_HELLO, false);
        }
        const started = performance.now();
        const outcome =
          op.kind === 'reconnect'
            ? await device.send(op.hello, false)
            : op.kind === 'text'
              ? await device.send(op.text.replaceAll(REAL_ID, String(device.realId)), false)
              : await device.send(op.bytes, op.binary);
        // The slowest frame is the input's time (a case is up to three frames).
        ms = Math.max(ms, performance.now() - started);
        if (outcome === 'crashed') {
          // The server threw while reading this connection: its reader is in an unknown state.
          device.close();
          break;
        }
        if (outcome === 'timeout') {
          device.close();
          throw new CaseFailure(
            'a stall: the server did not get through the frame within 2 s (no pong)',
          );
        }
      }
      await world.checkControl();
      return ms;
    },
  };
}

// --- a'. a takeover of the control board's Device-Id -------------------------------------------------

export interface TakeoverCase {
  readonly clientId: string;
  readonly hello: string;
  readonly frames: readonly string[];
}

/**
 * a'. A second client with the control board's Device-Id (and another Client-Id) connects and
 * talks while the control board is connected: the control board must still answer its
 * tools/call, and the intruder must never be sent one.
 */
export function takeoverTarget(world: FuzzWorld): FuzzTarget<TakeoverCase> {
  const maxBytes = world.server.config.maxFrameBytes - 256;
  return {
    name: 'takeover',
    summary: "a second client with the control board's Device-Id; the board keeps its tool calls",
    arbitrary: fc.record({
      clientId: fc.oneof(
        { weight: 4, arbitrary: fc.uuid({ version: 4 }) },
        { weight: 1, arbitrary: fc.constantFrom('', 'not-a-uuid') },
      ),
      hello: fc.oneof({ weight: 4, arbitrary: fc.constant(DEVICE_HELLO) }, helloText(maxBytes)),
      frames: fc.array(deviceFrameText(4096), { maxLength: 2 }),
    }),
    describe: (c) =>
      `Client-Id ${preview(c.clientId, 40)}, hello ${preview(c.hello)}, then ${c.frames.length} frames`,
    async run(c) {
      await world.healControl();
      const thief = new FuzzDevice(
        world.server.urls.websocket,
        CONTROL_MAC,
        c.clientId,
        world.watch,
      );
      const calls: string[] = [];
      let ms = 0;
      try {
        // The upgrade is part of the input: a refusal there is the answer it gets.
        const started = performance.now();
        const connected = await thief.connect();
        ms = performance.now() - started;
        if (connected) {
          thief.ws?.on('message', (data, isBinary) => {
            if (!isBinary && data.toString().includes('"tools/call"')) calls.push(data.toString());
          });
          await thief.send(c.hello, false);
          for (const frame of c.frames)
            await thief.send(frame.replaceAll(REAL_ID, String(thief.realId)), false);
          ms = performance.now() - started;
          // The server has handled the intruder's frames (and handed it the board's session, if it
          // would) once it answers a ping sent after them.
          if (thief.ws !== undefined) await barrier(thief.ws, world.watch);
        }
        await world.checkControl();
      } finally {
        thief.close();
      }
      if (calls.length > 0)
        throw new CaseFailure(
          `the intruder was sent the control board's tools/call: ${calls[0]?.slice(0, 200)}`,
        );
      return ms;
    },
  };
}

// --- b. DeviceSession directly --------------------------------------------------------------------

/** The bits of a `ws` WebSocket that DeviceSession uses. */
class FakeSocket extends EventEmitter {
  readonly sent: string[] = [];
  send(text: string, callback?: (error?: Error) => void): void {
    this.sent.push(text);
    if (this.sent.length > 64) this.sent.splice(0, 32);
    callback?.();
  }
  ping(): void {}
  terminate(): void {
    this.emit('close', 1006);
  }
  close(code = 1000): void {
    this.emit('close', code);
  }
}

export type SessionOp =
  | { readonly kind: 'text'; readonly text: string }
  | { readonly kind: 'binary'; readonly bytes: Uint8Array }
  | { readonly kind: 'close' };

export interface SessionCase {
  readonly method: 'tools/call' | 'tools/list' | 'initialize';
  readonly ops: readonly SessionOp[];
}

/**
 * b. DeviceSession fed inbound frames directly (no network, so many more cases): the handler
 * never throws, and the request in flight still settles (with the frames' reply, an error, the
 * close, or the well-formed reply sent after them), leaving nothing pending. Frames are up to
 * the gateway's frame limit, as the gateway lets them through.
 */
export function sessionTarget(maxBytes = 128 * 1024): FuzzTarget<SessionCase> {
  // A new session per case: a case's failure must not leak into the next (nor into its shrinking).
  const fresh = (socket: FakeSocket): DeviceSession =>
    new DeviceSession(
      socket as unknown as import('ws').WebSocket,
      {
        deviceId: FUZZ_DEVICE_MAC,
        clientId: '6c1f8f0e-0000-4000-8000-00000000f002',
        sessionId: 'fuzz-session',
        protocolVersion: 1,
        hello: { type: 'hello', transport: 'websocket' } as never,
        helloText: DEVICE_HELLO,
        remoteAddress: '127.0.0.1',
      },
      { callTimeoutMs: 60_000 },
    );
  const op: fc.Arbitrary<SessionOp> = fc.oneof(
    {
      weight: 20,
      arbitrary: deviceFrameText(maxBytes).map((text) => ({ kind: 'text' as const, text })),
    },
    {
      weight: 1,
      arbitrary: binaryBytes(maxBytes).map((bytes) => ({ kind: 'binary' as const, bytes })),
    },
    { weight: 1, arbitrary: fc.constant({ kind: 'close' as const }) },
  );
  return {
    name: 'session',
    summary:
      'inbound frames straight into a DeviceSession; no throw, the request in flight settles',
    arbitrary: fc.record({
      method: fc.constantFrom('tools/call', 'tools/list', 'initialize'),
      ops: fc.array(op, { minLength: 1, maxLength: 4 }),
    }),
    describe: ({ method, ops }) =>
      `${method} in flight, then ${ops
        .map((o) =>
          o.kind === 'text'
            ? `text ${preview(o.text)}`
            : o.kind === 'binary'
              ? `binary ${o.bytes.length} bytes`
              : 'close',
        )
        .join(' then ')}`,
    async run({ method, ops }) {
      const socket = new FakeSocket();
      const current = fresh(socket);
      let outcome: 'pending' | 'resolved' | 'rejected' = 'pending';
      current.request(method, method === 'tools/call' ? { name: 'x', arguments: {} } : {}).then(
        () => {
          outcome = 'resolved';
        },
        () => {
          outcome = 'rejected';
        },
      );
      const sent = JSON.parse(socket.sent.at(-1) ?? '{}') as { payload?: { id?: number } };
      const id = sent.payload?.id ?? 0;
      // The slowest frame is the input's time: each frame is one the server would read alone.
      let ms = 0;
      for (const o of ops) {
        const started = performance.now();
        try {
          if (o.kind === 'close') socket.terminate();
          else if (o.kind === 'binary') socket.emit('message', Buffer.from(o.bytes), true);
          else socket.emit('message', Buffer.from(o.text.replaceAll(REAL_ID, String(id))), false);
        } catch (error) {
          throw new CaseFailure(`the session's message handler threw: ${describeError(error)}`, {
            cause: error,
          });
        }
        ms = Math.max(ms, performance.now() - started);
      }
      if (!current.closed) {
        socket.emit(
          'message',
          Buffer.from(
            `{"session_id":"fuzz-session","type":"mcp","payload":{"jsonrpc":"2.0","id":${id},"result":{"content":[{"type":"text","text":"ok"}],"isError":false}}}`,
          ),
          false,
        );
      }
      await new Promise((resolve) => setImmediate(resolve));
      if (outcome === 'pending')
        throw new CaseFailure(
          `request ${id} (${method}) is still pending after its reply was sent`,
        );
      if (current.pending !== 0)
        throw new CaseFailure(`${current.pending} requests still pending after every reply`);
      return ms;
    },
  };
}

// --- c. the OTA endpoint ---------------------------------------------------------------------------

const SYSTEM_INFO = {
  version: 2,
  language: 'zh-CN',
  flash_size: 16_777_216,
  minimum_free_heap_size: '123456',
  mac_address: 'fa:22:00:00:10:01',
  uuid: '6c1f8f0e-0000-4000-8000-00000000a001',
  chip_model_name: 'esp32s3',
  chip_info: { model: 9, cores: 2, revision: 2, features: 18 },
  application: {
    name: 'xiaozhi',
    version: '1.6.0',
    compile_time: 'Jan  1 2026T00:00:00Z',
    idf_version: 'v5.4.1',
    elf_sha256: 'a'.repeat(64),
  },
  partition_table: [{ label: 'nvs', type: 1, subtype: 2, address: 36_864, size: 16_384 }],
  ota: { label: 'ota_0' },
  display: { monochrome: false, width: 240, height: 240 },
  board: {
    type: 'bread-compact-wifi',
    name: 'bread-compact-wifi',
    ssid: 'lab',
    rssi: -50,
    channel: 1,
    ip: '192.168.1.2',
    mac: 'fa:22:00:00:10:01',
  },
};

/** Every path in the system-info body, objects and leaves (`application.version`, ...). */
function paths(value: unknown, prefix = ''): string[] {
  if (typeof value !== 'object' || value === null) return [];
  return Object.entries(value).flatMap(([key, child]) => {
    const path = prefix === '' ? key : `${prefix}.${key}`;
    return [path, ...paths(child, path)];
  });
}
const SYSTEM_INFO_PATHS = paths(SYSTEM_INFO);

/** The body as text, each replaced path's value written as given (or left out, for ''). */
function systemInfoText(value: unknown, replace: ReadonlyMap<string, string>, prefix = ''): string {
  if (typeof value !== 'object' || value === null) return JSON.stringify(value);
  if (Array.isArray(value))
    return `[${value.map((v, i) => replace.get(`${prefix}.${i}`) ?? systemInfoText(v, replace, `${prefix}.${i}`)).join(',')}]`;
  const members: string[] = [];
  for (const [key, child] of Object.entries(value)) {
    const path = prefix === '' ? key : `${prefix}.${key}`;
    const replaced = replace.get(path);
    if (replaced === '') continue;
    members.push(`${JSON.stringify(key)}:${replaced ?? systemInfoText(child, replace, path)}`);
  }
  return `{${members.join(',')}}`;
}

export interface OtaCase {
  readonly method: string;
  readonly path: 'ota' | 'ota/' | 'ota/activate';
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string | undefined;
}

function otaCase(controlMac: string, controlUuid: string, maxBytes: number): fc.Arbitrary<OtaCase> {
  const optional = (arbitrary: fc.Arbitrary<string | undefined>) =>
    fc.oneof({ weight: 5, arbitrary }, { weight: 1, arbitrary: fc.constant(undefined) });
  const body = fc.oneof(
    {
      weight: 5,
      arbitrary: fc
        .array(
          fc.tuple(
            fc.constantFrom(...SYSTEM_INFO_PATHS),
            fc.oneof(
              { weight: 6, arbitrary: fragment(maxBytes) },
              { weight: 1, arbitrary: fc.constant('') },
            ),
          ),
          { maxLength: 3 },
        )
        .map((replacements) => systemInfoText(SYSTEM_INFO, new Map(replacements))),
    },
    {
      // An activation answer (docs/protocol.md §7), for the board with a key.
      weight: 1,
      arbitrary: objectText([
        ['algorithm', fc.oneof(fc.constant('"hmac-sha256"'), scalarText)],
        ['serial_number', fc.oneof(fc.constant(JSON.stringify(FUZZ_SERIAL)), scalarText)],
        ['challenge', fragment(4096)],
        ['hmac', fc.oneof(fc.constant(`"${'0'.repeat(64)}"`), fragment(4096))],
      ]),
    },
    { weight: 2, arbitrary: bodyText(maxBytes) },
  );
  return fc.record({
    method: fc.oneof(
      { weight: 12, arbitrary: fc.constant('POST') },
      fc.constantFrom('GET', 'PUT', 'HEAD'),
    ),
    path: fc.oneof(
      { weight: 8, arbitrary: fc.constant('ota/' as const) },
      fc.constantFrom('ota' as const, 'ota/activate' as const),
    ),
    headers: fc
      .record({
        'Device-Id': deviceIdHeader(controlMac),
        'Client-Id': fc.oneof(
          {
            weight: 4,
            arbitrary: fc.constantFrom(
              '6c1f8f0e-0000-4000-8000-00000000a001',
              '6c1f8f0e-0000-4000-8000-00000000a002',
            ),
          },
          { weight: 2, arbitrary: fc.uuid({ version: 4 }) },
          { weight: 1, arbitrary: fc.constant(controlUuid) },
          { weight: 1, arbitrary: headerValue },
        ),
        'Activation-Version': optional(fc.oneof(fc.constantFrom('1', '2'), headerValue)),
        'Serial-Number': optional(fc.oneof(fc.constant(FUZZ_SERIAL), headerValue)),
        'User-Agent': optional(fc.oneof(fc.constant('bread-compact-wifi/1.6.0'), headerValue)),
        'Accept-Language': optional(fc.oneof(fc.constant('zh-CN'), headerValue)),
        'Content-Type': optional(fc.oneof(fc.constant('application/json'), headerValue)),
        'X-Fuzz': optional(headerValue),
      })
      .map((h) =>
        Object.fromEntries(
          Object.entries(h).filter((e): e is [string, string] => e[1] !== undefined),
        ),
      ),
    body: body.map((b) => b),
  });
}

/**
 * c. The OTA endpoint over HTTP (keep-alive): the status is one the endpoint documents, never
 * 500 and never a reset; a 200 is never for a body over the limit, is an OTA reply a board can
 * take, and never carries the control board's token to another Client-Id; the control board
 * still answers.
 */
export function otaTarget(world: FuzzWorld, maxBytes = 128 * 1024): FuzzTarget<OtaCase> {
  const { server, control } = world;
  return {
    name: 'ota',
    summary:
      'hostile OTA checks over HTTP; a documented status, a safe reply, no token for a thief',
    arbitrary: otaCase(CONTROL_MAC, control.uuid, maxBytes),
    describe: (c) =>
      `${c.method} /${c.path} Device-Id ${preview(c.headers['Device-Id'] ?? '(none)', 24)} Client-Id ${preview(c.headers['Client-Id'] ?? '(none)', 40)}, header bytes ${Object.values(c.headers).reduce((n, v) => n + v.length, 0)}, body ${c.body === undefined ? 'none' : preview(c.body)}`,
    async run(c) {
      await world.healControl();
      const started = performance.now();
      let answer: HttpAnswer;
      try {
        answer = await httpRequest(world.agent, world.port, {
          method: c.method,
          path: `${server.config.prefix}/${c.path}`,
          headers: c.headers,
          body: c.body,
        });
      } catch (error) {
        throw new CaseFailure(`the OTA endpoint gave no answer: ${(error as Error).message}`);
      }
      const ms = performance.now() - started;
      if (!(c.path === 'ota/activate' ? ACTIVATE_STATUSES : OTA_STATUSES).includes(answer.status))
        throw new CaseFailure(
          `the OTA endpoint answered ${answer.status}: ${answer.body.slice(0, 300)}`,
        );
      const bodyBytes = Buffer.byteLength(c.body ?? '');
      if (answer.status === 200 && bodyBytes > server.config.maxOtaBodyBytes)
        throw new CaseFailure(
          `a 200 for a ${bodyBytes}-byte body, over maxOtaBodyBytes (${server.config.maxOtaBodyBytes})`,
        );
      if (answer.status === 200 && c.path !== 'ota/activate') {
        let reply: { websocket?: { token?: unknown } };
        try {
          reply = JSON.parse(answer.body);
        } catch {
          throw new CaseFailure(`a 200 whose body is not JSON: ${answer.body.slice(0, 200)}`);
        }
        const hazards = validateOtaReply(reply).filter((f) => f.severity === 'hazard');
        if (hazards.length > 0)
          throw new CaseFailure(
            `a 200 with a hazard for the board: ${hazards.map((h) => h.message).join('; ')}`,
          );
        const deviceId = (c.headers['Device-Id'] ?? '').toLowerCase();
        const token = server.tokenFor(CONTROL_MAC);
        if (
          deviceId === CONTROL_MAC &&
          c.headers['Client-Id'] !== control.uuid &&
          token !== undefined &&
          reply.websocket?.token === token
        ) {
          throw new CaseFailure(
            `the control board's token went to another Client-Id (${c.headers['Client-Id']}): a session takeover`,
          );
        }
      }
      await world.checkControl();
      return ms;
    },
  };
}

// --- d. the API --------------------------------------------------------------------------------------

export type ApiCase = HttpAsk;

const SAFE_TOOLS = [
  '"self.get_device_status"',
  '"self.audio_speaker.set_volume"',
  '"self.get_system_info"',
  '"self.no_such_tool"',
  '"a\\"b"',
  '""',
];

function apiCase(world: FuzzWorld, maxBytes: number): fc.Arbitrary<ApiCase> {
  const { apiPrefix, prefix } = world.server.config;
  const own = `127.0.0.1:${world.port}`;
  const segment = pathSegment(CONTROL_MAC);
  const query = fc.oneof(
    { weight: 3, arbitrary: fc.constant('') },
    {
      weight: 1,
      arbitrary: fc
        .array(
          fc.tuple(
            fc.constantFrom('limit', 'cursor', 'offset', 'x', ''),
            fc.oneof(fc.constantFrom('10', '-1', '0', '1e9', '%zz', '%', 'NaN', ''), segment),
          ),
          { maxLength: 3 },
        )
        .map((pairs) => `?${pairs.map(([k, v]) => `${k}=${v}`).join('&')}`),
    },
  );
  const path = fc.oneof(
    {
      weight: 8,
      arbitrary: fc
        .tuple(fc.array(segment, { minLength: 0, maxLength: 4 }), query)
        .map(([segs, q]) => `${apiPrefix}/${segs.join('/')}${q}`),
    },
    {
      weight: 2,
      arbitrary: fc
        .tuple(
          fc.constantFrom('devices', 'devices/'),
          fc.constantFrom(CONTROL_MAC, 'fa:22:00:00:10:01'),
          fc.constantFrom('call', 'tools', ''),
        )
        .map(([d, id, tail]) => `${apiPrefix}/${d}${d.endsWith('/') ? '' : '/'}${id}/${tail}`),
    },
    {
      weight: 1,
      arbitrary: fc
        .array(segment, { minLength: 1, maxLength: 3 })
        .map((segs) => `${prefix}/firmware/${segs.join('/')}`),
    },
    {
      weight: 1,
      arbitrary: fc.array(segment, { maxLength: 3 }).map((segs) => `/${segs.join('/')}`),
    },
  );
  const callBody = capped(
    objectText([
      [
        'name',
        fc.oneof(
          { weight: 4, arbitrary: fc.constantFrom(...SAFE_TOOLS) },
          { weight: 1, arbitrary: scalarText },
        ),
      ],
      [
        'arguments',
        fc.oneof(
          fc.constant('{"volume":50}'),
          objectText([['volume', scalarText]]),
          fragment(maxBytes),
        ),
      ],
      [
        'timeoutMs',
        fc.oneof(
          fc.constantFrom(
            '1',
            '0',
            '-1',
            '50',
            '1e10',
            '2147483648',
            '1.5',
            '"100"',
            'null',
            '1e400',
          ),
          scalarText,
        ),
      ],
    ]),
    maxBytes,
  );
  const optional = (arbitrary: fc.Arbitrary<string>) =>
    fc.oneof({ weight: 1, arbitrary }, { weight: 4, arbitrary: fc.constant(undefined) });
  return (
    fc
      .record({
        method: fc.oneof(
          { weight: 6, arbitrary: fc.constantFrom('GET', 'POST') },
          {
            weight: 1,
            arbitrary: fc.constantFrom(
              'PUT',
              'DELETE',
              'PATCH',
              'OPTIONS',
              'HEAD',
              'TRACE',
              'PROPFIND',
              'FOO',
            ),
          },
        ),
        path,
        headers: fc
          .record({
            Authorization: fc.oneof(
              { weight: 8, arbitrary: fc.constant(`Bearer ${API_TOKEN}`) },
              {
                weight: 1,
                arbitrary: fc.constantFrom(
                  API_TOKEN,
                  'Bearer ',
                  `Bearer ${API_TOKEN}x`,
                  `bearer ${API_TOKEN}`,
                ),
              },
              { weight: 1, arbitrary: headerValue },
              { weight: 1, arbitrary: fc.constant(undefined) },
            ),
            Origin: optional(
              fc.oneof(
                fc.constantFrom(
                  `http://${own}`,
                  'http://evil.example',
                  'null',
                  `http://localhost:${world.port}`,
                ),
                headerValue,
              ),
            ),
            Host: optional(
              fc.oneof(
                fc.constantFrom(own, 'evil.example', `localhost:${world.port}`, '127.0.0.1'),
                headerValue,
              ),
            ),
            'Content-Type': optional(
              fc.oneof(fc.constantFrom('application/json', 'text/plain'), headerValue),
            ),
            Upgrade: fc.oneof(
              { weight: 20, arbitrary: fc.constant(undefined) },
              { weight: 1, arbitrary: fc.constant('websocket') },
            ),
            'X-Fuzz': optional(headerValue),
          })
          .map((h) => {
            const headers = Object.fromEntries(
              Object.entries(h).filter((e): e is [string, string] => e[1] !== undefined),
            );
            if (headers.Upgrade !== undefined) headers.Connection = 'Upgrade';
            return headers;
          }),
        body: fc.oneof(
          { weight: 3, arbitrary: fc.constant(undefined) },
          { weight: 4, arbitrary: callBody },
          { weight: 2, arbitrary: bodyText(maxBytes) },
        ),
      })
      // DELETE /devices/:id is the operator releasing a device: on the control board it is no attack.
      .filter(
        (c) =>
          c.method !== 'DELETE' ||
          !c.path.toLowerCase().replaceAll('%3a', ':').includes(CONTROL_MAC),
      )
  );
}

/**
 * Statuses that serve nothing and reach no device: the front door's refusals, Node's own, and
 * "no such route" (the other statuses mean the API did the request's work).
 */
const REFUSALS = [400, 401, 403, 404, 405, 413, 414, 431];

/**
 * Why the API must refuse this request without serving it, if it must: no API token, or an
 * `Origin`/`Host` that is not the server's own (DNS rebinding, a cross-site POST).
 */
function mustRefuse(c: ApiCase, apiPrefix: string, port: number): string | undefined {
  const path = c.path.split('?')[0] ?? '';
  if (path !== apiPrefix && !path.startsWith(`${apiPrefix}/`)) return undefined;
  // An upgrade request goes to the WebSocket side, never to the API.
  if (c.headers?.Upgrade !== undefined) return undefined;
  const own = new Set([`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`]);
  const { Authorization: authorization, Origin: origin, Host: host } = c.headers ?? {};
  if (authorization === undefined || authorization.replace(/^bearer /i, '') !== API_TOKEN)
    return 'it has no API token';
  // Node's client sends its own Host in place of an empty one.
  if (host !== undefined && host !== '' && !own.has(host.toLowerCase()))
    return `its Host is ${host}`;
  if (
    origin !== undefined &&
    !(origin.toLowerCase().startsWith('http://') && own.has(origin.slice(7).toLowerCase()))
  )
    return `its Origin is ${origin}`;
  return undefined;
}

/**
 * d. The API (and the router around it) over HTTP: a documented status with a JSON answer,
 * never 500 and never a reset; a request without the API token, or from another origin or
 * host, is refused; the control board still answers.
 */
export function apiTarget(world: FuzzWorld, maxBytes = 128 * 1024): FuzzTarget<ApiCase> {
  return {
    name: 'api',
    summary:
      'hostile API requests (methods, paths, escapes, headers, bodies); a documented JSON answer',
    arbitrary: apiCase(world, maxBytes),
    describe: (c) =>
      `${c.method} ${preview(c.path, 50)} headers ${JSON.stringify(Object.keys(c.headers ?? {}))} Origin ${preview(c.headers?.Origin ?? '(none)', 30)} Host ${preview(c.headers?.Host ?? '(default)', 30)}, body ${c.body === undefined ? 'none' : preview(c.body)}`,
    async run(c) {
      await world.healControl();
      const started = performance.now();
      let answer: HttpAnswer;
      try {
        answer = await httpRequest(world.agent, world.port, c);
      } catch (error) {
        throw new CaseFailure(`no answer: ${(error as Error).message}`);
      }
      const ms = performance.now() - started;
      if (!API_STATUSES.includes(answer.status))
        throw new CaseFailure(`answered ${answer.status}: ${answer.body.slice(0, 300)}`);
      const refuse = mustRefuse(c, world.server.config.apiPrefix, world.port);
      if (refuse !== undefined && !REFUSALS.includes(answer.status))
        throw new CaseFailure(
          `served a request it must refuse (${preview(refuse, 60)}): ${answer.status} ${answer.body.slice(0, 120)}`,
        );
      if (answer.body !== '') {
        try {
          JSON.parse(answer.body);
        } catch {
          throw new CaseFailure(
            `answered ${answer.status} with a body that is not JSON: ${answer.body.slice(0, 200)}`,
          );
        }
      }
      await world.checkControl();
      return ms;
    },
  };
}

/** Every server target, in the order the runners run them, with its share of a fuzz run. */
export function serverTargets(world: FuzzWorld): { target: AnyTarget; share: number }[] {
  return [
    { target: erase(gatewayTarget(world)), share: 0.28 },
    { target: erase(takeoverTarget(world)), share: 0.02 },
    { target: erase(sessionTarget()), share: 0.3 },
    { target: erase(otaTarget(world)), share: 0.2 },
    { target: erase(apiTarget(world)), share: 0.2 },
  ];
}
