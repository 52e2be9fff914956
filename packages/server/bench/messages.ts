// What bench/run.ts says over IPC to its two kinds of child process: the simulator processes
// (bench/devices.ts: virtual boards or echo clients) and the server process (bench/server.ts:
// the echo server, the bare aedes broker or the XiaozhiServer, and the load).
import type { BoardTiming } from '@xiaozhi-mcp/device';

/** Counters of a simulator process; the first group is for boards, the second for echo clients. */
export interface DeviceCounts {
  created: number;
  idle: number;
  otaFailed: number;
  connecting: number;
  listening: number;
  sessionRetries: number;
  failed: number;
  disconnected: number;
  opened: number;
  echoed: number;
  echoRetries: number;
  framesEchoed: number;
  // boards over MQTT (connected from boot on, never clicked)
  mqttConnected: number;
}

export type Mode = 'boards' | 'echo';

/** How the simulator reaches the server: the boards' transport, and the echo baseline's. */
export type Transport = 'websocket' | 'mqtt';

/** The five most frequent failure kinds, with how often each happened. */
export type ErrorKinds = Record<string, number>;

/** Event-loop delay of a process over a window (monitorEventLoopDelay). */
export interface LoopDelay {
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

export interface BoardStats {
  consoleLines: number;
  consoleErrorLines: number;
  /** `Check new version failed` lines: OTA checks that failed and were retried. */
  otaRetries: number;
  /** OTA checks answered with HTTP 408 (the server's headers timeout). */
  ota408: number;
  /** WebSocket upgrades refused with HTTP 408. */
  session408: number;
  /** `MQTT: Failed to connect to endpoint` lines: MQTT connects that failed and were retried. */
  mqttConnectFailures: number;
}

/** How a simulator process creates its boards or clients: `batch` at a time, then it yields. */
export interface SimShare {
  /** Index of this simulator process (0-based) and how many there are. */
  index: number;
  of: number;
  /** Its boards are numbers offset … offset + n - 1 of the run (their MACs follow). */
  offset: number;
  n: number;
  batch: number;
}

/** Parent → simulator process. */
export type DeviceCommand =
  | ({
      cmd: 'boards';
      transport: Transport;
      otaUrl: string;
      preset: string;
      retries: number;
      timing: Partial<BoardTiming>;
    } & SimShare)
  | ({
      cmd: 'echo';
      transport: Transport;
      /** `ws://…` of the echo server, or `mqtt://…` of the bare broker. */
      url: string;
      hello: string;
      retries: number;
    } & SimShare)
  /** Ends the current event-loop window and starts the next; answered with a `mark`. */
  | { cmd: 'mark'; id: number }
  | { cmd: 'report'; id: number; gc: boolean }
  | { cmd: 'stop' };

export interface ProgressMessage {
  type: 'progress';
  mode: Mode | undefined;
  transport: Transport | undefined;
  counts: DeviceCounts;
  firstError: string | undefined;
  errorKinds: ErrorKinds;
  uptimeMs: number;
}

export interface MarkMessage {
  type: 'mark';
  id: number;
  /** The event-loop delay since the previous mark (or since the command, for the first). */
  loop: LoopDelay;
  cpu: NodeJS.CpuUsage;
}

export interface ReportMessage {
  type: 'report';
  id: number;
  mode: Mode | undefined;
  n: number;
  counts: DeviceCounts;
  memory: NodeJS.MemoryUsage;
  cpu: NodeJS.CpuUsage;
  boards: BoardStats | undefined;
  firstError: string | undefined;
  errorKinds: ErrorKinds;
}

/** Simulator process → parent. */
export type DeviceMessage =
  /** Its modules are loaded: it is ready for its command (sent once, at start). */
  | { type: 'loaded'; uptimeMs: number }
  | { type: 'started'; mode: Mode; uptimeMs: number }
  | ProgressMessage
  | { type: 'storm-done'; mode: Mode | undefined; counts: DeviceCounts; elapsedMs: number }
  | {
      type: 'storm-stuck';
      mode: Mode | undefined;
      counts: DeviceCounts;
      firstError: string | undefined;
      errorKinds: ErrorKinds;
    }
  | MarkMessage
  | ReportMessage
  | { type: 'fatal'; message: string };

// --- the server process ------------------------------------------------------------------------
/** What a server process runs: a baseline (raw `ws` echo, bare aedes) or the XiaozhiServer. */
export type ServerKind = 'echo' | 'xiaozhi';

export interface ServerStart {
  kind: ServerKind;
  transport: Transport;
  n: number;
  auth: 'token' | 'off';
}

/** One load of the server process, as the parent asks for it. */
export interface LoadSpec {
  /** calls: `total` calls with `concurrency` in flight; pings: one WebSocket ping at a time. */
  what: 'calls' | 'pings';
  total: number;
  concurrency: number;
  tool: string;
}

/** Latency figures of a load, from the server process's side. */
export interface Summary {
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

/** What the server process says while the storm runs (every 250 ms) and once it is done. */
export interface ServerProgress {
  /** Hellos echoed (echo), or devices ready (xiaozhi). */
  ready: number;
  otaChecks: number;
  connected: number;
  /** Open connections (WebSocket) or broker clients (MQTT). */
  open: number;
  withLastError: number;
  lastError: string | undefined;
}

/** Parent → server process. */
export type ServerCommand =
  | ({ cmd: 'start'; id: number } & ServerStart)
  /** gc three times, then memoryUsage(); after waiting `settleMs`. */
  | { cmd: 'memory'; id: number; settleMs: number }
  | ({ cmd: 'load'; id: number } & LoadSpec)
  | { cmd: 'stop'; id: number };

/** Server process → parent. Every reply carries the id of its command. */
export type ServerMessage =
  | { type: 'started'; id: number; url: string }
  | { type: 'memory'; id: number; memory: NodeJS.MemoryUsage }
  | {
      type: 'loaded';
      id: number;
      summary: Summary;
      /** process.cpuUsage() of the server process over the load, user + system, µs. */
      cpuUs: number;
      loop: LoopDelay;
    }
  | { type: 'stopped'; id: number }
  | { type: 'progress'; progress: ServerProgress }
  /**
   * Every device ready (xiaozhi) or every hello echoed (echo), with the moments (ms since the
   * epoch, `performance.timeOrigin + performance.now()`) that the last OTA check, the last
   * connection and the last ready happened; and the event-loop delay from start to then.
   */
  | {
      type: 'storm-done';
      atMs: number;
      otaDoneAtMs: number | undefined;
      connectedAtMs: number | undefined;
      loop: LoopDelay;
      /** process.cpuUsage() of the server process from its last memory sample (just before the storm) to then, µs. */
      cpuUs: number;
    }
  | { type: 'error'; id: number; message: string }
  | { type: 'fatal'; message: string };
