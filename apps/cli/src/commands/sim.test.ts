import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { TestBackend } from '@xiaozhi-mcp/device/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { runCli } from '../test-io.js';

const bin = join(
  resolve(dirname(fileURLToPath(import.meta.url)), '../../..'),
  'cli/bin/xiaozhi-mcp.js',
);
let backend: TestBackend | undefined;

afterEach(async () => {
  await backend?.close();
});

describe('xiaozhi-mcp sim', () => {
  it('runs boards against a backend from a shell until Ctrl-C', async () => {
    backend = await TestBackend.start();
    const child = spawn(
      process.execPath,
      [bin, 'sim', '--ota-url', backend.otaUrl, '--count', '2'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
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
        new Set(['f4:12:fa:00:00:01', 'f4:12:fa:00:00:02']),
      );
      expect(backend.otaRequests).toHaveLength(2);
      expect(stdout).toMatch(/^f4:12:fa:00:00:01 \| I \(\d+\) WS: Session ID: session-\d$/m);
    } finally {
      child.kill('SIGINT');
    }
    const [code] = await once(child, 'exit');
    expect(code).toBe(0);
    expect(stderr).toMatch(/stopped 2 boards \(2 in a session\)/);
  });

  it('refuses an unknown preset or a bad URL with one line and exit 2', async () => {
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
  });
});
