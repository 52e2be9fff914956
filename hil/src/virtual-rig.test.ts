/**
 * The virtual rig's boards as a user meets them: plugged in holding what a real board holds
 * after its first merged flash (bootloader, partition table, an app), so `--firmware` takes the
 * usual build output, an app image, as well as a merged image.
 */
import { once } from 'node:events';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  formatReplica,
  type ResolvedVirtual,
  replicaFromTools,
  VirtualBoardStore,
  VirtualBus,
} from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { buildVirtualFirmware, readPartitionTable } from '@xiaozhi-mcp/firmware';
import { lineSetterFor, openSafely, RESET_SEQUENCES, runLineSteps } from '@xiaozhi-mcp/serial';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import type { RigPort } from './board-runner.js';
import { hil } from './hil-main.test-helper.js';
import type { BoardConfig } from './inventory.js';
import type { RunReport } from './model.js';
import { openVirtual, plugVirtual } from './virtual-rig.js';

const buses: VirtualBus[] = [];
const ports: RigPort[] = [];
afterEach(() => {
  for (const port of ports.splice(0)) port.dispose();
  for (const bus of buses.splice(0)) bus.close();
});

describe('a virtual board of the rig', () => {
  it('is plugged in with a bootloader, a partition table at 0x8000 and an app it boots', async () => {
    const bus = new VirtualBus(FAST_TIMING);
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

  it("with virtual.replica runs the replica's identity on the bus, with the eFuses and chip revision the inventory gives", async () => {
    const bus = new VirtualBus(FAST_TIMING);
    buses.push(bus);
    const replicaFile = replicaFromTools(
      JSON.stringify({
        board: { variant: 'desk-lamp', firmwareVersion: '2.0.7', mac: 'f4:12:fa:55:00:07' },
        tools: [{ name: 'self.lamp.set', description: 'Turns the lamp on or off' }],
      }),
    );
    const port = plugVirtual(bus, {
      name: 'lamp',
      port: 'virtual:lamp',
      deviceId: 'F4:12:FA:55:00:09',
      replicaFile,
      virtual: { secureBoot: true, chipRevision: 'v0.2' },
    });
    const board = [...bus.binding.devices].find((d) => d.path === port.path)?.board;
    if (board === undefined) throw new Error(`no board at ${port.path}`);
    expect(port.path).toMatch(/^\/dev\/ttyVIRT\d+$/);
    expect(board.preset.name).toBe('desk-lamp');
    expect(board.app.version).toBe('2.0.7');
    expect(board.mac).toBe('f4:12:fa:55:00:09');
    expect(board.silicon).toEqual({ secureBoot: true, revision: { major: 0, minor: 2 } });
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

/**
 * Makes `virtual:<name>` in the store `dir` as `xiaozhi-mcp flash --port virtual:<name> --create`
 * does, its flash holding a build of `version`.
 */
async function storedBoard(dir: string, name: string, version: string): Promise<void> {
  let made: ResolvedVirtual | undefined;
  const store = new VirtualBoardStore({
    dir,
    onBoard: (virtual) => {
      made = virtual;
    },
  });
  const port = await store.resolve(`virtual:${name}`, { create: { board: 'bread-compact-wifi' } });
  const image = buildVirtualFirmware({ chip: 'esp32s3', version, board: 'bread-compact-wifi' });
  made?.board.flash?.program(0, image.merged);
  port.dispose();
}

/** The app version the board behind `port` boots after a hard reset (EN through RTS). */
async function bootedVersion(port: RigPort): Promise<string> {
  const stream = await openSafely(port.path, { baudRate: 115200, binding: port.binding });
  try {
    let text = '';
    stream.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
    });
    await runLineSteps(lineSetterFor(stream), RESET_SEQUENCES.hard);
    return await until(() => /App version:\s+(\S+)\r?\n/.exec(text)?.[1], {
      what: "the app's version line",
      seen: () => text,
    });
  } finally {
    const closed = once(stream, 'close');
    stream.close();
    await closed;
  }
}

describe('virtual:<name> in an inventory', () => {
  const desk: BoardConfig = { name: 'desk', port: 'virtual:desk', variant: 'bread-compact-wifi' };
  const open = async (bus: VirtualBus, store: string | undefined, notes: string[] = []) => {
    const port = await openVirtual(bus, desk, {
      signal: new AbortController().signal,
      notify: (_stream, text) => notes.push(text),
      ...(store === undefined ? {} : { store }),
    });
    ports.push(port);
    return port;
  };

  it('is the board xiaozhi-mcp made in the store, its flash and all, held like a real port', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-store-'));
    await storedBoard(dir, 'desk', '2.6.0');
    const bus = new VirtualBus(FAST_TIMING);
    buses.push(bus);

    const notes: string[] = [];
    const port = await open(bus, dir, notes);
    expect(port.path).toBe('virtual:desk');
    expect(notes.join('')).toContain(`virtual:desk is the board in ${dir}`);
    expect(await bootedVersion(port)).toBe('2.6.0');
    // xiaozhi-mcp reaching the same board meanwhile finds it taken.
    await expect(new VirtualBoardStore({ dir }).resolve('virtual:desk')).rejects.toMatchObject({
      code: 'PORT_BUSY',
    });
  });

  it('is a new board of the rig when the store has none of that name, or for the default rig', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-store-'));
    await storedBoard(dir, 'other', '2.6.0');
    const bus = new VirtualBus(FAST_TIMING);
    buses.push(bus);
    const fresh = await open(bus, dir);
    expect(fresh.path).toMatch(/^\/dev\/ttyVIRT\d+$/);
    expect(await bootedVersion(fresh)).toBe('2.4.0');

    // The default rig passes no store: a board named like a stored one is new all the same.
    await storedBoard(dir, 'desk', '2.6.0');
    const again = await open(bus, undefined);
    expect(again.path).toMatch(/^\/dev\/ttyVIRT\d+$/);
  });
});

describe('hil run on a board of the store', () => {
  it('runs virtual:<name> of the inventory on the board xiaozhi-mcp made, and what it writes stays', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-store-run-'));
    const store = join(dir, 'virtual');
    await storedBoard(store, 'desk', '2.6.0');
    const config = join(dir, 'hil.config.json');
    writeFileSync(
      config,
      JSON.stringify({
        boards: [{ name: 'desk', port: 'virtual:desk', variant: 'bread-compact-wifi' }],
      }),
    );
    const previous = process.env.XIAOZHI_VIRTUAL_DIR;
    process.env.XIAOZHI_VIRTUAL_DIR = store;
    try {
      const out = join(dir, 'out');
      const run = await hil('run', '--config', config, '--suite', 'initialize', '--out', out);
      expect(run.code, run.output).toBe(0);
      const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
      const board = report.boards[0];
      // Not flashed: it runs the firmware xiaozhi-mcp put on it.
      expect(board?.image).toBeUndefined();
      expect(board?.steps.find((s) => s.step === 'flash')?.status).not.toBe('passed');
      expect(board?.firmwareVersion).toBe('2.6.0');
      // Provisioned by the run: the store's board now points at the rig's OTA endpoint.
      const listed = new VirtualBoardStore({ dir: store })
        .boards()
        .find((b) => b.port === 'virtual:desk');
      expect(listed?.otaUrl).toBe(report.server.ota);
    } finally {
      if (previous === undefined) delete process.env.XIAOZHI_VIRTUAL_DIR;
      else process.env.XIAOZHI_VIRTUAL_DIR = previous;
    }
  });

  it("with virtual.replica runs the replica on the stored board: initialize answers with the replica's variant", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-store-replica-'));
    const store = join(dir, 'virtual');
    await storedBoard(store, 'desk', '2.6.0');
    writeFileSync(
      join(dir, 'lamp.replica.json'),
      formatReplica(
        replicaFromTools(
          JSON.stringify({
            board: { variant: 'desk-lamp', firmwareVersion: '2.0.7', mac: 'f4:12:fa:55:00:07' },
            tools: [{ name: 'self.lamp.set', description: 'Turns the lamp on or off' }],
          }),
        ),
      ),
    );
    const config = join(dir, 'hil.config.json');
    writeFileSync(
      config,
      JSON.stringify({
        boards: [{ name: 'desk', port: 'virtual:desk', virtual: { replica: 'lamp.replica.json' } }],
      }),
    );
    const previous = process.env.XIAOZHI_VIRTUAL_DIR;
    process.env.XIAOZHI_VIRTUAL_DIR = store;
    try {
      const out = join(dir, 'out');
      const run = await hil('run', '--config', config, '--suite', 'initialize', '--out', out);
      expect(run.output).not.toContain('virtual.replica');
      expect(run.code, run.output).toBe(0);
      const report = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
      const board = report.boards[0];
      const variant = board?.checks.find((c) => c.id === 'initialize.variant');
      expect(variant?.status, JSON.stringify(variant)).toBe('passed');
      expect(variant?.message).toBe('variant desk-lamp');
      expect(board?.mac).toBe('f4:12:fa:55:00:07');
      // Its own file still says what it is: only what it runs comes from the replica.
      const listed = new VirtualBoardStore({ dir: store })
        .boards()
        .find((b) => b.port === 'virtual:desk');
      expect(listed?.preset).toBe('bread-compact-wifi');
    } finally {
      if (previous === undefined) delete process.env.XIAOZHI_VIRTUAL_DIR;
      else process.env.XIAOZHI_VIRTUAL_DIR = previous;
    }
  });
});
