import { createServer, type Server } from 'node:net';
import { VirtualBoard } from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { resolveConfig } from '@xiaozhi-mcp/server';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { capture, runCli } from '../io.test-helper.js';
import { type ServeOptions, serveCommand, startOptions } from './serve.js';

const WIFI = { ssid: 'cli-test', password: 'secret' };
const boards: VirtualBoard[] = [];
let blocker: Server | undefined;

afterEach(async () => {
  for (const board of boards.splice(0)) board.powerOff();
  await new Promise<void>((resolve) => (blocker ? blocker.close(() => resolve()) : resolve()));
  blocker = undefined;
});

function options(overrides: Partial<ServeOptions>): ServeOptions {
  return {
    host: '127.0.0.1',
    port: 0,
    token: [],
    auth: 'token',
    prefix: '/xiaozhi',
    wsVersion: '1',
    logLevel: 'silent',
    ...overrides,
  };
}

/** Starts `serveCommand` in the background; `stop()` ends it and resolves with the exit code. */
function serve(overrides: Partial<ServeOptions> = {}) {
  const { io, out } = capture();
  let stop = () => {};
  const stopped = new Promise<void>((resolve) => {
    stop = resolve;
  });
  const done = serveCommand(io, options({ ...overrides, until: stopped }));
  // Surfaced by `finish`; kept from being reported as unhandled meanwhile.
  done.catch(() => {});
  return {
    out,
    finish: async () => {
      stop();
      return done;
    },
  };
}

describe('xiaozhi-mcp serve', { timeout: 20_000 }, () => {
  it('prints its endpoints, then one line per device event, and stops with 0', async () => {
    const server = serve();
    await until(() => /^API /m.test(server.out.stdout), { what: 'the endpoint lines' });
    const lines = server.out.stdout.split('\n');
    expect(lines[0]).toMatch(/^OTA {8}http:\/\/127\.0\.0\.1:\d+\/xiaozhi\/ota\/$/);
    expect(lines[1]).toMatch(/^WebSocket {2}ws:\/\/127\.0\.0\.1:\d+\/xiaozhi\/v1\/$/);
    expect(lines[2]).toMatch(/^API {8}http:\/\/127\.0\.0\.1:\d+\/api$/);
    const ota = lines[0]?.split(/\s+/)[1] ?? '';

    const board = new VirtualBoard({
      mac: 'F4:12:FA:00:00:07',
      wifi: WIFI,
      otaUrl: ota,
      timing: FAST_TIMING,
    });
    boards.push(board);
    board.powerOn();
    await board.waitForState('idle', 5000);
    board.click();
    await until(() => /^ready /m.test(server.out.stdout), { what: 'the ready line' });
    board.powerOff();
    await until(() => /^disconnected /m.test(server.out.stdout), { what: 'the disconnected line' });
    expect(await server.finish()).toBe(0);

    expect(server.out.stdout.split('\n').slice(3)).toEqual([
      'ota-check f4:12:fa:00:00:07 2.4.2',
      'connected f4:12:fa:00:00:07 websocket',
      'ready f4:12:fa:00:00:07 bread-compact-wifi 2.4.2 14 tools',
      expect.stringMatching(/^disconnected f4:12:fa:00:00:07 \S/),
      '',
    ]);
    expect(server.out.stderr).toMatch(/listening on http:\/\/127\.0\.0\.1:\d+; Ctrl-C to stop\n/);
    expect(server.out.stderr).toMatch(/stopped\n$/);
  });

  it('--transport mqtt: prints the MQTT and UDP URLs; a board is reached with no click and listed on mqtt', async () => {
    const server = serve({ transport: 'mqtt', mqttPort: 0 });
    await until(() => /^API /m.test(server.out.stdout), { what: 'the endpoint lines' });
    const lines = server.out.stdout.split('\n');
    expect(lines.slice(0, 5)).toEqual([
      expect.stringMatching(/^OTA {8}http:\/\/127\.0\.0\.1:\d+\/xiaozhi\/ota\/$/),
      expect.stringMatching(/^WebSocket {2}ws:\/\/127\.0\.0\.1:\d+\/xiaozhi\/v1\/$/),
      expect.stringMatching(/^MQTT {7}mqtt:\/\/127\.0\.0\.1:\d+$/),
      expect.stringMatching(/^UDP {8}udp:\/\/127\.0\.0\.1:\d+$/),
      expect.stringMatching(/^API {8}http:\/\/127\.0\.0\.1:\d+\/api$/),
    ]);
    const ota = lines[0]?.split(/\s+/)[1] ?? '';
    const http = ota.replace(/\/xiaozhi\/ota\/$/, '');
    const board = new VirtualBoard({
      mac: 'F4:12:FA:00:00:09',
      wifi: WIFI,
      otaUrl: ota,
      timing: FAST_TIMING,
    });
    boards.push(board);
    board.powerOn();
    // No click: a board on MQTT is connected from boot on.
    await until(() => /^ready f4:12:fa:00:00:09 /m.test(server.out.stdout), {
      what: 'the ready line',
    });
    expect(server.out.stdout).toContain('connected f4:12:fa:00:00:09 mqtt\n');

    const devices = await runCli('devices', '--server', http);
    expect(devices.stdout).toMatch(
      /^f4:12:fa:00:00:09 +bread-compact-wifi +2\.4\.2 +ready +mqtt +14 /m,
    );
    const call = await runCli(
      'call',
      'f4:12:fa:00:00:09',
      'self.audio_speaker.set_volume',
      'volume=20',
      '--server',
      http,
    );
    expect(call).toEqual({ code: 0, stdout: 'true\n', stderr: '' });
    board.powerOff();
    expect(await server.finish()).toBe(0);
  });

  it('prints JSON lines with --json', async () => {
    const server = serve({ json: true, prefix: '/box' });
    await until(() => server.out.stdout.includes('\n'), { what: 'the listening line' });
    const listening = JSON.parse(server.out.stdout.split('\n')[0] ?? '') as Record<string, string>;
    expect(listening).toMatchObject({
      event: 'listening',
      ota: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+\/box\/ota\/$/),
      websocket: expect.stringMatching(/\/box\/v1\/$/),
      api: expect.stringMatching(/\/api$/),
    });
    const board = new VirtualBoard({
      mac: 'f4:12:fa:00:00:08',
      wifi: WIFI,
      otaUrl: listening.ota ?? '',
      timing: FAST_TIMING,
    });
    boards.push(board);
    board.powerOn();
    await board.waitForState('idle', 5000);
    board.click();
    await until(() => server.out.stdout.includes('"ready"'), { what: 'the ready event' });
    expect(await server.finish()).toBe(0);
    const events = server.out.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(events.map((e) => e.event)).toEqual(['listening', 'ota-check', 'connected', 'ready']);
    expect(events[3]).toMatchObject({
      deviceId: 'f4:12:fa:00:00:08',
      board: 'bread-compact-wifi',
      version: '2.4.2',
      tools: 14,
      at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    });
  });

  it('refuses a hazardous or invalid configuration with one line and exit 2', async () => {
    const hazard = await runCli('serve', '--port', '0', '--token', 'x'.repeat(4000));
    expect(hazard.code).toBe(2);
    expect(hazard.stdout).toBe('');
    expect(hazard.stderr).toMatch(/^xiaozhi-mcp: CONFIG_HAZARD: config would send boards .*\n$/);
    expect(hazard.stderr.split('\n')).toHaveLength(2);

    const version = await runCli('serve', '--port', '0', '--ws-version', '7');
    expect(version.code).toBe(2);
    expect(version.stderr).toMatch(
      /^xiaozhi-mcp: option '--ws-version <n>' argument '7' is invalid/,
    );

    const prefix = await runCli('serve', '--port', '0', '--prefix', 'xiaozhi/');
    expect(prefix.code).toBe(2);
    expect(prefix.stderr).toMatch(/^xiaozhi-mcp: CONFIG_INVALID: config prefix: /);

    const port = await runCli('serve', '--port', '70000');
    expect(port.code).toBe(2);
    expect(port.stderr).toBe(
      'xiaozhi-mcp: --port must be an integer from 0 to 65535, got "70000"\n',
    );

    const tls = await runCli('serve', '--port', '0', '--transport', 'mqtt', '--mqtt-port', '8883');
    expect(tls.code).toBe(2);
    expect(tls.stderr).toMatch(
      /^xiaozhi-mcp: CONFIG_INVALID: config mqttPort: 8883 is where boards speak TLS/,
    );

    const transport = await runCli('serve', '--port', '0', '--transport', 'udp');
    expect(transport.code).toBe(2);
    expect(transport.stderr).toMatch(
      /^xiaozhi-mcp: option '--transport <transport>' argument 'udp' is invalid/,
    );

    const vision = await runCli('serve', '--port', '0', '--vision-token', 't');
    expect(vision.code).toBe(2);
    expect(vision.stderr).toBe('xiaozhi-mcp: --vision-token needs --vision-url\n');
  });

  it('refuses a network address without an API token with exit 2, naming --api-token and --auth off', async () => {
    const open = await runCli('serve', '--host', '0.0.0.0', '--port', '0', '--token', 'device-t');
    expect(open.code).toBe(2);
    expect(open.stdout).toBe('');
    expect(open.stderr).toMatch(/^xiaozhi-mcp: CONFIG_HAZARD: config apiTokens: .*--api-token/);
    expect(open.stderr).toMatch(/--auth off/);
  });

  it('starts on a network address with --auth off given on purpose', () => {
    // Checked on the configuration: tests never bind beyond loopback.
    const options = {
      host: '0.0.0.0',
      port: 0,
      token: [],
      apiToken: [],
      allowOrigin: [],
      auth: 'off',
      prefix: '/xiaozhi',
      wsVersion: '1',
      logLevel: 'silent',
    } as const;
    expect(() =>
      resolveConfig(startOptions({ ...options, token: [], apiToken: [], allowOrigin: [] })),
    ).not.toThrow();
    expect(() =>
      resolveConfig(
        startOptions({ ...options, auth: 'token', token: [], apiToken: [], allowOrigin: [] }),
      ),
    ).toThrow(/apiTokens/);
    expect(() =>
      resolveConfig(
        startOptions({
          ...options,
          auth: 'token',
          token: [],
          apiToken: ['api-t'],
          allowOrigin: [],
        }),
      ),
    ).not.toThrow();
  });

  it('passes --api-token and --allow-origin to the API: device tokens do not open it', async () => {
    const server = serve({
      token: ['device-t'],
      apiToken: ['api-t'],
      allowOrigin: ['http://tools.example:3000'],
      maxConnections: 50,
      headersTimeout: 5000,
      requestTimeout: 20_000,
    });
    await until(() => /^API /m.test(server.out.stdout), { what: 'the endpoint lines' });
    const api = /^API {8}(\S+)$/m.exec(server.out.stdout)?.[1] ?? '';
    const status = async (headers: Record<string, string>) =>
      (await fetch(`${api}/devices`, { headers })).status;
    expect(await status({})).toBe(401);
    expect(await status({ Authorization: 'Bearer device-t' })).toBe(401);
    expect(await status({ Authorization: 'Bearer api-t' })).toBe(200);
    expect(
      await status({ Authorization: 'Bearer api-t', Origin: 'http://tools.example:3000' }),
    ).toBe(200);
    expect(await status({ Authorization: 'Bearer api-t', Origin: 'http://evil.example' })).toBe(
      403,
    );
    expect(await server.finish()).toBe(0);
  });

  it('checks the front-door flags', async () => {
    const headers = await runCli('serve', '--port', '0', '--headers-timeout', '40000');
    expect(headers.code).toBe(2);
    expect(headers.stderr).toMatch(/^xiaozhi-mcp: CONFIG_INVALID: config headersTimeoutMs: /);

    const origin = await runCli('serve', '--port', '0', '--allow-origin', 'http://x.example/p');
    expect(origin.code).toBe(2);
    expect(origin.stderr).toMatch(/^xiaozhi-mcp: CONFIG_INVALID: config allowedOrigins: /);

    const cap = await runCli('serve', '--port', '0', '--max-connections', '-1');
    expect(cap.code).toBe(2);
    expect(cap.stderr).toBe(
      'xiaozhi-mcp: --max-connections must be an integer from 0 to 1000000, got "-1"\n',
    );
  });

  it('fails with exit 1 when the port is taken', async () => {
    const taken = createServer();
    blocker = taken;
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const address = taken.address();
    const port = typeof address === 'object' && address !== null ? address.port : 0;
    const result = await runCli('serve', '--port', String(port), '--log-level', 'silent');
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(
      new RegExp(
        `^xiaozhi-mcp: LISTEN_FAILED: cannot listen on 127\\.0\\.0\\.1:${port}: .*EADDRINUSE`,
      ),
    );
  });
});
