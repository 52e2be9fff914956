import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../io.test-helper.js';

const dir = mkdtempSync(join(tmpdir(), 'xz-ota-'));
function file(name: string, value: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, typeof value === 'string' ? value : JSON.stringify(value));
  return path;
}

const safe = {
  websocket: { url: 'ws://127.0.0.1:8000/xiaozhi/v1/', token: 'abc', version: 1 },
  server_time: { timestamp: 1_790_000_000_000, timezone_offset: 480 },
  firmware: { version: '2.4.2', url: '' },
};

describe('xiaozhi-mcp check-ota', () => {
  it('accepts a safe reply', async () => {
    const out = await runCli('check-ota', file('safe.json', safe), '--current-version', '2.4.2');
    expect(out.code).toBe(0);
    expect(out.stdout).toMatch(/^ok: .*safe\.json has no hazards/m);
    expect(out.stderr).toBe('');
  });

  it.each([
    ['websocket.version', { websocket: { url: 'ws://h/', version: '1' } }],
    ['websocket.authorization_token', { websocket: { url: 'ws://h/', authorization_token: 'x' } }],
    ['mqtt.password', { mqtt: { endpoint: 'h:1883', password: 'p'.repeat(4000) } }],
    ['firmware.version', { firmware: { version: '1.2.beta', url: 'http://h/f.bin' } }],
    ['firmware.force', { firmware: { version: '2.4.2', url: 'http://h/f.bin', force: 1 } }],
  ])('refuses the %s hazard with a one-line reason naming the field', async (field, reply) => {
    const out = await runCli(
      'check-ota',
      file(`${field}.json`, reply),
      '--current-version',
      '2.4.2',
    );
    expect(out.code).toBe(1);
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toContain(`first: ${field}:`);
    expect(out.stdout).toMatch(new RegExp(`^hazard ${field.replace('.', '\\.')}: `, 'm'));
  });

  it('reports findings as JSON', async () => {
    const out = await runCli(
      'check-ota',
      file('json.json', { websocket: { url: 'ws://h/', version: '1' } }),
      '--json',
    );
    const report = JSON.parse(out.stdout);
    expect(report.ok).toBe(false);
    expect(report.findings).toContainEqual(
      expect.objectContaining({ field: 'websocket.version', severity: 'hazard' }),
    );
    expect(out.code).toBe(1);
  });

  it('exits 2 on a file that is not JSON', async () => {
    const out = await runCli('check-ota', file('broken.json', '{'));
    expect(out.code).toBe(2);
    expect(out.stderr).toMatch(/broken\.json is not valid JSON/);
  });
});
