/**
 * Interoperability with software nobody here wrote: pyserial's RFC 2217 client (Debian's
 * python3-serial under /usr/bin/python3; `.ci/run` installs it) against our server, which
 * shares a port of `@serialport/binding-mock` (echoing what it is sent) and records what
 * reaches it.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { SerialPortStream } from '@serialport/stream';
import { until } from '@xiaozhi-mcp/test-kit';
import { SerialPortMock } from 'serialport';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ResolvedPort } from '../port-provider.js';
import type { SerialBinding } from '../web-serial.js';
import { Rfc2217Server } from './server.js';

const PYTHON = '/usr/bin/python3';
const SCRIPT = fileURLToPath(new URL('./fixtures/pyserial-client.py', import.meta.url));

/** Why the tests cannot run here, or undefined when they can. */
function missing(): string | undefined {
  const probe = spawnSync(PYTHON, ['-c', 'import serial.rfc2217'], { encoding: 'utf8' });
  if (probe.error !== undefined) return `${PYTHON} cannot run (${probe.error.message})`;
  if (probe.status !== 0)
    return `${PYTHON} has no pyserial (import serial.rfc2217 failed: ${probe.stderr.trim().split('\n').at(-1) ?? ''}); install Debian's python3-serial`;
  return undefined;
}
const skipped = missing();

// `@serialport/binding-mock`, reached through `serialport` (its ESM entry has no types).
const MockBinding = SerialPortMock.binding;
type Binding = ConstructorParameters<typeof SerialPortStream>[0]['binding'];
type BindingPort = Awaited<ReturnType<Binding['open']>>;
type SetOptions = Parameters<BindingPort['set']>[0];

/** The mock binding, recording every set() and update() of the port it opens. */
function recordingPort(path: string) {
  const sets: string[] = [];
  const updates: number[] = [];
  const binding: Binding = {
    list: () => MockBinding.list(),
    async open(options) {
      const port = await MockBinding.open(options);
      const set = port.set.bind(port);
      const update = port.update.bind(port);
      port.set = async (flags: SetOptions) => {
        sets.push(`${Number(flags.dtr)},${Number(flags.rts)}`);
        return set(flags);
      };
      port.update = async (options) => {
        updates.push(options.baudRate);
        return update(options);
      };
      return port;
    },
  };
  const port: ResolvedPort = {
    binding: binding as unknown as SerialBinding,
    path,
    info: { path, kind: 'usb-uart' },
    label: 'mock:board',
    present: async () => true,
    refind: async () => ({ path, info: { path, kind: 'usb-uart' } }),
    dispose: () => {},
  };
  return { port, sets, updates };
}

interface Python {
  readonly child: ChildProcess;
  /** Each JSON line it printed, as it comes. */
  next(): Promise<Record<string, unknown>>;
  readonly exited: Promise<{ code: number | null; stderr: string }>;
}

function python(mode: string, url: string): Python {
  const child = spawn(PYTHON, [SCRIPT, mode, url], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  const lines: Record<string, unknown>[] = [];
  const waiting: ((value: Record<string, unknown>) => void)[] = [];
  child.stdout?.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    for (;;) {
      const end = stdout.indexOf('\n');
      if (end < 0) break;
      const line = JSON.parse(stdout.slice(0, end)) as Record<string, unknown>;
      stdout = stdout.slice(end + 1);
      const waiter = waiting.shift();
      if (waiter === undefined) lines.push(line);
      else waiter(line);
    }
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  // A hang guard: pyserial's own timeouts are 3-10 s each.
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const exited = new Promise<{ code: number | null; stderr: string }>((resolve) =>
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    }),
  );
  return {
    child,
    exited,
    next: () => {
      const line = lines.shift();
      if (line !== undefined) return Promise.resolve(line);
      return new Promise((resolve, reject) => {
        waiting.push(resolve);
        void exited.then(({ code }) =>
          reject(new Error(`python exited (${code}) before printing: ${stderr}`)),
        );
      });
    },
  };
}

let server: Rfc2217Server | undefined;
beforeEach(() => {
  MockBinding.reset();
});
afterEach(async () => {
  await server?.close();
  server = undefined;
  MockBinding.reset();
});

async function serve(path: string) {
  MockBinding.createPort(path, { echo: true });
  const recorded = recordingPort(path);
  const log: string[] = [];
  server = await Rfc2217Server.start({
    port: recorded.port,
    listenPort: 0,
    log: (line) => log.push(line),
  });
  return { ...recorded, log, url: server.url };
}

describe.skipIf(skipped !== undefined)(
  `pyserial's RFC 2217 client${skipped === undefined ? '' : ` (skipped: ${skipped})`}`,
  () => {
    it('opens, sets the baud rate, toggles the lines, resets into download mode and echoes bytes', {
      timeout: 90_000,
    }, async () => {
      const { sets, updates, log, url } = await serve('/dev/ROBOT');
      const run = python('exercise', url);
      const result = await run.next();
      const { code, stderr } = await run.exited;
      expect(stderr).toBe('');
      expect(code).toBe(0);
      expect(result).toEqual({ baudrate: 460800, echo_length: 262, echo_equal: true, cts: true });
      // The server's goodbye (lines released, its rate back) follows pyserial's close.
      await until(() => log.some((l) => /disconnected/.test(l)), {
        what: 'the goodbye in the log',
      });
      // pyserial's open asks for its default 9600 baud, then our 460800; the server's own
      // rate comes back once it left.
      expect(updates).toEqual([9600, 460800, 115200]);
      // Open (the server's two releases), pyserial's open (DTR_OFF, RTS_OFF), the BOOT click,
      // the hard reset, ClassicReset's D0 and R1; its D1 is held and the R0 after it plays the
      // local download reset (esptool UnixTightReset on Linux, ClassicReset on Windows), and
      // its D0 is absorbed; released when pyserial left.
      const download =
        process.platform === 'win32'
          ? ['0,0', '0,1', '1,1', '1,0', '0,0']
          : ['0,0', '1,1', '0,1', '1,0', '0,0'];
      expect(sets).toEqual([
        '0,0',
        '0,0',
        '0,0',
        '0,0',
        '1,0',
        '0,0',
        '0,1',
        '0,0',
        '0,0',
        '0,1',
        ...download,
        '0,0',
      ]);
      const text = log.join('\n');
      expect(text).toMatch(/BOOT click \(a DTR pulse\) passed through/);
      expect(text).toMatch(/hard reset \(an RTS pulse\) passed through/);
      expect(text.match(/reset into download mode recognised/g)).toHaveLength(1);
      expect(text).toMatch(/disconnected \(\d+ bytes in, 262 out\); DTR and RTS released/);
    });

    it('refuses a second client with the busy line while the first is connected', {
      timeout: 90_000,
    }, async () => {
      const { url, log } = await serve('/dev/ROBOT');
      const first = python('hold', url);
      expect(await first.next()).toEqual({ open: true });
      const holder = server?.client;
      expect(holder).toMatch(/^127\.0\.0\.1:\d+$/);
      // A plain TCP client reads the line.
      const port = server?.address.port ?? 0;
      const line = await new Promise<string>((resolve, reject) => {
        const socket = connect({ host: '127.0.0.1', port });
        let text = '';
        socket.on('data', (chunk: Buffer) => {
          text += chunk.toString();
        });
        socket.on('close', () => resolve(text));
        socket.on('error', reject);
      });
      expect(line).toBe(
        `xiaozhi-mcp port serve: busy: mock:board is in use by ${holder}; one client at a time\r\n`,
      );
      // pyserial itself cannot open it: the server never negotiates with it.
      const second = python('try', url);
      const tried = await second.next();
      expect(tried.opened).toBe(false);
      expect(String(tried.error)).toMatch(/Remote does not seem to support RFC2217/);
      // The first is still served, and leaves normally.
      first.child.stdin?.write('close\n');
      expect(await first.next()).toEqual({ closed: true });
      expect((await first.exited).code).toBe(0);
      expect(log.filter((l) => l.startsWith('refused'))).toHaveLength(2);
    });
  },
);
