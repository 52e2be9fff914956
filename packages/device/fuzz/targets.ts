// The device SDK's hostile-input targets, each against the real thing: the McpServer (on the
// protocol core's McpRequestLoop) fed what a hostile backend can send, under both profiles, and
// a real VirtualBoard connected to a backend that sends it hostile frames over a WebSocket.
import { type BoardTiming, type McpProfile, McpServer, VirtualBoard } from '@xiaozhi-mcp/device';
import { type DeviceConnection, FAST_TIMING, TestBackend } from '@xiaozhi-mcp/device/testing';
import {
  type AnyTarget,
  CaseFailure,
  describeError,
  erase,
  type FuzzTarget,
  type ProcessWatch,
  preview,
} from '@xiaozhi-mcp/fuzz-kit';
import {
  encodeDeviceEnvelope,
  ImageContent,
  Prop,
  readBackendFrame,
  readDeviceFrame,
  readJsonRpc,
} from '@xiaozhi-mcp/protocol';
import fc from 'fast-check';
import WebSocket from 'ws';
import { ANY_ID, backendFrameText, mcpRequestText, type RequestVocabulary } from './arbitraries.js';

/** Resolves with `promise`, or fails the case after `ms` (a stuck main loop, a lost reply). */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new CaseFailure(`${what} within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

// --- e. the device SDK's McpServer -----------------------------------------------------------------

const FILLERS = 24;

/**
 * An McpServer with tools of every property type, a tool that throws with a message full of
 * quotes, an async one, one returning an image, a user-only one, a name with a quote in it
 * (the firmware writes cursors unescaped), and fillers enough for several tools/list pages.
 */
function fuzzMcpServer(profile: McpProfile): McpServer {
  const server = new McpServer({ board: { name: 'fuzz-board', version: '1.0.0' }, profile });
  server.addCommonTool(
    { name: 'self.fuzz.echo', description: 'Echoes text.', properties: [Prop.string('text')] },
    (args) => args.string('text'),
  );
  server.addCommonTool(
    {
      name: 'self.fuzz.set_level',
      description: 'Sets a level.',
      properties: [Prop.integer('level', { min: 0, max: 100 })],
    },
    (args) => args.integer('level') >= 0,
  );
  server.addTool(
    {
      name: 'self.fuzz.flags',
      description: 'Defaults of every type.',
      properties: [
        Prop.boolean('on'),
        Prop.integer('count', { default: 3, min: -10, max: 10 }),
        Prop.string('label', { default: 'x' }),
      ],
    },
    (args) => ({ json: { on: args.boolean('on'), count: args.integer('count') } }),
  );
  server.addTool({ name: 'self.fuzz.fail', description: 'Always fails.' }, () => {
    throw new Error('failed: "quoted" \\ back\nslash }} ]');
  });
  server.addTool({ name: 'self.fuzz.async', description: 'Answers later.' }, async () => {
    await new Promise((resolve) => setImmediate(resolve));
    return 42;
  });
  server.addTool(
    { name: 'self.fuzz.image', description: 'A tiny image.' },
    () => new ImageContent('image/png', new Uint8Array([137, 80, 78, 71])),
  );
  for (let i = 0; i < FILLERS; i++) {
    server.addTool(
      {
        name: i === FILLERS / 2 ? 'self.fuzz.quote"d' : `self.fuzz.filler_${i}`,
        description: `Filler ${i}: ${'d'.repeat(400)}`,
        properties: [Prop.string('text', { default: '' })],
      },
      () => true,
    );
  }
  server.addUserOnlyTool({ name: 'self.fuzz.secret', description: 'User only.' }, () => 'secret');
  return server;
}

export const MCP_VOCABULARY: RequestVocabulary = {
  tools: [
    'self.fuzz.echo',
    'self.fuzz.set_level',
    'self.fuzz.flags',
    'self.fuzz.fail',
    'self.fuzz.async',
    'self.fuzz.image',
    'self.fuzz.secret',
    'self.fuzz.quote"d',
    'self.fuzz.filler_3',
    `self.fuzz.filler_${FILLERS - 1}`,
  ],
  properties: ['text', 'level', 'on', 'count', 'label'],
};

export interface McpCase {
  /** `text`: the payload text as is; `envelope`: the backend frame, read the device's way. */
  readonly via: 'text' | 'envelope';
  readonly payloads: readonly string[];
  readonly id: number;
}

/**
 * A reply the device emits must be a string the protocol core can read back (readJsonRpc: a
 * result or an error with an id) and that a backend reads out of the device's envelope.
 */
function checkReply(reply: unknown, profile: McpProfile): void {
  if (typeof reply !== 'string')
    throw new CaseFailure(`a reply that is not a string: ${String(reply)}`);
  let message: ReturnType<typeof readJsonRpc>;
  try {
    message = readJsonRpc(reply);
  } catch (error) {
    throw new CaseFailure(
      `readJsonRpc threw on a reply: ${describeError(error)} ${preview(reply)}`,
    );
  }
  if (message.kind !== 'result' && message.kind !== 'error')
    throw new CaseFailure(
      `a reply the protocol core reads as ${message.kind}: ${preview(reply, 200)}`,
    );
  if (profile === 'firmware' && !Number.isInteger(message.id))
    throw new CaseFailure(`a firmware reply whose id is not a C int: ${preview(reply, 200)}`);
  let frame: ReturnType<typeof readDeviceFrame>;
  try {
    frame = readDeviceFrame(encodeDeviceEnvelope('s', reply));
  } catch (error) {
    throw new CaseFailure(
      `readDeviceFrame threw on the reply's envelope: ${describeError(error)} ${preview(reply)}`,
    );
  }
  if (frame.kind !== 'mcp' || frame.message.kind !== message.kind)
    throw new CaseFailure(`a backend cannot read the reply's envelope: ${preview(reply, 200)}`);
}

/**
 * e. The device SDK's MCP server fed hostile payloads (every method, bent params, odd ids, deep,
 * huge): it never throws, its main loop goes idle, it answers each request at most once, and
 * every reply is one the protocol core can read (or it drops the request, as the firmware does).
 */
export function mcpTarget(profile: McpProfile, maxBytes = 128 * 1024): FuzzTarget<McpCase> {
  const server = fuzzMcpServer(profile);
  const payload = mcpRequestText(MCP_VOCABULARY, maxBytes);
  return {
    name: `mcp-${profile}`,
    summary: `hostile payloads into McpServer (${profile} profile); no throw, readable replies`,
    arbitrary: fc.record({
      via: fc.constantFrom('text' as const, 'envelope' as const),
      payloads: fc.array(payload, { minLength: 1, maxLength: 3 }),
      id: fc.integer({ min: -5, max: 2_147_483_647 }),
    }),
    describe: (c) =>
      `${c.via === 'text' ? 'payload text' : 'backend envelope'} ${c.payloads.map((p) => preview(p)).join(' then ')}`,
    async run(c) {
      const replies: unknown[] = [];
      server.setSender((reply) => replies.push(reply));
      const started = performance.now();
      for (const text of c.payloads) {
        const payload = text.replaceAll(ANY_ID, String(c.id));
        try {
          if (c.via === 'text') server.handlePayload(payload);
          else {
            const frame = readBackendFrame(`{"session_id":"s","type":"mcp","payload":${payload}}`);
            if (frame?.payload !== undefined) server.handlePayload(frame.payload);
          }
        } catch (error) {
          throw new CaseFailure(`the MCP server threw: ${describeError(error)}`);
        }
      }
      await within(server.idle(), 5000, 'the main loop did not go idle');
      const ms = performance.now() - started;
      server.setSender(undefined);
      if (replies.length > c.payloads.length)
        throw new CaseFailure(`${replies.length} replies to ${c.payloads.length} requests`);
      for (const reply of replies) checkReply(reply, profile);
      return ms;
    },
  };
}

// --- e'. the virtual board's receive path --------------------------------------------------------

/** The firmware's pauses shortened, and no idle close while frames are played. */
const FAST: Partial<BoardTiming> = { ...FAST_TIMING, channelIdleMs: 24 * 3600_000 };

/** Tools of the board's preset the hostile frames may call: none reboots, upgrades or fetches. */
const BOARD_VOCABULARY: RequestVocabulary = {
  tools: ['self.get_device_status', 'self.audio_speaker.set_volume', 'self.no_such_tool'],
  properties: ['volume'],
};

export type BoardFrame =
  | { readonly kind: 'text'; readonly text: string }
  | { readonly kind: 'binary'; readonly bytes: Uint8Array }
  /** A valid tools/call padded past a board's receive limit: the board must not act on it. */
  | { readonly kind: 'oversize'; readonly id: number; readonly text: string };

/** A board's frames are at most this long (docs/protocol.md §4); it cannot take a longer one. */
const BOARD_FRAME_LIMIT = 65_535;

/**
 * No line the firmware prints on its own comes near this; a backend must not be able to make
 * the board print one (a UART log line costs the board its serial time).
 */
const CONSOLE_LINE_BOUND = 4096;

/** A real virtual board connected to a backend that will send it hostile frames. */
export class BoardWorld {
  #nextId = 2_000_000_000;
  #volume = 0;
  /** The longest console line since the last {@link takeLongestLine}. */
  #longest = '';

  private constructor(
    readonly backend: TestBackend,
    readonly board: VirtualBoard,
    readonly watch: ProcessWatch,
  ) {
    board.console.on('line', (line) => {
      if (line.text.length > this.#longest.length) this.#longest = line.text;
    });
  }

  /** The longest line the board printed since the last call. */
  takeLongestLine(): string {
    const longest = this.#longest;
    this.#longest = '';
    return longest;
  }

  static async start(watch: ProcessWatch): Promise<BoardWorld> {
    const backend = await TestBackend.start();
    const board = new VirtualBoard({
      mac: 'f4:12:fa:d0:00:01',
      wifi: { ssid: 'lab' },
      otaUrl: backend.otaUrl,
      timing: FAST,
    });
    const world = new BoardWorld(backend, board, watch);
    await world.connection();
    return world;
  }

  /** The board's open session, reopened (BOOT click) when a case closed it or rebooted the board. */
  async connection(): Promise<DeviceConnection> {
    const current = this.backend.connections.at(-1);
    const { board } = this;
    if (
      current?.hello !== undefined &&
      current.socket.readyState === WebSocket.OPEN &&
      (board.state === 'listening' || board.state === 'speaking')
    )
      return current;
    current?.socket.terminate();
    if (board.state === 'off') board.powerOn();
    await board.waitForState('idle', 10_000);
    const index = this.backend.connections.length;
    board.click();
    const next = await this.backend.connection(index, 10_000);
    await board.waitForState('listening', 10_000);
    return next;
  }

  /** Sends a frame and waits until the board has read it (a ping's pong comes after it). */
  async send(connection: DeviceConnection, frame: BoardFrame): Promise<'read' | 'closed'> {
    const { socket } = connection;
    if (socket.readyState !== WebSocket.OPEN) return 'closed';
    if (frame.kind === 'binary') socket.send(frame.bytes, { binary: true });
    else socket.send(frame.text);
    return new Promise((resolve) => {
      const done = (outcome: 'read' | 'closed') => {
        clearTimeout(timer);
        socket.off('pong', onPong);
        socket.off('close', onClose);
        resolve(outcome);
      };
      const onPong = () => done('read');
      const onClose = () => done('closed');
      const timer = setTimeout(() => done('closed'), 5000);
      socket.on('pong', onPong);
      socket.on('close', onClose);
      socket.ping();
    });
  }

  /**
   * The board still answers a tools/call on its session, or the session is gone (a frame made
   * it close or reboot, which the next case heals).
   */
  async checkAnswers(connection: DeviceConnection): Promise<void> {
    const { socket } = connection;
    if (socket.readyState !== WebSocket.OPEN) return;
    const id = this.#nextId++;
    this.#volume = (this.#volume + 7) % 101;
    const volume = this.#volume;
    const reply = new Promise<string | undefined>((resolve) => {
      const onMessage = (data: WebSocket.RawData, isBinary: boolean) => {
        if (isBinary) return;
        const text = data.toString();
        if (!text.includes(`"id":${id}`)) return;
        done(text);
      };
      const done = (text: string | undefined) => {
        clearTimeout(timer);
        socket.off('message', onMessage);
        socket.off('close', onClose);
        resolve(text);
      };
      const onClose = () => done(undefined);
      const timer = setTimeout(() => done(undefined), 3000);
      socket.on('message', onMessage);
      socket.on('close', onClose);
    });
    connection.sendPayload(
      `{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"self.audio_speaker.set_volume","arguments":{"volume":${volume}}}}`,
    );
    const text = await reply;
    const state = this.board.state;
    if (text === undefined) {
      if (socket.readyState !== WebSocket.OPEN || (state !== 'listening' && state !== 'speaking'))
        return;
      throw new CaseFailure(`the board no longer answers tools/call (state ${state})`);
    }
    if (this.board.hardware.volume !== volume)
      throw new CaseFailure(
        `the board answered but its volume is ${this.board.hardware.volume}, not ${volume}`,
      );
  }

  async close(): Promise<void> {
    this.board.powerOff();
    await this.backend.close();
  }
}

/**
 * e'. A real virtual board's receive path (readBackendFrame, frameAction, the MCP server behind
 * them) fed hostile frames by its backend: nothing throws, every frame the board sends back is
 * one a backend can read, it does not act on a frame longer than a board can receive, it prints
 * no line longer than a UART log line could be, and it still answers tools/call on its session.
 */
/** A little over a board's receive limit (64 KiB), so some frames are too big for it. */
const BOARD_FRAME_BYTES = 70_000;

export function boardTarget(
  world: BoardWorld,
  maxBytes = BOARD_FRAME_BYTES,
): FuzzTarget<BoardFrame[]> {
  const frame: fc.Arbitrary<BoardFrame> = fc.oneof(
    {
      weight: 12,
      arbitrary: backendFrameText(BOARD_VOCABULARY, maxBytes).map((text) => ({
        kind: 'text' as const,
        text: text.replaceAll(ANY_ID, '7'),
      })),
    },
    {
      weight: 1,
      arbitrary: fc
        .uint8Array({ maxLength: 400 })
        .map((bytes) => ({ kind: 'binary' as const, bytes })),
    },
    {
      weight: 1,
      arbitrary: fc
        .tuple(
          fc.integer({ min: 1_900_000_000, max: 1_999_999_999 }),
          fc.integer({ min: BOARD_FRAME_LIMIT + 1, max: 4 * BOARD_FRAME_LIMIT }),
        )
        .map(([id, size]) => {
          const head = `{"session_id":"s","type":"mcp","payload":{"jsonrpc":"2.0","id":${id},"method":"tools/call","params":{"name":"self.get_device_status","arguments":{},"pad":"`;
          const tail = '"}}}';
          return {
            kind: 'oversize' as const,
            id,
            text: `${head}${'x'.repeat(Math.max(0, size - head.length - tail.length))}${tail}`,
          };
        }),
    },
  );
  return {
    name: 'board',
    summary: "hostile backend frames into a virtual board's session; no throw, still answers",
    arbitrary: fc.array(frame, { minLength: 1, maxLength: 3 }),
    describe: (frames) =>
      frames
        .map((f) =>
          f.kind === 'binary'
            ? `binary ${f.bytes.length} bytes`
            : `${f.kind === 'oversize' ? 'oversize tools/call ' : 'text '}${preview(f.text)}`,
        )
        .join(' then '),
    async run(frames) {
      const connection = await world.connection();
      world.takeLongestLine();
      const before = connection.frames.length;
      const started = performance.now();
      for (const f of frames) if ((await world.send(connection, f)) === 'closed') break;
      const ms = performance.now() - started;
      await world.checkAnswers(connection);
      for (const f of frames) {
        if (f.kind === 'oversize' && connection.texts.some((t) => t.includes(`"id":${f.id},`)))
          throw new CaseFailure(
            `the board answered a ${Buffer.byteLength(f.text)}-byte frame, over the ${BOARD_FRAME_LIMIT} bytes a board can receive`,
          );
      }
      const longest = world.takeLongestLine();
      if (Buffer.byteLength(longest) > CONSOLE_LINE_BOUND)
        throw new CaseFailure(
          `a backend frame made the board print a ${Buffer.byteLength(longest)}-byte console line: ${preview(longest)}`,
        );
      for (const [i, read] of connection.frames.slice(before).entries()) {
        if (read.kind === 'invalid' || (read.kind === 'mcp' && read.message.kind === 'invalid'))
          throw new CaseFailure(
            `the board sent a frame a backend cannot read: ${preview(connection.texts[before + i] ?? '', 200)}`,
          );
      }
      return ms;
    },
  };
}

/** Every device target, in the order the runners run them, with its share of a fuzz run. */
export function deviceTargets(world: BoardWorld): { target: AnyTarget; share: number }[] {
  return [
    { target: erase(mcpTarget('firmware')), share: 0.45 },
    { target: erase(mcpTarget('strict')), share: 0.25 },
    { target: erase(boardTarget(world)), share: 0.3 },
  ];
}
