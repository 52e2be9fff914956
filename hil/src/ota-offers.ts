/**
 * The `ota-upgrade` candidate, offered at the rig's OTA endpoint to the board being qualified
 * only: by the MAC (Device-Id) it checked in with and its Client-Id, and the `deviceId` and
 * `clientId` its inventory entry gives. Any other device of that variant that checks in there (a
 * simulator pointed at `--listen`, a lab board on the network of a `--listen 0.0.0.0` rig) is
 * answered without a firmware section, and the server logs it.
 */
import type { FirmwareAudience, FirmwareImage, FirmwareStore } from '@xiaozhi-mcp/server';
import type { BoardConfig } from './inventory.js';

/** The board a candidate is for: its inventory entry and how it checked in. */
export interface CandidateBoard {
  readonly config: Pick<BoardConfig, 'name' | 'variant' | 'deviceId' | 'clientId'>;
  /** The Device-Id (MAC) of its OTA check. */
  readonly deviceId: string;
  /** The Client-Id of its OTA check, when the server has seen one. */
  readonly clientId?: string | undefined;
}

/** The identities a board's candidate goes to: what it checked in with, and what its entry says. */
export function candidateAudience(board: CandidateBoard): FirmwareAudience {
  const unique = (values: readonly (string | undefined)[]): string[] =>
    values.filter((v, i): v is string => v !== undefined && v !== '' && values.indexOf(v) === i);
  return {
    deviceIds: unique([board.deviceId.toLowerCase(), board.config.deviceId?.toLowerCase()]),
    clientIds: unique([board.clientId, board.config.clientId]),
  };
}

/** Adds the candidate to the rig's firmware store, for this board (and its variant) only. */
export function offerCandidate(
  firmware: FirmwareStore,
  image: Uint8Array,
  board: CandidateBoard,
): FirmwareImage {
  return firmware.add(image, {
    name: `candidate-${board.config.name}.bin`,
    ...(board.config.variant ? { board: board.config.variant } : {}),
    audience: candidateAudience(board),
  });
}
