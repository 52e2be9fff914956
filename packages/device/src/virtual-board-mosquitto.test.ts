/**
 * The virtual board's MQTT client against Debian's mosquitto, software nobody here wrote, for
 * everything a stock broker can show (docs/protocol.md §5): it connects with what NVS says
 * (MQTT 3.1.1, clean session, the stored credentials and keepalive), keeps the connection
 * alive, publishes QoS 0 on publish_topic, never subscribes, and reconnects after the broker
 * restarts. (A stock broker cannot deliver to a client that never subscribes: MCP needs the
 * server's embedded broker.)
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { until } from '@xiaozhi-mcp/test-kit';
import { connect, type MqttClient } from 'mqtt';
import { afterEach, describe, expect, it } from 'vitest';
import { TestBackend } from './testing/backend.js';
import { FAST_TIMING } from './testing/timing.js';
import { VirtualBoard } from './virtual-board.js';

const MOSQUITTO = '/usr/sbin/mosquitto';
const MOSQUITTO_PASSWD = '/usr/bin/mosquitto_passwd';
const missing = [MOSQUITTO, MOSQUITTO_PASSWD].filter((path) => !existsSync(path));
const CLIENT_ID = 'GID_xiaozhi@@@f4_12_fa_00_00_02@@@uuid-2';

/** A mosquitto on 127.0.0.1 with a password file and every log type, in a temp directory. */
class Mosquitto {
  #process: ChildProcess | undefined;
  /** What it logged (to stderr), across restarts. */
  log = '';
  private constructor(
    readonly dir: string,
    readonly port: number,
  ) {}

  static async create(users: Record<string, string>): Promise<Mosquitto> {
    const dir = mkdtempSync(join(tmpdir(), 'mosquitto-'));
    const passwords = join(dir, 'passwd');
    writeFileSync(passwords, '');
    for (const [user, password] of Object.entries(users))
      execFileSync(MOSQUITTO_PASSWD, ['-b', passwords, user, password]);
    // Started as root, mosquitto drops to its own user, which must still read these.
    chmodSync(dir, 0o755);
    chmodSync(passwords, 0o644);
    const port = await freePort();
    writeFileSync(
      join(dir, 'mosquitto.conf'),
      [
        `listener ${port} 127.0.0.1`,
        'allow_anonymous false',
        `password_file ${passwords}`,
        'persistence false',
        'log_dest stderr',
        'log_type all',
        'connection_messages true',
        '',
      ].join('\n'),
    );
    const broker = new Mosquitto(dir, port);
    await broker.start();
    return broker;
  }

  async start(): Promise<void> {
    const child = spawn(MOSQUITTO, ['-c', join(this.dir, 'mosquitto.conf')], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      this.log += chunk.toString();
    });
    this.#process = child;
    await until(
      () => this.log.includes(`listen socket on port ${this.port}`) || child.exitCode !== null,
      { what: 'mosquitto listening' },
    );
    if (child.exitCode !== null) throw new Error(`mosquitto exited: ${this.log}`);
  }

  async stop(): Promise<void> {
    const child = this.#process;
    this.#process = undefined;
    if (child === undefined || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }

  async dispose(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  return typeof address === 'object' && address !== null ? address.port : 0;
}

const count = (text: string, needle: string): number => text.split(needle).length - 1;

let broker: Mosquitto | undefined;
let backend: TestBackend | undefined;
let observer: MqttClient | undefined;
const boards: VirtualBoard[] = [];

afterEach(async () => {
  for (const board of boards.splice(0)) board.powerOff();
  observer?.end(true);
  observer = undefined;
  await backend?.close();
  backend = undefined;
  await broker?.dispose();
  broker = undefined;
});

async function bootOnMosquitto(
  keepalive: number,
): Promise<{ board: VirtualBoard; mosquitto: Mosquitto }> {
  const mosquitto = await Mosquitto.create({
    'board-2': 'board-secret',
    observer: 'observer-secret',
  });
  broker = mosquitto;
  backend = await TestBackend.start({
    otaReply: () => ({
      body: {
        mqtt: {
          endpoint: `127.0.0.1:${mosquitto.port}`,
          client_id: CLIENT_ID,
          username: 'board-2',
          password: 'board-secret',
          keepalive,
          publish_topic: 'device-server',
        },
      },
    }),
  });
  const board = new VirtualBoard({
    mac: 'f4:12:fa:00:00:02',
    wifi: { ssid: 'rig-wifi' },
    otaUrl: backend.otaUrl,
    timing: {
      ...FAST_TIMING,
      httpTimeoutMs: 5000,
      // No server answers the hello here: the board gives up quickly.
      helloTimeoutMs: 300,
      mqttReconnectMs: 500,
      mqttConnectTimeoutMs: 5000,
    },
  });
  boards.push(board);
  board.powerOn();
  await board.waitForState('idle', 20_000);
  await until(() => board.mqttConnected, { what: 'MQTT connection' });
  return { board, mosquitto };
}

describe.skipIf(missing.length > 0)(
  `the virtual board against Debian's mosquitto${missing.length > 0 ? ` (skipped: ${missing.join(', ')} not installed; apt-get install mosquitto)` : ''}`,
  () => {
    it('connects with what NVS says, keeps alive, publishes on publish_topic and never subscribes', async () => {
      const { board, mosquitto } = await bootOnMosquitto(2);
      // mosquitto's own account of the CONNECT: MQTT 3.1.1 (p2), clean session (c1), the
      // stored keepalive and user name.
      await until(() => mosquitto.log.includes(`as ${CLIENT_ID} (p2, c1, k2, u'board-2')`), {
        what: 'the CONNECT in the log',
      });

      const seen: { topic: string; text: string; qos: number }[] = [];
      const watcher = connect(`mqtt://127.0.0.1:${mosquitto.port}`, {
        username: 'observer',
        password: 'observer-secret',
        reconnectPeriod: 0,
      });
      observer = watcher;
      watcher.on('message', (topic, payload, packet) =>
        seen.push({ topic, text: payload.toString(), qos: packet.qos }),
      );
      await new Promise<void>((resolve, reject) => {
        watcher.once('connect', () =>
          watcher.subscribe('#', { qos: 0 }, (e) => (e ? reject(e) : resolve())),
        );
        watcher.once('error', reject);
      });

      // A click opens an audio session: the hello goes out on publish_topic (no server answers
      // it here, so the board gives up after its hello timeout).
      board.click();
      await until(() => seen.length > 0, { what: 'the hello on device-server' });
      expect(seen[0]).toEqual({
        topic: 'device-server',
        qos: 0,
        text: '{"type":"hello","version":3,"transport":"udp","features":{"mcp":true},"audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}',
      });
      await board.waitForLine(/MQTT: Failed to receive server hello/, 20_000);

      // With a 2 s keepalive mosquitto drops a silent client after 3 s: pings keep it up.
      await until(() => count(mosquitto.log, `Received PINGREQ from ${CLIENT_ID}`) >= 2, {
        what: 'two pings',
      });
      expect(board.mqttConnected).toBe(true);
      expect(mosquitto.log).not.toContain(`Client ${CLIENT_ID} has exceeded timeout`);
      expect(count(mosquitto.log, `as ${CLIENT_ID} (`)).toBe(1);
      expect(mosquitto.log).not.toContain(`Received SUBSCRIBE from ${CLIENT_ID}`);
      expect(mosquitto.log).toContain('Received SUBSCRIBE from '); // the observer's: the log shows them
    });

    it('reconnects after the broker restarts, once mqttReconnectMs has passed', async () => {
      const { board, mosquitto } = await bootOnMosquitto(240);
      const dropped = board.waitForLine(
        /^W \(\d+\) MQTT: MQTT disconnected, schedule reconnect in 0.5 seconds$/,
        10_000,
      );
      await mosquitto.stop();
      await dropped;
      expect(board.mqttConnected).toBe(false);
      await mosquitto.start();
      await until(() => board.mqttConnected, { what: 'reconnection' });
      expect(
        count(mosquitto.log, `as ${CLIENT_ID} (p2, c1, k240, u'board-2')`),
      ).toBeGreaterThanOrEqual(2);
      expect(board.transport).toBe('mqtt');
    });
  },
);
