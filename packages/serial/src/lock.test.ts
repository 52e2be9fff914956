/**
 * The board lock, in this process and across real processes racing for it. The racers run the
 * lock module itself (transpiled from this folder's source into a temp dir, so they never run
 * a stale build), start on one signal, and log when they hold the lock.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { once } from 'node:events';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { until } from '@xiaozhi-mcp/test-kit';
import ts from 'typescript';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { BoardLockError, LOCK_DIR_ENV, lockBoard, lockPath } from './lock.js';

const here = dirname(fileURLToPath(import.meta.url));
let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'board-lock-'));
});

afterEach(() => {
  vi.useRealTimers();
  rmSync(dir, { recursive: true, force: true });
});

describe('lockBoard in one process', () => {
  it('lets one hold a board; a second fails naming the owner, then gets it once released', async () => {
    const release = await lockBoard('serial:A1', { dir });
    const refused = await lockBoard('serial:A1', { dir }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(BoardLockError);
    expect(refused).toMatchObject({
      key: 'serial:A1',
      owner: process.pid,
      path: lockPath('serial:A1', dir),
      message: expect.stringMatching(
        new RegExp(
          `^serial:A1 is in use by another run \\(pid ${process.pid}, this process: .*\\); let it finish or stop it, then try again \\(lock: `,
        ),
      ),
    });
    const waiting = lockBoard('serial:A1', { dir, waitMs: 30_000 });
    release();
    release(); // twice is fine
    (await waiting)();
    // Nobody left: the key's directory is gone too.
    expect(readdirSync(dir)).toEqual([]);
  });

  it('keeps boards apart: another key is not blocked', async () => {
    const a = await lockBoard('by-path:pci-0000:00:14.0-usb-0:1:1.0-port0', { dir });
    const b = await lockBoard('by-path:pci-0000:00:14.0-usb-0:2:1.0-port0', { dir });
    a();
    b();
    expect(lockPath('serial:x', dir)).not.toBe(lockPath('serial_x', dir));
  });

  it('serves waiters in the order they came', async () => {
    const order: string[] = [];
    const first = await lockBoard('k', { dir });
    const second = lockBoard('k', { dir, waitMs: 30_000 }).then((release) => {
      order.push('second');
      return release;
    });
    // The third comes once the second has its ticket (a directory entry) and waits.
    await until(() => {
      expect(readdirSync(lockPath('k', dir)).filter((f) => f.startsWith('t.'))).toHaveLength(2);
      return true;
    });
    const third = lockBoard('k', { dir, waitMs: 30_000 }).then((release) => {
      order.push('third');
      return release;
    });
    await until(() => {
      expect(readdirSync(lockPath('k', dir)).filter((f) => f.startsWith('t.'))).toHaveLength(3);
      return true;
    });
    first();
    (await second)();
    (await third)();
    expect(order).toEqual(['second', 'third']);
  });

  it('bounds the wait by waitMs, then fails; the waiter leaves no trace', async () => {
    const release = await lockBoard('k', { dir });
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    let settled = false;
    const waiting = lockBoard('k', { dir, waitMs: 5000, pollMs: 100 }).then(
      () => {
        settled = true;
      },
      (error: unknown) => {
        settled = true;
        return error;
      },
    );
    await vi.advanceTimersByTimeAsync(4900);
    expect(settled).toBe(false);
    await vi.advanceTimersByTimeAsync(200);
    expect(await waiting).toBeInstanceOf(BoardLockError);
    expect(readdirSync(lockPath('k', dir))).toHaveLength(1);
    release();
  });

  it('stops waiting at the abort, with its reason', async () => {
    const release = await lockBoard('k', { dir });
    const controller = new AbortController();
    const waiting = lockBoard('k', { dir, waitMs: 60_000, signal: controller.signal }).catch(
      (error: unknown) => error,
    );
    const reason = new Error('interrupted by Ctrl-C');
    controller.abort(reason);
    expect(await waiting).toBe(reason);
    expect(readdirSync(lockPath('k', dir))).toHaveLength(1);
    release();
    await expect(lockBoard('k', { dir, signal: controller.signal })).rejects.toBe(reason);
  });
});

/** The lock module as plain JavaScript, for child processes. */
let lockModule: string;

beforeAll(() => {
  const out = mkdtempSync(join(tmpdir(), 'board-lock-module-'));
  for (const file of readdirSync(here).filter((f) => /^(lock|wait)\.ts$/.test(f))) {
    const { outputText } = ts.transpileModule(readFileSync(join(here, file), 'utf8'), {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
    });
    writeFileSync(join(out, file.replace(/\.ts$/, '.js')), outputText);
  }
  writeFileSync(join(out, 'package.json'), '{"type":"module"}');
  writeFileSync(join(out, 'racer.js'), RACER);
  lockModule = out;
});

afterAll(() => {
  rmSync(lockModule, { recursive: true, force: true });
});

/**
 * A racer: says `ready`, waits for `go` on stdin, takes the lock, logs `acquire` (with the
 * monotonic clock, shared by all processes on a host), checks that nobody else is inside, holds
 * the lock for `hold` ms (or, with `told`, until the next stdin line), logs `release` and lets
 * go. A refusal is logged with the owner it names.
 */
const RACER = `
import { appendFileSync, closeSync, openSync, unlinkSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { lockBoard } from './lock.js';
const [dirArg, key, log, waitMs, hold] = process.argv.slice(2);
// 'default': the lock's own default location (XIAOZHI_LOCK_DIR, else the host's shared one).
const dir = dirArg === 'default' ? undefined : dirArg;
const scratch = dir ?? process.env.RACER_SCRATCH;
const lines = createInterface({ input: process.stdin });
const next = () => new Promise((resolve) => lines.once('line', resolve));
const note = (event, extra = {}) =>
  appendFileSync(log, JSON.stringify({ pid: process.pid, event, t: String(process.hrtime.bigint()), ...extra }) + '\\n');
process.stdout.write('ready\\n');
await next();
let release;
try {
  release = await lockBoard(key, { ...(dir === undefined ? {} : { dir }), waitMs: Number(waitMs) });
} catch (error) {
  note('refused', { message: error.message });
  process.exit(0);
}
note('acquire');
const inside = join(scratch, 'inside');
try { closeSync(openSync(inside, 'wx')); } catch { note('overlap'); }
if (hold === 'told') {
  process.stdout.write('held\\n');
  await next();
} else {
  // The holder's own time in the lock, so that the others contend: nothing waits on it, and
  // longer on a busy machine only makes the run longer.
  await new Promise((resolve) => setTimeout(resolve, Number(hold)));
}
try { unlinkSync(inside); } catch { note('overlap'); }
note('release');
release();
process.exit(0);
`;

interface LogEntry {
  pid: number;
  event: 'acquire' | 'release' | 'refused' | 'overlap';
  t: string;
  message?: string;
}

interface Racer {
  child: ChildProcessWithoutNullStreams;
  lines: string[];
  line(text: string): Promise<void>;
  exited: Promise<unknown>;
}

function racer(
  key: string,
  log: string,
  waitMs: number,
  hold: number | 'told',
  /** The lock's default location and this environment (another user's temp directory). */
  env?: NodeJS.ProcessEnv,
): Racer {
  const child = spawn(
    process.execPath,
    [
      join(lockModule, 'racer.js'),
      env === undefined ? dir : 'default',
      key,
      log,
      String(waitMs),
      String(hold),
    ],
    {
      stdio: ['pipe', 'pipe', 'pipe'],
      ...(env === undefined ? {} : { env: { ...process.env, RACER_SCRATCH: dir, ...env } }),
    },
  );
  const lines: string[] = [];
  const waiters: { text: string; resolve: () => void }[] = [];
  createInterface({ input: child.stdout }).on('line', (text) => {
    lines.push(text);
    for (const waiter of waiters.filter((w) => w.text === text)) waiter.resolve();
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const exited = once(child, 'exit').then(([code]) => {
    if (code !== 0 && code !== null)
      throw new Error(`racer ${child.pid} exited ${code}: ${stderr}`);
    return code;
  });
  return {
    child,
    lines,
    exited,
    line: (text) =>
      lines.includes(text)
        ? Promise.resolve()
        : new Promise((resolve) => waiters.push({ text, resolve })),
  };
}

function readLog(log: string): LogEntry[] {
  if (!existsSync(log)) return [];
  return readFileSync(log, 'utf8')
    .trim()
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as LogEntry);
}

/** Starts all racers at once: each has loaded the module and waits for `go`. */
async function startTogether(racers: Racer[]): Promise<void> {
  await Promise.all(racers.map((r) => r.line('ready')));
  for (const r of racers) r.child.stdin.write('go\n');
}

/** A lock left behind by a process killed while holding it. */
async function staleLock(key: string, log: string): Promise<number> {
  const dead = racer(key, log, 0, 'told');
  await startTogether([dead]);
  await dead.line('held');
  dead.child.kill('SIGKILL');
  await dead.exited;
  rmSync(join(dir, 'inside'), { force: true });
  return dead.child.pid as number;
}

describe('lockBoard across processes racing', { timeout: 60_000 }, () => {
  it('8 processes started together hold the board one at a time, each once', async () => {
    const log = join(dir, 'log.jsonl');
    const racers = Array.from({ length: 8 }, () => racer('serial:RACE', log, 30_000, 20));
    await startTogether(racers);
    await Promise.all(racers.map((r) => r.exited));
    const entries = readLog(log);
    expect(entries.filter((e) => e.event === 'overlap')).toEqual([]);
    expect(entries.filter((e) => e.event === 'refused')).toEqual([]);
    // In the order they were written, acquire and release alternate, by the same process.
    const events = entries.map((e) => `${e.event} ${e.pid}`);
    const expected = entries
      .filter((e) => e.event === 'acquire')
      .flatMap((e) => [`acquire ${e.pid}`, `release ${e.pid}`]);
    expect(events).toEqual(expected);
    expect(new Set(entries.map((e) => e.pid)).size).toBe(8);
    // And by the clock: no two holding intervals overlap.
    const intervals = entries
      .filter((e) => e.event === 'acquire')
      .map((a) => {
        const r = entries.find((e) => e.event === 'release' && e.pid === a.pid) as LogEntry;
        return [BigInt(a.t), BigInt(r.t)] as const;
      })
      .sort((x, y) => (x[0] < y[0] ? -1 : 1));
    for (const [i, [acquired]] of intervals.entries()) {
      if (i > 0) expect(acquired).toBeGreaterThan((intervals[i - 1] as readonly bigint[])[1] ?? 0n);
    }
    expect(readdirSync(dir).sort()).toEqual(['log.jsonl']);
  });

  it('a lock left by a dead process is taken over by exactly one of 8 racers', async () => {
    const log = join(dir, 'log.jsonl');
    const deadPid = await staleLock('serial:STALE', log);
    expect(readLog(log).map((e) => e.event)).toEqual(['acquire']);
    const racers = Array.from({ length: 8 }, () => racer('serial:STALE', log, 0, 'told'));
    await startTogether(racers);
    // The winner holds until every other racer has given up.
    const winner = await Promise.race(racers.map((r) => r.line('held').then(() => r)));
    const losers = racers.filter((r) => r !== winner);
    await Promise.all(losers.map((r) => r.exited));
    winner.child.stdin.write('release\n');
    await winner.exited;
    const entries = readLog(log).slice(1);
    expect(entries.filter((e) => e.event === 'overlap')).toEqual([]);
    expect(entries.filter((e) => e.event === 'acquire').map((e) => e.pid)).toEqual([
      winner.child.pid,
    ]);
    const refused = entries.filter((e) => e.event === 'refused');
    expect(refused.map((e) => e.pid).sort()).toEqual(losers.map((r) => r.child.pid).sort());
    for (const entry of refused) {
      expect(entry.message).toMatch(new RegExp(`in use by .*pid ${winner.child.pid}\\b`));
      expect(entry.message).not.toMatch(new RegExp(`pid ${deadPid}\\b`));
    }
  });

  it('two users with their own temp directories (a service, a CI job) exclude each other', async () => {
    const log = join(dir, 'log.jsonl');
    const shared = join(dir, 'shared-locks');
    const userTemp = (name: string) => {
      const temp = join(dir, name);
      mkdirSync(temp);
      return { TMPDIR: temp, TMP: temp, TEMP: temp, [LOCK_DIR_ENV]: shared };
    };
    const service = racer('serial:SHARED', log, 0, 'told', userTemp('tmp-service'));
    await startTogether([service]);
    await service.line('held');
    const job = racer('serial:SHARED', log, 0, 20, userTemp('tmp-ci'));
    await startTogether([job]);
    await job.exited;
    const refused = readLog(log).filter((e) => e.event === 'refused');
    expect(refused.map((e) => e.pid)).toEqual([job.child.pid]);
    expect(refused[0]?.message).toMatch(
      new RegExp(`in use by another run \\(pid ${service.child.pid}\\b`),
    );
    expect(readdirSync(shared)).toHaveLength(1);
    service.child.stdin.write('release\n');
    await service.exited;
  });

  it('a live owner whose record reads empty (being written) is not taken for dead', async () => {
    const log = join(dir, 'log.jsonl');
    const owner = racer('serial:LIVE', log, 0, 'told');
    await startTogether([owner]);
    await owner.line('held');
    // Empty every record that names the owner, as a reader would see one mid-write.
    const records = (path: string): string[] =>
      statSync(path).isDirectory()
        ? readdirSync(path).flatMap((name) => records(join(path, name)))
        : [path];
    let emptied = 0;
    for (const file of records(dir)) {
      if (readFileSync(file, 'utf8').includes(String(owner.child.pid))) {
        writeFileSync(file, '');
        emptied += 1;
      }
    }
    expect(emptied).toBeGreaterThan(0);
    const refused = await lockBoard('serial:LIVE', { dir }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(BoardLockError);
    expect((refused as Error).message).toMatch(new RegExp(`pid ${owner.child.pid}\\b`));
    owner.child.stdin.write('release\n');
    await owner.exited;
    (await lockBoard('serial:LIVE', { dir }))();
  });
});

describe('lockPath', () => {
  it('is a directory per key under dir, readable and distinct', () => {
    const path = lockPath('serial:F4:12:FA:01:02:03', dir);
    expect(dirname(path)).toBe(dir);
    expect(path).toMatch(/xiaozhi-lock-serial_F4_12_FA_01_02_03-[0-9a-f]{12}$/);
    mkdirSync(path);
    expect(lockPath('serial:F4:12:FA:01:02:03', dir)).toBe(path);
  });
});
