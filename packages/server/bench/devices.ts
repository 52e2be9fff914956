// A simulator process of the benchmark: bench/run.ts forks K of them (`--sim-processes`), each
// given its share of the boards (distinct MACs: board numbers offset … offset + n - 1). It is
// told what to do over IPC:
//
//   { cmd: 'boards', transport, otaUrl, offset, n, batch, preset, timing, retries }  power on its
//       n VirtualBoards against the server's OTA URL, `batch` at a time, yielding to the event
//       loop between batches so that the boards already started are served. On WebSocket, each
//       one that reaches `idle` after its OTA check is clicked (BOOT), which opens its WebSocket
//       session; a session that fails to open is clicked again up to `retries` times, 1 s ×
//       attempt later. On MQTT (the server's OTA reply gives the boards MQTT), nothing is
//       clicked: each board connects to the broker right after its OTA check and stays
//       connected, and reconnects by itself (`timing.mqttReconnectMs`) after a failed connect
//       or a drop, as the firmware does.
//   { cmd: 'echo', transport, url, offset, n, batch, hello, retries }  the raw baseline: n plain
//       `ws` (or mqtt.js) clients, opened `batch` at a time as the boards are; each sends one
//       hello-sized text once connected, waits for its echo, then echoes every later frame back.
//       An MQTT client publishes on `device-server/<mac_>` and is sent to on
//       `devices/p2p/<mac_>`, to which the broker subscribes it, as boards are.
//   { cmd: 'mark', id }  ends this process's event-loop window (monitorEventLoopDelay) and
//       starts the next; answered with the window's delay and the CPU time so far. The first
//       window runs from the command to the mark; run.ts marks at the end of the storm, before
//       the timed load and after it.
//   { cmd: 'report', id, gc }  memory (after gc unless gc is false), CPU time, counters, error
//       kinds and what the boards' consoles say (OTA retries, HTTP 408s).
//   { cmd: 'stop' }  closes everything and exits.
//
// It sends { type: 'progress' } every 250 ms (when its event loop lets it), { type: 'storm-done' }
// once every one of its devices is connected from its side, and { type: 'storm-stuck' } when
// every one is either connected or has given up. It exits on its own if the parent goes away.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { VirtualBoard } from '@xiaozhi-mcp/device';
import { type MqttClient, connect as mqttConnect } from 'mqtt';
import WebSocket from 'ws';
import type {
  BoardStats,
  DeviceCommand,
  DeviceCounts,
  DeviceMessage,
  LoopDelay,
  Mode,
  SimShare,
  Transport,
} from './messages.js';
import { ECHO_CLIENT_PREFIX } from './mqtt-echo.js';

const startedAt = performance.now();
/** This process's event-loop delay since the command, or since the last mark. */
const LOOP_RESOLUTION_MS = 10;
const loopDelay = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
const counts: DeviceCounts = {
  created: 0,
  // boards
  idle: 0,
  otaFailed: 0,
  connecting: 0,
  listening: 0,
  sessionRetries: 0,
  failed: 0,
  disconnected: 0,
  // echo
  opened: 0,
  echoed: 0,
  echoRetries: 0,
  framesEchoed: 0,
  // boards over MQTT
  mqttConnected: 0,
};
const boards: VirtualBoard[] = [];
const sockets: WebSocket[] = [];
const mqttClients: MqttClient[] = [];
let mode: Mode | undefined;
let transport: Transport | undefined;
let n = 0;
let offset = 0;
let batch = 1;
let progressTimer: NodeJS.Timeout | undefined;
let doneSent = false;
let stuckSent = false;
let firstError: string | undefined;
/** Failure reasons with addresses and numbers blanked, and how often each happened. */
const errorKinds = new Map<string, number>();
/** A failed session or connection is retried after this many ms times the attempt number. */
const RETRY_BACKOFF_MS = 1000;

function send(message: DeviceMessage) {
  if (process.connected) process.send?.(message);
}

function noteError(error: unknown) {
  const message = error instanceof Error ? error.message : String(error);
  firstError ??= message;
  const kind = message
    .replace(/^board [0-9a-f:]+: /, '')
    .replace(/\d+\.\d+\.\d+\.\d+(:\d+)?/g, 'ADDR')
    .replace(/\(\d+\)/g, '(…)')
    .replace(/\d+/g, 'N');
  errorKinds.set(kind, (errorKinds.get(kind) ?? 0) + 1);
}

function topErrors() {
  return Object.fromEntries([...errorKinds].sort((a, b) => b[1] - a[1]).slice(0, 5));
}

function progress() {
  send({
    type: 'progress',
    mode,
    transport,
    counts: { ...counts },
    firstError,
    errorKinds: topErrors(),
    uptimeMs: performance.now() - startedAt,
  });
  const connected =
    mode === 'echo'
      ? counts.echoed
      : transport === 'mqtt'
        ? counts.mqttConnected
        : counts.listening;
  if (connected >= n && counts.created >= n && !doneSent) {
    doneSent = true;
    send({
      type: 'storm-done',
      mode,
      counts: { ...counts },
      elapsedMs: performance.now() - startedAt,
    });
  }
  // Every device is either connected or has given up: the storm can no longer complete.
  const givenUp = counts.failed + counts.otaFailed;
  if (givenUp > 0 && connected + givenUp >= n && !stuckSent) {
    stuckSent = true;
    send({ type: 'storm-stuck', mode, counts: { ...counts }, firstError, errorKinds: topErrors() });
  }
}

function macOf(i: number): string {
  // Espressif OUI, then the index: unique and stable for up to 16.7 M boards.
  return ['f4', '12', 'fa', (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff]
    .map((b) => (typeof b === 'string' ? b : b.toString(16).padStart(2, '0')))
    .join(':');
}

/**
 * Calls start(i) for each of this process's n devices, `batch` at a time. Between batches it
 * yields to a timer (not setImmediate): the timers and I/O of the devices already started run
 * first, so a busy loop slows the creation down instead of the devices falling into lockstep.
 */
async function inBatches(start: (i: number) => void) {
  for (let i = 0; i < n; i++) {
    if (i > 0 && i % batch === 0) await sleep(0);
    start(offset + i);
  }
}

function runBoards({ otaUrl, preset, timing, retries }: Extract<DeviceCommand, { cmd: 'boards' }>) {
  if (transport === 'mqtt') return runMqttBoards(otaUrl, preset, timing);
  return inBatches((i) => {
    const board = new VirtualBoard({
      preset,
      mac: macOf(i),
      wifi: { ssid: 'bench', password: 'bench' },
      otaUrl,
      timing,
    });
    let attempts = 0;
    board.on('state', (state, previous) => {
      if (state === 'idle' && previous === 'activating') {
        // Boot done: the OTA check succeeded (or gave up). Press BOOT to open the session.
        if (board.lastOta === undefined) {
          counts.otaFailed++;
          noteError(`board ${board.mac}: OTA check failed: ${lastError(board)}`);
          return;
        }
        counts.idle++;
        attempts = 1;
        board.click();
      } else if (state === 'connecting') {
        counts.connecting++;
      } else if (state === 'listening' && previous === 'connecting') {
        counts.connecting--;
        counts.listening++;
      } else if (state === 'idle' && previous === 'connecting') {
        // The session failed to open (connect refused, timeout, no server hello).
        counts.connecting--;
        noteError(`board ${board.mac}: session failed: ${lastError(board)}`);
        if (attempts <= retries) {
          counts.sessionRetries++;
          setTimeout(() => board.click(), RETRY_BACKOFF_MS * attempts++);
        } else counts.failed++;
      } else if (state === 'idle' && (previous === 'listening' || previous === 'speaking')) {
        counts.listening--;
        counts.disconnected++;
        noteError(`board ${board.mac}: session dropped: ${lastError(board)}`);
      } else if (state === 'fatal_error') {
        counts.failed++;
        noteError(`board ${board.mac}: fatal error: ${lastError(board)}`);
      }
    });
    board.on('panic', (panic) => {
      counts.failed++;
      noteError(`board ${board.mac}: panic: ${panic.message}`);
    });
    boards.push(board);
    counts.created++;
    board.powerOn();
  });
}

/**
 * Boards the server's OTA reply gives MQTT: none is clicked (a click would open a UDP audio
 * session). Each connects after its OTA check and stays connected; the server then initialises
 * it and walks its tool lists over MQTT.
 */
function runMqttBoards(
  otaUrl: string,
  preset: string,
  timing: Extract<DeviceCommand, { cmd: 'boards' }>['timing'],
) {
  return inBatches((i) => {
    const board = new VirtualBoard({
      preset,
      mac: macOf(i),
      wifi: { ssid: 'bench', password: 'bench' },
      otaUrl,
      timing,
    });
    let connectedOnce = false;
    board.on('state', (state, previous) => {
      if (state === 'idle' && previous === 'activating') {
        if (board.lastOta === undefined) {
          counts.otaFailed++;
          noteError(`board ${board.mac}: OTA check failed: ${lastError(board)}`);
          return;
        }
        counts.idle++;
        if (board.transport !== 'mqtt') {
          counts.failed++;
          noteError(
            `board ${board.mac}: the OTA reply gave it ${board.transport ?? 'no transport'}, not mqtt`,
          );
        } else if (!board.mqttConnected && !connectedOnce) {
          // The first connect failed; the board retries by itself after mqttReconnectMs.
          counts.sessionRetries++;
          noteError(`board ${board.mac}: MQTT connect failed: ${lastError(board)}`);
        }
      } else if (state === 'fatal_error') {
        counts.failed++;
        noteError(`board ${board.mac}: fatal error: ${lastError(board)}`);
      }
    });
    board.on('mqtt', (connected) => {
      if (connected) {
        connectedOnce = true;
        counts.mqttConnected++;
      } else {
        counts.mqttConnected--;
        counts.disconnected++;
        noteError(`board ${board.mac}: MQTT dropped: ${lastError(board)}`);
      }
    });
    board.on('panic', (panic) => {
      counts.failed++;
      noteError(`board ${board.mac}: panic: ${panic.message}`);
    });
    boards.push(board);
    counts.created++;
    board.powerOn();
  });
}

function lastError(board: VirtualBoard): string {
  const history = board.console.history;
  for (let i = history.length - 1; i >= 0; i--) {
    const line = history[i];
    if (line?.level === 'E') return line.text;
  }
  return 'no error line';
}

function runEcho(command: Extract<DeviceCommand, { cmd: 'echo' }>) {
  return command.transport === 'mqtt' ? runMqttEcho(command) : runWsEcho(command);
}

function runWsEcho({ url, hello, retries }: Extract<DeviceCommand, { cmd: 'echo' }>) {
  const open = (attempt: number) => {
    const ws = new WebSocket(url, { perMessageDeflate: false, handshakeTimeout: 60_000 });
    let echoed = false;
    let retried = false;
    const retry = (reason: string) => {
      if (echoed || retried) return;
      retried = true;
      noteError(reason);
      ws.terminate();
      if (attempt < retries) {
        counts.echoRetries++;
        setTimeout(() => open(attempt + 1), RETRY_BACKOFF_MS * (attempt + 1));
      } else counts.failed++;
    };
    ws.on('open', () => {
      counts.opened++;
      ws.send(hello);
    });
    ws.on('message', (data, isBinary) => {
      if (!echoed) {
        echoed = true;
        counts.echoed++;
        sockets.push(ws);
        return;
      }
      counts.framesEchoed++;
      ws.send(data, { binary: isBinary });
    });
    ws.on('error', (error) => retry(`echo socket error: ${error.message}`));
    ws.on('close', () => {
      if (echoed) {
        counts.disconnected++;
      } else retry('echo socket closed before its echo');
    });
  };
  return inBatches(() => {
    counts.created++;
    open(0);
  });
}

/**
 * The raw MQTT baseline: n mqtt.js clients with the options a virtual board's MqttChannel uses
 * (MQTT 3.1.1, clean session, keepalive 240 s, no reconnect of mqtt.js's own). Each publishes a
 * hello-sized text once connected and, once it is delivered back, publishes every later message
 * it gets back unchanged (QoS 0, as boards publish).
 */
function runMqttEcho({ url, hello, retries }: Extract<DeviceCommand, { cmd: 'echo' }>) {
  const open = (i: number, attempt: number) => {
    const mac = macOf(i).replaceAll(':', '_');
    const publishTopic = `device-server/${mac}`;
    const client = mqttConnect(url, {
      protocolVersion: 4,
      clean: true,
      clientId: `${ECHO_CLIENT_PREFIX}${mac}`,
      keepalive: 240,
      reconnectPeriod: 0,
      connectTimeout: 120_000,
      resubscribe: false,
    });
    let echoed = false;
    let retried = false;
    const retry = (reason: string) => {
      if (echoed || retried) return;
      retried = true;
      noteError(reason);
      client.end(true);
      if (attempt < retries) {
        counts.echoRetries++;
        setTimeout(() => open(i, attempt + 1), RETRY_BACKOFF_MS * (attempt + 1));
      } else counts.failed++;
    };
    client.on('connect', () => {
      counts.opened++;
      client.publish(publishTopic, hello, { qos: 0 });
    });
    client.on('message', (_topic, payload) => {
      if (!echoed) {
        echoed = true;
        counts.echoed++;
        mqttClients.push(client);
        return;
      }
      counts.framesEchoed++;
      client.publish(publishTopic, payload, { qos: 0 });
    });
    client.on('error', (error) => retry(`echo MQTT error: ${error.message}`));
    client.on('close', () => {
      if (echoed) {
        if (!client.disconnecting) counts.disconnected++;
      } else retry('echo MQTT connection closed before its echo');
    });
  };
  return inBatches((i) => {
    counts.created++;
    open(i, 0);
  });
}

function boardStats(): BoardStats {
  let lines = 0;
  let errors = 0;
  let otaRetries = 0;
  let ota408 = 0;
  let session408 = 0;
  let mqttConnectFailures = 0;
  for (const board of boards) {
    const h = board.console.history;
    lines += h.length;
    for (const line of h) {
      if (line.level === 'E') {
        errors++;
        // `Ota: Failed to check version, status code: 408`; `… upgrade refused with HTTP 408`.
        if (/\b408\b/.test(line.text)) {
          if (line.tag === 'Ota') ota408++;
          else session408++;
        }
      }
      if (line.tag === 'Application' && line.text.includes('Check new version failed'))
        otaRetries++;
      if (line.tag === 'MQTT' && line.text.startsWith('Failed to connect to endpoint'))
        mqttConnectFailures++;
    }
  }
  return {
    consoleLines: lines,
    consoleErrorLines: errors,
    otaRetries,
    ota408,
    session408,
    mqttConnectFailures,
  };
}

async function report(id: number, gc: boolean) {
  for (let i = 0; gc && i < 3; i++) {
    globalThis.gc?.();
    await sleep(20);
  }
  const memory = process.memoryUsage();
  send({
    type: 'report',
    id,
    mode,
    n,
    counts: { ...counts },
    memory,
    cpu: process.cpuUsage(),
    boards: mode === 'boards' ? boardStats() : undefined,
    firstError,
    errorKinds: topErrors(),
  });
}

/** BENCH_DEBUG_LAG=MS: every stall of this process's loop over MS, when it came and how far the storm was. */
function logLags(overMs: number) {
  let last = performance.now();
  setInterval(() => {
    const t = performance.now();
    if (t - last > overMs)
      process.stderr.write(
        `[simulator pid ${process.pid}] loop stalled ${(t - last).toFixed(0)} ms at ${(t - startedAt).toFixed(0)} ms: created ${counts.created} · idle ${counts.idle} · listening ${counts.listening} · mqtt ${counts.mqttConnected} · echoed ${counts.echoed}\n`,
      );
    last = t;
  }, 5).unref();
}

function mark(id: number) {
  // The histogram holds the time between the monitor's timer runs: the delay is what exceeds its period.
  const delay = (ns: number) => Math.max(0, ns / 1e6 - LOOP_RESOLUTION_MS);
  const loop: LoopDelay = {
    p50Ms: delay(loopDelay.percentile(50)),
    p99Ms: delay(loopDelay.percentile(99)),
    maxMs: delay(loopDelay.max),
  };
  loopDelay.reset();
  send({ type: 'mark', id, loop, cpu: process.cpuUsage() });
}

function stop() {
  clearInterval(progressTimer);
  for (const board of boards) board.powerOff();
  for (const ws of sockets) ws.terminate();
  for (const client of mqttClients) client.end(true);
  // Let the terminations flush, then leave.
  setTimeout(() => process.exit(0), 50).unref();
}

process.on('message', (received) => {
  const message = received as DeviceCommand;
  switch (message.cmd) {
    case 'boards':
    case 'echo':
      mode = message.cmd;
      transport = message.transport;
      ({ n, offset, batch } = message satisfies SimShare);
      batch = Math.max(1, batch);
      send({ type: 'started', mode, uptimeMs: performance.now() - startedAt });
      progressTimer = setInterval(progress, 250);
      loopDelay.enable();
      if (process.env.BENCH_DEBUG_LAG) logLags(Number(process.env.BENCH_DEBUG_LAG) || 40);
      (message.cmd === 'boards' ? runBoards(message) : runEcho(message)).catch((error) =>
        send({ type: 'fatal', message: `starting devices: ${error?.stack ?? error}` }),
      );
      return;
    case 'mark':
      mark(message.id);
      return;
    case 'report':
      report(message.id, message.gc !== false).catch((error) =>
        send({ type: 'fatal', message: `report failed: ${error.message}` }),
      );
      return;
    case 'stop':
      stop();
      return;
    default:
      send({
        type: 'fatal',
        message: `unknown command ${JSON.stringify((message as { cmd?: unknown }).cmd)}`,
      });
  }
});

send({ type: 'loaded', uptimeMs: performance.now() - startedAt });
// The parent went away (crash, Ctrl-C): never outlive it.
process.on('disconnect', () => process.exit(1));
process.on('uncaughtException', (error) => {
  send({ type: 'fatal', message: `device process: ${error.stack ?? error.message}` });
  process.exit(1);
});
process.on('unhandledRejection', (error) => {
  send({
    type: 'fatal',
    message: `device process: unhandled rejection: ${(error as { stack?: string } | undefined)?.stack ?? String(error)}`,
  });
  process.exit(1);
});
