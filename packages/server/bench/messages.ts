// What bench/run.ts and its device process (bench/devices.ts) say to each other over IPC.
import type { BoardTiming } from '@xiaozhi-mcp/device';

/** Counters of the device process; the first group is for boards, the second for echo clients. */
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

/** How the device process reaches the server: the boards' transport, and the echo baseline's. */
export type Transport = 'websocket' | 'mqtt';

/** The five most frequent failure kinds, with how often each happened. */
export type ErrorKinds = Record<string, number>;

export interface LoopDelay {
  p99Ms: number;
  maxMs: number;
}

export interface BoardStats {
  consoleLines: number;
  consoleErrorLines: number;
  otaRetries: number;
  /** `MQTT: Failed to connect to endpoint` lines: MQTT connects that failed and were retried. */
  mqttConnectFailures: number;
}

/** Parent → device process. */
export type DeviceCommand =
  | {
      cmd: 'boards';
      transport: Transport;
      otaUrl: string;
      n: number;
      preset: string;
      retries: number;
      timing: Partial<BoardTiming>;
    }
  | {
      cmd: 'echo';
      transport: Transport;
      /** `ws://…` of the echo server, or `mqtt://…` of the bare broker. */
      url: string;
      n: number;
      hello: string;
      retries: number;
    }
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
  stormLoopDelay: LoopDelay | undefined;
}

/** Device process → parent. */
export type DeviceMessage =
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
  | ReportMessage
  | { type: 'fatal'; message: string };
