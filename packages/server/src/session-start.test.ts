/**
 * A session that cannot start says so at once: a refused hello, an `initialize` reply without
 * `serverInfo` and a `tools/list` walk that loops are events (`hello-refused`,
 * `session-failed`) and end `waitForReady` with `SESSION_FAILED` instead of its timeout; a reply
 * under the wrong id is named as such.
 */
import { once } from 'node:events';
import { VirtualBoard } from '@xiaozhi-mcp/device';
import { FAST_TIMING, type FaultKnobs } from '@xiaozhi-mcp/device/testing';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { ServerError } from './errors.js';
import type { HelloRefusal, SessionStage } from './registry.js';
import { XiaozhiServer } from './server.js';

let server: XiaozhiServer | undefined;
const boards: VirtualBoard[] = [];

afterEach(async () => {
  for (const board of boards.splice(0)) board.powerOff();
  await server?.stop();
  server = undefined;
});

async function clicked(
  mac: string,
  faults: Partial<FaultKnobs>,
): Promise<{ target: XiaozhiServer; board: VirtualBoard }> {
  server = await XiaozhiServer.start({ port: 0, logLevel: 'silent' });
  const board = new VirtualBoard({
    mac,
    wifi: { ssid: 'lab' },
    otaUrl: server.urls.ota,
    timing: FAST_TIMING,
    faults,
  });
  boards.push(board);
  board.powerOn();
  await board.waitForState('idle', 5000);
  board.click();
  return { target: server, board };
}

/**
 * `waitForReady` with a long bound: it must end at the failure, not at the bound (which would
 * say DEVICE_NOT_READY).
 */
async function failure(target: XiaozhiServer, mac: string): Promise<ServerError> {
  const error = await target.registry.waitForReady(mac, 60_000).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ServerError);
  expect((error as ServerError).code).toBe('SESSION_FAILED');
  return error as ServerError;
}

describe('a session that cannot start', () => {
  it('reports a refused hello with its text and reason, and waitForReady ends at once', async () => {
    const mac = 'f4:12:fa:20:00:01';
    const refusals: HelloRefusal[] = [];
    const { target } = await clicked(mac, { helloWithout: ['transport'] });
    target.registry.on('hello-refused', (refusal) => refusals.push(refusal));
    const error = await failure(target, mac);
    expect(error.code).toBe('SESSION_FAILED');
    expect(error.message).toMatch(/hello refused .*transport/);
    expect(refusals).toHaveLength(1);
    expect(refusals[0]).toMatchObject({ deviceId: mac, protocolVersion: 1 });
    expect(JSON.parse(refusals[0]?.text ?? '')).not.toHaveProperty('transport');
    expect(target.registry.get(mac)?.lastError).toMatch(/^hello refused: /);
  });

  it('keeps the hello text of a session it accepted', async () => {
    const mac = 'f4:12:fa:20:00:02';
    const { target } = await clicked(mac, {});
    await target.registry.waitForReady(mac, 5000);
    const hello = JSON.parse(target.registry.session(mac).info.helloText);
    expect(hello).toMatchObject({ type: 'hello', transport: 'websocket', features: { mcp: true } });
  });

  it('fails the session at initialize when the reply has no serverInfo', async () => {
    const mac = 'f4:12:fa:20:00:03';
    const stages: SessionStage[] = [];
    const { target } = await clicked(mac, { initializeWithout: ['serverInfo'] });
    target.registry.on('session-failed', (_record, stage) => stages.push(stage));
    const error = await failure(target, mac);
    expect(error.code).toBe('SESSION_FAILED');
    expect(error.message).toMatch(/initialize failed: .*no serverInfo/);
    expect(stages).toEqual(['initialize']);
  });

  it('fails the session at tools/list when the walk loops', async () => {
    const mac = 'f4:12:fa:20:00:04';
    const stages: SessionStage[] = [];
    const { target } = await clicked(mac, { cursorLoop: true });
    target.registry.on('session-failed', (_record, stage) => stages.push(stage));
    const error = await failure(target, mac);
    expect(error.message).toMatch(/tools\/list failed: /);
    expect((error.cause as { code?: string }).code).toBe('PAGE_LOOP');
    expect(stages).toEqual(['tools']);
  });
});

describe('a reply under the wrong id', () => {
  it('is named in the timeout: a reply with id X, expected Y', async () => {
    server = await XiaozhiServer.start({
      port: 0,
      logLevel: 'silent',
      auth: 'off',
      callTimeoutMs: 200,
    });
    const mac = 'f4:12:fa:20:00:05';
    const ws = new WebSocket(server.urls.websocket, { headers: { 'Device-Id': mac } });
    await once(ws, 'open');
    ws.on('message', (data: Buffer) => {
      const frame = JSON.parse(data.toString()) as {
        type: string;
        session_id?: string;
        payload?: { id: number };
      };
      if (frame.type !== 'mcp' || frame.payload === undefined) return;
      ws.send(
        JSON.stringify({
          session_id: frame.session_id,
          type: 'mcp',
          payload: { jsonrpc: '2.0', id: frame.payload.id + 1, result: {} },
        }),
      );
    });
    const failed = once(server.registry, 'session-failed');
    ws.send(
      '{"type":"hello","version":1,"features":{"mcp":true},"transport":"websocket","audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}',
    );
    const [, stage, error] = (await failed) as [unknown, SessionStage, ServerError];
    expect(stage).toBe('initialize');
    expect(error.code).toBe('REQUEST_TIMEOUT');
    expect(error.message).toMatch(/initialize to .*: a reply with id 2, expected 1/);
    ws.terminate();
  });
});
