/**
 * The virtual rig's boards as a user meets them: plugged in holding what a real board holds
 * after its first merged flash (bootloader, partition table, an app), so `--firmware` takes the
 * usual build output, an app image, as well as a merged image.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VirtualBus } from '@xiaozhi-mcp/device';
import { buildVirtualFirmware, readPartitionTable } from '@xiaozhi-mcp/firmware';
import { afterEach, describe, expect, it } from 'vitest';
import { main } from './cli.js';
import type { RunReport } from './model.js';
import { plugVirtual } from './virtual-rig.js';

const buses: VirtualBus[] = [];
afterEach(() => {
  for (const bus of buses.splice(0)) bus.close();
});

async function hil(...argv: string[]): Promise<{ code: number; output: string }> {
  let output = '';
  const code = await main(argv, {
    stdout: (text) => {
      output += text;
    },
    stderr: (text) => {
      output += text;
    },
  });
  return { code, output };
}

describe('a virtual board of the rig', () => {
  it('is plugged in with a bootloader, a partition table at 0x8000 and an app it boots', async () => {
    const bus = new VirtualBus({ bootMs: 5, wifiConnectMs: 5 });
    buses.push(bus);
    const port = plugVirtual(bus, {
      name: 'desk',
      port: 'virtual:desk',
      variant: 'bread-compact-wifi',
    });
    // The board behind the port, on the bus.
    const board = [...bus.binding.devices].find((d) => d.path === port.path)?.board;
    if (board === undefined) throw new Error(`no board at ${port.path}`);
    const booted = board.waitForLine(/app_init: App version:\s+\S+$/, 10_000);
    const flash = board.flash;
    expect(flash).toBeDefined();
    // The second-stage bootloader at 0x0 (ESP32-S3), an image: magic 0xE9.
    expect(flash?.read(0x0, 1)[0]).toBe(0xe9);
    const table = readPartitionTable(flash?.read(0x8000, 0xc00) ?? new Uint8Array());
    const app = table.partitions.find((p) => p.type === 0);
    expect(app).toBeDefined();
    expect(flash?.read(app?.offset ?? 0, 1)[0]).toBe(0xe9);
    expect(await booted).toMatch(/App version:\s+2\.4\.0$/);
  });

  it('takes an app image alone as --firmware, writes it into its app partition and runs it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-app-image-'));
    const config = join(dir, 'rig.json');
    writeFileSync(
      config,
      JSON.stringify({
        boards: [{ name: 'desk', port: 'virtual:desk', variant: 'bread-compact-wifi' }],
      }),
    );
    const image = join(dir, 'xiaozhi.bin');
    writeFileSync(
      image,
      buildVirtualFirmware({ chip: 'esp32s3', version: '2.5.1', board: 'bread-compact-wifi' }).app,
    );
    const out = join(dir, 'out');

    const { code, output } = await hil(
      'run',
      '--config',
      config,
      '--firmware',
      image,
      '--suite',
      'initialize',
      '--out',
      out,
    );
    expect(output).not.toContain('no valid partition table');
    expect(code).toBe(0);
    const run = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
    const board = run.boards[0];
    expect(board?.image?.kind).toBe('app');
    expect(board?.steps.find((s) => s.step === 'flash')?.status).toBe('passed');
    // It runs the image flashed, not the app it came with.
    expect(board?.firmwareVersion).toBe('2.5.1');
    expect(board?.checks.find((c) => c.id === 'initialize.version')?.status).toBe('passed');
  });
});
