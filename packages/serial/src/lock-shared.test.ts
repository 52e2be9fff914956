/**
 * The board lock as every user of a host shares it: where it lives, how its directories are
 * made, what it says when this user cannot use it (refusals injected into `node:fs`, since the
 * tests may run as root), and other programs' UUCP locks.
 */
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { failureKind } from './commands/context.js';
import {
  BoardLockError,
  defaultLockDir,
  LOCK_DIR_ENV,
  lockBoard,
  lockPath,
  uucpLockDir,
  uucpLockHolder,
} from './lock.js';
import { resolvePort } from './resolve.js';

/** Which calls of `mkdirSync` and `unlinkSync` are refused, and with which errno. */
const refuse = vi.hoisted(() => ({
  mkdir: undefined as ((path: string) => string | undefined) | undefined,
  unlink: undefined as ((path: string) => string | undefined) | undefined,
}));

vi.mock('node:fs', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs')>();
  const refusal = (code: string, syscall: string, path: string) =>
    Object.assign(new Error(`${code}: operation refused, ${syscall} '${path}'`), {
      code,
      syscall,
      path,
    });
  return {
    ...fs,
    mkdirSync: ((path: string, options?: unknown) => {
      const code = refuse.mkdir?.(String(path));
      if (code !== undefined) throw refusal(code, 'mkdir', String(path));
      return fs.mkdirSync(path, options as never);
    }) as typeof fs.mkdirSync,
    unlinkSync: ((path: string) => {
      const code = refuse.unlink?.(String(path));
      if (code !== undefined) throw refusal(code, 'unlink', String(path));
      fs.unlinkSync(path);
    }) as typeof fs.unlinkSync,
  };
});

let root: string;
const savedEnv = process.env[LOCK_DIR_ENV];

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'lock-shared-'));
});
afterEach(() => {
  refuse.mkdir = undefined;
  refuse.unlink = undefined;
  if (savedEnv === undefined) delete process.env[LOCK_DIR_ENV];
  else process.env[LOCK_DIR_ENV] = savedEnv;
  rmSync(root, { recursive: true, force: true });
});

/** A directory every user may write, as `/run/lock` and `/tmp` are. */
function sharedDir(name: string): string {
  const dir = join(root, name);
  mkdirSync(dir);
  chmodSync(dir, 0o1777);
  return dir;
}

/** The pid of a process that has exited. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ['-e', '']);
  return child.pid as number;
}

describe('where the board locks live', () => {
  const links: Record<string, string> = { '/var/lock': '/run/lock', '/run/lock': '/run/lock' };

  it("in the host's UUCP lock directory, as minicom and lockdev use it, unless XIAOZHI_LOCK_DIR says", () => {
    // Debian, Fedora, Arch: /var/lock is a link to /run/lock.
    const linux = { env: {}, platform: 'linux' as const, realpath: (p: string) => links[p] };
    expect(uucpLockDir(linux)).toBe('/run/lock');
    expect(defaultLockDir(linux)).toBe('/run/lock/xiaozhi-mcp');
    // FreeBSD: /var/spool/lock.
    const bsd = {
      env: {},
      platform: 'freebsd' as const,
      realpath: (p: string) => (p === '/var/spool/lock' ? p : undefined),
    };
    expect(defaultLockDir(bsd)).toBe('/var/spool/lock/xiaozhi-mcp');
    // macOS has none, and per-user temp directories: /tmp is every user's.
    const mac = { env: {}, platform: 'darwin' as const, realpath: () => undefined };
    expect(uucpLockDir(mac)).toBeUndefined();
    expect(defaultLockDir(mac)).toBe('/tmp/xiaozhi-mcp');
    expect(defaultLockDir({ env: { ProgramData: 'C:\\ProgramData' }, platform: 'win32' })).toBe(
      'C:\\ProgramData\\xiaozhi-mcp\\locks',
    );
    expect(defaultLockDir({ ...linux, env: { [LOCK_DIR_ENV]: '/srv/rig/locks' } })).toBe(
      '/srv/rig/locks',
    );
  });

  it('makes its directory in a shared one as that is made (1777), and key directories any user can use (0777)', async () => {
    const base = join(sharedDir('lock'), 'xiaozhi-mcp');
    process.env[LOCK_DIR_ENV] = base;
    const release = await lockBoard('serial:A1');
    expect(statSync(base).mode & 0o7777).toBe(0o1777);
    expect(statSync(lockPath('serial:A1', base)).mode & 0o777).toBe(0o777);
    expect(lockPath('serial:A1')).toBe(lockPath('serial:A1', base));
    release();
  });
});

describe('a lock this user cannot use', () => {
  it('names the directory, the user and the fixes when it is not writable', async () => {
    const base = join(sharedDir('lock'), 'xiaozhi-mcp');
    refuse.mkdir = (path) => (path.startsWith(base) ? 'EACCES' : undefined);
    const error = await lockBoard('serial:A1', { dir: base }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BoardLockError);
    expect(error).toMatchObject({ reason: 'unusable', key: 'serial:A1' });
    expect((error as Error).message).toMatch(
      new RegExp(
        `^cannot take the board lock of serial:A1: ${join(root, 'lock')} is not writable by user \\S+ \\(EACCES\\); .*sudo install -d -m 1777 ${join(root, 'lock')}.*, or set XIAOZHI_LOCK_DIR to a directory they all can write$`,
      ),
    );
  });

  it('is a port failure with its own code when resolving a board', async () => {
    const pty = join(root, 'ttyFAKE');
    writeFileSync(pty, '');
    const lockDir = join(root, 'locks');
    refuse.mkdir = (path) => (path.startsWith(lockDir) ? 'EROFS' : undefined);
    const error = await resolvePort(pty, { lister: async () => [], lockDir }).catch(
      (e: unknown) => e,
    );
    expect(error).toMatchObject({
      code: 'LOCK_FAILED',
      message: expect.stringMatching(/is not writable by user .* \(EROFS\)/),
    });
    expect(failureKind(error)).toBe('port');
  });

  it("names a dead owner's entry it may not remove, its pid and user, and what to do", async () => {
    const dir = join(root, 'locks');
    // This host's entry names, from a lock taken and given back.
    const probe = await lockBoard('serial:A1', { dir, waitMs: 0 });
    const [mine] = readdirSync(lockPath('serial:A1', dir)).filter((f) => f.startsWith('t.'));
    probe();
    const host = /^t\.\d+\.([0-9a-f]{8})-/.exec(mine ?? '')?.[1];
    expect(host).toBeDefined();
    const pid = deadPid();
    const keyDir = lockPath('serial:A1', dir);
    mkdirSync(keyDir, { recursive: true });
    const entry = join(keyDir, `t.000000000001.${host}-${pid}-0-0badc0de`);
    writeFileSync(entry, '{"pid":1,"command":"hil run"}\n');
    // Another user's, in a directory that lets only its owner remove it.
    refuse.unlink = (path) => (path === entry ? 'EPERM' : undefined);
    const error = await lockBoard('serial:A1', { dir }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BoardLockError);
    expect(error).toMatchObject({ reason: 'unusable', owner: pid });
    expect((error as Error).message).toBe(
      `cannot take the board lock of serial:A1: pid ${pid} (user ${userOf(entry)}), which is no longer running, left ${entry}, and user ${userOf(entry)} may not remove it (EPERM); remove it as that user or root (sudo rm ${entry}), or let every user of the rig remove such entries (sudo chmod 0777 ${keyDir})`,
    );
    // Removable, it drops out by itself.
    refuse.unlink = undefined;
    (await lockBoard('serial:A1', { dir }))();
  });
});

/** The user name of a file's owner (this test's user: it made the file). */
function userOf(file: string): string {
  const uid = statSync(file).uid;
  const passwd = spawnSync('getent', ['passwd', String(uid)], { encoding: 'utf8' }).stdout;
  return passwd.split(':')[0] || String(uid);
}

describe("other programs' UUCP locks (minicom, picocom)", () => {
  it('a live LCK.. file makes the port busy, naming the program; a stale one does not', async () => {
    const uucp = join(root, 'uucp');
    mkdirSync(uucp);
    const pty = join(root, 'ttyFAKE');
    writeFileSync(pty, '');
    const lockFile = join(uucp, 'LCK..ttyFAKE');
    // HDB UUCP format: the pid as ten ASCII characters and a newline (minicom adds its name).
    writeFileSync(lockFile, `${String(process.pid).padStart(10)} minicom root\n`);
    expect(uucpLockHolder(pty, uucp)).toMatchObject({ pid: process.pid, file: lockFile });
    const options = { lister: async () => [], lockDir: join(root, 'locks'), uucpLockDir: uucp };
    const error = await resolvePort(pty, options).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'PORT_BUSY',
      message: expect.stringMatching(
        new RegExp(
          `^${pty} is in use by \\S+ \\(pid ${process.pid}, by its UUCP lock ${lockFile}\\); close it first`,
        ),
      ),
    });
    expect(failureKind(error)).toBe('port');
    // Refused, it held nothing: with the program gone, the port resolves.
    writeFileSync(lockFile, `${String(deadPid()).padStart(10)}\n`);
    expect(uucpLockHolder(pty, uucp)).toBeUndefined();
    (await resolvePort(pty, options)).dispose();
  });
});
