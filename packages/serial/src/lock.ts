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
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync,
  type FSWatcher,
  linkSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmdirSync,
  unlinkSync,
  watch,
  writeFileSync,
} from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { abortReason } from './wait.js';

export class BoardLockError extends Error {
  override readonly name = 'BoardLockError';
  /** What was locked. */
  readonly key: string | undefined;
  /** The lock's directory. */
  readonly path: string | undefined;
  /** The pid of the process holding (or next in line for) the lock, when known. */
  readonly owner: number | undefined;
  constructor(message: string, details: { key?: string; path?: string; owner?: number } = {}) {
    super(message);
    this.key = details.key;
    this.path = details.path;
    this.owner = details.owner;
  }
}

export interface LockOptions {
  /** How long to wait for the lock while another process holds it. Default 0: fail at once. */
  readonly waitMs?: number;
  /** Where lock directories live. Default `os.tmpdir()`. */
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
      ignoreMissing(() => unlinkSync(join(dir, name)));
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

/** Removes the key's directory once nobody is in it; a newcomer recreates it. */
function tidy(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // ENOTEMPTY: somebody else contends; ENOENT: already gone.
  }
}

/** Creates `name` in `dir` with `O_EXCL`, recreating `dir` if it was tidied away meanwhile. */
function createIn(dir: string, name: string, make: (path: string) => void): string {
  const path = join(dir, name);
  for (;;) {
    mkdirSync(dir, { recursive: true });
    try {
      make(path);
      return path;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
}

/** The directory that holds the lock of `key` (any text: a board's identity, a file name). */
export function lockPath(key: string, dir = tmpdir()): string {
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

/**
 * Takes the lock of `key`; resolves with its release (safe to call twice). While another
 * process holds it, waits up to `waitMs` (0: not at all) and then rejects with a
 * {@link BoardLockError} naming the owner's pid and command; an abort rejects with the
 * signal's reason. Waiters are served in the order they came.
 */
export async function lockBoard(key: string, options: LockOptions = {}): Promise<() => void> {
  const dir = lockPath(key, options.dir);
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
    writeFileSync(temporary, `${JSON.stringify(record)}\n`, { flag: 'wx' });
    ticketPath = join(dir, `t.${String(mine.ticket).padStart(TICKET_DIGITS, '0')}.${id}`);
    linkSync(temporary, ticketPath);
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
