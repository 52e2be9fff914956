/**
 * The tests' rig (not a suite; vitest.config.ts leaves it out): a real `XiaozhiServer` on
 * 127.0.0.1 with virtual boards from the device SDK, boards with test tools of our own, and
 * a gate to hold a tool's answer.
 */
import {
  type BoardPreset,
  boardPreset,
  type McpServer,
  VirtualBoard,
  type VirtualBoardOptions,
} from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { ImageContent } from '@xiaozhi-mcp/protocol';
import { type StartOptions, XiaozhiServer } from '@xiaozhi-mcp/server';

/** A PNG signature and IHDR start: the bytes the image tool returns, as a literal. */
export const PNG_BYTES = Uint8Array.from([
  0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
]);
/** The same bytes in base64, written out by hand. */
export const PNG_BASE64 = 'iVBORw0KGgoAAAANSUhEUg==';
/** What the failing tool throws: a quote, a backslash and a newline, sent unescaped. */
export const FAILURE_TEXT = 'Failed to "capture" C:\\photo\nnow';

/** Holds a tool's answer until opened. */
export class Gate {
  #open: (() => void) | undefined;
  readonly entered: Promise<void>;
  #entered!: () => void;
  constructor() {
    this.entered = new Promise((resolve) => {
      this.#entered = resolve;
    });
  }
  wait(): Promise<void> {
    this.#entered();
    return new Promise((resolve) => {
      this.#open = resolve;
    });
  }
  open(): void {
    this.#open?.();
  }
}

export interface TestTools {
  /** How many filler tools (`self.test.tool_000`, ...) the board declares. */
  readonly many?: number;
  /** The gate `self.test.wait` waits on. */
  readonly gate?: Gate;
}

/** The breadboard preset plus test tools: an image, a failure, a wait, and fillers. */
export function testPreset(name: string, tools: TestTools = {}): BoardPreset {
  const base = boardPreset('bread-compact-wifi');
  return {
    ...base,
    name,
    registerTools: (server: McpServer, board) => {
      base.registerTools(server, board);
      server.addTool({ name: 'self.test.image', description: 'A tiny PNG' }, () => {
        return new ImageContent('image/png', PNG_BYTES);
      });
      server.addTool({ name: 'self.test.fail', description: 'Always fails' }, () => {
        throw new Error(FAILURE_TEXT);
      });
      server.addTool({ name: 'self.test.wait', description: 'Answers when let go' }, async () => {
        await tools.gate?.wait();
        return 'done';
      });
      for (let i = 0; i < (tools.many ?? 0); i++) {
        server.addTool(
          {
            name: `self.test.tool_${String(i).padStart(3, '0')}`,
            description: `Filler tool number ${i}`,
            properties: [{ name: 'level', type: 'integer', minimum: 0, maximum: 100 }],
          },
          (args) => args.integer('level'),
        );
      }
    },
  };
}

export class Rig {
  server: XiaozhiServer | undefined;
  readonly boards: VirtualBoard[] = [];
  #macs = 0;

  async start(options: StartOptions = {}): Promise<XiaozhiServer> {
    this.server = await XiaozhiServer.start({ port: 0, logLevel: 'silent', ...options });
    return this.server;
  }

  get base(): string {
    if (this.server === undefined) throw new Error('rig not started');
    return this.server.urls.http;
  }

  board(options: VirtualBoardOptions = {}): VirtualBoard {
    if (this.server === undefined) throw new Error('rig not started');
    this.#macs++;
    const board = new VirtualBoard({
      mac: `f4:12:fa:20:00:${this.#macs.toString(16).padStart(2, '0')}`,
      wifi: { ssid: 'lab' },
      otaUrl: this.server.urls.ota,
      // The firmware's pauses shortened, with a hello wait for a busy machine.
      timing: { ...FAST_TIMING, helloTimeoutMs: 5000 },
      ...options,
    });
    this.boards.push(board);
    return board;
  }

  /** Powers a board on, clicks BOOT once idle, and waits until the server has its tools. */
  async connect(board: VirtualBoard): Promise<void> {
    if (this.server === undefined) throw new Error('rig not started');
    board.powerOn();
    await board.waitForState('idle', 10_000);
    board.click();
    await this.server.registry.waitForReady(board.mac, 20_000);
  }

  async stop(): Promise<void> {
    for (const board of this.boards.splice(0)) board.powerOff();
    this.#macs = 0;
    await this.server?.stop();
    this.server = undefined;
  }
}
