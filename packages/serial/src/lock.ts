/**
 * One hil per board: a lock file per port, holding the owner's pid. A second run on the same
 * board waits (bounded) and then fails clearly; a lock whose owner is gone is taken over.
 */
import { closeSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export class BoardLockError extends Error {
  override readonly name = 'BoardLockError';
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function lockPath(port: string, dir = tmpdir()): string {
  return join(dir, `xiaozhi-hil-${port.replace(/[^A-Za-z0-9._-]/g, '_')}.lock`);
}

/** Takes the lock for `port`; resolves with a release function. */
export async function lockBoard(
  port: string,
  options: { waitMs?: number; dir?: string; signal?: AbortSignal } = {},
): Promise<() => void> {
  const path = lockPath(port, options.dir);
  const deadline = Date.now() + (options.waitMs ?? 0);
  for (;;) {
    try {
      const fd = openSync(path, 'wx');
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      return () => rmSync(path, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const owner = Number.parseInt(readFileSync(path, 'utf8'), 10);
    if (!Number.isInteger(owner) || !alive(owner)) {
      rmSync(path, { force: true });
      continue;
    }
    if (Date.now() >= deadline || options.signal?.aborted) {
      throw new BoardLockError(
        `board on ${port} is in use by hil (pid ${owner}); lock file ${path}`,
      );
    }
    await sleep(Math.min(250, Math.max(0, deadline - Date.now())));
  }
}
