/**
 * One run per board: a lock that two processes can never both hold, and that a crashed owner
 * cannot keep.
 *
 * A lock is a directory per key (`<dir>/xiaozhi-lock-<key>-<hash>/`). Every process that wants
 * it takes part in Lamport's bakery algorithm, with files standing for the registers:
 *
 * 1. **Doorway.** Create `c.<id>` (choosing). Read the directory; the ticket is one more than
 *    the largest ticket there. Create `t.<ticket>.<id>` (its content, the owner's pid and
 *    command, written to a temporary file first and then `link`ed into place, so the record
 *    appears whole or not at all), then remove `c.<id>`.
 * 2. **Bakery.** Read the directory until two reads in a row, one after the other, show
 *    nobody choosing and no ticket smaller than ours (tickets compare as `(ticket, id)`, so
 *    ties are broken the same way by everyone). Then we hold the lock. Release removes our
 *    ticket.
 *
 * Files are only ever created (`O_EXCL` or `link`, which fail with EEXIST atomically) and
 * removed, never rewritten, and every name is unique (`id` is host, pid, process start time
 * and a random nonce). An entry whose process is dead is removed by whoever sees it: it cannot
 * be holding anything, and since names are never reused, removing it can never remove a live
 * process's entry, even if its pid has since been reused. So a stale owner is not "taken over"
 * by anyone in particular: its entry disappears and the bakery picks the next owner.
 *
 * Why two can never hold it at once. Say `i` and `j` both hold it, `(t_i, i) < (t_j, j)`. `j`
 * created its ticket at `w`, then read the directory twice, A then B, both starting after `w`;
 * POSIX `readdir` returns every entry that exists for the whole of a read, and `t.j` exists
 * from `w` until `j` releases. Where was `i` when A began?
 * - It had not created `c.i` yet: then it read the directory for its ticket after `w`, saw
 *   `t.j` and took a larger ticket than `j`'s. Contradiction.
 * - `t.i` existed: A saw it (a live process's entries are removed only by itself), and `j`
 *   would have waited for the smaller ticket.
 * - `c.i` existed, `t.i` not yet: if `c.i` outlived A, A saw `i` choosing and `j` would have
 *   waited; if `c.i` went during A, `t.i` was created before that, so before B began, and B
 *   saw it. Either way `j` would not have entered.
 * Reading twice is what makes a `readdir` that misses entries created or removed while it runs
 * harmless; waiting for a choosing process is what makes a ticket taken at the same moment
 * count. The process with the smallest ticket, once nobody is choosing, goes in: no deadlock,
 * and waiters are served in the order they took tickets.
 *
 * Dead owners are judged with `kill(pid, 0)` and, on Linux, the process start time (a reused
 * pid is not the owner); entries from another host or pid namespace are never judged dead (the
 * error names the directory to delete by hand if their owner is gone). A process that exits
 * without releasing removes its entries on `exit`; one that is killed leaves them to the next.
 *
 * Why ours: Node has no `flock`, and `proper-lockfile` judges staleness by mtime and takes a
 * stale lock over by removing it and creating its own, which two processes can both do (it
 * finds out later, as a "compromised" lock).
 *
 * Where: one place for every user of the host, since a `port serve` service, a CI job and a
 * person at the rig are often three users, and a temp directory is per user (macOS, Windows) or
 * per service (systemd's PrivateTmp). The anchor is the UUCP lock directory that minicom,
 * picocom (with UUCP locks) and lockdev use for `LCK..<device>` files: `/var/lock` (a link to
 * `/run/lock` on systemd hosts), `/var/spool/lock` on the BSDs; ours is its `xiaozhi-mcp`
 * subdirectory, `XIAOZHI_LOCK_DIR` elsewhere. A lock directory made inside a directory every
 * user may write (sticky, as `/run/lock` and `/tmp` are) is made the same way (mode 1777), and
 * the key directories in a world-writable one are world-writable (0777), so any user can take
 * part in the bakery and remove a dead owner's entries, whoever made them. Where that is not
 * possible the error says which directory, which user, and what to do.
 *
 * Other programs' UUCP locks are read, never made: {@link uucpLockHolder} names a live program
 * holding the port by its `LCK..<device>` file (HDB format: the pid in ASCII).
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  type FSWatcher,
  linkSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmdirSync,
  statSync,
  unlinkSync,
  watch,
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir, userInfo } from 'node:os';
import { basename, dirname, join, win32 } from 'node:path';
import { abortReason } from './wait.js';

export class BoardLockError extends Error {
  override readonly name = 'BoardLockError';
  /** What was locked. */
  readonly key: string | undefined;
  /** The lock's directory. */
  readonly path: string | undefined;
  /** The pid of the process holding (or next in line for) the lock, when known. */
  readonly owner: number | undefined;
  /**
   * `held`: another process holds the board. `unusable`: the lock itself cannot be taken here
   * (its directory is not writable, a dead owner's entry cannot be removed); the message says
   * what to do.
   */
  readonly reason: 'held' | 'unusable';
  constructor(
    message: string,
    details: { key?: string; path?: string; owner?: number; reason?: 'held' | 'unusable' } = {},
  ) {
    super(message);
    this.key = details.key;
    this.path = details.path;
    this.owner = details.owner;
    this.reason = details.reason ?? 'held';
  }
}

/** The environment variable that moves the board locks: a directory all of a rig's users can write. */
export const LOCK_DIR_ENV = 'XIAOZHI_LOCK_DIR';

/** The host a location is chosen for; each part defaults to this process's. */
export interface LockHost {
  readonly env?: NodeJS.ProcessEnv;
  readonly platform?: NodeJS.Platform;
  /** A directory's real path, or undefined when there is none. */
  readonly realpath?: (path: string) => string | undefined;
}

function realpathOrUndefined(path: string): string | undefined {
  try {
    return realpathSync(path);
  } catch {
    return undefined;
  }
}

/**
 * Where this host's programs keep UUCP lock files (`LCK..<device>`): minicom's and lockdev's
 * `/var/lock` (its real path: `/run/lock` where it is a link), then `/run/lock`, then
 * `/var/spool/lock` (minicom's configure looks for these; the BSDs use the last). None on
 * Windows, or where none exists (macOS).
 */
export function uucpLockDir(host: LockHost = {}): string | undefined {
  const platform = host.platform ?? process.platform;
  if (platform === 'win32') return undefined;
  const real = host.realpath ?? realpathOrUndefined;
  const candidates =
    platform === 'linux'
      ? ['/var/lock', '/run/lock', '/var/spool/lock']
      : ['/var/spool/lock', '/var/lock'];
  for (const candidate of candidates) {
    const found = real(candidate);
    if (found !== undefined) return found;
  }
  return undefined;
}

/**
 * Where board locks live unless told: `XIAOZHI_LOCK_DIR` when set; else the `xiaozhi-mcp`
 * subdirectory of the UUCP lock directory ({@link uucpLockDir}: `/run/lock/xiaozhi-mcp` on a
 * systemd host), of `/tmp` where there is none (macOS, whose temp directories are per user); on
 * Windows `%ProgramData%\xiaozhi-mcp\locks`.
 */
export function defaultLockDir(host: LockHost = {}): string {
  const env = host.env ?? process.env;
  const override = env[LOCK_DIR_ENV]?.trim();
  if (override !== undefined && override !== '') return override;
  const platform = host.platform ?? process.platform;
  if (platform === 'win32')
    return win32.join(env.ProgramData ?? env.ALLUSERSPROFILE ?? tmpdir(), 'xiaozhi-mcp', 'locks');
  return join(uucpLockDir(host) ?? '/tmp', 'xiaozhi-mcp');
}

export interface LockOptions {
  /** How long to wait for the lock while another process holds it. Default 0: fail at once. */
  readonly waitMs?: number;
  /** Where lock directories live. Default {@link defaultLockDir}: shared by the host's users. */
  readonly dir?: string;
  /** Stops waiting; the wait rejects with the signal's reason. */
  readonly signal?: AbortSignal;
  /**
   * How often to look again when nothing in the directory changed (an owner may die without a
   * trace in it). Default 100 ms; changes in the directory wake the wait at once.
   */
  readonly pollMs?: number;
  /** How messages name what is locked. Default: the key. */
  readonly label?: string;
}

/**
 * How long a process that is between creating `c.<id>` and its ticket (a few file operations)
 * is waited for even with `waitMs` 0: one stopped there (SIGSTOP) is waited for no longer.
 */
const CHOOSING_GRACE_MS = 2000;

function procStartTime(pid: number | 'self'): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces; starttime is field 22.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

function hostTag(): string {
  let namespace = '';
  try {
    namespace = readlinkSync('/proc/self/ns/pid');
  } catch {
    // Not Linux: one pid namespace per host.
  }
  return createHash('sha256').update(`${hostname()}\n${namespace}`).digest('hex').slice(0, 8);
}

const HOST = hostTag();
const START = procStartTime('self') ?? '0';

interface EntryId {
  /** `<host>-<pid>-<start>-<nonce>`. */
  readonly id: string;
  readonly host: string;
  readonly pid: number;
  readonly start: string;
}

function parseId(id: string): EntryId | undefined {
  const match = /^([0-9a-f]{8})-(\d+)-(\d+)-([0-9a-f]+)$/.exec(id);
  if (match === null) return undefined;
  return { id, host: match[1] as string, pid: Number(match[2]), start: match[3] as string };
}

/** False only when the entry's process is surely gone. */
function alive(entry: EntryId): boolean {
  if (entry.host !== HOST) return true; // another host or pid namespace: cannot tell
  if (entry.pid === process.pid && entry.start === START) return true;
  try {
    process.kill(entry.pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  if (entry.start === '0') return true;
  const start = procStartTime(entry.pid);
  return start === undefined || start === entry.start;
}

interface Ticket extends EntryId {
  readonly ticket: number;
  readonly file: string;
}

interface View {
  readonly tickets: Ticket[];
  readonly choosing: EntryId[];
}

const TICKET_DIGITS = 12;

function ignoreMissing(action: () => void): void {
  try {
    action();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

const errnoOf = (error: unknown): string | undefined => (error as NodeJS.ErrnoException).code;
const NOT_WRITABLE = new Set(['EACCES', 'EPERM', 'EROFS']);

/** A directory of the lock this user may not write to (create in, or remove from). */
class NotWritable extends Error {
  constructor(
    readonly dir: string,
    readonly code: string,
    /** The entry of a dead process that could not be removed, and its pid. */
    readonly dead?: { readonly file: string; readonly pid: number },
  ) {
    super(`${dir}: ${code}`);
  }
}

/** Runs a change to `dir`; a refusal to this user becomes {@link NotWritable}. */
function writing<T>(dir: string, action: () => T): T {
  try {
    return action();
  } catch (error) {
    const code = errnoOf(error);
    if (code !== undefined && NOT_WRITABLE.has(code)) throw new NotWritable(dir, code);
    throw error;
  }
}

/** The directory's entries; those of dead processes are removed on the way. */
function scan(dir: string): View {
  const view: View = { tickets: [], choosing: [] };
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return view;
    throw error;
  }
  for (const name of names) {
    const ticket = /^t\.(\d+)\.(.+)$/.exec(name);
    const choosing = /^c\.(.+)$/.exec(name);
    const temporary = /^\.tmp\.(.+)$/.exec(name);
    const id = parseId((ticket?.[2] ?? choosing?.[1] ?? temporary?.[1]) as string);
    if (id === undefined) continue;
    if (!alive(id)) {
      try {
        ignoreMissing(() => unlinkSync(join(dir, name)));
      } catch (error) {
        // Another user's entry in a directory that does not let us remove it.
        const code = errnoOf(error);
        if (code === undefined || !NOT_WRITABLE.has(code)) throw error;
        throw new NotWritable(dir, code, { file: join(dir, name), pid: id.pid });
      }
      continue;
    }
    if (ticket !== null) view.tickets.push({ ...id, ticket: Number(ticket[1]), file: name });
    else if (choosing !== null) view.choosing.push(id);
  }
  return view;
}

const before = (a: { ticket: number; id: string }, b: { ticket: number; id: string }): boolean =>
  a.ticket < b.ticket || (a.ticket === b.ticket && a.id < b.id);

/** The files this process has in lock directories, removed if it exits without releasing. */
const owned = new Set<string>();
let exitHook = false;
function own(path: string): void {
  owned.add(path);
  if (!exitHook) {
    exitHook = true;
    process.once('exit', () => {
      for (const file of owned) ignoreMissing(() => unlinkSync(file));
    });
  }
}
function disown(path: string): void {
  owned.delete(path);
  ignoreMissing(() => unlinkSync(path));
}

/**
 * Removes the key's directory once nobody is in it; a newcomer recreates it. Another user's, in
 * a sticky lock directory, stays (EPERM): harmless, it is reused.
 */
function tidy(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // ENOTEMPTY: somebody else contends; ENOENT: already gone.
  }
}

/** Every user may create entries here (the other bits do not matter to a bakery). */
const worldWritable = (dir: string): boolean => {
  try {
    return (statSync(dir).mode & 0o002) !== 0;
  } catch {
    return false;
  }
};

/** Makes `dir` (mode as umask leaves it) and, if it was made here, gives it `mode`. */
function makeDir(dir: string, mode: number | undefined): void {
  try {
    mkdirSync(dir);
  } catch (error) {
    if (errnoOf(error) === 'EEXIST') return;
    throw error;
  }
  if (mode !== undefined) chmodSync(dir, mode);
}

/**
 * Makes the lock directory `base` if it is missing: inside a directory every user may write
 * (`/run/lock`, `/tmp`) it is made as those are, mode 1777, so that every user can lock boards in
 * it and nobody can remove another's key directory.
 */
function makeBase(base: string): void {
  const parent = dirname(base);
  if (parent === base || realpathOrUndefined(base) !== undefined) return;
  if (realpathOrUndefined(parent) === undefined)
    writing(dirname(parent), () => mkdirSync(parent, { recursive: true }));
  writing(parent, () => makeDir(base, worldWritable(parent) ? 0o1777 : undefined));
}

/**
 * Creates `name` in the key's directory `dir` with `O_EXCL`, recreating `dir` (world-writable
 * in a world-writable lock directory, so any user can remove a dead owner's entries) if it was
 * tidied away meanwhile.
 */
function createIn(dir: string, name: string, make: (path: string) => void): string {
  const path = join(dir, name);
  const base = dirname(dir);
  for (;;) {
    makeBase(base);
    writing(base, () => makeDir(dir, worldWritable(base) ? 0o777 : undefined));
    try {
      writing(dir, () => make(path));
      return path;
    } catch (error) {
      if (errnoOf(error) !== 'ENOENT') throw error;
    }
  }
}

/** The directory that holds the lock of `key` (any text: a board's identity, a file name). */
export function lockPath(key: string, dir = defaultLockDir()): string {
  const readable = key.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 80);
  const hash = createHash('sha256').update(key).digest('hex').slice(0, 12);
  return join(dir, `xiaozhi-lock-${readable}-${hash}`);
}

function describeOwner(dir: string, owner: Ticket | EntryId): string {
  let what = '';
  if ('file' in owner) {
    try {
      const record = JSON.parse(readFileSync(join(dir, owner.file), 'utf8')) as {
        command?: string;
        since?: string;
      };
      what = [record.command, record.since === undefined ? undefined : `since ${record.since}`]
        .filter((part) => part !== undefined && part !== '')
        .join(', ');
    } catch {
      // Released meanwhile: the pid alone.
    }
  }
  const self = owner.pid === process.pid && owner.host === HOST ? ', this process' : '';
  return `pid ${owner.pid}${self}${what === '' ? '' : `: ${what}`}`;
}

/** Resolves at the first change in `dir`, after `ms`, or at the abort (which rejects). */
function changeOrTimeout(
  watcher: FSWatcher | undefined,
  ms: number,
  signal: AbortSignal | undefined,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (): void => {
      clearTimeout(timer);
      watcher?.off('change', done);
      signal?.removeEventListener('abort', onAbort);
      resolve();
    };
    const onAbort = (): void => {
      done();
      if (signal !== undefined) reject(abortReason(signal));
    };
    const timer = setTimeout(done, Math.max(0, ms));
    watcher?.on('change', done);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** This process's user, as messages name it. */
function currentUser(): string {
  try {
    return userInfo().username;
  } catch {
    return `uid ${process.getuid?.() ?? '?'}`;
  }
}

/** The name of a uid or gid from `/etc/passwd` or `/etc/group`, else the number. */
function accountName(file: '/etc/passwd' | '/etc/group', id: number): string {
  try {
    for (const line of readFileSync(file, 'utf8').split('\n')) {
      const [name, , number] = line.split(':');
      if (name !== undefined && name !== '' && Number(number) === id) return name;
    }
  } catch {
    // Not readable, or not Unix: the number will do.
  }
  return String(id);
}

/** `, or join its group lock (...)`, when `dir` is writable by its group. */
function groupHint(dir: string, user: string): string {
  let existing = dir;
  while (realpathOrUndefined(existing) === undefined && dirname(existing) !== existing)
    existing = dirname(existing);
  try {
    const { mode, gid } = statSync(existing);
    if ((mode & 0o020) === 0) return '';
    const group = accountName('/etc/group', gid);
    return `, join its group ${group} (sudo usermod -aG ${group} ${user}, then log in again)`;
  } catch {
    return '';
  }
}

/** Why the lock of `key` cannot be taken here, and what to do, as a {@link BoardLockError}. */
function unusable(label: string, key: string, dir: string, error: NotWritable): BoardLockError {
  const user = currentUser();
  if (error.dead !== undefined) {
    const { file, pid } = error.dead;
    let owner = 'another user';
    try {
      owner = `user ${accountName('/etc/passwd', statSync(file).uid)}`;
    } catch {
      // Gone meanwhile: its owner is not named.
    }
    return new BoardLockError(
      `cannot take the board lock of ${label}: pid ${pid} (${owner}), which is no longer running, left ${file}, and user ${user} may not remove it (${error.code}); remove it as that user or root (sudo rm ${file}), or let every user of the rig remove such entries (sudo chmod 0777 ${error.dir})`,
      { key, path: dir, owner: pid, reason: 'unusable' },
    );
  }
  return new BoardLockError(
    `cannot take the board lock of ${label}: ${error.dir} is not writable by user ${user} (${error.code}); every user of this host's boards (a port serve service, CI jobs, people) shares it, so all must be able to write it: have root create it once (sudo install -d -m 1777 ${error.dir})${groupHint(error.dir, user)}, or set ${LOCK_DIR_ENV} to a directory they all can write`,
    { key, path: dir, reason: 'unusable' },
  );
}

/** A live program's UUCP lock on a port (minicom's, picocom's, lockdev's `LCK..<device>`). */
export interface UucpLockHolder {
  readonly pid: number;
  /** The lock file. */
  readonly file: string;
  /** `/proc/<pid>/comm`, or the name the lock file gives after the pid (minicom writes it). */
  readonly command?: string;
}

/** The pid in a lock file: HDB's ten ASCII digits and a newline, or an old binary int. */
function lockFilePid(bytes: Buffer): { pid: number; rest: string } | undefined {
  const text = bytes.toString('latin1');
  const ascii = /^\s*(\d+)\s*(.*)$/s.exec(text);
  if (ascii !== null) return { pid: Number(ascii[1]), rest: (ascii[2] ?? '').trim() };
  if (bytes.length === 4) return { pid: bytes.readInt32LE(0), rest: '' };
  return undefined;
}

/**
 * Who holds `devicePath` by a UUCP lock file in `dir` (default {@link uucpLockDir}), if a live
 * process does: `LCK..<name>` for the path's own name and, for a link (`/dev/serial/by-id/...`),
 * its target's. Read only; a stale file (its process gone) is left where it is.
 */
export function uucpLockHolder(
  devicePath: string,
  dir: string | undefined = uucpLockDir(),
): UucpLockHolder | undefined {
  if (dir === undefined || !devicePath.startsWith('/')) return undefined;
  const names = new Set([basename(devicePath)]);
  const real = realpathOrUndefined(devicePath);
  if (real !== undefined) names.add(basename(real));
  for (const name of names) {
    const file = join(dir, `LCK..${name}`);
    let bytes: Buffer;
    try {
      bytes = readFileSync(file);
    } catch {
      continue;
    }
    const read = lockFilePid(bytes);
    if (read === undefined || !Number.isInteger(read.pid) || read.pid <= 0) continue;
    try {
      process.kill(read.pid, 0);
    } catch (error) {
      if (errnoOf(error) !== 'EPERM') continue; // gone: a stale lock
    }
    let command: string | undefined;
    try {
      command = readFileSync(`/proc/${read.pid}/comm`, 'utf8').trim() || undefined;
    } catch {
      command = read.rest.split(/\s+/)[0] || undefined;
    }
    return { pid: read.pid, file, ...(command === undefined ? {} : { command }) };
  }
  return undefined;
}

/**
 * Takes the lock of `key`; resolves with its release (safe to call twice). While another
 * process holds it, waits up to `waitMs` (0: not at all) and then rejects with a
 * {@link BoardLockError} naming the owner's pid and command; an abort rejects with the
 * signal's reason. Waiters are served in the order they came.
 */
export async function lockBoard(key: string, options: LockOptions = {}): Promise<() => void> {
  const dir = lockPath(key, options.dir);
  try {
    return await takeLock(key, dir, options);
  } catch (error) {
    if (!(error instanceof NotWritable)) throw error;
    throw unusable(options.label ?? key, key, dir, error);
  }
}

/** The bakery itself (see the top of this file), in the key's directory `dir`. */
async function takeLock(key: string, dir: string, options: LockOptions): Promise<() => void> {
  const { signal } = options;
  const pollMs = options.pollMs ?? 100;
  const started = Date.now();
  const deadline = started + (options.waitMs ?? 0);
  signal?.throwIfAborted();

  const id = `${HOST}-${process.pid}-${START}-${randomBytes(6).toString('hex')}`;
  // Doorway: announce that we are choosing, then take a ticket after every ticket there.
  const choosing = createIn(dir, `c.${id}`, (path) => closeSync(openSync(path, 'wx')));
  own(choosing);
  let mine: { ticket: number; id: string };
  let ticketPath: string;
  try {
    const max = Math.max(0, ...scan(dir).tickets.map((t) => t.ticket));
    mine = { ticket: max + 1, id };
    const temporary = join(dir, `.tmp.${id}`);
    own(temporary);
    const record = {
      pid: process.pid,
      command: [basename(process.argv[1] ?? 'node'), ...process.argv.slice(2)]
        .join(' ')
        .slice(0, 160),
      since: new Date().toISOString(),
    };
    writing(dir, () => writeFileSync(temporary, `${JSON.stringify(record)}\n`, { flag: 'wx' }));
    ticketPath = join(dir, `t.${String(mine.ticket).padStart(TICKET_DIGITS, '0')}.${id}`);
    writing(dir, () => linkSync(temporary, ticketPath));
    own(ticketPath);
    disown(temporary);
  } finally {
    disown(choosing);
  }

  let released = false;
  const release = (): void => {
    if (released) return;
    released = true;
    disown(ticketPath);
    tidy(dir);
  };

  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(dir, { persistent: false });
    watcher.on('error', () => {});
  } catch {
    watcher = undefined; // no change events here: looking again every pollMs will do
  }
  try {
    let clearReads = 0;
    for (;;) {
      if (signal?.aborted) throw abortReason(signal);
      const view = scan(dir);
      const ahead = view.tickets
        .filter((t) => t.id !== id && before(t, mine))
        .sort((a, b) => (before(a, b) ? -1 : 1));
      const others = view.choosing.filter((c) => c.id !== id);
      if (ahead.length === 0 && others.length === 0) {
        clearReads += 1;
        if (clearReads >= 2) return release;
        continue;
      }
      clearReads = 0;
      const now = Date.now();
      // Refuse only on a settled view (nobody choosing), so that the smallest ticket seen is
      // the owner; a process stuck while choosing is waited for no longer than the grace.
      const settled = others.length === 0 || now >= started + CHOOSING_GRACE_MS;
      const [owner = others[0]] = ahead;
      if (owner !== undefined && settled && now >= deadline) {
        throw new BoardLockError(
          `${options.label ?? key} is in use by another run (${describeOwner(dir, owner)}); let it finish or stop it, then try again (lock: ${dir})`,
          { key, path: dir, owner: owner.pid },
        );
      }
      const until = settled ? deadline : Math.max(deadline, started + CHOOSING_GRACE_MS);
      await changeOrTimeout(watcher, Math.min(pollMs, until - now), signal);
    }
  } catch (error) {
    release();
    throw error;
  } finally {
    watcher?.close();
  }
}
