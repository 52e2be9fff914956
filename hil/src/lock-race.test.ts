/**
 * Two runs on one real board, as separate `hil` processes started together: never both hold
 * it. The board is a pseudo-terminal (a tty path that exists; nothing answers on it), named by
 * its path and by a symlink to it, two selectors of one device.
 *
 * A board that nothing answers on is given up within milliseconds, too soon for the other
 * process to find it held. So each process runs with a hook (`--import`, test-only) that stops
 * it, synchronously and still holding what it holds, right after it writes a chosen line (the
 * `open` step passing, the monitor's banner), until the test writes to a FIFO. While one is
 * stopped there, holding the board, the other must be refused; were both let in, both would
 * stop there and the test would see it.
 */
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunReport } from './model.js';

// The binary needs hil built (`npx turbo run build`; `npm test` builds first).
const hilBin = join(resolve(dirname(fileURLToPath(import.meta.url)), '..'), 'bin/hil.js');
const python = spawnSync('python3', ['--version']).status === 0;
const usable = process.platform !== 'win32' && python;

/** Holds a pty open and prints the path of its tty side. */
const PTY = `
import os, pty, sys
master, tty = pty.openpty()
print(os.ttyname(tty), flush=True)
sys.stdin.read()
`;

/** The hook: after writing a line matching $PAUSE_ON, wait (blocking) for $PAUSE_FIFO. */
const PAUSE = `
import { readFileSync } from 'node:fs';
const pattern = new RegExp(process.env.PAUSE_ON, 'm');
let paused = false;
for (const stream of [process.stdout, process.stderr]) {
  const write = stream.write.bind(stream);
  stream.write = (chunk, encoding, callback) => {
    const done = typeof encoding === 'function' ? encoding : callback;
    const matched = !paused && pattern.test(String(chunk));
    if (matched) paused = true;
    return write(chunk, typeof encoding === 'function' ? undefined : encoding, (error) => {
      // The line is out: stop here, holding whatever is held, until the test says go on.
      if (matched) readFileSync(process.env.PAUSE_FIFO);
      done?.(error);
    });
  };
}
`;

let dir: string;
let pty: ChildProcessWithoutNullStreams | undefined;
let tty: string;
let link: string;
let firmware: string;
let hook: string;

beforeAll(async () => {
  if (!usable) return;
  dir = mkdtempSync(join(tmpdir(), 'hil-lock-race-'));
  pty = spawn('python3', ['-c', PTY], { stdio: ['pipe', 'pipe', 'pipe'] });
  const [line] = (await once(createInterface({ input: pty.stdout }), 'line')) as [string];
  tty = line.trim();
  link = join(dir, 'my-board');
  symlinkSync(tty, link);
  firmware = join(dir, 'merged.bin');
  writeFileSync(
    firmware,
    buildVirtualFirmware({ chip: 'esp32s3', version: '2.4.2', board: 'bread-compact-wifi' }).merged,
  );
  hook = join(dir, 'pause.mjs');
  writeFileSync(hook, PAUSE);
});

afterAll(() => {
  pty?.kill();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

interface Run {
  readonly child: ChildProcessWithoutNullStreams;
  readonly name: string;
  output: string;
  /** Resolves once the process wrote its pause line (it is stopped, holding the board). */
  readonly paused: Promise<void>;
  readonly exited: Promise<number | null>;
  /** Whether it wrote its pause line, whether it ended: what a wait for either looks at. */
  readonly state: { paused: boolean; exited: boolean };
}

/** A `hil` process with its own FIFO to be let go by; locks in the case's own directory. */
function hil(name: string, args: string[], pauseOn: string, locks: string, fifo: string): Run {
  const child = spawn(process.execPath, [hilBin, ...args], {
    cwd: dir,
    env: {
      ...process.env,
      XIAOZHI_LOCK_DIR: locks,
      NODE_OPTIONS: `--import ${pathToFileURL(hook).href}`,
      PAUSE_ON: pauseOn,
      PAUSE_FIFO: fifo,
      FORCE_COLOR: '0',
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  // Decoded as text across chunks: a read that ends inside '✓' must not hide the pause line.
  child.stdout.setEncoding('utf8');
  child.stderr.setEncoding('utf8');
  const state = { paused: false, exited: false };
  const run: Run = {
    child,
    name,
    output: '',
    state,
    paused: new Promise((resolvePaused) => {
      const pattern = new RegExp(pauseOn, 'm');
      const seen = (chunk: string) => {
        run.output += chunk;
        if (pattern.test(run.output)) {
          state.paused = true;
          resolvePaused();
        }
      };
      child.stdout.on('data', seen);
      child.stderr.on('data', seen);
    }),
    // 'close': its output is read to the end by then.
    exited: once(child, 'close').then(([code]) => {
      state.exited = true;
      return code as number | null;
    }),
  };
  return run;
}

function fifoIn(path: string): string {
  mkdirSync(path, { recursive: true });
  const fifo = join(path, 'go');
  expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
  return fifo;
}

/**
 * Starts `a` and `b` together; one stops holding the board, the other must be done (refused)
 * by then. Lets the holder go on and returns both, holder first.
 */
async function race(a: Run, b: Run, fifo: string): Promise<[Run, Run]> {
  // One holds the board, or both ended without: that fails here, with their output.
  await until(() => a.state.paused || b.state.paused || (a.state.exited && b.state.exited), {
    what: 'one run to hold the board',
    timeoutMs: 45_000,
    seen: () => ({ [a.name]: a.output, [b.name]: b.output }),
  });
  expect(a.state.paused || b.state.paused, `${a.output}\n---\n${b.output}`).toBe(true);
  const holder = a.state.paused ? a : b;
  const other = holder === a ? b : a;
  const outcome = await Promise.race([
    other.exited.then(() => 'refused'),
    other.paused.then(() => 'both hold the board'),
  ]);
  expect(outcome, `${other.output}\n---\n${holder.output}`).toBe('refused');
  await writeFile(fifo, ''); // let the holder go on
  await holder.exited;
  return [holder, other];
}

function report(out: string): RunReport {
  return JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
}

describe.skipIf(!usable)(
  'one board, two hil processes started together',
  { timeout: 60_000 },
  () => {
    for (const [what, selectors] of [
      ['the same selector', () => [tty, tty]],
      ['two selectors of one device (the tty and a link to it)', () => [tty, link]],
    ] as const) {
      it(`hil run on ${what}: one gets past open, the other fails open naming it`, async () => {
        const [first, second] = selectors();
        const locks = join(dir, `locks-${what.length}`);
        const fifo = fifoIn(locks);
        const runs = [first, second].map((port, i) => {
          const config = join(locks, `hil-${i}.config.json`);
          writeFileSync(config, JSON.stringify({ boards: [{ name: 'a', port, chip: 'esp32s3' }] }));
          return hil(
            `run-${i}`,
            [
              'run',
              '--config',
              config,
              '--out',
              join(locks, `out-${i}`),
              '--lock-wait',
              '0',
            ].concat(['--firmware', firmware, '--reporter', 'json']),
            '^\\[a\\] open ✓',
            locks,
            fifo,
          );
        }) as [Run, Run];
        const [holder, refused] = await race(runs[0], runs[1], fifo);

        // The refused run: a rig failure (exit 3) at `open`, naming the holder's pid.
        expect(await refused.exited).toBe(3);
        const lost = report(join(locks, `out-${runs.indexOf(refused)}`)).boards[0];
        expect(lost).toMatchObject({
          status: 'rig-failed',
          failure: {
            step: 'open',
            reason: expect.stringMatching(
              new RegExp(`is in use by another run \\(pid ${holder.child.pid}: hil\\.js run `),
            ),
          },
        });
        expect(lost?.steps[0]).toMatchObject({ step: 'open', status: 'failed' });
        expect(lost?.steps.map((s) => s.step)).not.toContain('identify');
        // The holder got past open and failed later, at identify: nothing answers on a pty.
        expect(await holder.exited).toBe(3);
        const held = report(join(locks, `out-${runs.indexOf(holder)}`)).boards[0];
        expect(held?.steps[0]).toMatchObject({ step: 'open', status: 'passed' });
        expect(held?.failure?.step).toBe('identify');
        // Both are gone: so is the lock.
        expect(readdirSync(locks).filter((f) => f.startsWith('xiaozhi-lock-'))).toEqual([]);
      });
    }

    it('flash on a board that monitor holds (by another selector) is refused: exit 3', async () => {
      const locks = join(dir, 'locks-commands');
      const fifo = fifoIn(locks);
      const monitor = hil('monitor', ['monitor', '--port', tty], '^--- monitor ', locks, fifo);
      await until(() => monitor.state.paused || monitor.state.exited, {
        what: 'monitor to hold the board',
        timeoutMs: 45_000,
        seen: () => monitor.output,
      });
      expect(monitor.state.paused, monitor.output).toBe(true);
      const flash = hil('flash', ['flash', firmware, '--port', link], '^never$', locks, fifo);
      expect(await flash.exited).toBe(3);
      expect(flash.output).toMatch(
        new RegExp(
          `^hil: flash ${link}: ${link} \\(path:[^)]+\\) is in use by another run \\(pid ${monitor.child.pid}: hil\\.js monitor --port `,
          'm',
        ),
      );
      await writeFile(fifo, '');
      monitor.child.kill('SIGINT');
      await monitor.exited;
    });
  },
);
