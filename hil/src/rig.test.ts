/**
 * `hil run` end to end on virtual boards, through the same serial path as real boards:
 * esptool-js flashing, provisioning, the OTA check, the BOOT click over DTR, the suites and
 * the reports. Fault knobs make checks fail with what was expected and what came back.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { resolveConfig, XiaozhiServer } from '@xiaozhi-mcp/server';
import { until } from '@xiaozhi-mcp/test-kit';
import { describe, expect, it } from 'vitest';
import { hil } from './hil-main.test-helper.js';
import type { BoardConfig } from './inventory.js';
import type { RunReport } from './model.js';
import { rigServerOptions } from './rig.js';

const hilBin = join(resolve(dirname(fileURLToPath(import.meta.url)), '..'), 'bin/hil.js');

function rig(boards: BoardConfig[]): { config: string; out: string } {
  const dir = mkdtempSync(join(tmpdir(), 'hil-rig-'));
  const config = join(dir, 'hil.config.json');
  writeFileSync(config, JSON.stringify({ wifi: { ssid: 'lab' }, boards }));
  return { config, out: join(dir, 'out') };
}

const bread = (
  name: string,
  faults: Record<string, unknown> = {},
  extra: Partial<BoardConfig> = {},
): BoardConfig => ({
  name,
  port: `virtual:${name}`,
  chip: 'esp32s3',
  variant: 'bread-compact-wifi',
  session: 'boot-click',
  virtual: { preset: 'bread-compact-wifi', faults },
  ...extra,
});

function report(out: string): RunReport {
  return JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
}

describe('hil run', () => {
  it('qualifies the default virtual rig end to end and exits 0', async () => {
    const out = join(mkdtempSync(join(tmpdir(), 'hil-default-')), 'reports');
    const cwd = process.cwd();
    process.chdir(dirname(out)); // no hil.config.json here: the default virtual rig
    let result: Awaited<ReturnType<typeof hil>>;
    try {
      result = await hil('run', '--out', out);
    } finally {
      process.chdir(cwd);
    }
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const run = report(out);
    expect(run.rig).toBe('virtual');
    expect(run.suites).toEqual([
      'session',
      'initialize',
      'tools-list',
      'tools-call',
      'robustness',
      'latency',
      'audio',
      'ota-upgrade',
    ]);
    expect(run.boards.map((b) => [b.name, b.status])).toEqual([
      ['bread-compact-wifi', 'passed'],
      ['otto-robot', 'passed'],
    ]);
    // Both transports on every run: one board over MQTT (no click), one over WebSocket.
    expect(run.boards.map((b) => [b.name, b.transport])).toEqual([
      ['bread-compact-wifi', 'mqtt'],
      ['otto-robot', 'websocket'],
    ]);
    expect(run.server.mqtt).toMatch(/^mqtt:\/\/127\.0\.0\.1:\d+$/);
    const [overMqtt, overWebsocket] = run.boards;
    expect(overMqtt?.checks.find((c) => c.id === 'audio.uplink')).toMatchObject({
      status: 'passed',
      data: { packets: 10, gaps: 0, outOfOrder: 0, rejected: 0, firstSequence: 1 },
    });
    expect(
      overMqtt?.checks.filter((c) => c.status === 'skipped').map((c) => [c.id, c.message]),
    ).toEqual([
      ...['hello', 'hello-version', 'hello-mcp', 'hello-transport'].map((id) => [
        `session.${id}`,
        'over MQTT MCP needs no hello (docs/protocol.md §5)',
      ]),
      ['latency.ping', expect.stringMatching(/on mqtt, where the server has no ping/)],
    ]);
    expect(overMqtt?.steps.find((s) => s.step === 'session')?.message).toMatch(
      /^on MQTT with no click, initialized, tools listed$/,
    );
    expect(
      overWebsocket?.checks.filter((c) => c.status === 'skipped').map((c) => [c.id, c.message]),
    ).toEqual([['audio.uplink', 'audio over WebSocket is not judged']]);
    // One board direct, one reached as a board on another host, through RFC 2217.
    expect(run.boards.map((b) => b.port)).toEqual([
      expect.stringMatching(/^virtual:bread-compact-wifi\b/),
      expect.stringMatching(/^rfc2217:\/\/127\.0\.0\.1:\d+$/),
    ]);
    for (const board of run.boards) {
      expect(board.steps.filter((s) => s.status === 'passed').map((s) => s.step)).toEqual([
        'open',
        'identify',
        'flash',
        'provision',
        'reset',
        'boot',
        'ota-check',
        'session',
        'suites',
        'close',
      ]);
      expect(board.steps.find((s) => s.step === 'flash')?.message).toMatch(/MD5 verified/);
      expect(board.checks.find((c) => c.id === 'ota-upgrade.version')).toMatchObject({
        status: 'passed',
        message: 'runs 2.4.3',
      });
      expect(board.checks.filter((c) => c.status === 'known-deviation').map((c) => c.id)).toEqual([
        'robustness.error-code',
        'robustness.escaped-messages',
        'robustness.ping',
      ]);
      expect(board.latency[0]?.samples).toBeGreaterThan(0);
      expect(readFileSync(join(out, board.consoleLog ?? ''), 'utf8')).toMatch(
        /app_init: App version:\s+2\.4\.3/,
      );
      expect(readFileSync(join(out, board.transcript ?? ''), 'utf8')).toMatch(
        /"dir":"out".*tools\/list/,
      );
    }
    const junit = readFileSync(join(out, 'junit.xml'), 'utf8');
    expect(junit.match(/<testsuite /g)).toHaveLength(2);
    expect(junit).toContain('<property name="firmwareVersion" value="2.4.2"/>');
    expect(junit).toContain('<property name="transport" value="mqtt"/>');
    expect(junit).toContain('<property name="transport" value="websocket"/>');
    expect(readFileSync(join(out, 'report.html'), 'utf8')).toMatch(
      /<dt>Transport<\/dt>\s*<dd[^>]*>MQTT<\/dd>/,
    );
    for (const file of ['report.html', 'metrics.txt'])
      expect(existsSync(join(out, file))).toBe(true);
    expect(result.stdout).toMatch(/Exit code 0: all checks passed/);
  });

  it('fails tools-list on a board that pages wrong, saying what the firmware rule expects', async () => {
    const { config, out } = rig([
      {
        ...bread('robot', { pageBudgetBytes: 9000 }),
        variant: 'otto-robot',
        virtual: { preset: 'otto-robot', faults: { pageBudgetBytes: 9000 } },
      },
    ]);
    const result = await hil('run', '--config', config, '--out', out, '--suite', 'tools-list');
    expect(result.code).toBe(1);
    const check = report(out).boards[0]?.checks.find((c) => c.id === 'tools-list.page-budget');
    expect(check?.status).toBe('failed');
    expect(check?.message).toMatch(/expected .*8000.*got|> 8000/);
  });

  it('fails latency on a board that answers slowly, against the inventory budget', async () => {
    const { config, out } = rig([
      bread('slow', { replyLatencyMs: 30 }, { latency: { calls: 8, warmup: 1, p50Ms: 10 } }),
    ]);
    const result = await hil('run', '--config', config, '--out', out, '--suite', 'latency');
    expect(result.code).toBe(1);
    const check = report(out).boards[0]?.checks.find((c) => c.id === 'latency.calls');
    expect(check?.status).toBe('failed');
    expect(check?.message).toMatch(/expected p50 <= 10 ms.*got p50/);
  });

  it('fails a board that crashes on the hello, naming the step and the crash', async () => {
    const { config, out } = rig([bread('crashy', { crashOnHello: true })]);
    const result = await hil('run', '--config', config, '--out', out, '--suite', 'initialize');
    expect(result.code).toBe(1);
    const board = report(out).boards[0];
    expect(board?.status).toBe('failed');
    expect(board?.failure?.step).toBe('session');
    expect(board?.failure?.reason).toMatch(
      /expected no panic, got one: .*Guru Meditation Error.*LoadProhibited/,
    );
  });

  it('fails a build that panics at boot, at the boot step', async () => {
    const { config, out } = rig([bread('panicky', { panicAtBoot: true })]);
    const result = await hil('run', '--config', config, '--out', out, '--suite', 'initialize');
    expect(result.code).toBe(1);
    const board = report(out).boards[0];
    expect(board?.failure?.step).toBe('boot');
    expect(board?.failure?.reason).toMatch(/assert failed: app_main/);
  });

  it('reports a board that vanishes mid-run as a rig failure while the other finishes (exit 3)', async () => {
    const { config, out } = rig([
      bread('vanishing', { unplugOnCall: 'self.get_device_status' }),
      bread('steady'),
    ]);
    const result = await hil('run', '--config', config, '--out', out, '--suite', 'tools-call');
    expect(result.code).toBe(3);
    const [vanishing, steady] = report(out).boards;
    expect(vanishing?.status).toBe('rig-failed');
    expect(vanishing?.failure).toMatchObject({
      step: 'suites',
      reason: expect.stringMatching(/vanished|lost|failed/),
    });
    expect(steady?.status).toBe('passed');
    expect(result.stdout).toMatch(/Exit code 3/);
  });

  it('qualifies a board on native USB: re-found after every reset, sessions without a DTR click', async () => {
    // USB-Serial-JTAG: the port re-enumerates under a new path whenever the app starts (the
    // hard reset, the reboot, the upgrade), and DTR cannot press BOOT. The inventory says
    // boot-click; the rig knows better and prompts, and the virtual rig's operator presses it.
    const { config, out } = rig([
      {
        ...bread('native'),
        virtual: { preset: 'bread-compact-wifi', usb: 'native' },
      },
    ]);
    const result = await hil(
      'run',
      '--config',
      config,
      '--out',
      out,
      '--suite',
      'initialize,tools-list,tools-call,reboot,ota-upgrade',
    );
    const [board] = report(out).boards;
    expect(board?.failure).toBeUndefined();
    expect(result.code).toBe(0);
    expect(board?.status).toBe('passed');
    const steps = board?.steps.map((s) => `${s.step}:${s.status}`);
    expect(steps).toEqual(
      expect.arrayContaining(['flash:passed', 'reset:passed', 'boot:passed', 'session:passed']),
    );
    expect(board?.checks.filter((c) => c.status === 'failed')).toEqual([]);
    expect(board?.checks.map((c) => c.id)).toEqual(
      expect.arrayContaining(['reboot.back', 'ota-upgrade.version']),
    );
    // Re-found at a new path after the resets, and prompted rather than clicked.
    expect(board?.port).toMatch(/\/dev\/ttyACM[1-9]/);
    expect(result.stdout).toMatch(/native USB .*press the BOOT button/);
    const log = readFileSync(join(out, 'native', 'console.log'), 'utf8');
    expect(log).toMatch(/reconnected on \/dev\/ttyACM1/);
  });

  it('qualifies a board on native USB over MQTT by default: no prompt, audio by the operator, back after reboot and upgrade', async () => {
    // No session in the inventory: a board DTR cannot click runs over MQTT, offered it by our
    // OTA reply, and every session (after the reset, the reboot, the upgrade) needs no press.
    const { config, out } = rig([
      {
        name: 'box',
        port: 'virtual:box',
        chip: 'esp32s3',
        variant: 'bread-compact-wifi',
        virtual: { preset: 'bread-compact-wifi', usb: 'native' },
      },
    ]);
    const result = await hil(
      'run',
      '--config',
      config,
      '--out',
      out,
      '--suite',
      'initialize,tools-call,audio,reboot,ota-upgrade',
    );
    const [board] = report(out).boards;
    expect(board?.failure).toBeUndefined();
    expect(result.code).toBe(0);
    expect(board?.transport).toBe('mqtt');
    expect(board?.checks.filter((c) => c.status === 'failed')).toEqual([]);
    expect(board?.checks.find((c) => c.id === 'audio.uplink')?.status).toBe('passed');
    expect(board?.checks.find((c) => c.id === 'ota-upgrade.version')?.message).toBe('runs 2.4.3');
    // Nobody was asked to press BOOT to start a session; the operator pressed it for audio only.
    expect(result.stdout).not.toMatch(/press the BOOT button/);
    expect(result.stdout).toMatch(/our OTA reply gives f4:12:fa:[0-9a-f:]+ our MQTT broker/);
    expect(board?.port).toMatch(/\/dev\/ttyACM[1-9]/);
  });

  it('qualifies a native-USB board that re-enumerates in 2 s and loses its boot lines: boot by its OTA check, back after reboot and upgrade', async () => {
    // The inventory's virtual.reenumerateMs: a real board's 1-3 s off the bus on every reset,
    // with what it prints meanwhile lost, as on a real USB-Serial-JTAG console.
    const { config, out } = rig([
      {
        name: 'slow-usb',
        port: 'virtual:slow-usb',
        chip: 'esp32s3',
        variant: 'bread-compact-wifi',
        virtual: { preset: 'bread-compact-wifi', usb: 'native', reenumerateMs: 2000 },
      },
    ]);
    const result = await hil(
      'run',
      '--config',
      config,
      '--out',
      out,
      '--suite',
      'initialize,reboot,ota-upgrade',
    );
    const [board] = report(out).boards;
    expect(board?.failure).toBeUndefined();
    expect(result.code).toBe(0);
    expect(board?.steps.find((s) => s.step === 'boot')?.message).toMatch(
      /its OTA check at our endpoint/,
    );
    expect(board?.checks.find((c) => c.id === 'ota-upgrade.version')?.message).toBe('runs 2.4.3');
  });

  it('fails a board on reset none at once where nobody can press its buttons (CI, no TTY: exit 3)', async () => {
    // Behind an RFC 2217 server the virtual rig has no hand on the board: only a person could
    // put it into its bootloader, and this run has none (its output is no terminal).
    const { config, out } = rig([
      {
        ...bread('remote-none', {}, { reset: 'none' }),
        virtual: { preset: 'bread-compact-wifi', via: 'rfc2217' },
      },
    ]);
    // CI: nobody at the terminal, whatever the test's output is.
    const ci = process.env.CI;
    process.env.CI = 'true';
    let result: Awaited<ReturnType<typeof hil>>;
    try {
      result = await hil('run', '--config', config, '--out', out, '--suite', 'initialize');
    } finally {
      if (ci === undefined) delete process.env.CI;
      else process.env.CI = ci;
    }
    expect(result.code).toBe(3);
    const [board] = report(out).boards;
    expect(board?.failure).toMatchObject({
      step: 'identify',
      reason: expect.stringMatching(
        /^hold BOOT and press RESET on remote-none: reset is none, and nobody is at a terminal to press it/,
      ),
    });
  });

  it('refuses session mqtt where the MAC is not known before the OTA check (exit 2, the field named)', async () => {
    const { config, out } = rig([{ name: 'desk', port: '/dev/ttyUSB7', session: 'mqtt' }]);
    const result = await hil('run', '--config', config, '--out', out);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(
      /^hil: board desk runs over MQTT \(session mqtt\).*give its deviceId \(aa:bb:cc:dd:ee:ff\) in the inventory, or run with --provision or --firmware/,
    );
    expect(existsSync(join(out, 'report.json'))).toBe(false);
  });

  it('refuses a bad inventory with exit 2 and the field named', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-bad-'));
    const config = join(dir, 'hil.config.json');
    writeFileSync(config, JSON.stringify({ boards: [{ name: 'a', port: 'x', session: 'press' }] }));
    const result = await hil('run', '--config', config, '--out', join(dir, 'out'));
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^hil: .*boards\[0\]\.session must be one of/);
    const suite = await hil('run', '--config', config, '--suite', 'fuzz');
    expect(suite.code).toBe(2);
  });

  it('stops cleanly on Ctrl-C and still writes the reports', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-int-'));
    const child = spawn(process.execPath, [hilBin, 'run', '--out', join(dir, 'out')], {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    // Decoded as text across chunks: a read that ends inside the glyph '…' must not hide the line.
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: string) => {
      stdout += chunk;
    });
    // Read too, so a chatty stderr never fills its pipe and stalls the child.
    child.stderr.on('data', (chunk: string) => {
      stderr += chunk;
    });
    // Listened for from the start: a child that ends before the suites cannot be missed. 'close',
    // not 'exit': its output is then read to the end.
    let ended = false;
    const closed = once(child, 'close').then(([code, signal]) => {
      ended = true;
      return { code: code as number | null, signal: signal as NodeJS.Signals | null };
    });
    try {
      await until(() => ended || /suites …/.test(stdout), {
        what: "a board's suites step to start",
        timeoutMs: 45_000,
        seen: () => stdout,
      });
      // Ctrl-C is meant to land mid-run; a run that ended before any suite says why here.
      expect(ended, `hil ended before any board's suites:\n${stdout}\n${stderr}`).toBe(false);
      child.kill('SIGINT');
      const { code, signal } = await closed;
      expect({ code, signal }, `${stdout}\n${stderr}`).toEqual({ code: 130, signal: null });
    } finally {
      if (!ended) child.kill('SIGKILL');
    }
    const out = join(dir, 'out');
    const run = report(out);
    expect(run.interrupted).toBe(true);
    expect(run.boards.length).toBe(2);
    // Recorded as interrupted everywhere, not as a rig failure (exit 3).
    expect(run.exitCode).toBe(130);
    expect(run.summary.rigFailures).toBe(0);
    const cut = run.boards.filter((b) => b.status === 'interrupted');
    expect(cut.length).toBeGreaterThan(0);
    expect(run.boards.every((b) => b.status === 'interrupted' || b.status === 'passed')).toBe(true);
    for (const board of cut) {
      expect(board.failure).toMatchObject({ reason: 'interrupted by Ctrl-C' });
      expect(board.steps.some((s) => s.status === 'interrupted')).toBe(true);
      expect(board.steps.some((s) => s.status === 'failed')).toBe(false);
    }
    expect(stdout).toMatch(/Exit code 130: interrupted/);
    expect(stdout).not.toMatch(/Exit code 3|rig failed|rig\.\w+/);
    const junit = readFileSync(join(out, 'junit.xml'), 'utf8');
    expect(junit).not.toContain('<error');
    expect(junit).toContain('<property name="run.exitCode" value="130"/>');
    expect(junit).toContain('<property name="status" value="interrupted"/>');
    expect(junit).toMatch(/<skipped message="interrupted by Ctrl-C at \w+/);
    const html = readFileSync(join(out, 'report.html'), 'utf8');
    expect(html).toMatch(/<title>hil: exit 130, interrupted \(Ctrl-C\)[^<]*<\/title>/);
    expect(html).toContain('data-exit-code="130"');
    expect(html).not.toContain('The rig failed');
  });
});

describe('rigServerOptions', () => {
  it('starts on a lab network address: its API is closed by a token of its own', () => {
    // A rig that listens for network boards binds 0.0.0.0; an open API there is refused.
    const options = rigServerOptions('0.0.0.0', 8000, undefined);
    expect(() => resolveConfig(options)).not.toThrow();
    expect(options.apiTokens).toHaveLength(1);
    expect(rigServerOptions('0.0.0.0', 8000, undefined).apiTokens).not.toEqual(options.apiTokens);
    // No board on MQTT: no broker, no port more on the lab network.
    expect(resolveConfig(options).mqttBroker).toBe(false);
  });

  it('runs the MQTT broker when asked, offering boards the public host with the port it bound', async () => {
    const options = rigServerOptions('127.0.0.1', 0, 'http://localhost:8000', 0);
    expect(resolveConfig(options)).toMatchObject({ mqttBroker: true, transport: 'websocket' });
    const server = await XiaozhiServer.start(options);
    try {
      expect(server.urls.mqtt).toMatch(/^mqtt:\/\/localhost:\d+$/);
      expect(server.urls.mqtt).not.toBe('mqtt://localhost:0');
    } finally {
      await server.stop();
    }
  });
});
