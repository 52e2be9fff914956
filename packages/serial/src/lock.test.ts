import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BoardLockError, lockBoard, lockPath } from './lock.js';

describe('lockBoard', () => {
  it('lets one hil hold a board; a second fails clearly, then gets it once released', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-lock-'));
    const release = await lockBoard('/dev/ttyUSB0', { dir });
    await expect(lockBoard('/dev/ttyUSB0', { dir })).rejects.toThrow(BoardLockError);
    await expect(lockBoard('/dev/ttyUSB0', { dir })).rejects.toThrow(
      new RegExp(`in use by hil \\(pid ${process.pid}\\)`),
    );
    const waiting = lockBoard('/dev/ttyUSB0', { dir, waitMs: 5000 });
    release();
    (await waiting)();
  });

  it('takes over a lock whose owner has exited', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hil-lock-'));
    const child = spawn(process.execPath, ['-e', '']);
    await once(child, 'exit');
    writeFileSync(lockPath('serial:A1', dir), `${child.pid}\n`);
    const release = await lockBoard('serial:A1', { dir });
    release();
  });
});
