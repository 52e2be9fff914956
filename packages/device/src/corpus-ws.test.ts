/**
 * Replays every golden corpus case through a whole virtual board over a real WebSocket:
 * the board does its OTA check, connects, says hello, and answers each request inside the
 * envelope. Replies must match the firmware's byte for byte, in order.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fixtureToolReturn, parseToolSet } from '@xiaozhi-mcp/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BoardPreset } from './board-api.js';
import { openSession } from './board-session.test-helper.js';
import { plainHardware } from './presets.js';
import { type DeviceConnection, TestBackend } from './testing/backend.js';
import { FAST_TIMING } from './testing/timing.js';
import { VirtualBoard } from './virtual-board.js';

const corpusDir = join(
  resolve(dirname(fileURLToPath(import.meta.url)), '../../..'),
  'fixtures/corpus/mcp',
);
const files = readdirSync(corpusDir)
  .filter((f) => f.endsWith('.json'))
  .sort();

interface CorpusCase {
  name: string;
  board: { name: string; version: string };
  mode: 'sequential' | 'burst';
  tools: unknown[];
  exchanges?: { request: string; replies: string[] }[];
  requests?: string[];
  replies?: string[];
}

function presetFor(c: CorpusCase): BoardPreset {
  return {
    name: c.board.name,
    chip: 'esp32s3',
    flashSizeMb: 16,
    display: undefined,
    camera: false,
    backlight: false,
    hardware: plainHardware,
    registerTools: (server) => {
      for (const entry of parseToolSet(c.tools)) {
        const { name, description, properties } = entry.tool;
        const handler = (args: { values: ReadonlyMap<string, string | number | boolean> }) =>
          fixtureToolReturn(entry, args.values);
        if (entry.tool.userOnly) server.addUserOnlyTool({ name, description, properties }, handler);
        else server.addTool({ name, description, properties }, handler);
      }
    },
  };
}

const BARRIER_IDS = [2_000_000_001, 2_000_000_002];

/**
 * Waits until everything the device will send for what came before has arrived: two
 * initialize requests in turn, since a successful call's reply takes one more hop than a
 * one-hop reply sent after it. Returns the payloads received before the barrier replies.
 */
async function settle(connection: DeviceConnection, from: number): Promise<string[]> {
  for (const id of BARRIER_IDS) {
    connection.sendPayload(`{"jsonrpc":"2.0","id":${id},"method":"initialize"}`);
    await connection.until(
      () =>
        connection.mcpPayloads
          .slice(from)
          .some((p) => p.startsWith(`{"jsonrpc":"2.0","id":${id},`)),
      5000,
      `barrier ${id}`,
    );
  }
  return connection.mcpPayloads
    .slice(from)
    .filter((p) => !BARRIER_IDS.some((id) => p.startsWith(`{"jsonrpc":"2.0","id":${id},`)));
}

describe('golden corpus over a real WebSocket, through a whole virtual board', () => {
  let backend: TestBackend;
  beforeAll(async () => {
    backend = await TestBackend.start();
  });
  afterAll(async () => {
    await backend.close();
  });

  it('covers every corpus file', () => {
    expect(files.length).toBe(11);
  });

  for (const [index, file] of files.entries()) {
    const c = JSON.parse(readFileSync(join(corpusDir, file), 'utf8')) as CorpusCase;
    it(`${c.name}: byte for byte`, async () => {
      const board = new VirtualBoard({
        preset: presetFor(c),
        app: { version: c.board.version },
        wifi: { ssid: 'rig' },
        otaUrl: backend.otaUrl,
        timing: FAST_TIMING,
      });
      try {
        board.powerOn();
        const connection = await openSession(board, backend, index);

        if (c.mode === 'sequential') {
          for (const exchange of c.exchanges ?? []) {
            const from = connection.mcpPayloads.length;
            connection.sendPayload(exchange.request);
            expect(await settle(connection, from), exchange.request).toEqual(exchange.replies);
          }
        } else {
          const from = connection.mcpPayloads.length;
          const requests = c.requests ?? [];
          // One TCP write: every request reaches the device before its main loop runs.
          const socket = (
            connection.socket as unknown as { _socket: { cork(): void; uncork(): void } }
          )._socket;
          socket.cork();
          for (const request of requests) connection.sendPayload(request);
          socket.uncork();
          const expected = c.replies ?? [];
          await connection.until(
            () => connection.mcpPayloads.length - from >= expected.length,
            5000,
            'burst replies',
          );
          expect(await settle(connection, from)).toEqual(expected);
        }
      } finally {
        board.powerOff();
      }
    });
  }
});
