import {
  readNvsPartition,
  readPartitionTable,
  writeNvsPartition,
  writePartitionTable,
  XIAOZHI_PARTITIONS_16M,
} from '@xiaozhi-mcp/firmware';
import { describe, expect, it } from 'vitest';
import { buildProvisionImage, provisionBoard, provisionEntries } from './provision.js';

const settings = {
  ssid: 'rig-lab',
  password: 's3cret',
  otaUrl: 'http://127.0.0.1:8000/xiaozhi/ota/',
};

/** A board's flash as the provisioning code sees it through a flasher. */
function fakeBoard(nvs?: Uint8Array) {
  const flash = new Uint8Array(0x20000).fill(0xff);
  flash.set(writePartitionTable(XIAOZHI_PARTITIONS_16M), 0x8000);
  if (nvs) flash.set(nvs, 0x9000);
  const writes: { offset: number; size: number }[] = [];
  return {
    flash,
    writes,
    target: {
      readPartitionTable: async () => readPartitionTable(flash.subarray(0x8000, 0x8c00)),
      readFlash: async (offset: number, size: number) => flash.slice(offset, offset + size),
      flash: async (parts: { offset: number; data: Uint8Array }[]) => {
        for (const part of parts) {
          flash.set(part.data, part.offset);
          writes.push({ offset: part.offset, size: part.data.length });
        }
      },
    },
  };
}

describe('provisioning', () => {
  it('writes wifi/ssid, wifi/password and wifi/ota_url, plus the websocket section when given', () => {
    const entries = provisionEntries({
      ...settings,
      websocket: { url: 'ws://127.0.0.1:8000/xiaozhi/v1/', token: 't', version: 3 },
    });
    expect(entries.map((e) => `${e.namespace}/${e.key}=${String(e.value)}`)).toEqual([
      'wifi/ssid=rig-lab',
      'wifi/password=s3cret',
      'wifi/ota_url=http://127.0.0.1:8000/xiaozhi/ota/',
      'websocket/url=ws://127.0.0.1:8000/xiaozhi/v1/',
      'websocket/token=t',
      'websocket/version=3',
    ]);
    expect(readNvsPartition(buildProvisionImage(settings))).toEqual(provisionEntries(settings));
  });

  it('flashes the nvs partition found in the board table, keeping the board uuid', async () => {
    const before = writeNvsPartition(
      [
        { namespace: 'wifi', key: 'ssid', type: 'string', value: 'old' },
        {
          namespace: 'board',
          key: 'uuid',
          type: 'string',
          value: '4b0d6c2e-8a47-4f0e-9a53-2d3f1c9b7e11',
        },
      ],
      0x4000,
    );
    const board = fakeBoard(before);
    const result = await provisionBoard(board.target, settings);
    expect(board.writes).toEqual([{ offset: 0x9000, size: 0x4000 }]);
    expect(result.kept).toEqual([expect.objectContaining({ namespace: 'board', key: 'uuid' })]);
    const after = readNvsPartition(board.flash.subarray(0x9000, 0xd000));
    expect(after).toContainEqual({
      namespace: 'wifi',
      key: 'ssid',
      type: 'string',
      value: 'rig-lab',
    });
    expect(after).toContainEqual({
      namespace: 'board',
      key: 'uuid',
      type: 'string',
      value: '4b0d6c2e-8a47-4f0e-9a53-2d3f1c9b7e11',
    });
    expect(after.filter((e) => e.key === 'ssid')).toHaveLength(1);
  });

  it('provisions an erased nvs partition', async () => {
    const board = fakeBoard();
    await provisionBoard(board.target, settings);
    expect(readNvsPartition(board.flash.subarray(0x9000, 0xd000))).toEqual(
      provisionEntries(settings),
    );
  });

  it.each([
    [{ ...settings, ssid: '' }, /ssid/],
    [{ ...settings, otaUrl: 'ftp://x/y/z/w' }, /ota url/],
    [{ ...settings, password: 'p'.repeat(65) }, /password/],
    [{ ...settings, websocket: { url: 'http://x' } }, /websocket url/],
  ])('refuses bad settings with a clear error (%#)', (bad, message) => {
    expect(() => provisionEntries(bad)).toThrow(
      expect.objectContaining({ code: 'OPTION_INVALID', message: expect.stringMatching(message) }),
    );
  });
});
