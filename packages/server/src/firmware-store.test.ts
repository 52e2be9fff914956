import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildAppImage } from '@xiaozhi-mcp/firmware';
import { describe, expect, it } from 'vitest';
import { FirmwareStore } from './firmware-store.js';

describe('FirmwareStore', () => {
  it('offers the newest newer image for the chip and board, never an older or equal one', () => {
    const store = new FirmwareStore();
    store.add(buildAppImage({ chip: 'esp32s3', version: '2.4.3' }), { name: 'a.bin' });
    store.add(buildAppImage({ chip: 'esp32s3', version: '2.10.0' }), { name: 'b.bin' });
    store.add(buildAppImage({ chip: 'esp32s3', version: '3.0.0' }), {
      name: 'robot/c.bin',
      board: 'otto-robot',
    });
    store.add(buildAppImage({ chip: 'esp32c3', version: '9.0.0' }), { name: 'd.bin' });
    const offer = (board: string, version: string, chip = 'esp32s3') =>
      store.offerFor({ chip, board, version })?.name;
    expect(offer('bread-compact-wifi', '2.4.2')).toBe('b.bin');
    expect(offer('otto-robot', '2.4.2')).toBe('robot/c.bin');
    expect(offer('bread-compact-wifi', '2.10.0')).toBeUndefined();
    expect(offer('bread-compact-wifi', '2.4.2', 'esp32c3')).toBe('d.bin');
    expect(offer('bread-compact-wifi', 'v2')).toBeUndefined();
  });

  it('offers an image with an audience only to the devices it names, by MAC or Client-Id', () => {
    const store = new FirmwareStore();
    store.add(buildAppImage({ chip: 'esp32s3', version: '2.4.3' }), { name: 'everyone.bin' });
    store.add(buildAppImage({ chip: 'esp32s3', version: '2.5.0' }), {
      name: 'candidate.bin',
      board: 'bread-compact-wifi',
      audience: { deviceIds: ['F4:12:FA:00:00:01'], clientIds: ['uuid-of-board-2'] },
    });
    const device = (deviceId: string | undefined, clientId?: string) => ({
      chip: 'esp32s3',
      board: 'bread-compact-wifi',
      version: '2.4.2',
      ...(deviceId === undefined ? {} : { deviceId }),
      ...(clientId === undefined ? {} : { clientId }),
    });
    const offer = (d: ReturnType<typeof device>) => store.offerFor(d)?.name;
    const withheld = (d: ReturnType<typeof device>) => store.withheldFrom(d)?.name;
    // Named by its MAC (in any case), or by its Client-Id.
    expect(offer(device('f4:12:fa:00:00:01', 'any'))).toBe('candidate.bin');
    expect(offer(device('f4:12:fa:00:00:02', 'uuid-of-board-2'))).toBe('candidate.bin');
    expect(withheld(device('f4:12:fa:00:00:01'))).toBeUndefined();
    // Another device of that chip and board: what is for everyone, the candidate withheld.
    expect(offer(device('f4:12:fa:00:00:09', 'stranger'))).toBe('everyone.bin');
    expect(withheld(device('f4:12:fa:00:00:09', 'stranger'))).toBe('candidate.bin');
    expect(offer(device(undefined))).toBe('everyone.bin');
    // Nothing is withheld from a device that runs the candidate already.
    expect(withheld({ ...device('f4:12:fa:00:00:09'), version: '2.5.0' })).toBeUndefined();
  });

  it('loads a directory: root images for every board, folders for one board', () => {
    const dir = mkdtempSync(join(tmpdir(), 'xz-fw-'));
    writeFileSync(join(dir, 'xiaozhi.bin'), buildAppImage({ chip: 'esp32s3', version: '2.5.0' }));
    mkdirSync(join(dir, 'otto-robot'));
    writeFileSync(
      join(dir, 'otto-robot', 'robot.bin'),
      buildAppImage({ chip: 'esp32s3', version: '2.6.0' }),
    );
    writeFileSync(join(dir, 'notes.txt'), 'ignored');
    const store = FirmwareStore.fromDirectory(dir);
    expect(store.list().map((f) => [f.name, f.version, f.board])).toEqual([
      ['otto-robot/robot.bin', '2.6.0', 'otto-robot'],
      ['xiaozhi.bin', '2.5.0', undefined],
    ]);
    expect(() => FirmwareStore.fromDirectory(join(dir, 'missing'))).toThrow(
      expect.objectContaining({ code: 'CONFIG_INVALID' }),
    );
  });
});
