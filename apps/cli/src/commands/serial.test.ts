import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TestBackend } from '@xiaozhi-mcp/device/testing';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, spawnCommand } from '../io.test-helper.js';

// The binaries need the workspace built (`npx turbo run build`; `npm test` builds first).
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');
const xiaozhiMcp = join(root, 'apps/cli/bin/xiaozhi-mcp.js');
// `hil flash` from a shell is tested in hil (hil/src/commands/flash.test.ts): xiaozhi-mcp no
// longer depends on hil, so nothing builds hil before these tests run.

let dir: string;
let firmware: string;
let backend: TestBackend;

function env(): NodeJS.ProcessEnv {
  const vars: NodeJS.ProcessEnv = { ...process.env, XIAOZHI_VIRTUAL_DIR: join(dir, 'virtual') };
  // Plain output whatever the test runner's terminal is.
  delete vars.FORCE_COLOR;
  delete vars.NO_COLOR;
  return vars;
}

function start(bin: string, args: string[]) {
  // Every run is bounded: a hung command fails the test instead of hanging it.
  return spawnCommand(bin, args, { env: env(), timeoutMs: 45_000 });
}

const shell = (bin: string, ...args: string[]) => start(bin, args).done;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'xiaozhi-shell-'));
  firmware = join(dir, 'merged-binary.bin');
  writeFileSync(
    firmware,
    buildVirtualFirmware({ chip: 'esp32s3', version: '2.7.0', board: 'bread-compact-wifi' }).merged,
  );
  backend = await TestBackend.start();
});

afterAll(async () => {
  await backend?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the serial commands from a shell', () => {
  it('The CLI commands work against a virtual board from a shell', {
    timeout: 120_000,
  }, async () => {
    const info = await shell(xiaozhiMcp, 'image', 'info', firmware);
    expect(info.stderr).toBe('');
    expect(info.code).toBe(0);
    expect(info.stdout).toMatch(/merged image/);
    expect(info.stdout).toMatch(/chip esp32s3, xiaozhi 2\.7\.0 for bread-compact-wifi/);

    const flash = await shell(xiaozhiMcp, 'flash', firmware, '--port', 'virtual:desk', '--create');
    expect(flash.stderr).toBe('');
    expect(flash.code).toBe(0);
    expect(flash.stdout).toMatch(/^created virtual board virtual:desk: bread-compact-wifi/m);
    expect(flash.stdout).toMatch(
      /^virtual:desk: ESP32-S3 .*, MAC f4:12:fa(:[0-9a-f]{2}){3}, 16 MB flash$/m,
    );
    expect(flash.stdout).toMatch(/at 921600 baud; MD5 verified \([0-9a-f]{32}\)$/m);

    const provision = await shell(
      xiaozhiMcp,
      'provision',
      '--ssid',
      'lab',
      '--password',
      'pw',
      '--ota-url',
      backend.otaUrl,
      '--port',
      'virtual:desk',
    );
    expect(provision.stderr).toBe('');
    expect(provision.code).toBe(0);
    expect(provision.stdout).toMatch(
      /wrote wifi\/ssid=lab, wifi\/password \(set\), wifi\/ota_url=/,
    );

    const before = backend.otaRequests.length;
    const monitor = await shell(
      xiaozhiMcp,
      'monitor',
      '--port',
      'virtual:desk',
      '--until',
      'StateMachine: State: activating -> idle',
      '--timeout',
      '30',
    );
    expect(monitor.code).toBe(0);
    expect(monitor.stdout).toMatch(/^I \(\d+\) app_init: App version: {6}2\.7\.0$/m);
    expect(monitor.stdout).toMatch(/StateMachine: State: activating -> idle$/m);
    expect(monitor.stderr).toMatch(/^--- matched /m);
    const requests = backend.otaRequests.slice(before);
    expect(requests.map((r) => r.headers['user-agent'])).toContain('bread-compact-wifi/2.7.0');

    const ports = await shell(xiaozhiMcp, 'ports');
    expect(ports.code).toBe(0);
    expect(ports.stdout).toMatch(
      /^virtual:desk +virtual +esp32s3\/16MB +f4:12:fa\S+ +bread-compact-wifi: firmware 2\.7\.0, wifi lab, ota http:\/\/127\.0\.0\.1:\d+\/xiaozhi\/ota\/$/m,
    );
  });

  it('monitor stops on Ctrl-C with exit 130', { timeout: 60_000 }, async () => {
    const { child, done } = start(xiaozhiMcp, ['monitor', '--port', 'virtual:rig', '--create']);
    // Ctrl-C once the monitor is following the console.
    await new Promise<void>((resolveStarted, reject) => {
      // A hang guard, not a pause: the wait ends at the monitor's banner.
      const timer = setTimeout(() => reject(new Error('monitor did not start')), 30_000);
      child.stderr?.on('data', (chunk: Buffer) => {
        if (chunk.toString().includes('--- monitor virtual:rig')) {
          clearTimeout(timer);
          resolveStarted();
        }
      });
    });
    child.kill('SIGINT');
    const run = await done;
    expect(run.code).toBe(130);
    expect(run.stderr).toMatch(/^--- stopped \(/m);
  });

  it('refuses a virtual board name that is not there with exit 2, listing those that are', {
    timeout: 60_000,
  }, async () => {
    for (const argv of [
      ['monitor', '--port', 'virtual:typo'],
      [
        'provision',
        '--ssid',
        'lab',
        '--password',
        'pw',
        '--ota-url',
        backend.otaUrl,
        '--port',
        'virtual:typo',
      ],
      ['flash', firmware, '--port', 'virtual:typo'],
    ]) {
      const run = await shell(xiaozhiMcp, ...argv);
      expect(run.code, argv[0]).toBe(2);
      expect(run.stdout, argv[0]).toBe('');
      expect(run.stderr, argv[0]).toBe(
        `xiaozhi-mcp: ${argv[0]} virtual:typo: no virtual board 'typo' in ${join(dir, 'virtual')} (known: virtual:desk, virtual:rig); add --create to make a new one, or set XIAOZHI_VIRTUAL_DIR if it lives elsewhere\n`,
      );
    }
    expect(readdirSync(join(dir, 'virtual')).filter((file) => file.startsWith('typo'))).toEqual([]);
  });

  it('fails with one line and exit 2 when --port is needed', { timeout: 60_000 }, async () => {
    // Two virtual boards exist now (desk; rig, which monitor created).
    const run = await shell(xiaozhiMcp, 'flash', firmware);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(
      /^xiaozhi-mcp: flash: \d+ boards attached: .*virtual:desk \(bread-compact-wifi\); virtual:rig \(bread-compact-wifi\); choose one with --port\n$/,
    );
  });
});

describe('registration in xiaozhi-mcp', () => {
  it('has ports, flash, provision and monitor', async () => {
    const help = await runCli('--help');
    for (const command of ['ports', 'flash', 'provision', 'monitor'])
      expect(help.stdout).toMatch(new RegExp(`^  ${command}\\b`, 'm'));
    const usage = await runCli('monitor', '--until', '(', '--port', 'virtual:x');
    expect(usage.code).toBe(2);
    expect(usage.stderr).toMatch(
      /^xiaozhi-mcp: monitor virtual:x: --until "\(" is not a regular expression/,
    );
    const missing = await runCli('provision', '--ssid', 'lab');
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(
      /^xiaozhi-mcp: required option '--password <password>' not specified/,
    );
  });

  it('takes them from @xiaozhi-mcp/serial: xiaozhi-mcp does not depend on hil', () => {
    const cli = join(root, 'apps/cli');
    const manifest = JSON.parse(readFileSync(join(cli, 'package.json'), 'utf8')) as {
      dependencies?: Record<string, string>;
      devDependencies?: Record<string, string>;
    };
    expect(Object.keys({ ...manifest.dependencies, ...manifest.devDependencies })).not.toContain(
      '@xiaozhi-mcp/hil',
    );
    const importers = readdirSync(join(cli, 'src'), { recursive: true, encoding: 'utf8' })
      .filter((file) => file.endsWith('.ts'))
      .filter((file) =>
        /from '@xiaozhi-mcp\/hil'|import\('@xiaozhi-mcp\/hil'\)/.test(
          readFileSync(join(cli, 'src', file), 'utf8'),
        ),
      );
    expect(importers).toEqual([]);
  });
});
