// Benchmark of @xiaozhi-mcp/server against a raw echo baseline over the same transport, both
// measured in this run: over WebSocket a raw `ws` echo server, over MQTT a bare aedes broker.
//
//   npm run bench -- [--devices N] [--calls M] [--rounds R] [--runs U] [--sim-processes K] ...
//   node bench/dist/run.js [options]      (once `npm run bench` has compiled it)
//
// This process only conducts. For each transport it runs R interleaved rounds (echo, xiaozhi,
// echo, xiaozhi, ...). Each phase of a round forks a fresh server process (bench/server.ts: the
// echo server, the bare broker or the XiaozhiServer, and the load) and K fresh simulator
// processes (bench/devices.ts), each with its share of the boards or echo clients. Every figure
// is the median of its rounds, with the spread. A simulator process whose event loop lagged
// (p99 over --sim-loop-bound-ms) during the storm or the timed load makes the figures that
// depend on it "simulator-bound" instead of a verdict. The bench is compiled to bench/dist
// (git-ignored) and run as plain JavaScript, so no TypeScript loader adds to the start of the
// processes, which the storm times include. See bench/README.md for what each figure means.
// Exit codes: 0 done, 1 error, 2 a connect storm did not complete, 3 the global timeout,
// 130 interrupted.
import { type ChildProcess, fork } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import os from 'node:os';
import { basename, dirname, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { buildDeviceHello } from '@xiaozhi-mcp/protocol';
import { agreement, agreementTable, fmt, type Spread, spreadOf } from './figures.js';
import type {
  BoardStats,
  DeviceCommand,
  DeviceCounts,
  DeviceMessage,
  ErrorKinds,
  LoadSpec,
  LoopDelay,
  MarkMessage,
  Mode,
  ReportMessage,
  ServerCommand,
  ServerKind,
  ServerMessage,
  ServerProgress,
  Summary,
  Transport,
} from './messages.js';

const HERE = dirname(fileURLToPath(import.meta.url));
/** bench/, where last-run.json goes: this file runs compiled, from bench/dist/. */
const BENCH_DIR = basename(HERE) === 'dist' ? dirname(HERE) : HERE;
/** The moment now, comparable across processes (ms since the epoch, sub-ms resolution). */
const now = () => performance.timeOrigin + performance.now();

// --- options --------------------------------------------------------------------------------------
interface Options {
  devices: number;
  /** Each runs its rounds of echo baseline and xiaozhi phase, in this order: websocket, then mqtt. */
  transports: Transport[];
  calls: number;
  concurrency: number;
  rounds: number;
  runs: number;
  simProcesses: number;
  simLoopBoundMs: number;
  simBatch: number;
  preset: string;
  tool: string;
  auth: 'token' | 'off';
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
const TRANSPORTS: readonly Transport[] = ['websocket', 'mqtt'];
/** Default bound on the whole run, per round of one transport (an echo and a xiaozhi phase). */
const TIMEOUT_PER_ROUND_S = 300;

const USAGE = `usage: node bench/dist/run.js [options]
  --devices N            virtual boards, and echo clients (default 1000, env BENCH_DEVICES)
  --transports LIST      websocket, mqtt or websocket,mqtt: the boards' transports, each with
                         its own echo baseline (default websocket, env BENCH_TRANSPORTS)
  --calls M              timed tools/call per phase (default 20000, env BENCH_CALLS)
  --concurrency C        calls in flight (default 64, env BENCH_CONCURRENCY)
  --rounds R             interleaved rounds echo, xiaozhi, echo, ... per transport; every figure
                         is the median of its rounds (default 3, env BENCH_ROUNDS)
  --runs U               repeat the whole bench U times and say whether the runs' ratios agree
                         within 15% (default 1)
  --sim-processes K      simulator processes, each with its share of the boards or echo clients
                         (default: one per core, ${os.availableParallelism()} here)
  --sim-loop-bound-ms B  a simulator process whose event-loop delay p99 exceeds B ms in a storm
                         or a timed load makes the figures that depend on it simulator-bound
                         (default 50)
  --sim-batch S          boards (or echo clients) a simulator creates before it yields to its
                         event loop (default 10)
  --preset NAME          board preset (default bread-compact-wifi, env BENCH_PRESET)
  --tool NAME            self.audio_speaker.set_volume (default) or self.get_device_status
  --auth token|off       server auth mode (default token: the OTA reply's per-device token)
  --timeout S            global bound, seconds (default ${TIMEOUT_PER_ROUND_S} per round of each transport and run)
  --storm-timeout S      bound on each connect storm, seconds (default 300)
  --warmup W             untimed calls before each timed load (default 2000)
  --serial-calls K       calls at concurrency 1, for unloaded latency (default 1000)
  --pings K              WebSocket pings, one at a time (default 200)
  --retries R            times a device retries a failed session/connection (default 3)
  --settle-ms MS         wait before the "after" memory sample (default 5500)
  --child-heap-mb MB     --max-old-space-size of each simulator process (default 12288)
  --json PATH            where to write every figure (default bench/last-run.json)`;

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
    rounds: int('rounds', env.BENCH_ROUNDS ?? 3),
    runs: 1,
    simProcesses: os.availableParallelism(),
    simLoopBoundMs: 50,
    simBatch: 10,
    preset: env.BENCH_PRESET ?? 'bread-compact-wifi',
    tool: 'self.audio_speaker.set_volume',
    auth: 'token',
    timeout: 0,
    stormTimeout: int('storm-timeout', env.BENCH_STORM_TIMEOUT ?? 300),
    warmup: 2000,
    serialCalls: 1000,
    pings: 200,
    retries: 3,
    settleMs: 5500,
    childHeapMb: 12_288,
    json: resolve(BENCH_DIR, 'last-run.json'),
  };
  const text = (_n: string, v: string) => v;
  const names: Record<string, [keyof Options, (name: string, value: string) => unknown]> = {
    '--devices': ['devices', int],
    '--transports': ['transports', (_n, v) => transports(v)],
    '--calls': ['calls', int],
    '--concurrency': ['concurrency', int],
    '--rounds': ['rounds', int],
    '--runs': ['runs', int],
    '--sim-processes': ['simProcesses', int],
    '--sim-loop-bound-ms': ['simLoopBoundMs', int],
    '--sim-batch': ['simBatch', int],
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
  if (env.BENCH_TIMEOUT !== undefined) options.timeout = int('timeout', env.BENCH_TIMEOUT);
  for (let i = 0; i < argv.length; i++) {
    let arg = argv[i] as string;
    if (arg === '--help' || arg === '-h') {
      console.log(USAGE);
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
  for (const [name, key] of [
    ['devices', 'devices'],
    ['concurrency', 'concurrency'],
    ['rounds', 'rounds'],
    ['runs', 'runs'],
    ['sim-processes', 'simProcesses'],
    ['sim-batch', 'simBatch'],
  ] as const) {
    if (options[key] < 1) throw new Error(`--${name} must be at least 1`);
  }
  options.simProcesses = Math.min(options.simProcesses, options.devices);
  if (options.timeout === 0)
    options.timeout =
      TIMEOUT_PER_ROUND_S * options.rounds * options.runs * options.transports.length;
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
 * Open file descriptors of the server process and of each simulator process, sampled every
 * 500 ms off the event loop (readdir of /proc/PID/fd in libuv's thread pool), with the peak of each.
 */
class FdSampler {
  peak: number[];
  last: number[];
  #timer: NodeJS.Timeout;
  #busy = false;
  #pids: (number | undefined)[];

  constructor(pids: (number | undefined)[]) {
    this.#pids = pids;
    this.peak = pids.map(() => 0);
    this.last = pids.map(() => Number.NaN);
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
    this.last = await Promise.all(this.#pids.map(count));
    this.peak = this.peak.map((p, i) => Math.max(p, this.last[i] || 0));
    this.#busy = false;
  }

  /** Stops sampling after one last sample (the storm's end, when every connection is open). */
  async stop() {
    clearInterval(this.#timer);
    await this.#sample(true);
  }
}

/** A command as sent: the id is the request's own. */
type WithoutId<T> = T extends unknown ? Omit<T, 'id'> : never;

/** A child process answering commands that carry an id with a message that carries it back. */
abstract class Child<Command extends { cmd: string }, Message extends { type: string }> {
  readonly forkedAt: number;
  readonly name: string;
  protected child: ChildProcess;
  #expectedExit = false;
  #waiters = new Map<number, { resolve: (m: Message) => void; reject: (e: Error) => void }>();
  #nextId = 1;

  constructor(name: string, file: string, execArgv: string[], onFatal: (message: string) => void) {
    this.name = name;
    this.forkedAt = now();
    this.child = fork(resolve(HERE, file), [], {
      execArgv,
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.child.on('message', (message) => {
      const m = message as Message & { id?: number };
      if (m.type === 'fatal') onFatal((m as unknown as { message: string }).message);
      const waiter = m.id !== undefined ? this.#waiters.get(m.id) : undefined;
      if (waiter !== undefined && m.id !== undefined) {
        this.#waiters.delete(m.id);
        if (m.type === 'error')
          waiter.reject(new Error(`${name}: ${(m as unknown as { message: string }).message}`));
        else waiter.resolve(m);
        return;
      }
      this.onMessage(m);
    });
    this.child.on('error', (error) => onFatal(`${name}: ${error.message}`));
    this.child.on('exit', (code, signal) => {
      for (const { reject } of this.#waiters.values())
        reject(new Error(`${name} exited (${code ?? signal})`));
      this.#waiters.clear();
      if (!this.#expectedExit)
        onFatal(`${name} exited unexpectedly (code ${code}, signal ${signal})`);
    });
  }

  get pid() {
    return this.child.pid;
  }

  protected abstract onMessage(message: Message): void;

  send(message: Command) {
    this.child.send(message);
  }

  /** Sends `command` with a fresh id; resolves with the answer that carries it. */
  request<T extends Message>(command: WithoutId<Command>, timeoutMs = 120_000): Promise<T> {
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiters.delete(id);
        reject(new Error(`${this.name} did not answer ${command.cmd} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#waiters.set(id, {
        resolve: (m) => {
          clearTimeout(timer);
          resolve(m as T);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.child.send({ ...command, id });
    });
  }

  /** Lets the process exit (it leaves when its IPC channel closes); kills it after 10 s. */
  async exit(stopCommand?: Command) {
    this.#expectedExit = true;
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    try {
      if (stopCommand) this.child.send(stopCommand);
      else this.child.disconnect();
    } catch {
      // The IPC channel is already gone.
    }
    const timer = setTimeout(() => this.kill(), 10_000);
    await exited;
    clearTimeout(timer);
  }

  kill() {
    this.#expectedExit = true;
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill('SIGKILL');
  }
}

/** What a simulator process last said about its storm. */
interface SimStatus {
  mode?: Mode | undefined;
  transport?: Transport | undefined;
  counts: DeviceCounts;
  firstError?: string | undefined;
  errorKinds?: ErrorKinds;
}

class SimProcess extends Child<DeviceCommand, DeviceMessage> {
  last: SimStatus | undefined = undefined;
  /** Fork → its modules loaded, ready for its command. */
  loadedMs: number | undefined = undefined;
  doneMs: number | undefined = undefined;
  #onLoaded: (() => void)[] = [];
  #onDone: (() => void)[] = [];
  #onStuck: (() => void)[] = [];

  constructor(index: number, options: Options, onFatal: (message: string) => void) {
    super(
      `simulator ${index + 1}/${options.simProcesses}`,
      'devices.js',
      [
        '--expose-gc',
        `--max-old-space-size=${options.childHeapMb}`,
        // A larger young generation: thousands of boards make short-lived garbage per frame, and
        // the default scavenges cost the simulator ~10% of its CPU per call (the same for echo clients).
        '--max-semi-space-size=64',
        // BENCH_CHILD_EXEC_ARGV: extra node flags for the simulators, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof".
        ...(process.env.BENCH_CHILD_EXEC_ARGV ?? '').split(' ').filter(Boolean),
      ],
      onFatal,
    );
  }

  onStuck(fn: () => void) {
    this.#onStuck.push(fn);
  }

  /** Resolves once its modules are loaded. */
  loaded(): Promise<void> {
    if (this.loadedMs !== undefined) return Promise.resolve();
    return new Promise((resolve) => this.#onLoaded.push(resolve));
  }

  /** Resolves once every one of its devices is connected from its side. */
  done(): Promise<void> {
    if (this.doneMs !== undefined) return Promise.resolve();
    return new Promise((resolve) => this.#onDone.push(resolve));
  }

  protected onMessage(message: DeviceMessage) {
    switch (message.type) {
      case 'loaded':
        this.loadedMs = now() - this.forkedAt;
        for (const fn of this.#onLoaded.splice(0)) fn();
        return;
      case 'progress':
        this.last = message;
        return;
      case 'storm-stuck':
        this.last = { ...this.last, ...message };
        for (const fn of this.#onStuck.splice(0)) fn();
        return;
      case 'storm-done':
        this.last = { ...this.last, counts: message.counts };
        this.doneMs = now() - this.forkedAt;
        for (const fn of this.#onDone.splice(0)) fn();
        return;
      default:
    }
  }

  mark() {
    return this.request<MarkMessage>({ cmd: 'mark' });
  }

  report(gc: boolean) {
    return this.request<ReportMessage>({ cmd: 'report', gc }, 60_000);
  }

  stop() {
    return this.exit({ cmd: 'stop' });
  }
}

type StormDone = Extract<ServerMessage, { type: 'storm-done' }>;

class ServerProcess extends Child<ServerCommand, ServerMessage> {
  progress: ServerProgress | undefined = undefined;
  stormDone: StormDone | undefined = undefined;
  #onDone: ((m: StormDone) => void)[] = [];

  constructor(label: string, onFatal: (message: string) => void) {
    super(
      `${label} server process`,
      'server.js',
      [
        '--expose-gc',
        '--max-old-space-size=8192',
        // BENCH_SERVER_EXEC_ARGV: extra node flags for the server process, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof".
        ...(process.env.BENCH_SERVER_EXEC_ARGV ?? '').split(' ').filter(Boolean),
      ],
      onFatal,
    );
  }

  onDone(fn: (m: StormDone) => void) {
    if (this.stormDone) fn(this.stormDone);
    else this.#onDone.push(fn);
  }

  protected onMessage(message: ServerMessage) {
    if (message.type === 'progress') this.progress = message.progress;
    else if (message.type === 'storm-done') {
      this.stormDone = message;
      for (const fn of this.#onDone.splice(0)) fn(message);
    }
  }

  async memory(settleMs: number): Promise<NodeJS.MemoryUsage> {
    const m = await this.request<Extract<ServerMessage, { type: 'memory' }>>({
      cmd: 'memory',
      settleMs,
    });
    return m.memory;
  }

  load(spec: LoadSpec): Promise<Extract<ServerMessage, { type: 'loaded' }>> {
    return this.request({ cmd: 'load', ...spec }, 600_000);
  }
}

const cpuOf = (cpu: NodeJS.CpuUsage) => cpu.user + cpu.system;

function sumCounts(all: (DeviceCounts | undefined)[]): DeviceCounts {
  const total = {} as DeviceCounts;
  for (const c of all) {
    if (c === undefined) continue;
    for (const [k, v] of Object.entries(c) as [keyof DeviceCounts, number][])
      total[k] = (total[k] ?? 0) + v;
  }
  return total;
}

function sumBoards(all: (BoardStats | undefined)[]): BoardStats | undefined {
  const present = all.filter((b): b is BoardStats => b !== undefined);
  if (present.length === 0) return undefined;
  const total = {} as BoardStats;
  for (const b of present)
    for (const [k, v] of Object.entries(b) as [keyof BoardStats, number][])
      total[k] = (total[k] ?? 0) + v;
  return total;
}

function simCounts(sims: SimProcess[]): string {
  const lasts = sims.map((s) => s.last);
  if (lasts.every((l) => l === undefined)) return 'simulators: not started yet';
  const c = sumCounts(lasts.map((l) => l?.counts));
  const first = lasts.find((l) => l?.firstError)?.firstError;
  const kinds = new Map<string, number>();
  for (const l of lasts)
    for (const [k, v] of Object.entries(l?.errorKinds ?? {})) kinds.set(k, (kinds.get(k) ?? 0) + v);
  const error = first
    ? ` · first error: ${first} · errors by kind: ${[...kinds].map(([k, v]) => `${v}× ${k}`).join('; ')}`
    : '';
  const mode = lasts.find((l) => l?.mode)?.mode;
  const transport = lasts.find((l) => l?.transport)?.transport;
  if (mode === 'boards' && transport === 'mqtt')
    return `simulators: created ${c.created} · idle ${c.idle} · mqtt connected ${c.mqttConnected} · ota failed ${c.otaFailed} · first connects failed ${c.sessionRetries} · failed ${c.failed} · dropped ${c.disconnected}${error}`;
  return mode === 'boards'
    ? `simulators: created ${c.created} · idle ${c.idle} · connecting ${c.connecting} · listening ${c.listening} · ota failed ${c.otaFailed} · session retries ${c.sessionRetries} · failed ${c.failed} · dropped ${c.disconnected}${error}`
    : `simulators: created ${c.created} · opened ${c.opened} · echoed ${c.echoed} · retries ${c.echoRetries} · failed ${c.failed} · dropped ${c.disconnected}${error}`;
}

// --- a phase ------------------------------------------------------------------------------------
/** What is running, so that a failure anywhere can stop it. */
interface State {
  server: ServerProcess | undefined;
  sims: SimProcess[];
  fatal: (message: string) => void;
}

/** A simulator process's event-loop delay in the storm and over the timed load. */
interface SimLoop {
  process: string;
  pid: number | undefined;
  storm: LoopDelay;
  load: LoopDelay;
}

interface PhaseResult {
  kind: ServerKind;
  transport: Transport;
  round: number;
  /** Command to the simulators → the server saw every device ready (xiaozhi) or every hello echoed (echo). */
  stormMs: number;
  /** Fork → the slowest simulator's modules loaded (before the storm's clock starts). */
  simStartupMs: number;
  otaChecksDoneMs?: number | undefined;
  /** Command → every device's session attached to the registry (its WebSocket, or its MQTT connection). */
  connectedDoneMs?: number | undefined;
  devicesPerSecond: number;
  serverLoop: { storm: LoopDelay; load: LoopDelay };
  /** CPU time per device over the storm: where the storm's time went, on a machine whose cores both sides share. */
  stormCpuPerDeviceUs: { server: number; simulators: number };
  simLoops: SimLoop[];
  listenOverflows: number;
  listenDrops: number;
  peakFds: { server: number; simulators: number[] };
  serverMemory: {
    before: NodeJS.MemoryUsage;
    after: NodeJS.MemoryUsage;
    perDevice: { heapUsedKiB: number; rssKiB: number; externalKiB: number };
  };
  simMemory: { heapUsed: number; rss: number; perDevice: { heapUsedKiB: number; rssKiB: number } };
  load: Summary & { serverCpuUs: number; serverCpuPerCallUs: number; simCpuPerCallUs: number };
  serial: Summary;
  /** WebSocket pings; none over MQTT, where only the client pings (the broker answers). */
  ping: Summary;
  counts: DeviceCounts;
  boardConsole?: BoardStats | undefined;
  /** Every retry and 408 of the storm, counted explicitly. */
  retries: {
    ota: number;
    session: number;
    echo: number;
    mqttConnect: number;
    ota408: number;
    session408: number;
  };
}

const LABEL: Record<Transport, Record<ServerKind, string>> = {
  websocket: { echo: 'ws echo', xiaozhi: 'xiaozhi' },
  mqtt: { echo: 'mqtt echo', xiaozhi: 'xiaozhi mqtt' },
};

/** A hello-sized first message for the echo clients: the WebSocket build's, or the MQTT build's (transport udp). */
function echoHello(transport: Transport): string {
  return JSON.stringify(
    transport === 'mqtt'
      ? buildDeviceHello({ transport: 'udp', version: 3 })
      : buildDeviceHello({ transport: 'websocket', version: 1 }),
  );
}

/** Fast boot, no artificial stagger; long idle/hello/HTTP/connect bounds so a slow storm is
 * measured, not failed; over MQTT a failed connect is retried after 1 s (firmware: 60 s). */
const BOARD_TIMING = {
  bootMs: 10,
  wifiConnectMs: 10,
  otaRetryMs: 1000,
  otaMaxRetries: 10,
  helloTimeoutMs: 120_000,
  httpTimeoutMs: 120_000,
  channelIdleMs: 3_600_000,
  mqttReconnectMs: 1000,
  mqttConnectTimeoutMs: 120_000,
};

/**
 * Resolves once the server process says the storm is done and every simulator says all its
 * devices are connected, printing progress every 2 s; rejects with a StormError after
 * timeoutMs, or as soon as a simulator says its share cannot complete.
 */
function storm(
  label: string,
  server: ServerProcess,
  sims: SimProcess[],
  startedAt: number,
  timeoutMs: number,
  describe: () => string,
): Promise<StormDone> {
  return new Promise((resolve, reject) => {
    let finished = false;
    const ticker = setInterval(
      () => log(`[${label} ${((now() - startedAt) / 1000).toFixed(1)}s] ${describe()}`),
      2000,
    );
    const finish = () => {
      finished = true;
      clearInterval(ticker);
      clearTimeout(timer);
    };
    const timer = setTimeout(() => {
      finish();
      reject(
        new StormError(
          `${label}: the connect storm did not complete within ${timeoutMs / 1000} s: ${describe()}`,
        ),
      );
    }, timeoutMs);
    for (const sim of sims)
      sim.onStuck(() => {
        if (finished) return;
        finish();
        reject(
          new StormError(
            `${label}: the connect storm cannot complete, every device of ${sim.name} is connected or has given up: ${describe()}`,
          ),
        );
      });
    const serverDone = new Promise<StormDone>((r) => server.onDone(r));
    Promise.all([serverDone, ...sims.map((s) => s.done())]).then(([done]) => {
      if (finished) return;
      finish();
      resolve(done);
    });
  });
}

async function phase(
  options: Options,
  state: State,
  kind: ServerKind,
  transport: Transport,
  round: number,
): Promise<PhaseResult> {
  const { devices: n, simProcesses: k } = options;
  const label = `${LABEL[transport][kind]} r${round}`;
  const server = new ServerProcess(label, state.fatal);
  state.server = server;
  const { url } = await server.request<Extract<ServerMessage, { type: 'started' }>>({
    cmd: 'start',
    kind,
    transport,
    n,
    auth: options.auth,
  });
  // A fresh process: no earlier phase's garbage to settle, only gc.
  const before = await server.memory(0);
  const listen0 = listenCounters();
  const sims = Array.from({ length: k }, (_, i) => new SimProcess(i, options, state.fatal));
  state.sims = sims;
  // The clock starts once every simulator has loaded its modules (the boards' are heavier than
  // the echo clients'), so the storm times the devices' work and the server's, not node's start-up.
  await Promise.all(sims.map((s) => s.loaded()));
  const startMarks = await Promise.all(sims.map((s) => s.mark()));
  const startedAt = now();
  const fds = new FdSampler([server.pid, ...sims.map((s) => s.pid)]);
  let offset = 0;
  sims.forEach((sim, index) => {
    const share = Math.floor(n / k) + (index < n % k ? 1 : 0);
    const common = { index, of: k, offset, n: share, batch: options.simBatch };
    offset += share;
    sim.send(
      kind === 'echo'
        ? {
            cmd: 'echo',
            transport,
            url,
            hello: echoHello(transport),
            retries: options.retries,
            ...common,
          }
        : {
            cmd: 'boards',
            transport,
            otaUrl: url,
            preset: options.preset,
            retries: options.retries,
            timing: BOARD_TIMING,
            ...common,
          },
    );
  });
  const describe = () => {
    const p = server.progress;
    const s = p
      ? kind === 'echo'
        ? `server: hellos echoed ${p.ready}/${n} · connections ${p.open}`
        : `server: ota checks ${p.otaChecks}/${n} · ${transport === 'mqtt' ? 'mqtt sessions' : 'ws connected'} ${p.connected} · open ${p.open} · ready ${p.ready}${p.withLastError ? ` · ${p.withLastError} with lastError, e.g. ${p.lastError}` : ''}`
      : 'server: no progress yet';
    return `${s} · fds ${fds.last[0]} | ${simCounts(sims)} · fds ${fds.last.slice(1).join('+')}`;
  };
  const done = await storm(label, server, sims, startedAt, options.stormTimeout * 1000, describe);
  const stormMarks = await Promise.all(sims.map((s) => s.mark()));
  await fds.stop();
  const listen1 = listenCounters();
  const stormMs = done.atMs - startedAt;
  const after = await server.memory(options.settleMs);
  const reports = await Promise.all(sims.map((s) => s.report(true)));
  log(
    `[${label}] ${n} ${kind === 'echo' ? 'connections' : 'devices ready'} in ${(stormMs / 1000).toFixed(2)} s; call load...`,
  );

  const spec = { tool: options.tool, concurrency: options.concurrency };
  await server.load({ what: 'calls', total: Math.min(options.warmup, options.calls), ...spec });
  const marks0 = await Promise.all(sims.map((s) => s.mark()));
  const loaded = await server.load({ what: 'calls', total: options.calls, ...spec });
  const marks1 = await Promise.all(sims.map((s) => s.mark()));
  const serial = await server.load({
    what: 'calls',
    total: options.serialCalls,
    ...spec,
    concurrency: 1,
  });
  const ping = await server.load({ what: 'pings', total: Math.min(options.pings, n), ...spec });
  // The server side closes first: the TIME_WAIT sockets then stay on its side, not on ephemeral
  // ports of the simulators, which the next phase's storm needs.
  await server.request({ cmd: 'stop' });
  await Promise.all(sims.map((s) => s.stop()));
  await server.exit();
  state.server = undefined;
  state.sims = [];

  const simCpu = marks1.reduce(
    (sum, m, i) => sum + cpuOf(m.cpu) - cpuOf((marks0[i] as MarkMessage).cpu),
    0,
  );
  const boards = sumBoards(reports.map((r) => r.boards));
  const counts = sumCounts(reports.map((r) => r.counts));
  const simHeap = reports.reduce((sum, r) => sum + r.memory.heapUsed, 0);
  const simRss = reports.reduce((sum, r) => sum + r.memory.rss, 0);
  const perDevice = (key: 'heapUsed' | 'rss' | 'external') => (after[key] - before[key]) / n / 1024;
  return {
    kind,
    transport,
    round,
    stormMs,
    simStartupMs: Math.max(...sims.map((s) => s.loadedMs ?? Number.NaN)),
    otaChecksDoneMs: done.otaDoneAtMs === undefined ? undefined : done.otaDoneAtMs - startedAt,
    connectedDoneMs: done.connectedAtMs === undefined ? undefined : done.connectedAtMs - startedAt,
    devicesPerSecond: n / (stormMs / 1000),
    serverLoop: { storm: done.loop, load: loaded.loop },
    stormCpuPerDeviceUs: {
      server: done.cpuUs / n,
      simulators:
        stormMarks.reduce(
          (sum, m, i) => sum + cpuOf(m.cpu) - cpuOf((startMarks[i] as MarkMessage).cpu),
          0,
        ) / n,
    },
    simLoops: sims.map((s, i) => ({
      process: s.name,
      pid: s.pid,
      storm: (stormMarks[i] as MarkMessage).loop,
      load: (marks1[i] as MarkMessage).loop,
    })),
    listenOverflows: listen1.overflows - listen0.overflows,
    listenDrops: listen1.drops - listen0.drops,
    peakFds: { server: fds.peak[0] ?? 0, simulators: fds.peak.slice(1) },
    serverMemory: {
      before,
      after,
      perDevice: {
        heapUsedKiB: perDevice('heapUsed'),
        rssKiB: perDevice('rss'),
        externalKiB: perDevice('external'),
      },
    },
    simMemory: {
      heapUsed: simHeap,
      rss: simRss,
      perDevice: { heapUsedKiB: simHeap / n / 1024, rssKiB: simRss / n / 1024 },
    },
    load: {
      ...loaded.summary,
      serverCpuUs: loaded.cpuUs,
      serverCpuPerCallUs: loaded.cpuUs / loaded.summary.count,
      simCpuPerCallUs: simCpu / loaded.summary.count,
    },
    serial: serial.summary,
    ping: ping.summary,
    counts,
    boardConsole: boards,
    retries: {
      ota: boards?.otaRetries ?? 0,
      session: kind === 'xiaozhi' ? counts.sessionRetries : 0,
      echo: counts.echoRetries,
      mqttConnect: boards?.mqttConnectFailures ?? 0,
      ota408: boards?.ota408 ?? 0,
      session408: boards?.session408 ?? 0,
    },
  };
}

// --- rounds, figures, verdict -------------------------------------------------------------------
interface Rounds {
  transport: Transport;
  xiaozhi: PhaseResult[];
  echo: PhaseResult[];
}

/** A row of the tables: its name, the figure of a phase, and for a count (no ratio) how rounds combine. */
type Metric = [
  name: string,
  value: (r: PhaseResult) => number | undefined,
  count?: 'total' | 'max',
];

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
    ['simulator CPU per call (µs)', (r) => r.load.simCpuPerCallUs],
    ['simulator heap per device (KiB)', (r) => r.simMemory.perDevice.heapUsedKiB],
    ['server CPU per device, storm (µs)', (r) => r.stormCpuPerDeviceUs.server],
    ['simulator CPU per device, storm (µs)', (r) => r.stormCpuPerDeviceUs.simulators],
    ['server loop p99, storm (ms)', (r) => r.serverLoop.storm.p99Ms],
    ['server loop p99, load (ms)', (r) => r.serverLoop.load.p99Ms],
    ['sim loop p99 max, storm (ms)', (r) => Math.max(...r.simLoops.map((s) => s.storm.p99Ms))],
    ['sim loop p99 max, load (ms)', (r) => Math.max(...r.simLoops.map((s) => s.load.p99Ms))],
    ['storm listen-queue overflows', (r) => r.listenOverflows, 'total'],
    ['storm peak open fds, server', (r) => r.peakFds.server, 'max'],
    ['storm peak open fds, per sim', (r) => Math.max(...r.peakFds.simulators), 'max'],
    ['OTA retries', (r) => r.retries.ota, 'total'],
    ['session / echo retries', (r) => r.retries.session + r.retries.echo, 'total'],
    ['HTTP 408 (OTA + upgrade)', (r) => r.retries.ota408 + r.retries.session408, 'total'],
  ];
}

const spreadText = (s: Spread) =>
  Number.isNaN(s.median) ? '' : s.values.length < 2 ? '' : `±${s.spreadPct.toFixed(0)}%`;

function ratioOf(a: number | undefined, b: number | undefined): number {
  if (a === undefined || b === undefined || Number.isNaN(a) || Number.isNaN(b) || b === 0)
    return Number.NaN;
  return a / b;
}

/** Medians of each side with their spread (± the largest distance from the median), and the ratio of the medians. */
function table(options: Options, r: Rounds): string[] {
  const [xt, et] = [LABEL[r.transport].xiaozhi, LABEL[r.transport].echo];
  const widths = [38, 12, 7, 12, 7, 9];
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (i === 0 ? c.padEnd(widths[i] ?? 0) : c.padStart(widths[i] ?? 0)))
      .join('')
      .trimEnd();
  const out = [line(['metric (median of rounds)', xt, '±', et, '±', 'ratio'])];
  for (const [name, value, count] of metrics(options, r.transport === 'websocket')) {
    const x = spreadOf(r.xiaozhi.map(value).map((v) => v ?? Number.NaN));
    const e = spreadOf(r.echo.map(value).map((v) => v ?? Number.NaN));
    if (count) {
      // Counts: the total over the rounds, or the largest of them.
      const combine = (s: Spread) =>
        String(count === 'max' ? Math.max(...s.values) : s.values.reduce((a, b) => a + b, 0));
      out.push(line([`${name} (${count})`, combine(x), '', combine(e), '', '']));
      continue;
    }
    const ratio = ratioOf(x.median, e.median);
    out.push(
      line([
        name,
        fmt(x.median),
        spreadText(x),
        fmt(e.median),
        spreadText(e),
        Number.isNaN(ratio) ? '—' : `${ratio.toFixed(2)}×`,
      ]),
    );
  }
  const x = r.xiaozhi;
  const med = (f: (p: PhaseResult) => number | undefined) =>
    fmt(spreadOf(x.map((p) => (f(p) ?? Number.NaN) / 1000)).median);
  out.push(
    '',
    `storm breakdown (${xt}, medians, from the command to the simulators, which took ${med((p) => p.simStartupMs)} s to load): all OTA checks ${med((p) => p.otaChecksDoneMs)} s · all ${r.transport === 'mqtt' ? 'MQTT' : 'WS'} sessions ${med((p) => p.connectedDoneMs)} s · all ready (initialize + 2× tools/list) ${med((p) => p.stormMs)} s`,
  );
  // Where the storm's time went: on a machine whose cores the server and the simulators share,
  // the storm lasts about as long as their CPU time together divided by the cores.
  const cpu = (phases: PhaseResult[], side: 'server' | 'simulators') =>
    spreadOf(phases.map((p) => p.stormCpuPerDeviceUs[side])).median;
  const times = (a: number, b: number) => `${ratioOf(a, b).toFixed(2)}×`;
  const share = (phases: PhaseResult[]) => {
    const server = cpu(phases, 'server');
    const sims = cpu(phases, 'simulators');
    return `${Math.round((100 * sims) / (server + sims))}%`;
  };
  out.push(
    `storm CPU per device: server ${fmt(cpu(x, 'server'))} µs (${times(cpu(x, 'server'), cpu(r.echo, 'server'))} the echo server's), simulators ${fmt(cpu(x, 'simulators'))} µs (${times(cpu(x, 'simulators'), cpu(r.echo, 'simulators'))} the echo clients'); the simulators did ${share(x)} of the storm's CPU (echo: ${share(r.echo)})`,
  );
  return out;
}

type Outcome = 'PASS' | 'MISS' | 'simulator-bound';

interface Target {
  transport: Transport;
  target: string;
  value: number;
  bound: number;
  outcome: Outcome;
  /** Why it is simulator-bound: the process and its p99. */
  why?: string | undefined;
}

/** The worst simulator event-loop p99 of `phases` in `window`, when it is over the bound. */
function simBound(
  options: Options,
  phases: PhaseResult[],
  windows: ('storm' | 'load')[],
): string | undefined {
  let worst: { p99: number; text: string } | undefined;
  for (const p of phases)
    for (const s of p.simLoops)
      for (const w of windows) {
        const p99 = s[w].p99Ms;
        if (p99 > options.simLoopBoundMs && p99 > (worst?.p99 ?? 0))
          worst = {
            p99,
            text: `${LABEL[p.transport][p.kind]} round ${p.round}, ${s.process} (pid ${s.pid}): event-loop p99 ${fmt(p99)} ms in the ${w === 'storm' ? 'storm' : 'timed load'} > ${options.simLoopBoundMs} ms`,
          };
      }
  return worst?.text;
}

/**
 * A figure timed on cores that both sides share measures the simulators as much as the server
 * when the cores were busy all along and the simulators used more of them than the server did:
 * then a wall-clock figure (the storm, a latency under load) is simulator-bound too, even if no
 * simulator's loop lagged. CPU per call, the server's own counter, is not judged by this.
 */
function simulatorsTookTheCores(
  options: Options,
  phases: PhaseResult[],
  windows: ('storm' | 'load')[],
): string | undefined {
  const cores = os.availableParallelism();
  let worst: { share: number; text: string } | undefined;
  for (const p of phases)
    for (const w of windows) {
      const n = w === 'storm' ? p.stormCpuPerDeviceUs : undefined;
      const wallUs = (w === 'storm' ? p.stormMs : p.load.elapsedMs) * 1000;
      const server = n ? n.server * options.devices : p.load.serverCpuUs;
      const sims = n ? n.simulators * options.devices : p.load.simCpuPerCallUs * p.load.count;
      const busy = (server + sims) / (cores * wallUs);
      const share = sims / (server + sims);
      if (busy >= SATURATED && share > 0.5 && share > (worst?.share ?? 0))
        worst = {
          share,
          text: `${LABEL[p.transport][p.kind]} round ${p.round}: in the ${w === 'storm' ? 'storm' : 'timed load'} the ${cores} cores were ${Math.round(100 * busy)}% busy and the simulators took ${Math.round(100 * share)}% of it`,
        };
    }
  return worst?.text;
}

/** Cores this busy (server and simulators together, over the figure's wall time) count as saturated. */
const SATURATED = 0.8;

function judge(
  options: Options,
  r: Rounds,
  target: string,
  value: number,
  bound: number,
  windows: ('storm' | 'load')[],
  phases: PhaseResult[] = [...r.xiaozhi, ...r.echo],
  wallClock = true,
): Target {
  const why =
    simBound(options, phases, windows) ??
    (wallClock ? simulatorsTookTheCores(options, phases, windows) : undefined);
  const outcome: Outcome = why ? 'simulator-bound' : value <= bound ? 'PASS' : 'MISS';
  return { transport: r.transport, target, value, bound, outcome, ...(why ? { why } : {}) };
}

const medianOf = (phases: PhaseResult[], f: (p: PhaseResult) => number) =>
  spreadOf(phases.map(f)).median;

/** The ratios the verdict rests on (and that runs must agree on), by name. Every ratio of every figure is in the tables and the JSON. */
function ratios(all: Rounds[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of all) {
    const t = r.transport === 'websocket' ? 'ws' : 'mqtt';
    const ratio = (f: (p: PhaseResult) => number) =>
      ratioOf(medianOf(r.xiaozhi, f), medianOf(r.echo, f));
    // The targets' ratios: storm and p90 over WebSocket, p50 over MQTT, server CPU per call on both.
    if (r.transport === 'websocket') {
      out[`${t} storm`] = ratio((p) => p.stormMs);
      out[`${t} call p90`] = ratio((p) => p.load.p90Ms);
    } else out[`${t} call p50`] = ratio((p) => p.load.p50Ms);
    out[`${t} server CPU/call`] = ratio((p) => p.load.serverCpuPerCallUs);
  }
  return out;
}

function verdict(options: Options, all: Rounds[]): Target[] {
  const targets: Target[] = [];
  const q = ratios(all);
  for (const r of all) {
    if (r.transport === 'websocket') {
      const retries = r.xiaozhi.reduce(
        (sum, p) =>
          sum + p.retries.ota + p.retries.session + p.retries.ota408 + p.retries.session408,
        0,
      );
      const noRetries = judge(
        options,
        r,
        'no retries and no HTTP 408s',
        retries,
        0,
        ['storm'],
        r.xiaozhi,
      );
      // None happened: that holds whatever the simulators' loops did.
      if (retries === 0) {
        noRetries.outcome = 'PASS';
        noRetries.why = undefined;
      }
      targets.push(
        noRetries,
        judge(options, r, 'storm ≤ 2× the echo storm', q['ws storm'] ?? Number.NaN, 2, ['storm']),
        judge(options, r, 'call p90 ≤ 1.5× echo', q['ws call p90'] ?? Number.NaN, 1.5, ['load']),
        judge(
          options,
          r,
          'server CPU/call ≤ 1.2× echo',
          q['ws server CPU/call'] ?? Number.NaN,
          1.2,
          ['load'],
          undefined,
          false,
        ),
        {
          transport: r.transport,
          target: 'server RSS per board ≤ 20 KiB',
          value: medianOf(r.xiaozhi, (p) => p.serverMemory.perDevice.rssKiB),
          bound: 20,
          outcome:
            medianOf(r.xiaozhi, (p) => p.serverMemory.perDevice.rssKiB) <= 20 ? 'PASS' : 'MISS',
        },
      );
    } else {
      targets.push(
        judge(options, r, 'call p50 ≤ 1.2× MQTT echo', q['mqtt call p50'] ?? Number.NaN, 1.2, [
          'load',
        ]),
        judge(
          options,
          r,
          'server CPU/call ≤ 1.2× MQTT echo',
          q['mqtt server CPU/call'] ?? Number.NaN,
          1.2,
          ['load'],
          undefined,
          false,
        ),
      );
    }
  }
  return targets;
}

function verdictBlock(options: Options, targets: Target[]): string[] {
  const out = [
    `verdict (${options.devices} boards, ${options.rounds} round${options.rounds === 1 ? '' : 's'}, ${options.simProcesses} simulator process${options.simProcesses === 1 ? '' : 'es'}; targets: 10,000 boards over WebSocket, 1,000 over MQTT):`,
  ];
  for (const t of targets) {
    const value = t.target.startsWith('no retries')
      ? `${t.value}`
      : t.target.includes('KiB')
        ? `${fmt(t.value)} KiB`
        : `${fmt(t.value)}×`;
    out.push(
      `  ${t.transport === 'websocket' ? 'WebSocket' : 'MQTT'.padEnd(9)} ${t.target.padEnd(34)} ${value.padStart(9)}  ${t.outcome}${t.why ? ` (${t.why})` : ''}`,
    );
  }
  return out;
}

function problems(r: Rounds): string[] {
  const found: string[] = [];
  for (const p of [...r.echo, ...r.xiaozhi]) {
    const at = `${LABEL[p.transport][p.kind]} r${p.round}`;
    if (p.load.errors) found.push(`${at}: call errors ${p.load.errors} (${p.load.firstError})`);
    if (p.ping.errors) found.push(`${at}: ping errors ${p.ping.errors} (${p.ping.firstError})`);
    if (p.counts.disconnected) found.push(`${at}: connections dropped ${p.counts.disconnected}`);
    const rt = p.retries;
    for (const [name, v] of [
      ['OTA retries', rt.ota],
      [p.transport === 'mqtt' ? 'first MQTT connects failed' : 'session retries', rt.session],
      ['echo connection retries', rt.echo],
      ['MQTT connect failures', rt.mqttConnect],
      ['OTA HTTP 408s', rt.ota408],
      ['upgrade HTTP 408s', rt.session408],
    ] as const)
      if (v) found.push(`${at}: ${name} ${v}`);
  }
  return found.length
    ? [`problems: ${found.join(' · ')}`]
    : ['problems: none (no call errors, retries, 408s or dropped connections)'];
}

// --- main -------------------------------------------------------------------------------------
async function main() {
  let options: Options;
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (error) {
    log(`bench: ${messageOf(error)}`);
    process.exit(1);
  }
  const state: State = { server: undefined, sims: [], fatal: () => {} };
  let exiting = false;
  const shutdown = async (reason: string | undefined, code: number) => {
    if (exiting) return;
    exiting = true;
    if (reason) log(`bench: FAILED: ${reason}`);
    for (const sim of state.sims) sim.kill();
    state.server?.kill();
    await sleep(50);
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

  const header = `xiaozhi-mcp server benchmark — ${options.devices} devices, ${options.calls} calls, concurrency ${options.concurrency}, ${options.rounds} round${options.rounds === 1 ? '' : 's'}${options.runs > 1 ? `, ${options.runs} runs` : ''}, ${options.simProcesses} simulator processes (node ${process.version}, ${os.availableParallelism()} cpus)`;
  log(
    `${header}\ntransports ${options.transports.join(', ')}, preset ${options.preset}, tool ${options.tool}, auth ${options.auth}, simulator batch ${options.simBatch}, simulator loop bound ${options.simLoopBoundMs} ms, open-file limit ${fdLimit()} per process`,
  );
  try {
    const runs: { rounds: Rounds[]; targets: Target[]; ratios: Record<string, number> }[] = [];
    for (let run = 1; run <= options.runs; run++) {
      const all: Rounds[] = [];
      for (const transport of options.transports) {
        const r: Rounds = { transport, xiaozhi: [], echo: [] };
        for (let round = 1; round <= options.rounds; round++) {
          if (options.runs > 1)
            log(`--- run ${run}/${options.runs}, ${transport} round ${round}/${options.rounds}`);
          r.echo.push(await phase(options, state, 'echo', transport, round));
          r.xiaozhi.push(await phase(options, state, 'xiaozhi', transport, round));
        }
        all.push(r);
      }
      const targets = verdict(options, all);
      const out = [options.runs > 1 ? `${header} — run ${run}/${options.runs}` : header];
      for (const r of all) {
        if (r.transport === 'mqtt')
          out.push(
            '',
            `over MQTT (${options.devices} boards on the embedded broker; baseline: mqtt.js clients on a bare aedes broker)`,
          );
        out.push(...table(options, r), ...problems(r));
      }
      out.push('', ...verdictBlock(options, targets));
      console.log(`${out.join('\n')}\n`);
      runs.push({ rounds: all, targets, ratios: ratios(all) });
    }
    const agree = options.runs > 1 ? agreement(runs.map((r) => r.ratios)) : undefined;
    if (agree) console.log(agreementTable(agree).join('\n'));
    const result = {
      at: new Date().toISOString(),
      node: process.version,
      cpus: os.availableParallelism(),
      totalMemoryGiB: os.totalmem() / 2 ** 30,
      options,
      runs: runs.map((r) => ({
        transports: Object.fromEntries(r.rounds.map((x) => [x.transport, x])),
        verdict: { targets: r.targets, ratios: r.ratios },
      })),
      agreement: agree,
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

await main();
