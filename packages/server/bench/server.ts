// The server side of the benchmark, run by bench/run.ts as a fresh process for each phase of
// each round, so that its CPU and memory figures are its own and nothing is left from an earlier
// phase. It is told what to do over IPC (ServerCommand in messages.ts):
//
//   start   the echo baseline (a raw `ws` echo server, or a bare aedes broker) or a
//           XiaozhiServer, on 127.0.0.1, port 0; counts hellos echoed / devices ready and says
//           `storm-done` with the moment the last one came.
//   memory  waits settleMs, runs gc() three times, answers memoryUsage().
//   load    runs calls (`registry.callTool` against the boards, or the same `tools/call`
//           envelope down an echo connection) with C in flight, or pings one at a time; answers
//           the latencies and this process's CPU time over the load, load driver included
//           (the same code for both sides).
//   stop    the server side closes every connection first, so TIME_WAIT stays on its side.
//
// It exits on its own if the parent goes away.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { percentile } from '@xiaozhi-mcp/protocol';
import type { XiaozhiServer } from '@xiaozhi-mcp/server';
import { EchoServer } from './echo.js';
import type {
  LoadSpec,
  LoopDelay,
  ServerCommand,
  ServerMessage,
  ServerProgress,
  ServerStart,
  Summary,
} from './messages.js';
import { MqttEchoBroker } from './mqtt-echo.js';

/** The moment now, comparable across processes (ms since the epoch, sub-ms resolution). */
const now = () => performance.timeOrigin + performance.now();
const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error));

function send(message: ServerMessage) {
  if (process.connected) process.send?.(message);
}

const LOOP_RESOLUTION_MS = 10;

/** The histogram holds the time between the monitor's timer runs: the delay is what exceeds its period. */
function loopOf(h: ReturnType<typeof monitorEventLoopDelay>): LoopDelay {
  const delay = (ns: number) => Math.max(0, ns / 1e6 - LOOP_RESOLUTION_MS);
  return { p50Ms: delay(h.percentile(50)), p99Ms: delay(h.percentile(99)), maxMs: delay(h.max) };
}

/** What a load runs against: one call, and (WebSocket only) one ping, over device i. */
interface Target {
  readonly url: string;
  progress(): ServerProgress;
  call(i: number, tool: string, args: Record<string, unknown>): Promise<void>;
  ping: ((i: number) => Promise<number>) | undefined;
  stop(): Promise<void>;
}

let target: Target | undefined;
let progressTimer: NodeJS.Timeout | undefined;
const stormLoop = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
/** CPU counters at the last memory sample: the one before the storm starts the storm's CPU time. */
let cpuMark = process.cpuUsage();

function stormDone(
  otaDoneAtMs: number | undefined = undefined,
  connectedAtMs: number | undefined = undefined,
) {
  const atMs = now();
  stormLoop.disable();
  clearInterval(progressTimer);
  if (target !== undefined) send({ type: 'progress', progress: target.progress() });
  const used = process.cpuUsage(cpuMark);
  send({
    type: 'storm-done',
    atMs,
    otaDoneAtMs,
    connectedAtMs,
    loop: loopOf(stormLoop),
    cpuUs: used.user + used.system,
  });
}

async function startEcho({ transport, n }: ServerStart): Promise<Target> {
  const onHello = (count: number) => {
    if (count === n) stormDone();
  };
  const echo =
    transport === 'mqtt' ? await MqttEchoBroker.start(onHello) : await EchoServer.start(onHello);
  return {
    url: echo.url,
    progress: () => ({
      ready: echo.hellos,
      otaChecks: 0,
      connected: echo.connections,
      open: echo.connections,
      withLastError: 0,
      lastError: undefined,
    }),
    call: (i, tool, args) => echo.roundTrip(i, tool, args),
    ping: echo instanceof EchoServer ? (i) => echo.ping(i) : undefined,
    stop: () => echo.stop(),
  };
}

async function startXiaozhi({ transport, n, auth }: ServerStart): Promise<Target> {
  const { XiaozhiServer } = await import('@xiaozhi-mcp/server');
  const server: XiaozhiServer = await XiaozhiServer.start({
    port: 0,
    host: '127.0.0.1',
    logLevel: 'silent',
    auth,
    pingIntervalMs: 0,
    // Generous bounds: the benchmark measures how long the storm takes, not who gives up first.
    helloTimeoutMs: 120_000,
    callTimeoutMs: 60_000,
    // Over MQTT: the OTA reply offers every board the embedded broker, on a port the OS chooses.
    ...(transport === 'mqtt' ? { transport: 'mqtt' as const, mqttPort: 0, udpPort: 0 } : {}),
  });
  const otaChecked = new Set<string>();
  const connected = new Set<string>();
  const ready = new Set<string>();
  const readyOrder: string[] = [];
  let otaDoneAtMs: number | undefined;
  let connectedAtMs: number | undefined;
  server.registry.on('ota-check', (check) => {
    otaChecked.add(check.deviceId);
    if (otaChecked.size === n) otaDoneAtMs ??= now();
  });
  server.registry.on('connected', (record) => {
    connected.add(record.deviceId);
    if (connected.size === n) connectedAtMs ??= now();
  });
  server.registry.on('ready', (record) => {
    if (ready.has(record.deviceId)) return;
    ready.add(record.deviceId);
    readyOrder.push(record.deviceId);
    if (ready.size === n) stormDone(otaDoneAtMs, connectedAtMs);
  });
  const deviceAt = (i: number) => readyOrder[i % readyOrder.length] as string;
  return {
    url: server.urls.ota,
    progress: () => {
      const errors = server.registry.list().filter((r) => r.lastError !== undefined);
      return {
        ready: ready.size,
        otaChecks: otaChecked.size,
        connected: connected.size,
        open: transport === 'mqtt' ? server.mqttClients : server.connections,
        withLastError: errors.length,
        lastError: errors[0]?.lastError,
      };
    },
    // The call's own promise and one shared check, as the echo side returns its round trip's
    // promise: no extra async function per call on one side only.
    call: (i, tool, args) => server.registry.callTool(deviceAt(i), tool, args).then(checkResult),
    // A session on MQTT has no ping: MQTT pings go from the client to the broker.
    ping: transport === 'mqtt' ? undefined : (i) => server.registry.session(deviceAt(i)).ping(),
    stop: () => server.stop(),
  };
}

function checkResult(result: { isError?: boolean; content: unknown }): void {
  if (result.isError) throw new Error(`a call answered isError: ${JSON.stringify(result.content)}`);
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

/** Runs the load; latency of each call from this side, CPU time of this process over it. */
async function load(t: Target, spec: LoadSpec) {
  const args = spec.tool === 'self.audio_speaker.set_volume' ? { volume: 50 } : {};
  const ping = t.ping;
  const total = spec.what === 'pings' ? (ping ? spec.total : 0) : spec.total;
  const concurrency = spec.what === 'pings' ? 1 : Math.max(1, spec.concurrency);
  const latencies = new Float64Array(total);
  let next = 0;
  let errors = 0;
  let firstError: string | undefined;
  const worker = async () => {
    for (let i = next++; i < total; i = next++) {
      const started = performance.now();
      try {
        if (spec.what === 'pings') latencies[i] = await (ping as (i: number) => Promise<number>)(i);
        else {
          await t.call(i, spec.tool, args);
          latencies[i] = performance.now() - started;
        }
      } catch (error) {
        errors++;
        firstError ??= messageOf(error);
        latencies[i] = performance.now() - started;
      }
    }
  };
  const loop = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
  loop.enable();
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(Array.from({ length: Math.min(concurrency, Math.max(total, 1)) }, worker));
  const elapsedMs = performance.now() - started;
  const used = process.cpuUsage(cpu);
  loop.disable();
  return {
    summary: summarize(latencies, elapsedMs, errors, firstError),
    cpuUs: used.user + used.system,
    loop: loopOf(loop),
  };
}

async function handle(command: ServerCommand) {
  switch (command.cmd) {
    case 'start': {
      stormLoop.enable();
      target = command.kind === 'echo' ? await startEcho(command) : await startXiaozhi(command);
      const t = target;
      progressTimer = setInterval(() => send({ type: 'progress', progress: t.progress() }), 250);
      send({ type: 'started', id: command.id, url: t.url });
      return;
    }
    case 'memory': {
      await sleep(command.settleMs);
      for (let i = 0; i < 3; i++) {
        globalThis.gc?.();
        await sleep(20);
      }
      send({ type: 'memory', id: command.id, memory: process.memoryUsage() });
      cpuMark = process.cpuUsage();
      return;
    }
    case 'load': {
      if (target === undefined) throw new Error('load before start');
      send({ type: 'loaded', id: command.id, ...(await load(target, command)) });
      return;
    }
    case 'stop': {
      clearInterval(progressTimer);
      await target?.stop();
      target = undefined;
      send({ type: 'stopped', id: command.id });
      return;
    }
  }
}

if (process.send !== undefined) {
  process.on('message', (received) => {
    const command = received as ServerCommand;
    handle(command).catch((error) =>
      send({ type: 'error', id: command.id, message: error?.stack ?? messageOf(error) }),
    );
  });
  // The parent went away (crash, Ctrl-C): never outlive it.
  process.on('disconnect', () => process.exit(1));
  process.on('uncaughtException', (error) => {
    send({ type: 'fatal', message: `server process: ${error.stack ?? error.message}` });
    process.exit(1);
  });
  process.on('unhandledRejection', (error) => {
    send({
      type: 'fatal',
      message: `server process: unhandled rejection: ${(error as { stack?: string } | undefined)?.stack ?? String(error)}`,
    });
    process.exit(1);
  });
}
