import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, spawnCommand } from '../io.test-helper.js';

// The binary needs the workspace built (`npx turbo run build`; `npm test` builds first).
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');
const xiaozhiMcp = join(root, 'apps/cli/bin/xiaozhi-mcp.js');

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'xiaozhi-port-serve-'));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

function start(args: string[]) {
  const env: NodeJS.ProcessEnv = { ...process.env, XIAOZHI_VIRTUAL_DIR: join(dir, 'virtual') };
  delete env.FORCE_COLOR;
  return spawnCommand(xiaozhiMcp, args, { env });
}

/** Connects, sends `bytes`, and collects what comes back until `enough` or the close. */
function exchange(
  port: number,
  bytes: number[],
  enough: (got: Buffer) => boolean,
): Promise<Buffer> {
  return new Promise((resolveBytes, reject) => {
    const socket = connect({ host: '127.0.0.1', port });
    let got = Buffer.alloc(0);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer: ${got.toString()}`));
    }, 30_000);
    socket.on('data', (chunk: Buffer) => {
      got = Buffer.concat([got, chunk]);
      if (enough(got)) {
        clearTimeout(timer);
        socket.destroy();
        resolveBytes(got);
      }
    });
    socket.on('close', () => {
      clearTimeout(timer);
      resolveBytes(got);
    });
    socket.on('error', reject);
    socket.write(Buffer.from(bytes));
  });
}

/** Starts serving and resolves with the port it listens on. */
async function serving(args: string[]) {
  const started = start(args);
  await until(() => /^serving /m.test(started.run.stdout) || started.run.code !== null, {
    what: 'serving',
  });
  const match = /^serving (\S+) on rfc2217:\/\/127\.0\.0\.1:(\d+)$/m.exec(started.run.stdout);
  if (match === null) throw new Error(`not serving: ${started.run.stdout}${started.run.stderr}`);
  return { ...started, label: match[1], port: Number(match[2]) };
}

// IAC WILL COM-PORT, IAC SB COM-PORT SIGNATURE IAC SE (RFC 854, RFC 2217).
const SIGNATURE_REQUEST = [255, 251, 44, 255, 250, 44, 0, 255, 240];

describe('xiaozhi-mcp port serve from a shell', () => {
  it('shares a virtual board over RFC 2217, refuses a second client, and ends with 130 on Ctrl-C', {
    timeout: 120_000,
  }, async () => {
    const server = await serving([
      'port',
      'serve',
      'virtual:shared',
      '--create',
      '--listen',
      '127.0.0.1:0',
    ]);
    expect(server.label).toBe('virtual:shared');
    expect(server.run.stdout).toMatch(/^created virtual board virtual:shared: /m);
    // A client that keeps the port while a second one is refused.
    const signature = Buffer.from('xiaozhi-mcp port serve port=virtual:shared kind=');
    const first = connect({ host: '127.0.0.1', port: server.port });
    let firstGot = Buffer.alloc(0);
    first.on('data', (chunk: Buffer) => {
      firstGot = Buffer.concat([firstGot, chunk]);
    });
    first.write(Buffer.from(SIGNATURE_REQUEST));
    await until(() => firstGot.includes(signature), { what: 'the signature' });
    const busy = await exchange(server.port, [255, 251, 44], () => false);
    expect(busy.toString()).toMatch(
      /^xiaozhi-mcp port serve: busy: virtual:shared is in use by 127\.0\.0\.1:\d+; one client at a time\r\n$/,
    );
    first.destroy();
    await until(() => /disconnected/.test(server.run.stderr), { what: 'the goodbye' });
    server.child.kill('SIGINT');
    const run = await server.done;
    expect(run.code).toBe(130);
    expect(run.stderr).toMatch(/^--- client 127\.0\.0\.1:\d+ connected ---$/m);
    expect(run.stderr).toMatch(/^--- refused 127\.0\.0\.1:\d+: virtual:shared is in use by /m);
    expect(run.stderr).toMatch(/^--- stopped serving virtual:shared ---$/m);
  });

  it('ends with 0 on SIGTERM, and the board is free again for the next command', {
    timeout: 120_000,
  }, async () => {
    const server = await serving(['port', 'serve', 'virtual:shared', '--listen', ':0']);
    const answer = await exchange(server.port, SIGNATURE_REQUEST, (got) =>
      got.includes(Buffer.from('kind=')),
    );
    expect(answer.includes(Buffer.from('port=virtual:shared'))).toBe(true);
    server.child.kill('SIGTERM');
    expect((await server.done).code).toBe(0);
    // The board's lock went with the server.
    const again = await serving(['port', 'serve', 'virtual:shared', '--listen', ':0']);
    again.child.kill('SIGTERM');
    expect((await again.done).code).toBe(0);
  });

  it('flashes and monitors a board through rfc2217://: the board boots the new image', {
    timeout: 180_000,
  }, async () => {
    // The "done when": port serve, then flash and monitor naming rfc2217://.
    const image = join(dir, 'remote-2.8.1.bin');
    writeFileSync(
      image,
      buildVirtualFirmware({ chip: 'esp32s3', version: '2.8.1', board: 'bread-compact-wifi' })
        .merged,
    );
    const server = await serving(['port', 'serve', 'virtual:remote', '--create', '--listen', ':0']);
    const url = `rfc2217://127.0.0.1:${server.port}`;
    try {
      const flash = await start(['flash', image, '--port', url]).done;
      expect(flash.stderr).toBe('');
      expect(flash.code).toBe(0);
      expect(flash.stdout).toMatch(new RegExp(`^${url}: ESP32-S3\\b`, 'm'));
      expect(flash.stdout).toMatch(/; MD5 verified \(/);
      expect(flash.stdout).toMatch(/the board runs its new firmware$/m);
      const monitor = await start([
        'monitor',
        '--port',
        url,
        '--reset',
        '--until',
        'App version: +2\\.8\\.1',
        '--timeout',
        '60',
      ]).done;
      expect(monitor.code).toBe(0);
      // The hard reset went through the server: the boot log comes from a normal boot.
      expect(monitor.stdout).toMatch(/boot:0x8 \(SPI_FAST_FLASH_BOOT\)/);
      expect(monitor.stdout).toMatch(/App version: +2\.8\.1/);
    } finally {
      server.child.kill('SIGTERM');
      await server.done;
    }
    // The server saw the download reset esptool sent and played it locally.
    expect(server.run.stderr).toMatch(/reset into download mode recognised/);
  });

  it('exits 2 for a virtual board that is not there, or a bad --listen', {
    timeout: 60_000,
  }, async () => {
    const typo = await start(['port', 'serve', 'virtual:typo']).done;
    expect(typo.code).toBe(2);
    expect(typo.stderr).toMatch(/^xiaozhi-mcp: port serve virtual:typo: no virtual board 'typo'/);
    const listen = await start(['port', 'serve', 'virtual:shared', '--listen', 'nowhere']).done;
    expect(listen.code).toBe(2);
    expect(listen.stderr).toMatch(/^xiaozhi-mcp: port serve virtual:shared: --listen "nowhere": /);
  });
});

describe('registration in xiaozhi-mcp', () => {
  it('has port serve', async () => {
    const help = await runCli('--help');
    expect(help.stdout).toMatch(/^ {2}port\b/m);
    const serve = await runCli('port', 'serve', '--help');
    expect(serve.code).toBe(0);
    expect(serve.stdout).toMatch(/^Usage: xiaozhi-mcp port serve \[options\] <port>/m);
    expect(serve.stdout).toMatch(/--listen <host:port>/);
    const missing = await runCli('port', 'serve');
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/missing required argument 'port'/);
  });
});
