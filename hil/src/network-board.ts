/**
 * Boards without a serial cable (docs/hil.md §1.4): an inventory board with no `port` is reached
 * over the network only. The rig listens at a fixed address (`--listen HOST:PORT`, or
 * `server.host`/`server.port` of the inventory) that the device is pointed at, waits for the
 * device's OTA check, identified by the inventory's `deviceId` (MAC) or `clientId`, or taken as
 * the first device no other board claims when it is the only such board, then for the session
 * it opens. Boards on another host, boards already provisioned, py-xiaozhi and simulators are
 * qualified this way.
 */
import type { OtaCheckRecord } from '@xiaozhi-mcp/server';
import type { BoardConfig } from './inventory.js';

export interface ListenAddress {
  readonly host: string;
  readonly port: number;
}

/** `--listen HOST:PORT` (`[::]:8000` for IPv6); a message naming the problem otherwise. */
export function parseListen(text: string): ListenAddress | string {
  const match = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(text.trim());
  const host = match?.[1] ?? match?.[2];
  const port = Number(match?.[3]);
  if (host === undefined || !Number.isInteger(port) || port < 1 || port > 65_535)
    return `--listen must be HOST:PORT with a port from 1 to 65535 (e.g. 0.0.0.0:8000, 127.0.0.1:8000, [::]:8000), got ${JSON.stringify(text)}`;
  return { host, port };
}

/** A board reached over the network only: no serial port to flash, reset or read. */
export function isNetworkBoard(config: BoardConfig): boolean {
  return config.port === undefined;
}

/** How a network board is recognised, as messages name it. */
export function networkIdentity(config: BoardConfig): string {
  if (config.deviceId !== undefined) return `Device-Id ${config.deviceId.toLowerCase()}`;
  if (config.clientId !== undefined) return `Client-Id ${config.clientId}`;
  return 'the first device no other board of the rig claims';
}

/**
 * The identities (lowercase MACs and Client-Ids) the boards of a run are known by: the
 * inventory's, then the ones learned on the way (a MAC read from the ROM, the Client-Id a
 * console printed, the Device-Id of a matched OTA check). A network board without an identity
 * of its own takes the first OTA check nobody claims.
 */
export class BoardClaims {
  readonly #ids = new Set<string>();

  constructor(boards: readonly BoardConfig[] = []) {
    for (const board of boards) {
      if (board.deviceId !== undefined) this.claim(board.deviceId);
      if (board.clientId !== undefined) this.claim(board.clientId);
    }
  }

  claim(id: string | undefined): void {
    if (id !== undefined && id !== '') this.#ids.add(id.toLowerCase());
  }

  claimed(check: Pick<OtaCheckRecord, 'deviceId' | 'clientId'>): boolean {
    return (
      this.#ids.has(check.deviceId.toLowerCase()) ||
      (check.clientId !== undefined && this.#ids.has(check.clientId.toLowerCase()))
    );
  }
}

/** Whether an OTA check is this network board's. */
export function isNetworkBoardCheck(
  config: BoardConfig,
  check: Pick<OtaCheckRecord, 'deviceId' | 'clientId'>,
  claims: BoardClaims,
): boolean {
  if (config.deviceId !== undefined)
    return check.deviceId.toLowerCase() === config.deviceId.toLowerCase();
  if (config.clientId !== undefined)
    return check.clientId?.toLowerCase() === config.clientId.toLowerCase();
  return !claims.claimed(check);
}
