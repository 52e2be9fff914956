// What device tests share: a powered board brought into a session with a test backend.
import type { DeviceConnection, TestBackend } from './testing/backend.js';
import type { VirtualBoard } from './virtual-board.js';

/**
 * Waits for the board's boot to end in `idle`, clicks it (BOOT) and resolves with the backend's
 * `index`-th connection once the board is `listening`, as a user opening a session would.
 */
export async function openSession(
  board: VirtualBoard,
  backend: TestBackend,
  index = 0,
): Promise<DeviceConnection> {
  await board.waitForState('idle', 20_000);
  board.click();
  const connection = await backend.connection(index);
  await board.waitForState('listening', 20_000);
  return connection;
}
