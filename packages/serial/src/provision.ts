/**
 * Provisioning: the settings a rig writes into a board's NVS partition so it joins the
 * rig's Wi-Fi and checks OTA at our server (docs/protocol.md §8): `wifi/ssid`, `wifi/password`,
 * `wifi/ota_url`, and optionally the `websocket` url/token/version. The partition's offset
 * is read from the board's own partition table; entries already on the board that we do not
 * set (its `board/uuid`, the volume...) are kept, so provisioning does not change identity.
 */
import {
  FirmwareError,
  findPartition,
  type NvsEntry,
  type Partition,
  type PartitionTable,
  readNvsPartition,
  writeNvsPartition,
} from '@xiaozhi-mcp/firmware';
import { SerialError } from './errors.js';

export interface ProvisionSettings {
  readonly ssid: string;
  readonly password: string;
  readonly otaUrl: string;
  readonly websocket?: {
    readonly url: string;
    readonly token?: string;
    readonly version?: 1 | 2 | 3;
  };
}

/** What provisioning needs from a connected board (a `Flasher` has all three). */
export interface ProvisionTarget {
  readPartitionTable(): Promise<PartitionTable>;
  readFlash(offset: number, size: number): Promise<Uint8Array>;
  flash(parts: { offset: number; data: Uint8Array }[]): Promise<unknown>;
}

export interface ProvisionResult {
  readonly partition: Partition;
  readonly entries: readonly NvsEntry[];
  /** Entries that were on the board before and were kept. */
  readonly kept: readonly NvsEntry[];
}

function check(settings: ProvisionSettings): void {
  const bytes = (s: string) => Buffer.byteLength(s, 'utf8');
  if (settings.ssid === '' || bytes(settings.ssid) > 32) {
    throw new SerialError('OPTION_INVALID', 'ssid must be 1 to 32 bytes (an 802.11 SSID)');
  }
  if (bytes(settings.password) > 64)
    throw new SerialError('OPTION_INVALID', 'password must be at most 64 bytes');
  if (!/^https?:\/\/\S+$/.test(settings.otaUrl)) {
    throw new SerialError(
      'OPTION_INVALID',
      `ota url must be http:// or https://, got ${JSON.stringify(settings.otaUrl)}`,
    );
  }
  // The firmware refuses an OTA URL shorter than 10 characters.
  if (settings.otaUrl.length < 10)
    throw new SerialError(
      'OPTION_INVALID',
      'ota url is too short for the firmware (fewer than 10 characters)',
    );
  if (settings.websocket !== undefined && !/^wss?:\/\/\S+$/.test(settings.websocket.url)) {
    throw new SerialError(
      'OPTION_INVALID',
      `websocket url must be ws:// or wss://, got ${JSON.stringify(settings.websocket.url)}`,
    );
  }
}

/** The NVS entries provisioning writes, in the order the firmware's namespaces expect them. */
export function provisionEntries(settings: ProvisionSettings): NvsEntry[] {
  check(settings);
  const entries: NvsEntry[] = [
    { namespace: 'wifi', key: 'ssid', type: 'string', value: settings.ssid },
    { namespace: 'wifi', key: 'password', type: 'string', value: settings.password },
    { namespace: 'wifi', key: 'ota_url', type: 'string', value: settings.otaUrl },
  ];
  const ws = settings.websocket;
  if (ws !== undefined) {
    entries.push({ namespace: 'websocket', key: 'url', type: 'string', value: ws.url });
    if (ws.token !== undefined)
      entries.push({ namespace: 'websocket', key: 'token', type: 'string', value: ws.token });
    if (ws.version !== undefined)
      entries.push({ namespace: 'websocket', key: 'version', type: 'i32', value: ws.version });
  }
  return entries;
}

/** Our entries, then every existing entry we do not replace (kept in its namespace). */
export function mergeNvsEntries(
  ours: readonly NvsEntry[],
  existing: readonly NvsEntry[],
): { entries: NvsEntry[]; kept: NvsEntry[] } {
  const taken = new Set(ours.map((e) => `${e.namespace}\u0000${e.key}`));
  const kept = existing.filter((e) => !taken.has(`${e.namespace}\u0000${e.key}`));
  return { entries: [...ours, ...kept], kept };
}

/** An NVS partition image holding the settings (for `nvs` partitions of the firmware's tables: 0x4000). */
export function buildProvisionImage(
  settings: ProvisionSettings,
  size = 0x4000,
  existing: readonly NvsEntry[] = [],
): Uint8Array {
  return writeNvsPartition(mergeNvsEntries(provisionEntries(settings), existing).entries, size);
}

/**
 * Provisions a connected board: reads its partition table, finds `nvs`, keeps what the
 * partition holds that we do not set, and flashes the new partition at its offset.
 */
export async function provisionBoard(
  target: ProvisionTarget,
  settings: ProvisionSettings,
): Promise<ProvisionResult> {
  const table = await target.readPartitionTable();
  const partition =
    findPartition(table, { label: 'nvs' }) ??
    findPartition(table, { type: 'data', subtype: 'nvs' });
  if (partition === undefined) {
    throw new FirmwareError(
      'PARTITION_INVALID',
      'the board has no nvs partition in its partition table at 0x8000; flash a firmware first',
    );
  }
  const current = await target.readFlash(partition.offset, partition.size);
  let existing: NvsEntry[] = [];
  if (!current.every((b) => b === 0xff)) {
    try {
      existing = readNvsPartition(current);
    } catch {
      existing = []; // an unreadable partition is replaced, as nvs_flash_init would erase it
    }
  }
  const { entries, kept } = mergeNvsEntries(provisionEntries(settings), existing);
  await target.flash([
    { offset: partition.offset, data: writeNvsPartition(entries, partition.size) },
  ]);
  return { partition, entries, kept };
}
