import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import {
  chooseSelector,
  type PortInfo,
  type ProviderRequest,
  type ResolvedPort,
  resolvePort,
} from '@xiaozhi-mcp/serial';
import { failureKind, runReported, type SerialCommandContext } from '@xiaozhi-mcp/serial/commands';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { replicaFromTools } from '../replica/replica-from-tools.js';
import { replicaBoardOptions } from '../replica/replica-preset.js';
import { FAST_TIMING } from '../testing/timing.js';
import {
  defaultVirtualDir,
  listVirtualBoards,
  type ResolvedVirtual,
  VirtualBoardStore,
  virtualMac,
} from './virtual-store.js';

const FAST = { ...FAST_TIMING, panicRebootMs: 100 };
let dir: string;
let store: VirtualBoardStore;
/** Each board the store plugged in, in order (its `onBoard` hook). */
let plugged: ResolvedVirtual[];
const opened: ResolvedPort[] = [];

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'hil-virtual-'));
  plugged = [];
  store = new VirtualBoardStore({ dir, timing: FAST, onBoard: (virtual) => plugged.push(virtual) });
});

afterEach(() => {
  for (const port of opened.splice(0)) port.dispose();
  rmSync(dir, { recursive: true, force: true });
});

type OpenedPort = ResolvedPort & { readonly virtual: ResolvedVirtual };

/** Resolves through serial's `resolvePort` with the store registered, as the commands do. */
async function open(
  selector: string,
  create: ProviderRequest['create'] | false = { board: 'bread-compact-wifi', flashSize: '4' },
  notify?: ProviderRequest['notify'],
): Promise<OpenedPort> {
  const before = plugged.length;
  const port = await resolvePort(selector, {
    providers: [store],
    request: {
      ...(create === false ? {} : { create }),
      ...(notify === undefined ? {} : { notify }),
    },
  });
  opened.push(port);
  const virtual = plugged[before];
  if (virtual === undefined) throw new Error(`${selector}: no board was plugged in`);
  return Object.assign(port, { virtual });
}

const usbPort: PortInfo = {
  path: '/dev/ttyUSB0',
  vendorId: '10c4',
  productId: 'ea60',
  serialNumber: '0001',
  manufacturer: 'Silicon Labs',
  kind: 'usb-uart',
};

describe('VirtualBoardStore: virtual boards that persist in files', () => {
  it('creates the sidecar and the erased flash file on first use, with a MAC from the name', async () => {
    const notes: string[] = [];
    const port = await open('virtual:desk', undefined, (stream, text) =>
      notes.push(`${stream}: ${text}`),
    );
    expect(port.path).toBe('virtual:desk');
    expect(port.label).toBe('virtual:desk');
    expect(port.provider).toBe('virtual:');
    expect(port.virtual.created).toBe(true);
    expect(notes).toEqual([
      `stdout: created virtual board virtual:desk: bread-compact-wifi (esp32s3, 4 MB flash, MAC ${virtualMac('desk')}) in ${dir}\n`,
    ]);
    const sidecar = JSON.parse(readFileSync(join(dir, 'desk.json'), 'utf8'));
    expect(sidecar).toEqual({
      preset: 'bread-compact-wifi',
      chip: 'esp32s3',
      mac: virtualMac('desk'),
      flashSizeMb: 4,
    });
    expect(statSync(join(dir, 'desk.flash')).size).toBe(4 * 1024 * 1024);
    expect(virtualMac('desk')).toMatch(/^f4:12:fa(:[0-9a-f]{2}){3}$/);
    expect(virtualMac('desk')).toBe(virtualMac('desk'));
    expect(virtualMac('desk')).not.toBe(virtualMac('bench'));
    expect(port.virtual.board.mac).toBe(virtualMac('desk'));
    expect(port.virtual.board.powered).toBe(true);
    // The port looks like a CP2102 bridge, as real boards do.
    expect(port.info).toMatchObject({ path: 'virtual:desk', vendorId: '10c4', kind: 'usb-uart' });
  });

  it('creates with the defaults (bread-compact-wifi, 16 MB) when nothing is given', async () => {
    const port = await open('virtual:plain', {});
    expect(port.virtual.entry).toMatchObject({ preset: 'bread-compact-wifi', flashSizeMb: 16 });
    expect(statSync(join(dir, 'plain.flash')).size).toBe(16 * 1024 * 1024);
  });

  it('keeps what the sidecar says: create options apply only to a new board', async () => {
    const first = await open('virtual:desk');
    first.dispose();
    const notes: string[] = [];
    const again = await open('virtual:desk', { board: 'otto-robot', flashSize: '16' }, (s, t) =>
      notes.push(`${s}: ${t}`),
    );
    expect(again.virtual.created).toBe(false);
    expect(again.virtual.entry).toMatchObject({ preset: 'bread-compact-wifi', flashSizeMb: 4 });
    expect(again.virtual.board.preset.name).toBe('bread-compact-wifi');
    expect(notes).toEqual([
      `stderr: virtual:desk already exists (bread-compact-wifi, 4 MB flash); --board and --flash-size apply only when creating a virtual board (delete ${join(dir, 'desk.json')} and ${join(dir, 'desk.flash')} to start over)\n`,
    ]);
  });

  it('boots what the flash file holds, in a later process as in this one', async () => {
    const fw = buildVirtualFirmware({
      chip: 'esp32s3',
      version: '2.7.0',
      board: 'bread-compact-wifi',
      flashSizeMb: 4,
    });
    (await open('virtual:desk')).dispose();
    // Write the firmware into the file as a flasher would have.
    const flashPath = join(dir, 'desk.flash');
    const bytes = readFileSync(flashPath);
    bytes.set(fw.merged, 0);
    writeFileSync(flashPath, bytes);
    const port = await open('virtual:desk');
    const board = port.virtual.board;
    await board.waitForLine(/App version:\s+2\.7\.0/, 20_000);
    expect(board.version).toBe('2.7.0');
  });

  it('lets one process at a time use a virtual board, like a serial port', async () => {
    const port = await open('virtual:desk');
    await expect(open('virtual:desk')).rejects.toMatchObject({
      code: 'PORT_BUSY',
      message: expect.stringMatching(/virtual:desk is in use by another process \(pid \d+\)/),
    });
    port.dispose();
    port.dispose(); // twice is fine
    expect(port.virtual.board.powered).toBe(false);
    const again = await open('virtual:desk');
    expect(again.virtual.board.powered).toBe(true);
  });

  it('refuses names that are not file names, and missing boards without create', async () => {
    await expect(open('virtual:../etc')).rejects.toMatchObject({ kind: 'usage' });
    await expect(open('virtual:')).rejects.toMatchObject({ kind: 'usage' });
    await expect(open('virtual:.hidden')).rejects.toMatchObject({ kind: 'usage' });
    await expect(open('virtual:ghost', false)).rejects.toMatchObject({
      kind: 'usage',
      message: `no virtual board 'ghost' in ${dir} (it has none); add --create to make a new one, or set XIAOZHI_VIRTUAL_DIR if it lives elsewhere`,
    });
    expect(existsSync(join(dir, 'ghost.json'))).toBe(false);
    // Creation options are checked before anything is written.
    await expect(open('virtual:new', { board: 'toaster' })).rejects.toMatchObject({
      kind: 'usage',
      message: expect.stringMatching(/unknown board preset "toaster"; known: .*bread-compact-wifi/),
    });
    await expect(open('virtual:new', { flashSize: '32' })).rejects.toMatchObject({
      kind: 'usage',
      message: expect.stringMatching(/--flash-size must be 4, 8 or 16/),
    });
    expect(existsSync(join(dir, 'new.json'))).toBe(false);
  });

  it('refuses a mistyped name without create, listing the boards there are, and writes nothing', async () => {
    (await open('virtual:desk')).dispose();
    (await open('virtual:rig')).dispose();
    await expect(open('virtual:dsek', false)).rejects.toMatchObject({
      kind: 'usage',
      message: `no virtual board 'dsek' in ${dir} (known: virtual:desk, virtual:rig); add --create to make a new one, or set XIAOZHI_VIRTUAL_DIR if it lives elsewhere`,
    });
    expect(existsSync(join(dir, 'dsek.json'))).toBe(false);
    expect(existsSync(join(dir, 'dsek.flash'))).toBe(false);
    expect(plugged.map((virtual) => virtual.entry.name)).toEqual(['desk', 'rig']);
    // An existing board needs no create.
    expect((await open('virtual:desk', false)).virtual.created).toBe(false);
  });

  it('says how to recover from a damaged sidecar', async () => {
    writeFileSync(join(dir, 'bad.json'), '{"preset":"toaster"}');
    await expect(open('virtual:bad')).rejects.toMatchObject({
      kind: 'failed',
      message: expect.stringMatching(/delete it and its \.flash file/),
    });
    expect(listVirtualBoards(dir)).toEqual([]);
  });

  it('gives a board the eFuses its sidecar says, and refuses one its chip cannot record, before taking the lock', async () => {
    const spec = {
      preset: 'bread-compact-wifi',
      chip: 'esp32s3',
      mac: virtualMac('fused'),
      flashSizeMb: 4,
    };
    writeFileSync(
      join(dir, 'fused.json'),
      JSON.stringify({ ...spec, secureBoot: true, flashEncryption: true, chipRevision: 'v0.1' }),
    );
    const fused = await open('virtual:fused', false);
    expect(fused.virtual.board.silicon).toEqual({
      secureBoot: true,
      flashEncryption: true,
      revision: { major: 0, minor: 1 },
    });
    fused.dispose();
    // The ESP32-S3 records a major revision in two bits: v4.0 it cannot.
    writeFileSync(
      join(dir, 'odd.json'),
      JSON.stringify({ ...spec, mac: virtualMac('odd'), chipRevision: 'v4.0' }),
    );
    await expect(open('virtual:odd', false)).rejects.toMatchObject({
      kind: 'failed',
      message: expect.stringMatching(
        /odd\.json: esp32s3: major revision 4 does not fit its eFuse field; correct it/,
      ),
    });
    writeFileSync(
      join(dir, 'typo.json'),
      JSON.stringify({ ...spec, mac: virtualMac('typo'), secureBoot: 'yes' }),
    );
    await expect(open('virtual:typo', false)).rejects.toMatchObject({ kind: 'failed' });
    // Refused before the lock: the board is free for the next try.
    writeFileSync(join(dir, 'odd.json'), JSON.stringify({ ...spec, mac: virtualMac('odd') }));
    expect((await open('virtual:odd', false)).virtual.board.silicon).toEqual({});
  });

  it('finds a virtual board again by serial number after it re-enumerates', async () => {
    const port = await open('virtual:desk');
    const { binding, device } = port.virtual;
    binding.unplug(port.path, { powerOff: false });
    expect(await port.present(port.path)).toBe(false);
    const path = binding.plug(device, { powerOn: false });
    expect(path).not.toBe('virtual:desk');
    const found = await port.refind(20_000);
    expect(found.path).toBe(path);
    expect(await port.present(path)).toBe(true);
  });

  it('lists its boards for `ports` and for choosing the only board', async () => {
    (await open('virtual:desk')).dispose();
    const listing = store.listing();
    expect(listing.boards).toEqual([
      {
        port: 'virtual:desk',
        summary: 'virtual:desk (bread-compact-wifi)',
        line: expect.stringMatching(
          new RegExp(
            `^virtual:desk +virtual +esp32s3/4MB +${virtualMac('desk')} +bread-compact-wifi: flash erased \\(no firmware\\)$`,
          ),
        ),
      },
    ]);
    expect(listing.json).toMatchObject({
      virtual: [{ port: 'virtual:desk', preset: 'bread-compact-wifi', flashSizeMb: 4 }],
      virtualDir: dir,
    });
    expect(listing.none).toBe(`no virtual board in ${dir}`);
  });
});

describe('VirtualBoardStore with a board of its own (a replica on a stored board)', () => {
  const replica = (mac?: string) =>
    replicaFromTools(
      JSON.stringify({
        board: {
          variant: 'desk-lamp',
          firmwareVersion: '2.0.7',
          flashSizeMb: 8,
          ...(mac === undefined ? {} : { mac }),
        },
        tools: [
          {
            name: 'self.lamp.set',
            description: 'Turns the lamp on or off',
            properties: [{ name: 'on', type: 'boolean' }],
          },
        ],
      }),
    );

  it("runs it on the stored board, keeping the board's flash file, MAC and eFuses", async () => {
    writeFileSync(
      join(dir, 'fused.json'),
      JSON.stringify({
        preset: 'bread-compact-wifi',
        chip: 'esp32s3',
        mac: virtualMac('fused'),
        flashSizeMb: 4,
        secureBoot: true,
        flashEncryption: true,
        chipRevision: 'v0.1',
      }),
    );
    store = new VirtualBoardStore({
      dir,
      timing: FAST,
      onBoard: (virtual) => plugged.push(virtual),
      board: replicaBoardOptions(replica()),
    });
    const port = await open('virtual:fused', false);
    const { board, entry } = port.virtual;
    expect(board.preset.name).toBe('desk-lamp');
    expect(board.app.version).toBe('2.0.7');
    expect(board.mac).toBe(virtualMac('fused'));
    expect(board.silicon).toEqual({
      secureBoot: true,
      flashEncryption: true,
      revision: { major: 0, minor: 1 },
    });
    expect(board.flash?.size).toBe(4 * 1024 * 1024);
    expect(entry).toMatchObject({ preset: 'bread-compact-wifi', flashSizeMb: 4 });
  });

  it("creates a board the replica's size, and the first board plugged already runs it, with the replica's MAC", async () => {
    store = new VirtualBoardStore({
      dir,
      timing: FAST,
      onBoard: (virtual) => plugged.push(virtual),
      board: replicaBoardOptions(replica('f4:12:fa:55:00:07')),
    });
    const notes: string[] = [];
    const port = await open('virtual:lamp', {}, (s, t) => notes.push(`${s}: ${t}`));
    expect(plugged).toHaveLength(1);
    expect(port.virtual.created).toBe(true);
    expect(port.virtual.board.preset.name).toBe('desk-lamp');
    expect(port.virtual.board.mac).toBe('f4:12:fa:55:00:07');
    expect(port.virtual.entry.flashSizeMb).toBe(8);
    expect(statSync(join(dir, 'lamp.flash')).size).toBe(8 * 1024 * 1024);
    expect(notes).toEqual([expect.stringMatching(/^stdout: created virtual board virtual:lamp: /)]);
  });
});

describe('resolvePort: real ports beside the store', () => {
  it('finds a real port through the lister, not the store', async () => {
    const port = await resolvePort('serial:0001', {
      providers: [store],
      lister: async () => [usbPort],
    });
    expect(port).toMatchObject({ path: '/dev/ttyUSB0', label: '/dev/ttyUSB0', info: usbPort });
    expect(port.provider).toBeUndefined();
    expect(plugged).toEqual([]);
  });
});

describe('chooseSelector: --port may be left out when there is one board', () => {
  it('picks the only board, real or virtual', async () => {
    expect(
      await chooseSelector(undefined, { providers: [store], lister: async () => [usbPort] }),
    ).toBe('/dev/ttyUSB0');
    (await open('virtual:desk')).dispose();
    expect(await chooseSelector(undefined, { providers: [store], lister: async () => [] })).toBe(
      'virtual:desk',
    );
    expect(await chooseSelector('virtual:x', { providers: [store] })).toBe('virtual:x');
  });

  it('lists the boards when there are several, and says what to do when there is none', async () => {
    (await open('virtual:desk')).dispose();
    const several = await chooseSelector(undefined, {
      providers: [store],
      lister: async () => [usbPort],
    }).catch((error: unknown) => error);
    expect(failureKind(several)).toBe('usage');
    expect(several).toMatchObject({
      message: expect.stringMatching(
        /^2 boards attached: \/dev\/ttyUSB0 \(10c4:ea60.*\); virtual:desk \(bread-compact-wifi\); choose one with --port$/,
      ),
    });
    const builtIn: PortInfo = { path: '/dev/ttyS0', kind: 'unknown' };
    const elsewhere = new VirtualBoardStore({ dir: join(dir, 'none') });
    const none = await chooseSelector(undefined, {
      providers: [elsewhere],
      lister: async () => [builtIn],
    }).catch((error: unknown) => error);
    expect(failureKind(none)).toBe('port');
    expect(none).toMatchObject({
      message: `no board attached and no virtual board in ${join(dir, 'none')}; plug a board in, or name one with --port (a path, serial:<sn>, or virtual:<name> for a virtual board)`,
    });
  });
});

describe('failures', () => {
  it('are one line with the program name, and exit 2, 1 or the port code', async () => {
    let stderr = '';
    const context: SerialCommandContext = {
      program: 'hil',
      out: { stdout: () => {}, stderr: (t) => (stderr += t) },
      portExitCode: 3,
    };
    const fail = (error: unknown) =>
      runReported(
        context,
        () => 'flash virtual:desk',
        async () => {
          throw error;
        },
      );
    await open('virtual:desk');
    expect(await fail(await open('virtual:desk').catch((e: unknown) => e))).toBe(3);
    expect(stderr).toMatch(/^hil: flash virtual:desk: virtual:desk is in use by another process/);
    expect(await fail(new Error('two\nlines'))).toBe(1);
    expect(stderr.endsWith('hil: flash virtual:desk: two lines\n')).toBe(true);
    expect(await fail(await open('virtual:..').catch((e: unknown) => e))).toBe(2);
    // A board that is not there is a name to correct (or to --create), not a rig failure.
    expect(await fail(await open('virtual:ghost', false).catch((e: unknown) => e))).toBe(2);
  });

  it('default virtual dir: $XIAOZHI_VIRTUAL_DIR, else ~/.cache/xiaozhi-mcp/virtual', () => {
    expect(defaultVirtualDir({ XIAOZHI_VIRTUAL_DIR: '/x' })).toBe('/x');
    expect(defaultVirtualDir({})).toMatch(/\.cache\/xiaozhi-mcp\/virtual$/);
    expect(new VirtualBoardStore({ dir: '/y' }).dir).toBe('/y');
  });
});
