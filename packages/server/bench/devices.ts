// The device side of the benchmark, run by bench/run.ts as a separate process
// (child_process.fork). It is told what to do over IPC:
//
//   { cmd: 'boards', transport, otaUrl, n, preset, timing, retries }  power on n VirtualBoards at
//       once against the server's OTA URL. On WebSocket, each one that reaches `idle` after its
//       OTA check is clicked (BOOT), which opens its WebSocket session; a session that fails to
//       open is clicked again up to `retries` times, 1 s × attempt later. On MQTT (the server's
//       OTA reply gives the boards MQTT), nothing is clicked: each board connects to the broker
//       right after its OTA check and stays connected, and reconnects by itself
//       (`timing.mqttReconnectMs`) after a failed connect or a drop, as the firmware does.
//   { cmd: 'echo', transport, url, n, hello, retries }  the raw baseline: n plain `ws` (or mqtt.js)
//       clients, each sends one hello-sized text once connected, waits for its echo, then echoes
//       every later frame back. An MQTT client publishes on `device-server/<mac_>` and is sent
//       to on `devices/p2p/<mac_>`, to which the broker subscribes it, as boards are.
//   { cmd: 'report', id, gc }  memory (after gc unless gc is false), CPU time, counters, error kinds
//       and this process's event-loop delay during the storm; answered with type 'report'.
//   { cmd: 'stop' }  closes everything and exits.
//
// It sends { type: 'progress' } every 250 ms (when its event loop lets it), { type: 'storm-done' }
// once every device is connected from its side, and { type: 'storm-stuck' } when every device is
// either connected or has given up. It exits on its own if the parent goes away.
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
  Transport,
} from './messages.js';
import { ECHO_CLIENT_PREFIX } from './mqtt-echo.js';

const startedAt = performance.now();
/** This process's event-loop delay from the command to the end of its storm. */
const loopDelay = monitorEventLoopDelay({ resolution: 10 });
let stormLoopDelay: LoopDelay | undefined;
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
  if (connected >= n && !doneSent) {
    doneSent = true;
    loopDelay.disable();
    stormLoopDelay = { p99Ms: loopDelay.percentile(99) / 1e6, maxMs: loopDelay.max / 1e6 };
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

function runBoards({ otaUrl, preset, timing, retries }: Extract<DeviceCommand, { cmd: 'boards' }>) {
  if (transport === 'mqtt') {
    runMqttBoards(otaUrl, preset, timing);
    return;
  }
  for (let i = 0; i < n; i++) {
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
  }
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
  for (let i = 0; i < n; i++) {
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
  }
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
  if (command.transport === 'mqtt') runMqttEcho(command);
  else runWsEcho(command);
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
  for (let i = 0; i < n; i++) {
    counts.created++;
    open(0);
  }
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
  for (let i = 0; i < n; i++) {
    counts.created++;
    open(i, 0);
  }
}

function boardStats(): BoardStats {
  let lines = 0;
  let errors = 0;
  let otaRetries = 0;
  let mqttConnectFailures = 0;
  for (const board of boards) {
    const h = board.console.history;
    lines += h.length;
    for (const line of h) {
      if (line.level === 'E') errors++;
      if (line.tag === 'Application' && line.text.includes('Check new version failed'))
        otaRetries++;
      if (line.tag === 'MQTT' && line.text.startsWith('Failed to connect to endpoint'))
        mqttConnectFailures++;
    }
  }
  return { consoleLines: lines, consoleErrorLines: errors, otaRetries, mqttConnectFailures };
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
    stormLoopDelay,
  });
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
      n = message.n;
      send({ type: 'started', mode, uptimeMs: performance.now() - startedAt });
      progressTimer = setInterval(progress, 250);
      loopDelay.enable();
      if (message.cmd === 'boards') runBoards(message);
      else runEcho(message);
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
