import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { TestBackend } from '@xiaozhi-mcp/device/testing';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../io.test-helper.js';
import { simMac, simUuid } from './sim.js';

const bin = join(
  resolve(dirname(fileURLToPath(import.meta.url)), '../../..'),
  'cli/bin/xiaozhi-mcp.js',
);
/** 40 tools with Chinese descriptions, four of them user-only. */
const homeTools = join(
  resolve(dirname(fileURLToPath(import.meta.url)), '../..'),
  'fixtures/home-tools.json',
);
let backend: TestBackend | undefined;
const children: ChildProcess[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }
  await backend?.close();
  backend = undefined;
});

/** `xiaozhi-mcp sim` from a shell, its output collected. */
function startSim(...argv: string[]) {
  const process_ = spawn(process.execPath, [bin, 'sim', ...argv], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(process_);
  const output = { stdout: '', stderr: '' };
  process_.stdout.on('data', (chunk) => {
    output.stdout += chunk;
  });
  process_.stderr.on('data', (chunk) => {
    output.stderr += chunk;
  });
  return { process: process_, output };
}

/** Resolves once `n` OTA checks have reached the backend, or throws with what the sims said. */
async function otaChecks(
  target: TestBackend,
  n: number,
  sims: readonly ReturnType<typeof startSim>[],
): Promise<void> {
  const said = () =>
    `${target.otaRequests.length} of ${n} OTA checks; ${sims.map((sim) => `exit ${sim.process.exitCode}: ${sim.output.stdout}${sim.output.stderr}`).join('; ')}`;
  await until(
    () => target.otaRequests.length >= n || sims.some((sim) => sim.process.exitCode !== null),
    { what: `${n} OTA checks`, seen: said },
  );
  if (target.otaRequests.length < n) throw new Error(`a sim ended: ${said()}`);
}

/** Resolves once the sim's board is idle, or throws with what the sim said. */
async function idle(sim: ReturnType<typeof startSim>): Promise<void> {
  const said = () => `${sim.output.stdout}${sim.output.stderr}`;
  await until(
    () => /State: activating -> idle$/m.test(sim.output.stdout) || sim.process.exitCode !== null,
    { what: 'the board to get idle', seen: said },
  );
  if (sim.process.exitCode !== null) throw new Error(`the sim ended: ${said()}`);
}

async function stop(sims: readonly ReturnType<typeof startSim>[]): Promise<(number | null)[]> {
  return Promise.all(
    sims.map(async (sim) => {
      // 'close', not 'exit': the output is read to its end first.
      const exited = once(sim.process, 'close');
      sim.process.kill('SIGINT');
      const [code] = (await exited) as [number | null];
      return code;
    }),
  );
}

describe('xiaozhi-mcp sim', () => {
  it('runs boards against a backend from a shell until Ctrl-C', { timeout: 60_000 }, async () => {
    backend = await TestBackend.start();
    const sim = startSim('--ota-url', backend.otaUrl, '--count', '2');
    const macs = [simMac('bread-compact-wifi', 0), simMac('bread-compact-wifi', 1)];
    try {
      const connections = [
        await backend.connection(0, 15_000),
        await backend.connection(1, 15_000),
      ];
      for (const connection of connections) {
        const reply = await connection.request('initialize');
        expect(reply).toMatchObject({
          kind: 'result',
          result: { serverInfo: { name: 'bread-compact-wifi' } },
        });
      }
      expect(new Set(connections.map((c) => c.upgrade.headers['device-id']))).toEqual(
        new Set(macs),
      );
      expect(backend.otaRequests).toHaveLength(2);
      expect(sim.output.stdout).toMatch(
        new RegExp(`^${macs[0]} \\| I \\(\\d+\\) WS: Session ID: session-\\d$`, 'm'),
      );
    } finally {
      sim.process.kill('SIGINT');
    }
    const [code] = await once(sim.process, 'close');
    expect(code).toBe(130);
    expect(sim.output.stderr).toMatch(/stopped 2 boards \(2 in a session\)/);
  });

  it('runs the boards at --fw-version, or --version after sim; the tool keeps its own --version', {
    timeout: 60_000,
  }, async () => {
    const target = await TestBackend.start();
    backend = target;
    const flags = ['--version', '--fw-version'];
    const sims = flags.map((flag, i) =>
      startSim('--ota-url', target.otaUrl, flag, `2.5.${i}`, '--session', 'none'),
    );
    await otaChecks(target, 2, sims);
    expect(new Set(target.otaRequests.map((r) => r.headers['user-agent']))).toEqual(
      new Set(['bread-compact-wifi/2.5.0', 'bread-compact-wifi/2.5.1']),
    );
    expect(await stop(sims)).toEqual([130, 130]);
    for (const sim of sims) expect(sim.output.stdout).not.toMatch(/^0\.1\.0$/m);
    expect(await runCli('--version')).toEqual({ code: 0, stdout: '0.1.0\n', stderr: '' });
  });

  it('refuses a firmware version the firmware cannot read with exit 2', async () => {
    for (const flag of ['--fw-version', '--version']) {
      const bad = await runCli('sim', '--ota-url', 'http://127.0.0.1:1/ota/', flag, 'v2.5');
      expect(bad.code, flag).toBe(2);
      expect(bad.stderr, flag).toMatch(/^xiaozhi-mcp: --fw-version: firmware version "v2\.5" /);
    }
    const both = await runCli(
      'sim',
      '--ota-url',
      'http://127.0.0.1:1/ota/',
      '--fw-version',
      '2.5.0',
      '--version',
      '2.6.0',
    );
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/disagree/);
  });

  it('keeps running with --session none once the boards are idle, until Ctrl-C', {
    timeout: 60_000,
  }, async () => {
    backend = await TestBackend.start();
    const sim = startSim('--ota-url', backend.otaUrl, '--session', 'none');
    await idle(sim);
    // With nothing pending, node used to end here with an unsettled await (exit 13), in the same
    // turn as its last output. The sim is another process, out of reach of fake timers: a second
    // of its life is the check (a slow machine can only make it pass late, never fail wrongly).
    const early = await Promise.race([once(sim.process, 'exit'), sleep(1000, 'running')]);
    expect(early).toBe('running');
    expect(backend.connections).toHaveLength(0);
    sim.process.kill('SIGINT');
    const [code] = await once(sim.process, 'close');
    expect(code).toBe(130);
    expect(sim.output.stderr).toMatch(/stopped 1 board \(0 in a session\)/);
  });

  it('gives each board its own stable MAC and Client-Id, apart from other presets', {
    timeout: 60_000,
  }, async () => {
    const target = await TestBackend.start();
    backend = target;
    const sims = [
      ['bread-compact-wifi', '3'],
      ['otto-robot', '2'],
    ].map(([preset = '', count = '']) =>
      startSim(
        '--ota-url',
        target.otaUrl,
        '--board',
        preset,
        '--count',
        count,
        '--session',
        'none',
      ),
    );
    await otaChecks(target, 5, sims);
    expect(await stop(sims)).toEqual([130, 130]);
    const seen = target.otaRequests.map((r) => ({
      mac: r.headers['device-id'],
      uuid: r.headers['client-id'],
    }));
    expect(new Set(seen.map((s) => s.mac)).size).toBe(5);
    expect(new Set(seen.map((s) => s.uuid)).size).toBe(5);
    for (const { mac, uuid } of seen) {
      expect(mac).toMatch(/^f4:12:fa(:[0-9a-f]{2}){3}$/);
      expect(uuid).toBe(simUuid(String(mac)));
    }
    expect(seen.map((s) => s.mac).sort()).toEqual(
      [0, 1, 2]
        .map((i) => simMac('bread-compact-wifi', i))
        .concat([0, 1].map((i) => simMac('otto-robot', i)))
        .sort(),
    );
  });

  it('leaves a board on MQTT alone with --session auto: it is reachable without a session', {
    timeout: 60_000,
  }, async () => {
    // Just enough of an MQTT 3.1.1 broker: CONNACK for CONNECT, and every packet type noted.
    const types: number[] = [];
    const sockets = new Set<Socket>();
    const broker: Server = createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => {});
      let buffer = Buffer.alloc(0);
      socket.on('data', (chunk: Buffer) => {
        buffer = Buffer.concat([buffer, chunk]);
        for (;;) {
          let length = 0;
          let offset = 1;
          let done = false;
          for (let shift = 0; offset < buffer.length && shift < 28; shift += 7) {
            const byte = buffer[offset++] as number;
            length += (byte & 0x7f) << shift;
            if ((byte & 0x80) === 0) {
              done = true;
              break;
            }
          }
          if (!done || buffer.length < offset + length) return;
          const type = (buffer[0] as number) >> 4;
          buffer = buffer.subarray(offset + length);
          types.push(type);
          if (type === 1) socket.write(Buffer.from([0x20, 0x02, 0x00, 0x00]));
          if (type === 12) socket.write(Buffer.from([0xd0, 0x00]));
        }
      });
    });
    await new Promise<void>((ready) => broker.listen(0, '127.0.0.1', ready));
    const address = broker.address();
    const port = typeof address === 'object' && address !== null ? address.port : 0;
    try {
      backend = await TestBackend.start({
        otaReply: () => ({
          body: {
            mqtt: {
              endpoint: `127.0.0.1:${port}`,
              client_id: 'GID_xiaozhi@@@sim@@@uuid',
              publish_topic: 'device-server',
            },
          },
        }),
      });
      const sim = startSim('--ota-url', backend.otaUrl);
      await idle(sim);
      expect(sim.output.stdout).toMatch(/MQTT: Connected to endpoint$/m);
      // --session auto clicks an idle WebSocket board within 250 ms, on the sim's own timer in
      // another process (fake timers cannot reach it): several times that shows it does not for
      // MQTT. A busy machine can only let a wrong click through, never fail this wrongly.
      await sleep(1500);
      expect(sim.output.stdout).not.toMatch(/State: idle -> connecting/);
      expect(types).toEqual([1]); // CONNECT only: no hello was published
      expect(await stop([sim])).toEqual([130]);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((closed) => broker.close(closed));
    }
  });

  it('--replica: boards run the replica, their MACs derived from its variant, or from --first-mac', {
    timeout: 60_000,
  }, async () => {
    const target = await TestBackend.start();
    backend = target;
    const dir = mkdtempSync(join(tmpdir(), 'xiaozhi-sim-replica-'));
    try {
      const replica = join(dir, 'hub.replica.json');
      const made = await runCli('replica', '--tools', homeTools, '--out', replica);
      expect(made.code, made.stderr).toBe(0);
      const sims = [
        startSim(
          '--ota-url',
          target.otaUrl,
          '--replica',
          replica,
          '--count',
          '2',
          '--session',
          'none',
        ),
        startSim(
          '--ota-url',
          target.otaUrl,
          '--replica',
          replica,
          '--first-mac',
          'f4:12:fa:20:00:01',
          '--session',
          'none',
        ),
      ];
      await otaChecks(target, 3, sims);
      expect(await stop(sims)).toEqual([130, 130]);
      expect(target.otaRequests.map((r) => r.headers['device-id']).sort()).toEqual(
        [simMac('smart-home-hub', 0), simMac('smart-home-hub', 1), 'f4:12:fa:20:00:01'].sort(),
      );
      // The replica's identity: its variant and firmware version, as a real board's OTA check says them.
      for (const request of target.otaRequests)
        expect(request.headers['user-agent']).toBe('smart-home-hub/2.4.2');
      expect(sims[0]?.output.stderr).toMatch(/2 smart-home-hub \(replica\) boards against /);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('derives MACs and uuids the same way every time, counting up from --first-mac', () => {
    expect(simMac('otto-robot', 0)).toBe(simMac('otto-robot', 0));
    expect(simMac('otto-robot', 0)).not.toBe(simMac('bread-compact-wifi', 0));
    expect(simMac('x', 0, 'F4-12-FA-00-00-FF')).toBe('f4:12:fa:00:00:ff');
    expect(simMac('x', 1, 'f4:12:fa:00:00:ff')).toBe('f4:12:fa:00:01:00');
    // The count-up stays in the last three bytes: the OUI is kept.
    expect(simMac('x', 1, 'f4:12:fa:ff:ff:ff')).toBe('f4:12:fa:00:00:00');
    expect(simUuid('f4:12:fa:00:00:01')).toMatch(
      /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    );
    expect(simUuid('f4:12:fa:00:00:01')).not.toBe(simUuid('f4:12:fa:00:00:02'));
  });

  it('refuses an unknown preset, a bad URL, count or --first-mac with one line and exit 2', async () => {
    const preset = await runCli('sim', '--ota-url', 'http://127.0.0.1:1/ota/', '--board', 'nope');
    expect(preset.code).toBe(2);
    expect(preset.stderr).toBe(
      'xiaozhi-mcp: unknown board preset "nope"; known: bread-compact-wifi, otto-robot\n',
    );
    const url = await runCli('sim', '--ota-url', 'ftp://x');
    expect(url.code).toBe(2);
    expect(url.stderr).toMatch(/--ota-url must be an http/);
    const count = await runCli('sim', '--ota-url', 'http://127.0.0.1:1/', '--count', '0');
    expect(count.code).toBe(2);
    const multicast = await runCli(
      'sim',
      '--ota-url',
      'http://127.0.0.1:1/',
      '--first-mac',
      '01:00:5e:00:00:01',
    );
    expect(multicast.code).toBe(2);
    expect(multicast.stderr).toMatch(/--first-mac must be a unicast MAC/);
  });
});
