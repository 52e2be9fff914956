// Benchmark of @xiaozhi-mcp/server against a raw echo baseline over the same transport, both
// measured in this run: over WebSocket a raw `ws` echo server, over MQTT a bare aedes broker.
//
//   npm run bench -- [--devices N] [--calls M] [--concurrency C] [--transports websocket,mqtt] ...
//   node --expose-gc bench/dist/run.js [options]      (once `npm run bench` has compiled it)
//
// This process is the server side: for each transport it starts the echo server, then the
// xiaozhi server, and for each forks bench/devices.ts, the device side, as a separate process. The bench is compiled to
// bench/dist (git-ignored) and run as plain JavaScript, so no TypeScript loader adds to the
// device process's start-up, which the storm times include. See bench/README.md for
// what each figure means. Exit codes: 0 done, 1 error, 2 the connect storm did not complete,
// 3 the global timeout, 130 interrupted.
import { type ChildProcess, fork, spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import os from 'node:os';
import { basename, dirname, resolve } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { percentile } from '@xiaozhi-mcp/protocol';
import type { AuthMode, XiaozhiServer } from '@xiaozhi-mcp/server';
import type { EchoServer as EchoServerClass } from './echo.js';
import type {
  BoardStats,
  DeviceCommand,
  DeviceCounts,
  DeviceMessage,
  ErrorKinds,
  LoopDelay,
  Mode,
  ReportMessage,
  Transport,
} from './messages.js';
import type { MqttEchoBroker as MqttEchoBrokerClass } from './mqtt-echo.js';

const HERE = dirname(fileURLToPath(import.meta.url));
/** bench/, where last-run.json goes: this file runs compiled, from bench/dist/. */
const BENCH_DIR = basename(HERE) === 'dist' ? dirname(HERE) : HERE;

// --- options --------------------------------------------------------------------------------------
interface Options {
  devices: number;
  /** Each runs its echo baseline and its xiaozhi phase, in this order: websocket, then mqtt. */
  transports: Transport[];
  calls: number;
  concurrency: number;
  preset: string;
  tool: string;
  auth: AuthMode;
  timeout: number;
  stormTimeout: number;
  warmup: number;
  serialCalls: number;
  pings: number;
  retries: number;
  settleMs: number;
  childHeapMb: number;
  json: string;
}
type OptionParser = (name: string, value: string) => number | string;
const TRANSPORTS: readonly Transport[] = ['websocket', 'mqtt'];

function parseOptions(argv: string[]): Options {
  const env = process.env;
  const int = (name: string, value: string | number): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 0)
      throw new Error(`--${name} must be a non-negative integer, got ${JSON.stringify(value)}`);
    return n;
  };
  const transports = (value: string): Transport[] => {
    const list = value.split(',').map((t) => t.trim());
    const bad = list.find((t) => t !== 'websocket' && t !== 'mqtt');
    if (bad !== undefined || list.length === 0)
      throw new Error(`--transports must list websocket and/or mqtt, got ${JSON.stringify(value)}`);
    return TRANSPORTS.filter((t) => list.includes(t));
  };
  const options: Options = {
    devices: int('devices', env.BENCH_DEVICES ?? 1000),
    transports: transports(env.BENCH_TRANSPORTS ?? 'websocket'),
    calls: int('calls', env.BENCH_CALLS ?? 20_000),
    concurrency: int('concurrency', env.BENCH_CONCURRENCY ?? 64),
    preset: env.BENCH_PRESET ?? 'bread-compact-wifi',
    tool: 'self.audio_speaker.set_volume',
    auth: 'token' as AuthMode,
    timeout: int('timeout', env.BENCH_TIMEOUT ?? 600),
    stormTimeout: int('storm-timeout', env.BENCH_STORM_TIMEOUT ?? 300),
    warmup: 2000,
    serialCalls: 1000,
    pings: 200,
    retries: 3,
    settleMs: 5500,
    childHeapMb: 12_288,
    json: resolve(BENCH_DIR, 'last-run.json'),
  };
  const text: OptionParser = (_n, v) => v;
  const names: Record<string, [keyof Options, (name: string, value: string) => unknown]> = {
    '--devices': ['devices', int],
    '--transports': ['transports', (_n, v) => transports(v)],
    '--calls': ['calls', int],
    '--concurrency': ['concurrency', int],
    '--preset': ['preset', text],
    '--tool': ['tool', text],
    '--auth': ['auth', text],
    '--timeout': ['timeout', int],
    '--storm-timeout': ['stormTimeout', int],
    '--warmup': ['warmup', int],
    '--serial-calls': ['serialCalls', int],
    '--pings': ['pings', int],
    '--retries': ['retries', int],
    '--settle-ms': ['settleMs', int],
    '--child-heap-mb': ['childHeapMb', int],
    '--json': ['json', (_n, v) => resolve(v)],
  };
  for (let i = 0; i < argv.length; i++) {
    let arg = argv[i] as string;
    if (arg === '--help' || arg === '-h') {
      console.log(`usage: node --expose-gc bench/dist/run.js [options]
  --devices N         virtual boards (default 1000, env BENCH_DEVICES)
  --transports LIST   websocket, mqtt or websocket,mqtt: the boards' transports, each with
                      its own echo baseline (default websocket, env BENCH_TRANSPORTS)
  --calls M           tools/call in the load (default 20000, env BENCH_CALLS)
  --concurrency C     calls in flight (default 64, env BENCH_CONCURRENCY)
  --preset NAME       board preset (default bread-compact-wifi, env BENCH_PRESET)
  --tool NAME         self.audio_speaker.set_volume (default) or self.get_device_status
  --auth token|off    server auth mode (default token: the OTA reply's per-device token)
  --timeout S         global bound, seconds (default 600, env BENCH_TIMEOUT)
  --storm-timeout S   bound on each connect storm, seconds (default 300)
  --warmup W          untimed calls before each timed load (default 2000)
  --serial-calls K    calls at concurrency 1, for unloaded latency (default 1000)
  --pings K           WebSocket pings, one at a time (default 200)
  --retries R         times a device retries a failed session/connection (default 3)
  --settle-ms MS      wait before the "after" memory sample (default 5500)
  --child-heap-mb MB  --max-old-space-size of the device process (default 12288)
  --json PATH         where to write the figures (default bench/last-run.json)`);
      process.exit(0);
    }
    let value: string | undefined;
    if (arg.includes('='))
      [arg, value] = [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)];
    const spec = names[arg];
    if (spec === undefined) throw new Error(`unknown option ${arg} (try --help)`);
    value ??= argv[++i];
    if (value === undefined) throw new Error(`${arg} needs a value`);
    Object.assign(options, { [spec[0]]: spec[1](spec[0], value) });
  }
  if (options.devices < 1) throw new Error('--devices must be at least 1');
  if (options.concurrency < 1) throw new Error('--concurrency must be at least 1');
  if (!['token', 'off'].includes(options.auth)) throw new Error('--auth must be token or off');
  if (!['self.audio_speaker.set_volume', 'self.get_device_status'].includes(options.tool)) {
    throw new Error('--tool must be self.audio_speaker.set_volume or self.get_device_status');
  }
  return options;
}

// --- small helpers --------------------------------------------------------------------------------
class StormError extends Error {}

const log = (text: string) => process.stderr.write(`${text}\n`);
const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error));
const stackOf = (error: unknown) =>
  error instanceof Error ? (error.stack ?? error.message) : String(error);

async function measureMemory(): Promise<NodeJS.MemoryUsage> {
  for (let i = 0; i < 3; i++) {
    globalThis.gc?.();
    await sleep(20);
  }
  return process.memoryUsage();
}

function perDevice(before: NodeJS.MemoryUsage, after: NodeJS.MemoryUsage, n: number) {
  const kib = (key: 'heapUsed' | 'rss' | 'external') => (after[key] - before[key]) / n / 1024;
  return { heapUsedKiB: kib('heapUsed'), rssKiB: kib('rss'), externalKiB: kib('external') };
}

/** TcpExt ListenOverflows and ListenDrops (Linux): SYNs dropped because an accept queue was full. */
function listenCounters(): { overflows: number; drops: number } {
  try {
    const lines = readFileSync('/proc/net/netstat', 'utf8')
      .split('\n')
      .filter((l) => l.startsWith('TcpExt:'));
    const keys = (lines[0] as string).split(/\s+/);
    const values = (lines[1] as string).split(/\s+/);
    return {
      overflows: Number(values[keys.indexOf('ListenOverflows')]),
      drops: Number(values[keys.indexOf('ListenDrops')]),
    };
  } catch {
    return { overflows: Number.NaN, drops: Number.NaN };
  }
}

function fdLimit(): string {
  try {
    return /Max open files\s+(\S+)/.exec(readFileSync('/proc/self/limits', 'utf8'))?.[1] ?? '?';
  } catch {
    return '?';
  }
}

/**
 * Open file descriptors of this process and the device process, sampled every 500 ms off the
 * event loop (readdir of /proc/PID/fd in libuv's thread pool), with the peak of each.
 */
class FdSampler {
  peak = { server: 0, devices: 0 };
  last = { server: Number.NaN, devices: Number.NaN };
  #timer: NodeJS.Timeout;
  #busy = false;
  #pid: number | undefined;

  constructor(pid: number | undefined) {
    this.#pid = pid;
    this.#timer = setInterval(() => this.#sample(), 500);
    this.#sample();
  }

  async #sample(force = false) {
    if (this.#busy && !force) return;
    this.#busy = true;
    const count = (pid: number | undefined) =>
      readdir(`/proc/${pid}/fd`).then(
        (names) => names.length,
        () => Number.NaN,
      );
    const [server, devices] = await Promise.all([count(process.pid), count(this.#pid)]);
    this.last = { server, devices };
    this.peak = {
      server: Math.max(this.peak.server, server || 0),
      devices: Math.max(this.peak.devices, devices || 0),
    };
    this.#busy = false;
  }

  /** Stops sampling after one last sample (the storm's end, when every connection is open). */
  async stop() {
    clearInterval(this.#timer);
    await this.#sample(true);
  }
}

interface Summary {
  count: number;
  errors: number;
  firstError: string | undefined;
  elapsedMs: number;
  perSecond: number;
  meanMs: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
}

function summarize(
  latencies: ArrayLike<number>,
  elapsedMs: number,
  errors: number,
  firstError: string | undefined,
): Summary {
  const sorted = Array.from(latencies).sort((a, b) => a - b);
  const count = sorted.length;
  const at = (p: number) => percentile(sorted, p / 100);
  let sum = 0;
  for (const v of sorted) sum += v;
  return {
    count,
    errors,
    firstError,
    elapsedMs,
    perSecond: count / (elapsedMs / 1000),
    meanMs: sum / count,
    p50Ms: at(50),
    p90Ms: at(90),
    p99Ms: at(99),
    maxMs: count === 0 ? Number.NaN : (sorted[count - 1] as number),
  };
}

/** Runs `total` calls of `call(i)` with `concurrency` in flight; latency of each from this side. */
async function load(
  total: number,
  concurrency: number,
  call: (i: number) => Promise<unknown>,
): Promise<Summary & { serverCpuUs: number }> {
  const latencies = new Float64Array(total);
  let next = 0;
  let errors = 0;
  let firstError: string | undefined;
  const worker = async () => {
    for (let i = next++; i < total; i = next++) {
      const started = performance.now();
      try {
        await call(i);
      } catch (error) {
        errors++;
        firstError ??= messageOf(error);
      }
      latencies[i] = performance.now() - started;
    }
  };
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(Array.from({ length: Math.min(concurrency, Math.max(total, 1)) }, worker));
  const elapsedMs = performance.now() - started;
  const summary = summarize(latencies, elapsedMs, errors, firstError);
  const used = process.cpuUsage(cpu);
  return Object.assign(summary, { serverCpuUs: used.user + used.system });
}

async function pings(count: number, ping: (i: number) => Promise<number>): Promise<Summary> {
  const latencies: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  for (let i = 0; i < count; i++) {
    try {
      latencies.push(await ping(i));
    } catch (error) {
      errors++;
      firstError ??= messageOf(error);
    }
  }
  return summarize(latencies, 0, errors, firstError);
}

// --- the device process -----------------------------------------------------------------------
/** What the device process last said about its storm. */
interface DeviceStatus {
  mode?: Mode | undefined;
  transport?: Transport | undefined;
  counts: DeviceCounts;
  firstError?: string | undefined;
  errorKinds?: ErrorKinds;
}

interface Waiter {
  resolve: (message: ReportMessage) => void;
  reject: (error: Error) => void;
}

class DeviceProcess {
  last: DeviceStatus | undefined = undefined;
  startedMs: number | undefined = undefined;
  doneMs: number | undefined = undefined;
  #child: ChildProcess;
  #forkedAt: number;
  #expectedExit = false;
  #waiters = new Map<number, Waiter>();
  #nextId = 1;
  #onDone: ((ms: number) => void)[] = [];
  #onStuck: ((message: DeviceMessage) => void)[] = [];
  #onFatal: (message: string) => void;

  constructor(options: Options, onFatal: (message: string) => void) {
    this.#onFatal = onFatal;
    this.#forkedAt = performance.now();
    this.#child = fork(resolve(HERE, 'devices.js'), [], {
      // BENCH_CHILD_EXEC_ARGV: extra node flags for the device process, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof".
      execArgv: [
        '--expose-gc',
        `--max-old-space-size=${options.childHeapMb}`,
        ...(process.env.BENCH_CHILD_EXEC_ARGV ?? '').split(' ').filter(Boolean),
      ],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.#child.on('message', (message) => this.#onMessage(message as DeviceMessage));
    this.#child.on('error', (error) => onFatal(`device process: ${error.message}`));
    this.#child.on('exit', (code, signal) => {
      for (const { reject } of this.#waiters.values())
        reject(new Error(`device process exited (${code ?? signal})`));
      this.#waiters.clear();
      if (!this.#expectedExit)
        onFatal(`the device process exited unexpectedly (code ${code}, signal ${signal})`);
    });
  }

  get forkedAt() {
    return this.#forkedAt;
  }

  get pid() {
    return this.#child.pid;
  }

  send(message: DeviceCommand) {
    this.#child.send(message);
  }

  /** Memory, CPU and counters of the device process (`gc` first, for memory). */
  report(gc = true, timeoutMs = 60_000): Promise<ReportMessage> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiters.delete(id);
        reject(new Error(`the device process did not report within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#waiters.set(id, {
        resolve: (m) => {
          clearTimeout(timer);
          resolve(m);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.#child.send({ cmd: 'report', id, gc });
    });
  }

  /** Calls `fn` if the device process says every device is connected or has given up, some having given up. */
  onStuck(fn: (message: DeviceMessage) => void) {
    this.#onStuck.push(fn);
  }

  /** Resolves when the device process says every device is connected from its side. */
  done(timeoutMs: number): Promise<number> {
    if (this.doneMs !== undefined) return Promise.resolve(this.doneMs);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new StormError('the device process never said all devices were connected')),
        timeoutMs,
      );
      this.#onDone.push((ms) => {
        clearTimeout(timer);
        resolve(ms);
      });
    });
  }

  #onMessage(message: DeviceMessage) {
    switch (message.type) {
      case 'started':
        this.startedMs = performance.now() - this.#forkedAt;
        return;
      case 'progress':
        this.last = message;
        return;
      case 'storm-stuck':
        this.last = {
          ...this.last,
          counts: message.counts,
          firstError: message.firstError,
          errorKinds: message.errorKinds,
        };
        for (const fn of this.#onStuck.splice(0)) fn(message);
        return;
      case 'storm-done':
        this.last = { ...this.last, counts: message.counts };
        this.doneMs = performance.now() - this.#forkedAt;
        for (const fn of this.#onDone.splice(0)) fn(this.doneMs);
        return;
      case 'report': {
        const waiter = this.#waiters.get(message.id);
        this.#waiters.delete(message.id);
        waiter?.resolve(message);
        return;
      }
      case 'fatal':
        this.#onFatal(message.message);
        return;
      default:
    }
  }

  /** Asks the process to close its devices and exit; kills it if it does not within 10 s. */
  async stop() {
    this.#expectedExit = true;
    if (this.#child.exitCode !== null || this.#child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.#child.once('exit', resolve));
    try {
      this.#child.send({ cmd: 'stop' });
    } catch {
      // The IPC channel is already gone.
    }
    const timer = setTimeout(() => this.kill(), 10_000);
    await exited;
    clearTimeout(timer);
  }

  kill() {
    this.#expectedExit = true;
    if (this.#child.exitCode === null && this.#child.signalCode === null)
      this.#child.kill('SIGKILL');
  }
}

/**
 * Resolves with the milliseconds from the fork to the moment `arm`'s callback is called (by the
 * event that completes the storm, so the time is the event's own), printing progress to stderr
 * every 2 s; rejects with a StormError carrying `describe()` after timeoutMs, or as soon as the
 * device process says the storm cannot complete.
 */
function storm(
  label: string,
  devices: DeviceProcess,
  timeoutMs: number,
  arm: (done: () => void) => void,
  describe: () => string,
): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = devices.forkedAt;
    let finished = false;
    let ticks = 0;
    const ticker = setInterval(() => {
      if (++ticks % 8 === 0)
        log(`[${label} ${((performance.now() - started) / 1000).toFixed(1)}s] ${describe()}`);
    }, 250);
    const timer = setTimeout(() => {
      finish();
      reject(
        new StormError(
          `${label}: the connect storm did not complete within ${timeoutMs / 1000} s: ${describe()}`,
        ),
      );
    }, timeoutMs);
    const finish = () => {
      finished = true;
      clearInterval(ticker);
      clearTimeout(timer);
    };
    devices.onStuck(() => {
      if (finished) return;
      finish();
      reject(
        new StormError(
          `${label}: the connect storm cannot complete, every device is connected or has given up: ${describe()}`,
        ),
      );
    });
    arm(() => {
      if (finished) return;
      const ms = performance.now() - started;
      finish();
      resolve(ms);
    });
  });
}

function childCounts(devices: DeviceProcess): string {
  const last = devices.last;
  const c = last?.counts;
  if (last === undefined || c === undefined) return 'device process: not started yet';
  const kinds = Object.entries(last.errorKinds ?? {});
  const error = last.firstError
    ? ` · first error: ${last.firstError} · errors by kind: ${kinds.map(([k, v]) => `${v}× ${k}`).join('; ')}`
    : '';
  if (last.mode === 'boards' && last.transport === 'mqtt')
    return `device process: created ${c.created} · idle ${c.idle} · mqtt connected ${c.mqttConnected} · ota failed ${c.otaFailed} · first connects failed ${c.sessionRetries} · failed ${c.failed} · dropped ${c.disconnected}${error}`;
  return last.mode === 'boards'
    ? `device process: created ${c.created} · idle ${c.idle} · connecting ${c.connecting} · listening ${c.listening} · ota failed ${c.otaFailed} · session retries ${c.sessionRetries} · failed ${c.failed} · dropped ${c.disconnected}${error}`
    : `device process: created ${c.created} · opened ${c.opened} · echoed ${c.echoed} · retries ${c.echoRetries} · failed ${c.failed} · dropped ${c.disconnected}${error}`;
}

function cpuOf(report: ReportMessage): number {
  return report.cpu.user + report.cpu.system;
}

// --- the phases -------------------------------------------------------------------------------
/** What is running, so that a failure anywhere can stop it. */
interface State {
  server: XiaozhiServer | undefined;
  echo: { stop(): Promise<void> } | undefined;
  devices: DeviceProcess | undefined;
  fatal: (message: string) => void;
}

interface PhaseResult {
  transport: Transport;
  stormMs: number;
  childStartupMs: number | undefined;
  otaChecksDoneMs?: number | undefined;
  /** Fork → every device's session attached to the registry (its WebSocket, or its MQTT connection). */
  connectedDoneMs?: number | undefined;
  devicesPerSecond: number;
  stormEventLoopDelayP99Ms: number;
  deviceStormEventLoopDelay: LoopDelay | undefined;
  deviceCpuAtReadyUs: NodeJS.CpuUsage;
  listenOverflows: number;
  listenDrops: number;
  peakFds: { server: number; devices: number };
  serverMemory: {
    before: NodeJS.MemoryUsage;
    after: NodeJS.MemoryUsage;
    perDevice: ReturnType<typeof perDevice>;
  };
  deviceMemory: { after: NodeJS.MemoryUsage; perDevice: { heapUsedKiB: number; rssKiB: number } };
  load: Summary & { serverCpuUs: number; serverCpuPerCallUs: number; deviceCpuPerCallUs: number };
  serial: Summary;
  /** WebSocket pings; none over MQTT, where only the client pings (the broker answers). */
  ping: Summary;
  deviceCounts: DeviceCounts;
  boardConsole?: BoardStats | undefined;
}

/** What an echo baseline's server offers the load: connections, a round trip, maybe a ping. */
interface EchoBaseline {
  readonly url: string;
  readonly hellos: number;
  readonly connections: number;
  roundTrip(i: number, tool: string, args: Record<string, unknown>): Promise<void>;
  ping?(i: number): Promise<number>;
  stop(): Promise<void>;
}

const PHASE_LABEL: Record<Transport, { echo: string; xiaozhi: string }> = {
  websocket: { echo: 'ws echo', xiaozhi: 'xiaozhi' },
  mqtt: { echo: 'mqtt echo', xiaozhi: 'xiaozhi mqtt' },
};

async function echoPhase(
  options: Options,
  state: State,
  transport: Transport,
): Promise<PhaseResult> {
  const { devices: n } = options;
  const label = PHASE_LABEL[transport].echo;
  const { buildDeviceHello } = await import('@xiaozhi-mcp/protocol');
  // A hello-sized first message: the WebSocket build's hello, or the MQTT build's (transport udp).
  const hello = JSON.stringify(
    transport === 'mqtt'
      ? buildDeviceHello({ transport: 'udp', version: 3 })
      : buildDeviceHello({ transport: 'websocket', version: 1 }),
  );
  let onAll: (() => void) | undefined;
  const onHello = (count: number) => count === n && onAll?.();
  const echo: EchoBaseline =
    transport === 'mqtt' ? await MqttEchoBroker.start(onHello) : await EchoServer.start(onHello);
  state.echo = echo;
  // Taken after the same settle as the "after" sample, so that what the previous phase freed
  // has been given back to the system and does not come off this phase's RSS.
  await sleep(options.settleMs);
  const before = await measureMemory();
  const listen0 = listenCounters();
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  const devices = new DeviceProcess(options, state.fatal);
  const fds = new FdSampler(devices.pid);
  state.devices = devices;
  devices.send({ cmd: 'echo', transport, url: echo.url, n, hello, retries: options.retries });
  const stormMs = await storm(
    label,
    devices,
    options.stormTimeout * 1000,
    (done) => {
      onAll = done;
    },
    () =>
      `server: hellos echoed ${echo.hellos}/${n} · connections ${echo.connections} · fds ${fds.last.server} | ${childCounts(devices)} · fds ${fds.last.devices}`,
  );
  loop.disable();
  await fds.stop();
  await devices.done(options.stormTimeout * 1000);
  const listen1 = listenCounters();
  await sleep(options.settleMs);
  const after = await measureMemory();
  const deviceReport = await devices.report(true);
  log(`[${label}] ${n} connections in ${(stormMs / 1000).toFixed(2)} s; call load...`);

  const args = options.tool === 'self.audio_speaker.set_volume' ? { volume: 50 } : {};
  const call = (i: number) => echo.roundTrip(i, options.tool, args);
  await load(Math.min(options.warmup, options.calls), options.concurrency, call);
  const cpu0 = await devices.report(false);
  const loaded = await load(options.calls, options.concurrency, call);
  const cpu1 = await devices.report(false);
  const serial = await load(options.serialCalls, 1, call);
  const ping = await pings(echo.ping === undefined ? 0 : Math.min(options.pings, n), (i) =>
    (echo.ping as (i: number) => Promise<number>)(i),
  );
  // The server side closes first: the TIME_WAIT sockets then stay on its side, not on ephemeral
  // ports of the device host, which the next phase's storm needs.
  await echo.stop();
  state.echo = undefined;
  await devices.stop();
  state.devices = undefined;
  return {
    transport,
    stormMs,
    childStartupMs: devices.startedMs,
    devicesPerSecond: n / (stormMs / 1000),
    stormEventLoopDelayP99Ms: loop.percentile(99) / 1e6,
    deviceStormEventLoopDelay: deviceReport.stormLoopDelay,
    deviceCpuAtReadyUs: deviceReport.cpu,
    listenOverflows: listen1.overflows - listen0.overflows,
    listenDrops: listen1.drops - listen0.drops,
    peakFds: fds.peak,
    serverMemory: { before, after, perDevice: perDevice(before, after, n) },
    deviceMemory: {
      after: deviceReport.memory,
      perDevice: {
        heapUsedKiB: deviceReport.memory.heapUsed / n / 1024,
        rssKiB: deviceReport.memory.rss / n / 1024,
      },
    },
    load: {
      ...loaded,
      serverCpuPerCallUs: loaded.serverCpuUs / loaded.count,
      deviceCpuPerCallUs: (cpuOf(cpu1) - cpuOf(cpu0)) / loaded.count,
    },
    serial,
    ping,
    deviceCounts: deviceReport.counts,
  };
}

async function xiaozhiPhase(
  options: Options,
  state: State,
  transport: Transport,
): Promise<PhaseResult> {
  const { devices: n } = options;
  const label = PHASE_LABEL[transport].xiaozhi;
  const { XiaozhiServer } = await import('@xiaozhi-mcp/server');
  const server = await XiaozhiServer.start({
    port: 0,
    logLevel: 'silent',
    auth: options.auth,
    pingIntervalMs: 0,
    // Generous bounds: the benchmark measures how long the storm takes, not who gives up first.
    helloTimeoutMs: 120_000,
    callTimeoutMs: 60_000,
    // Over MQTT: the OTA reply offers every board the embedded broker, on a port the OS chooses.
    ...(transport === 'mqtt' ? { transport: 'mqtt' as const, mqttPort: 0, udpPort: 0 } : {}),
  });
  state.server = server;
  const otaChecked = new Set<string>();
  const connected = new Set<string>();
  const ready = new Set<string>();
  const readyOrder: string[] = [];
  let otaDoneMs: number | undefined;
  let connectedDoneMs: number | undefined;
  let onAll: (() => void) | undefined;
  let forkedAt = 0;
  server.registry.on('ota-check', (check) => {
    otaChecked.add(check.deviceId);
    if (otaChecked.size === n && otaDoneMs === undefined) otaDoneMs = performance.now() - forkedAt;
  });
  server.registry.on('connected', (record) => {
    connected.add(record.deviceId);
    if (connected.size === n && connectedDoneMs === undefined)
      connectedDoneMs = performance.now() - forkedAt;
  });
  server.registry.on('ready', (record) => {
    if (ready.has(record.deviceId)) return;
    ready.add(record.deviceId);
    readyOrder.push(record.deviceId);
    if (ready.size === n) onAll?.();
  });
  // Taken after the same settle as the "after" sample, so that what the previous phase freed
  // has been given back to the system and does not come off this phase's RSS.
  await sleep(options.settleMs);
  const before = await measureMemory();
  const listen0 = listenCounters();
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  const devices = new DeviceProcess(options, state.fatal);
  const fds = new FdSampler(devices.pid);
  forkedAt = devices.forkedAt;
  state.devices = devices;
  devices.send({
    cmd: 'boards',
    transport,
    otaUrl: server.urls.ota,
    n,
    preset: options.preset,
    retries: options.retries,
    // Fast boot, no artificial stagger; long idle/hello/HTTP/connect bounds so a slow storm is
    // measured, not failed; over MQTT a failed connect is retried after 1 s (firmware: 60 s).
    timing: {
      bootMs: 10,
      wifiConnectMs: 10,
      otaRetryMs: 1000,
      otaMaxRetries: 10,
      helloTimeoutMs: 120_000,
      httpTimeoutMs: 120_000,
      channelIdleMs: 3_600_000,
      mqttReconnectMs: 1000,
      mqttConnectTimeoutMs: 120_000,
    },
  });
  const describe = () => {
    const errors = server.registry.list().filter((r) => r.lastError !== undefined);
    const error =
      errors.length > 0 ? ` · ${errors.length} with lastError, e.g. ${errors[0]?.lastError}` : '';
    const open =
      transport === 'mqtt'
        ? `mqtt sessions ${connected.size} · broker clients ${server.mqttClients}`
        : `ws connected ${connected.size} · open ${server.connections}`;
    return `server: ota checks ${otaChecked.size}/${n} · ${open} · ready ${ready.size}${error} · fds ${fds.last.server} | ${childCounts(devices)} · fds ${fds.last.devices}`;
  };
  const stormMs = await storm(
    label,
    devices,
    options.stormTimeout * 1000,
    (done) => {
      onAll = done;
    },
    describe,
  );
  loop.disable();
  await fds.stop();
  await devices.done(options.stormTimeout * 1000);
  const listen1 = listenCounters();
  await sleep(options.settleMs);
  const after = await measureMemory();
  const deviceReport = await devices.report(true);
  log(`[${label}] ${n} devices ready in ${(stormMs / 1000).toFixed(2)} s; call load...`);

  const args = options.tool === 'self.audio_speaker.set_volume' ? { volume: 50 } : {};
  const deviceAt = (i: number) => readyOrder[i % readyOrder.length] as string;
  const call = async (i: number) => {
    const result = await server.registry.callTool(deviceAt(i), options.tool, args);
    if (result.isError)
      throw new Error(`${options.tool} answered isError: ${JSON.stringify(result.content)}`);
  };
  await load(Math.min(options.warmup, options.calls), options.concurrency, call);
  const cpu0 = await devices.report(false);
  const loaded = await load(options.calls, options.concurrency, call);
  const cpu1 = await devices.report(false);
  const serial = await load(options.serialCalls, 1, call);
  // A session on MQTT has no ping: MQTT pings go from the client to the broker.
  const ping = await pings(transport === 'mqtt' ? 0 : Math.min(options.pings, n), (i) =>
    server.registry.session(deviceAt(i)).ping(),
  );
  await server.stop();
  state.server = undefined;
  await devices.stop();
  state.devices = undefined;
  return {
    transport,
    stormMs,
    childStartupMs: devices.startedMs,
    otaChecksDoneMs: otaDoneMs,
    connectedDoneMs,
    devicesPerSecond: n / (stormMs / 1000),
    stormEventLoopDelayP99Ms: loop.percentile(99) / 1e6,
    deviceStormEventLoopDelay: deviceReport.stormLoopDelay,
    deviceCpuAtReadyUs: deviceReport.cpu,
    listenOverflows: listen1.overflows - listen0.overflows,
    listenDrops: listen1.drops - listen0.drops,
    peakFds: fds.peak,
    serverMemory: { before, after, perDevice: perDevice(before, after, n) },
    deviceMemory: {
      after: deviceReport.memory,
      perDevice: {
        heapUsedKiB: deviceReport.memory.heapUsed / n / 1024,
        rssKiB: deviceReport.memory.rss / n / 1024,
      },
    },
    load: {
      ...loaded,
      serverCpuPerCallUs: loaded.serverCpuUs / loaded.count,
      deviceCpuPerCallUs: (cpuOf(cpu1) - cpuOf(cpu0)) / loaded.count,
    },
    serial,
    ping,
    deviceCounts: deviceReport.counts,
    boardConsole: deviceReport.boards,
  };
}

// --- output -----------------------------------------------------------------------------------
function fmt(value: number | undefined): string {
  if (value === undefined || Number.isNaN(value)) return '—';
  const a = Math.abs(value);
  if (a >= 100) return String(Math.round(value));
  if (a >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

/** Milliseconds as seconds; NaN (printed as —) when the moment never came. */
function seconds(ms: number | undefined): number {
  return (ms ?? Number.NaN) / 1000;
}

function ratioOf(a: number | undefined, b: number | undefined): number {
  if (a === undefined || b === undefined || Number.isNaN(a) || Number.isNaN(b) || b === 0)
    return Number.NaN;
  return a / b;
}

function ratio(a: number | undefined, b: number | undefined): string {
  const r = ratioOf(a, b);
  return Number.isNaN(r) ? '—' : `${r.toFixed(2)}×`;
}

/** A row of the tables: its name, the figure of a phase, whether it is a count (no ratio). */
type Metric = [name: string, value: (r: PhaseResult) => number | undefined, count?: boolean];

function metrics(options: Options, withPing: boolean): Metric[] {
  return [
    ['connect storm (s)', (r) => r.stormMs / 1000],
    ['devices/s', (r) => r.devicesPerSecond],
    ['server heap per device (KiB)', (r) => r.serverMemory.perDevice.heapUsedKiB],
    ['server rss per device (KiB)', (r) => r.serverMemory.perDevice.rssKiB],
    [`calls/s (c=${options.concurrency})`, (r) => r.load.perSecond],
    ['latency p50 (ms)', (r) => r.load.p50Ms],
    ['latency p90 (ms)', (r) => r.load.p90Ms],
    ['latency p99 (ms)', (r) => r.load.p99Ms],
    ['latency max (ms)', (r) => r.load.maxMs],
    ['latency p50 c=1 (ms)', (r) => r.serial.p50Ms],
    ['latency p99 c=1 (ms)', (r) => r.serial.p99Ms],
    ...(withPing
      ? ([
          ['ws ping p50 (ms)', (r) => r.ping.p50Ms],
          ['ws ping p99 (ms)', (r) => r.ping.p99Ms],
        ] satisfies Metric[])
      : []),
    ['server CPU per call (µs)', (r) => r.load.serverCpuPerCallUs],
    ['device CPU per call (µs)', (r) => r.load.deviceCpuPerCallUs],
    ['device-process heap/device (KiB)', (r) => r.deviceMemory.perDevice.heapUsedKiB],
    ['storm event-loop p99, server (ms)', (r) => r.stormEventLoopDelayP99Ms],
    ['storm event-loop max, devices (ms)', (r) => r.deviceStormEventLoopDelay?.maxMs],
    ['storm listen-queue overflows', (r) => r.listenOverflows, true],
    ['storm peak open fds, server', (r) => r.peakFds.server, true],
    ['storm peak open fds, devices', (r) => r.peakFds.devices, true],
  ];
}

/**
 * Columns of phase figures, then ratio columns, each `[title, numerator, denominator]` as
 * indexes into the phase columns (counts get no ratio).
 */
function renderTable(
  rows: Metric[],
  columns: [title: string, phase: PhaseResult][],
  ratios: [title: string, a: number, b: number][],
): string[] {
  const widths = [35, ...columns.map(() => 13), ...ratios.map(() => 10)];
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0)))
      .join('')
      .trimEnd();
  const out = [line(['metric', ...columns.map(([t]) => t), ...ratios.map(([t]) => t)])];
  for (const [name, value, count] of rows) {
    const values = columns.map(([, phase]) => value(phase));
    out.push(
      line([
        name,
        ...values.map((v) => (count ? String(v) : fmt(v))),
        ...ratios.map(([, a, b]) => (count ? '' : ratio(values[a], values[b]))),
      ]),
    );
  }
  return out;
}

function problems(label: string, x: PhaseResult, e: PhaseResult): string[] {
  return [
    x.load.errors && `${label} call errors ${x.load.errors} (${x.load.firstError})`,
    e.load.errors && `echo errors ${e.load.errors} (${e.load.firstError})`,
    x.ping.errors && `ping errors ${x.ping.errors} (${x.ping.firstError})`,
    x.deviceCounts.sessionRetries &&
      `${x.transport === 'mqtt' ? 'first MQTT connects failed' : 'session retries'} ${x.deviceCounts.sessionRetries}`,
    x.boardConsole?.mqttConnectFailures &&
      `MQTT connect failures ${x.boardConsole.mqttConnectFailures}`,
    x.deviceCounts.disconnected &&
      `${x.transport === 'mqtt' ? 'MQTT connections dropped' : 'sessions dropped'} ${x.deviceCounts.disconnected}`,
    x.boardConsole?.otaRetries && `OTA retries ${x.boardConsole.otaRetries}`,
    e.deviceCounts.echoRetries && `echo connection retries ${e.deviceCounts.echoRetries}`,
  ].filter((p): p is string => typeof p === 'string');
}

function problemLine(found: string[]): string {
  return found.length
    ? `problems: ${found.join(' · ')}`
    : 'problems: none (no call errors, retries or dropped sessions)';
}

function table(options: Options, x: PhaseResult, e: PhaseResult): string {
  const out = renderTable(
    metrics(options, true),
    [
      ['xiaozhi-mcp', x],
      ['ws echo', e],
    ],
    [['ratio', 0, 1]],
  );
  out.push('');
  out.push(
    `storm breakdown (xiaozhi, from fork): device process up ${fmt(seconds(x.childStartupMs))} s · all OTA checks ${fmt(seconds(x.otaChecksDoneMs))} s · all WS sessions ${fmt(seconds(x.connectedDoneMs))} s · all ready (initialize + 2× tools/list) ${fmt(x.stormMs / 1000)} s`,
  );
  out.push(problemLine(problems('xiaozhi', x, e)));
  return out.join('\n');
}

/** The MQTT table: xiaozhi over MQTT beside the bare-broker echo and, when it ran, xiaozhi over WebSocket. */
function mqttTable(
  options: Options,
  x: PhaseResult,
  e: PhaseResult,
  ws: PhaseResult | undefined,
): string {
  const out = renderTable(
    metrics(options, false),
    [
      ['xiaozhi mqtt', x],
      ['mqtt echo', e],
      ...(ws ? [['xiaozhi ws', ws] as [string, PhaseResult]] : []),
    ],
    [['ratio', 0, 1], ...(ws ? [['mqtt/ws', 0, 2] as [string, number, number]] : [])],
  );
  out.push('');
  out.push(
    `storm breakdown (xiaozhi mqtt, from fork): device process up ${fmt(seconds(x.childStartupMs))} s · all OTA checks ${fmt(seconds(x.otaChecksDoneMs))} s · all MQTT sessions ${fmt(seconds(x.connectedDoneMs))} s · all ready (initialize + 2× tools/list) ${fmt(x.stormMs / 1000)} s`,
  );
  out.push(problemLine(problems('xiaozhi mqtt', x, e)));
  return out.join('\n');
}

/** The figures compared in last-run.json: xiaozhi over its baseline (or over another path). */
function ratiosOf(x: PhaseResult, e: PhaseResult) {
  return {
    stormTime: ratioOf(x.stormMs, e.stormMs),
    devicesPerSecond: ratioOf(x.devicesPerSecond, e.devicesPerSecond),
    serverHeapPerDevice: ratioOf(
      x.serverMemory.perDevice.heapUsedKiB,
      e.serverMemory.perDevice.heapUsedKiB,
    ),
    serverRssPerDevice: ratioOf(x.serverMemory.perDevice.rssKiB, e.serverMemory.perDevice.rssKiB),
    callsPerSecond: ratioOf(x.load.perSecond, e.load.perSecond),
    p50: ratioOf(x.load.p50Ms, e.load.p50Ms),
    p90: ratioOf(x.load.p90Ms, e.load.p90Ms),
    p99: ratioOf(x.load.p99Ms, e.load.p99Ms),
    serialP50: ratioOf(x.serial.p50Ms, e.serial.p50Ms),
    pingP50: ratioOf(x.ping.p50Ms, e.ping.p50Ms),
  };
}

// --- main -------------------------------------------------------------------------------------
let EchoServer: typeof EchoServerClass;
let MqttEchoBroker: typeof MqttEchoBrokerClass;

async function main() {
  let options: Options;
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (error) {
    log(`bench: ${messageOf(error)}`);
    process.exit(1);
  }
  ({ EchoServer } = await import('./echo.js'));
  ({ MqttEchoBroker } = await import('./mqtt-echo.js'));
  const state: State = {
    server: undefined,
    echo: undefined,
    devices: undefined,
    fatal: () => {},
  };
  let exiting = false;
  const shutdown = async (reason: string | undefined, code: number) => {
    if (exiting) return;
    exiting = true;
    if (reason) log(`bench: FAILED: ${reason}`);
    state.devices?.kill();
    const stops = [state.server?.stop(), state.echo?.stop()].filter(Boolean);
    await Promise.race([Promise.allSettled(stops), sleep(5000)]);
    process.exit(code);
  };
  state.fatal = (message) => shutdown(message, 1);
  process.on('SIGINT', () => shutdown('interrupted', 130));
  process.on('SIGTERM', () => shutdown('terminated', 143));
  process.on('uncaughtException', (error) =>
    shutdown(`uncaught: ${error.stack ?? error.message}`, 1),
  );
  process.on('unhandledRejection', (error) =>
    shutdown(
      `unhandled rejection: ${(error as { stack?: string } | undefined)?.stack ?? error}`,
      1,
    ),
  );
  const global = setTimeout(
    () => shutdown(`global timeout: the run took more than ${options.timeout} s (--timeout)`, 3),
    options.timeout * 1000,
  );
  global.unref();

  const header = `xiaozhi-mcp server benchmark — ${options.devices} devices, ${options.calls} calls, concurrency ${options.concurrency} (node ${process.version}, ${os.availableParallelism()} cpus)`;
  log(
    `${header}\ntransports ${options.transports.join(', ')}, preset ${options.preset}, tool ${options.tool}, auth ${options.auth}, open-file limit ${fdLimit()} per process`,
  );
  try {
    const runs: Partial<Record<Transport, { xiaozhi: PhaseResult; echo: PhaseResult }>> = {};
    for (const transport of options.transports) {
      // The baseline first: it leaves little behind, so the xiaozhi memory figures are not flattered by reuse.
      const echo = await echoPhase(options, state, transport);
      const xiaozhi = await xiaozhiPhase(options, state, transport);
      runs[transport] = { xiaozhi, echo };
    }
    const out = [header];
    const verdicts: Record<string, unknown> = {};
    const ws = runs.websocket;
    if (ws !== undefined) {
      const p50 = ws.xiaozhi.load.p50Ms / ws.echo.load.p50Ms;
      out.push(
        table(options, ws.xiaozhi, ws.echo),
        `verdict: call latency p50 at concurrency ${options.concurrency} is ${p50.toFixed(3)}× the ws echo baseline — ${p50 <= 1.3 ? 'within' : 'MISSES'} the 1.3× target; ${options.devices} devices ${options.devices >= 10_000 ? 'meets' : 'is below'} the 10,000-device target (storm completed)`,
      );
      verdicts.websocket = {
        p50Ratio: p50,
        p50Target: 1.3,
        p50Met: p50 <= 1.3,
        devices: options.devices,
        devicesTarget: 10_000,
      };
    }
    const mqtt = runs.mqtt;
    if (mqtt !== undefined) {
      const x = mqtt.xiaozhi;
      const overWs = ws
        ? `, ${ratio(x.load.p50Ms, ws.xiaozhi.load.p50Ms)} the WebSocket path's; storm ${ratio(x.stormMs, ws.xiaozhi.stormMs)} the WebSocket path's`
        : '';
      out.push(
        ...(ws ? [''] : []),
        `over MQTT (${options.devices} boards on the embedded broker; baseline: mqtt.js clients on a bare aedes broker)`,
        mqttTable(options, x, mqtt.echo, ws?.xiaozhi),
        `summary: over MQTT, call latency p50 at concurrency ${options.concurrency} is ${ratio(x.load.p50Ms, mqtt.echo.load.p50Ms)} the mqtt echo baseline${overWs}; all ${options.devices} boards ready in ${fmt(x.stormMs / 1000)} s`,
      );
      verdicts.mqtt = {
        p50RatioToEcho: ratioOf(x.load.p50Ms, mqtt.echo.load.p50Ms),
        p50RatioToWebsocket: ws ? ratioOf(x.load.p50Ms, ws.xiaozhi.load.p50Ms) : undefined,
        devices: options.devices,
      };
    }
    console.log(out.join('\n'));
    const result = {
      at: new Date().toISOString(),
      node: process.version,
      cpus: os.availableParallelism(),
      totalMemoryGiB: os.totalmem() / 2 ** 30,
      options,
      // The WebSocket phases keep their old keys (xiaozhi, echo, ratios, verdict).
      ...(ws ? { xiaozhi: ws.xiaozhi, echo: ws.echo, ratios: ratiosOf(ws.xiaozhi, ws.echo) } : {}),
      ...(mqtt
        ? {
            mqtt: {
              xiaozhi: mqtt.xiaozhi,
              echo: mqtt.echo,
              ratios: ratiosOf(mqtt.xiaozhi, mqtt.echo),
              ratiosToWebsocket: ws ? ratiosOf(mqtt.xiaozhi, ws.xiaozhi) : undefined,
            },
          }
        : {}),
      verdict: verdicts,
    };
    writeFileSync(options.json, `${JSON.stringify(result, null, 2)}\n`);
    log(`figures written to ${options.json}`);
    clearTimeout(global);
    await shutdown(undefined, 0);
  } catch (error) {
    await shutdown(
      error instanceof StormError ? error.message : stackOf(error),
      error instanceof StormError ? 2 : 1,
    );
  }
}

// --- gc: re-run this file with --expose-gc when started without it ----------------------------
if (typeof globalThis.gc !== 'function') {
  const child = spawn(
    process.execPath,
    [
      '--expose-gc',
      '--max-old-space-size=8192',
      ...process.execArgv,
      fileURLToPath(import.meta.url),
      ...process.argv.slice(2),
    ],
    { stdio: 'inherit' },
  );
  // Ctrl-C reaches both processes (same process group); the inner one cleans up and exits.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => child.kill(signal));
  child.on('exit', (code, signal) => process.exit(code ?? (signal === 'SIGINT' ? 130 : 1)));
} else {
  await main();
}
