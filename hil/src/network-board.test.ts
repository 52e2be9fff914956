/**
 * Boards without a serial cable (docs/hil.md §1.4): an inventory board with no `port` is
 * qualified when a device process outside hil (here `xiaozhi-mcp sim`) is pointed at the
 * address given with `--listen`; the waits for its OTA check and its session are bounded and
 * say what to do.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { XiaozhiServer } from '@xiaozhi-mcp/server';
import { until } from '@xiaozhi-mcp/test-kit';
import { describe, expect, it } from 'vitest';
import { BoardRunner } from './board-runner.js';
import { main } from './cli.js';
import { type BoardConfig, InventoryError, parseInventory } from './inventory.js';
import type { RunReport } from './model.js';
import { BoardClaims, isNetworkBoardCheck, parseListen } from './network-board.js';
import { ConsoleReporter } from './reporters/console.js';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const xiaozhiMcp = join(repo, 'apps/cli/bin/xiaozhi-mcp.js');

async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  await new Promise<void>((done) => server.close(() => done()));
  return port;
}

/**
 * Until the run says it waits for the device; a run that ended first (its port taken, a bad
 * inventory) fails here with what it printed, not at the test's timeout.
 */
async function waitingFor(
  run: Promise<number>,
  stdout: () => string,
  stderr: () => string,
): Promise<void> {
  let ended = false;
  const end = () => {
    ended = true;
  };
  run.then(end, end);
  await until(() => stdout().includes('waiting') || ended, {
    what: 'hil to wait for the device',
    seen: stdout,
  });
  expect(ended, `hil ended before waiting for the device:\n${stdout()}\n${stderr()}`).toBe(false);
}

function inventory(boards: BoardConfig[], extra: Record<string, unknown> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'hil-network-'));
  const config = join(dir, 'hil.config.json');
  writeFileSync(config, JSON.stringify({ ...extra, boards }));
  return { dir, config, out: join(dir, 'out') };
}

describe('a board without a serial port', () => {
  it('is qualified when a device process outside hil points at --listen', async () => {
    const port = await freePort();
    const ota = `http://127.0.0.1:${port}/xiaozhi/ota/`;
    const { config, out } = inventory([{ name: 'far-board', variant: 'bread-compact-wifi' }]);
    let stdout = '';
    let stderr = '';
    const run = main(['run', '--listen', `127.0.0.1:${port}`, '--config', config, '--out', out], {
      stdout: (text) => {
        stdout += text;
      },
      stderr: (text) => {
        stderr += text;
      },
    });
    let device: ChildProcess | undefined;
    try {
      await waitingFor(
        run,
        () => stdout,
        () => stderr,
      );
      expect(stdout).toContain(
        `for the OTA check of the first device no other board of the rig claims at ${ota}`,
      );
      // The device: another process, knowing nothing of hil but the OTA URL.
      device = spawn(
        process.execPath,
        [
          xiaozhiMcp,
          'sim',
          '--ota-url',
          ota,
          '--session',
          'auto',
          '--first-mac',
          'f4:12:fa:00:00:01',
        ],
        {
          stdio: ['ignore', 'ignore', 'pipe'],
        },
      );
      let deviceErrors = '';
      device.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
        deviceErrors += chunk;
      });
      const exited = once(device, 'exit').then(([status]) => {
        throw new Error(
          `the device process exited (${status}) before the run ended: ${deviceErrors}`,
        );
      });
      const code = await Promise.race([run, exited]);
      expect(stderr).toBe('');
      expect(code).toBe(0);
    } finally {
      device?.kill();
    }
    const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    const [board] = report.boards;
    expect(board).toMatchObject({
      name: 'far-board',
      kind: 'network',
      status: 'passed',
      mac: 'f4:12:fa:00:00:01',
      firmwareVersion: '2.4.2',
    });
    expect(report.server.ota).toBe(ota);
    expect(board?.steps.map((s) => [s.step, s.status])).toEqual([
      ['open', 'skipped'],
      ['flash', 'skipped'],
      ['provision', 'skipped'],
      ['reset', 'skipped'],
      ['boot', 'skipped'],
      ['ota-check', 'passed'],
      ['session', 'passed'],
      ['suites', 'passed'],
      ['close', 'passed'],
    ]);
    expect(board?.steps[0]?.message).toMatch(/no serial port/);
    // The default suites ran against it, the known deviations known.
    const suites = new Set(board?.checks.map((c) => c.suite));
    for (const suite of ['initialize', 'tools-list', 'tools-call', 'robustness', 'latency'])
      expect(suites).toContain(suite);
    expect(board?.checks.filter((c) => c.status === 'failed')).toEqual([]);
    expect(board?.checks.find((c) => c.id === 'robustness.error-code')?.status).toBe(
      'known-deviation',
    );
  }, 60_000);

  it('is qualified over MQTT with its deviceId: given our broker by its OTA reply, no click', async () => {
    const port = await freePort();
    const ota = `http://127.0.0.1:${port}/xiaozhi/ota/`;
    const { config, out } = inventory([
      {
        name: 'far-mqtt',
        deviceId: 'F4:12:FA:00:00:21',
        session: 'mqtt',
        variant: 'bread-compact-wifi',
      },
    ]);
    let stdout = '';
    let stderr = '';
    const run = main(
      [
        'run',
        '--listen',
        `127.0.0.1:${port}`,
        '--config',
        config,
        '--out',
        out,
        '--suite',
        'initialize,tools-list',
      ],
      {
        stdout: (text) => {
          stdout += text;
        },
        stderr: (text) => {
          stderr += text;
        },
      },
    );
    let device: ChildProcess | undefined;
    try {
      await waitingFor(
        run,
        () => stdout,
        () => stderr,
      );
      expect(stdout).toMatch(/our OTA reply gives f4:12:fa:00:00:21 our MQTT broker \(mqtt:\/\//);
      // `--session none`: nothing on the device starts a conversation; over MQTT none is needed.
      device = spawn(
        process.execPath,
        [
          xiaozhiMcp,
          'sim',
          '--ota-url',
          ota,
          '--session',
          'none',
          '--first-mac',
          'f4:12:fa:00:00:21',
        ],
        { stdio: ['ignore', 'ignore', 'pipe'] },
      );
      const exited = once(device, 'exit').then(([status]) => {
        throw new Error(`the device process exited (${status}) before the run ended`);
      });
      expect(await Promise.race([run, exited])).toBe(0);
    } finally {
      device?.kill();
    }
    const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    expect(report.server.mqtt).toMatch(/^mqtt:\/\/127\.0\.0\.1:\d+$/);
    expect(report.boards[0]).toMatchObject({
      name: 'far-mqtt',
      kind: 'network',
      status: 'passed',
      transport: 'mqtt',
      mac: 'f4:12:fa:00:00:21',
    });
  }, 60_000);

  it('needs a fixed address: without --listen or server.port the run is refused (exit 2)', async () => {
    const { config, out } = inventory([{ name: 'far-board' }]);
    let stderr = '';
    const code = await main(['run', '--config', config, '--out', out], {
      stdout: () => {},
      stderr: (text) => {
        stderr += text;
      },
    });
    expect(code).toBe(2);
    expect(stderr).toMatch(/board far-board has no port: .*give --listen HOST:PORT/);
    const bad = await main(['run', '--listen', 'localhost', '--out', out], {
      stdout: () => {},
      stderr: (text) => {
        stderr += text;
      },
    });
    expect(bad).toBe(2);
    expect(stderr).toMatch(/--listen must be HOST:PORT/);
  });

  it('says where to point the device when no OTA check comes, and why no session came', async () => {
    const server = await XiaozhiServer.start({ host: '127.0.0.1', port: 0, logLevel: 'silent' });
    const dir = mkdtempSync(join(tmpdir(), 'hil-network-'));
    const runner = (config: BoardConfig) =>
      new BoardRunner({
        config,
        port: () => Promise.reject(new Error('no port')),
        server,
        outDir: dir,
        firmware: undefined,
        provision: undefined,
        candidateImage: undefined,
        suites: [],
        latency: {},
        baseline: { deviations: [] },
        reporter: new ConsoleReporter({ write: () => {}, live: false }),
        signal: new AbortController().signal,
        timeouts: { otaMs: 300, sessionMs: 300 },
      });
    try {
      const silent = await runner({ name: 'far', deviceId: 'AA:BB:CC:DD:EE:01' }).run();
      expect(silent.status).toBe('rig-failed');
      expect(silent.failure?.step).toBe('ota-check');
      expect(silent.failure?.reason).toBe(
        `no OTA check from far (Device-Id aa:bb:cc:dd:ee:01) at ${server.urls.ota} within 0.3 s: point the device at ${server.urls.ota} (its OTA URL: NVS wifi/ota_url, the build's default, or a simulator's --ota-url) and restart it`,
      );

      // A device that checks OTA but never opens its session.
      const quiet = runner({ name: 'quiet', clientId: '0b8e4b5e-7a4c-4f6e-9d0e-0c2f1e3d4a5b' });
      const running = quiet.run();
      const reply = await fetch(server.urls.ota, {
        method: 'POST',
        headers: {
          'Device-Id': 'aa:bb:cc:dd:ee:02',
          'Client-Id': '0b8e4b5e-7a4c-4f6e-9d0e-0c2f1e3d4a5b',
          'User-Agent': 'bread-compact-wifi/2.4.2',
          'Content-Type': 'application/json',
        },
        body: JSON.stringify({ application: { version: '2.4.2' } }),
      });
      expect(reply.status).toBe(200);
      const report = await running;
      expect(report.mac).toBe('aa:bb:cc:dd:ee:02');
      expect(report.failure?.step).toBe('session');
      expect(report.failure?.reason).toMatch(
        /^no session from quiet \(aa:bb:cc:dd:ee:02\) within 0\.3 s after its OTA check: it was given our WebSocket URL ws:\/\/127\.0\.0\.1:\d+\/xiaozhi\/v1\/ but did not open a session there .*start a conversation on the device/,
      );
    } finally {
      await server.stop();
    }
  });
});

describe('network boards in the inventory', () => {
  it('may leave out the port, and give a deviceId (MAC) or clientId', () => {
    const rig = parseInventory({
      boards: [
        { name: 'far', deviceId: 'F4:12:FA:00:00:01' },
        { name: 'py', clientId: 'b5ad4f34-6c1b-4c1e-8a4e-3f0e8f5a2c11', session: 'manual' },
        { name: 'any' },
      ],
    });
    expect(rig.boards.map((b) => b.port)).toEqual([undefined, undefined, undefined]);
  });

  it.each([
    [{ name: 'far', deviceId: 'f4-12-fa-00-00-01' }, /boards\[0\]\.deviceId must match pattern/],
    [{ name: 'far', session: 'boot-click' }, /boards\[0\]\.session boot-click needs a serial port/],
    [{ name: 'far', virtual: { preset: 'otto-robot' } }, /boards\[0\]\.virtual is only for/],
  ])('refuses %j', (board, message) => {
    expect(() => parseInventory({ boards: [board] })).toThrow(message);
  });

  it('refuses two boards that could not be told apart', () => {
    expect(() => parseInventory({ boards: [{ name: 'a' }, { name: 'b' }] })).toThrow(
      new InventoryError(
        'hil.config.json: boards a, b have no port and no deviceId or clientId: give each its deviceId (MAC) or clientId, so their OTA checks can be told apart',
        'boards[1].deviceId',
      ),
    );
  });

  it("matches a board's OTA check by deviceId, clientId, or as the first device nobody claims", () => {
    const boards: BoardConfig[] = [
      { name: 'serial', port: '/dev/ttyUSB0' },
      { name: 'far', deviceId: 'F4:12:FA:00:00:01' },
      { name: 'py', clientId: 'B5AD4F34-6C1B-4C1E-8A4E-3F0E8F5A2C11' },
      { name: 'any' },
    ];
    const claims = new BoardClaims(boards);
    const check = (deviceId: string, clientId: string) => ({ deviceId, clientId });
    const [, far, py, any] = boards as [BoardConfig, BoardConfig, BoardConfig, BoardConfig];
    const farCheck = check('f4:12:fa:00:00:01', 'c0000000-0000-4000-8000-000000000000');
    const pyCheck = check('02:00:00:00:00:09', 'b5ad4f34-6c1b-4c1e-8a4e-3f0e8f5a2c11');
    const other = check('02:00:00:00:00:0a', 'c0000000-0000-4000-8000-00000000000a');
    expect(isNetworkBoardCheck(far, farCheck, claims)).toBe(true);
    expect(isNetworkBoardCheck(far, pyCheck, claims)).toBe(false);
    expect(isNetworkBoardCheck(py, pyCheck, claims)).toBe(true);
    // The anonymous board takes neither of those, but a device nobody claims.
    expect(isNetworkBoardCheck(any, farCheck, claims)).toBe(false);
    expect(isNetworkBoardCheck(any, pyCheck, claims)).toBe(false);
    expect(isNetworkBoardCheck(any, other, claims)).toBe(true);
    // Once the serial board's console printed its Client-Id, its check is its own.
    claims.claim(other.clientId);
    expect(isNetworkBoardCheck(any, other, claims)).toBe(false);
  });

  it('parses --listen', () => {
    expect(parseListen('0.0.0.0:8000')).toEqual({ host: '0.0.0.0', port: 8000 });
    expect(parseListen('[::]:8000')).toEqual({ host: '::', port: 8000 });
    expect(parseListen('localhost:1')).toEqual({ host: 'localhost', port: 1 });
    for (const bad of ['8000', 'host:0', 'host:70000', ':8000', 'a:b'])
      expect(parseListen(bad)).toMatch(/^--listen must be HOST:PORT/);
  });
});
