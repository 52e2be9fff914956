/**
 * The `bridge` suite against a real server and virtual boards over real sockets: the bridge,
 * its Streamable HTTP transport and the SDK client all real. Faults are planted between the
 * bridge and the server's API (a proxy that rewrites the API's answers), so the bridge serves
 * what a broken path would serve and the checks must say what went wrong.
 */
import { once } from 'node:events';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { VirtualBoard } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { XiaozhiServer } from '@xiaozhi-mcp/server';
import { afterEach, describe, expect, it } from 'vitest';
import { main } from '../cli.js';
import { parseInventory } from '../inventory.js';
import { type CheckResult, DEFAULT_SUITES, type RunReport } from '../model.js';
import type { SuiteContext } from '../suite.js';
import { BRIDGE_CHECKS, bridgeSuite, documentedName } from './bridge.js';

const API_TOKEN = 'hil-bridge-test-token';
const servers: XiaozhiServer[] = [];
const boards: VirtualBoard[] = [];
const proxies: Server[] = [];
let macCounter = 0;

afterEach(async () => {
  for (const board of boards.splice(0)) board.powerOff();
  for (const proxy of proxies.splice(0)) {
    proxy.closeAllConnections();
    await new Promise((resolve) => proxy.close(resolve));
  }
  for (const server of servers.splice(0)) await server.stop();
});

interface Rig {
  readonly server: XiaozhiServer;
  readonly board: VirtualBoard;
  readonly context: SuiteContext;
}

/** A server with a closed API, a virtual board in session on it, and the context the rig gives. */
async function virtualRig(preset = 'bread-compact-wifi'): Promise<Rig> {
  const server = await XiaozhiServer.start({
    port: 0,
    logLevel: 'silent',
    apiTokens: [API_TOKEN],
  });
  servers.push(server);
  macCounter++;
  const board = new VirtualBoard({
    mac: `f4:12:fa:30:00:${macCounter.toString(16).padStart(2, '0')}`,
    preset,
    wifi: { ssid: 'lab' },
    otaUrl: server.urls.ota,
    timing: FAST_TIMING,
  });
  boards.push(board);
  board.powerOn();
  await board.waitForState('idle', 10_000);
  board.click();
  await server.registry.waitForReady(board.mac, 10_000);
  const { registry } = server;
  const context: SuiteContext = {
    board: { name: `virtual-${preset}` },
    registry,
    deviceId: board.mac,
    session: () => registry.session(board.mac),
    record: () => {
      const record = registry.get(board.mac);
      if (record === undefined) throw new Error(`no record for ${board.mac}`);
      return record;
    },
    reconnect: () => Promise.reject(new Error('not in this test')),
    offerFirmware: () => {},
    candidateImage: undefined,
    latency: { calls: 1, warmup: 0, tool: 'self.get_device_status' },
    serverApi: { url: server.urls.api, token: API_TOKEN },
    log: () => {},
    signal: new AbortController().signal,
  };
  return { server, board, context };
}

/**
 * An HTTP proxy in front of the server's API that hands each JSON answer to `rewrite` (by
 * method and path); its URL stands in for the API's.
 */
async function rewritingProxy(
  target: string,
  rewrite: (method: string, path: string, body: unknown, request: unknown) => unknown,
): Promise<string> {
  const base = new URL(target);
  const proxy = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const path = (req.url ?? '/').replace(/^\/api/, '');
      const headers: Record<string, string> = {};
      for (const name of ['authorization', 'content-type', 'accept']) {
        const value = req.headers[name];
        if (typeof value === 'string') headers[name] = value;
      }
      const body = Buffer.concat(chunks);
      fetch(`${base.origin}${base.pathname}${path}`, {
        method: req.method ?? 'GET',
        headers,
        ...(body.length > 0 ? { body } : {}),
      })
        .then(async (answer) => {
          const text = await answer.text();
          let out = text;
          try {
            const request: unknown =
              body.length > 0 ? JSON.parse(body.toString('utf8')) : undefined;
            out = JSON.stringify(rewrite(req.method ?? 'GET', path, JSON.parse(text), request));
          } catch {
            // Not JSON: passed on as it came.
          }
          res.writeHead(answer.status, { 'content-type': 'application/json' });
          res.end(out);
        })
        .catch((error: unknown) => {
          res.writeHead(502);
          res.end(String(error));
        });
    });
  });
  proxies.push(proxy);
  proxy.listen(0, '127.0.0.1');
  await once(proxy, 'listening');
  return `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/api`;
}

function byId(checks: readonly CheckResult[], id: string): CheckResult {
  const check = checks.find((c) => c.id === id);
  if (check === undefined)
    throw new Error(`no check ${id} in ${checks.map((c) => c.id).join(', ')}`);
  return check;
}

const IDS = Object.values(BRIDGE_CHECKS).map((check) => `bridge.${check.id}`);

describe('documentedName', () => {
  it("writes the bridge's documented names of plain board tools as literals", () => {
    expect(documentedName('self.audio_speaker.set_volume')).toBe('self-audio_speaker-set_volume');
    expect(documentedName('self.get_device_status')).toBe('self-get_device_status');
    expect(documentedName('take_photo')).toBe('take_photo');
    // Escaped or cut names are found by their title instead.
    expect(documentedName('a-b')).toBeUndefined();
    expect(documentedName('a..b')).toBeUndefined();
    expect(documentedName('self.lamp.')).toBeUndefined();
    expect(documentedName(`self.${'x'.repeat(60)}`)).toBeUndefined();
  });
});

describe('bridge suite on a virtual board over real sockets', () => {
  it('lists every page and calls every safe tool through the bridge with the SDK client', async () => {
    const rig = await virtualRig();
    rig.board.hardware.volume = 40;
    const { checks } = await bridgeSuite.run(rig.context);
    expect(checks.map((c) => c.id)).toEqual(IDS);
    expect(checks.map((c) => [c.id, c.status, c.message])).toEqual(
      IDS.map((id) => [id, 'passed', expect.any(String)]),
    );
    const listed = rig.context.record().tools.filter((tool) => !tool.userOnly).length;
    // Pages of 5: the client followed cursors to the end.
    expect(byId(checks, 'bridge.list')).toMatchObject({
      data: { tools: listed, pages: Math.ceil(listed / 5) },
    });
    expect(Math.ceil(listed / 5)).toBeGreaterThan(1);
    expect(byId(checks, 'bridge.call-safe-tools').data).toEqual({
      tools: ['self.get_device_status', 'self.audio_speaker.set_volume', 'self.screen.set_theme'],
      calls: 5,
    });
    expect(byId(checks, 'bridge.call-safe-tools').message).toMatch(
      /user-only, not served to a model: self\.screen\.get_info, self\.get_system_info/,
    );
    // The sweep set the volume at its bounds; it was put back.
    expect(rig.board.hardware.volume).toBe(40);
  });

  it('fails bridge.list and bridge.names, naming the tool, when the bridge serves one tool too few', async () => {
    const rig = await virtualRig();
    const dropped = 'self.audio_speaker.set_volume';
    const api = await rewritingProxy(rig.server.urls.api, (method, path, body) => {
      if (method !== 'GET' || !path.endsWith('/tools')) return body;
      const { tools } = body as { tools: { name: string }[] };
      return { ...(body as object), tools: tools.filter((tool) => tool.name !== dropped) };
    });
    const { checks } = await bridgeSuite.run({
      ...rig.context,
      serverApi: { url: api, token: API_TOKEN },
    });
    const listed = rig.context.record().tools.filter((tool) => !tool.userOnly).length;
    expect(byId(checks, 'bridge.list')).toMatchObject({
      status: 'failed',
      message: `expected the board's tools through the bridge, got ${listed - 1} tools listed through the bridge, the board lists ${listed} without user tools`,
      expected: `${listed} tools`,
      actual: `${listed - 1} tools`,
    });
    expect(byId(checks, 'bridge.names')).toMatchObject({
      status: 'failed',
      message: `expected each board tool under its documented name with its schema, got ${dropped} is not served as self-audio_speaker-set_volume`,
    });
    // The missing safe tool is named; the others still go through.
    const calls = byId(checks, 'bridge.call-safe-tools');
    expect(calls.status).toBe('failed');
    expect(calls.message).toMatch(
      /^expected every safe tool to answer through the bridge, got self\.audio_speaker\.set_volume: not listed through the bridge$/,
    );
  });

  it('fails bridge.call-safe-tools when a call comes back as an error or without content', async () => {
    const rig = await virtualRig();
    const api = await rewritingProxy(rig.server.urls.api, (method, path, body, request) => {
      if (method !== 'POST' || !path.endsWith('/call')) return body;
      const { result } = body as { result: { content: unknown[] } };
      const { name } = request as { name: string };
      // get_device_status answers lose their content; set_volume's become errors.
      if (name === 'self.get_device_status') return { result: { ...result, content: [] } };
      if (name === 'self.audio_speaker.set_volume') return { result: { ...result, isError: true } };
      return body;
    });
    const { checks } = await bridgeSuite.run({
      ...rig.context,
      serverApi: { url: api, token: API_TOKEN },
    });
    expect(byId(checks, 'bridge.list').status).toBe('passed');
    const calls = byId(checks, 'bridge.call-safe-tools');
    expect(calls.status).toBe('failed');
    expect(calls.message).toContain('self-get_device_status {}: no content');
    expect(calls.message).toMatch(/self-audio_speaker-set_volume \{"volume":0\}: isError with /);
    expect(calls.expected).toBe('MCP content without isError, from the board');
  });

  it('fails bridge.list when the bridge cannot reach the API (a wrong token), saying why', async () => {
    const rig = await virtualRig();
    const { checks } = await bridgeSuite.run({
      ...rig.context,
      serverApi: { url: rig.server.urls.api, token: 'not-the-token' },
    });
    expect(byId(checks, 'bridge.list')).toMatchObject({
      status: 'failed',
      message: expect.stringMatching(/^the bridge did not come up: /),
    });
    expect(byId(checks, 'bridge.names')).toMatchObject({
      status: 'skipped',
      message: 'no listing through the bridge (see bridge.list)',
    });
  });

  it('skips every check, saying why, without a server API or a session', async () => {
    const rig = await virtualRig();
    const { serverApi: _, ...noApi } = rig.context;
    const without = await bridgeSuite.run(noApi);
    expect(without.checks.map((c) => [c.id, c.status, c.message])).toEqual(
      IDS.map((id) => [id, 'skipped', 'the rig gives this suite no server API']),
    );
    rig.board.powerOff();
    await expect
      .poll(() => rig.context.record().session?.closed ?? true, { timeout: 10_000 })
      .toBe(true);
    const gone = await bridgeSuite.run(rig.context);
    expect(gone.checks.map((c) => [c.id, c.status, c.message])).toEqual(
      IDS.map((id) => [id, 'skipped', 'the board has no session']),
    );
  });
});

describe('hil run --suite session,bridge', () => {
  it('is opt-in: not a default suite, but an inventory may name it', () => {
    expect(DEFAULT_SUITES).not.toContain('bridge');
    const boards = [{ name: 'a', port: 'virtual:a' }];
    expect(parseInventory({ suites: ['tools-list', 'bridge'], boards }).suites).toEqual([
      'tools-list',
      'bridge',
    ]);
  });

  it('qualifies both boards of the default virtual rig through the bridge and exits 0', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'hil-bridge-')), 'reports');
    const cwd = process.cwd();
    process.chdir(dirname(out)); // no hil.config.json here: the default virtual rig
    let code: number;
    let stderr = '';
    try {
      code = await main(['run', '--suite', 'session,bridge', '--out', out], {
        stdout: () => {},
        stderr: (text) => {
          stderr += text;
        },
      });
    } finally {
      process.chdir(cwd);
    }
    expect(stderr).toBe('');
    expect(code).toBe(0);
    const run = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    expect(run.suites).toEqual(['session', 'bridge']);
    expect(run.boards.map((b) => [b.name, b.transport, b.status])).toEqual([
      ['bread-compact-wifi', 'mqtt', 'passed'],
      ['otto-robot', 'websocket', 'passed'],
    ]);
    for (const board of run.boards) {
      expect(board.checks.filter((c) => c.suite === 'bridge').map((c) => [c.id, c.status])).toEqual(
        IDS.map((id) => [id, 'passed']),
      );
    }
  }, 180_000);
});
