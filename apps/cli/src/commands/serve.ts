import {
  type AuthMode,
  type DeviceRecord,
  type LogLevel,
  type OtaCheckRecord,
  ServerError,
  type StartOptions,
  XiaozhiServer,
} from '@xiaozhi-mcp/server';
import { type Command, Option } from 'commander';
import { CliError, type CliIo, ExitCode, interrupted } from '../io.js';

export interface ServeOptions {
  host: string;
  port: number;
  /** Device tokens, accepted at the WebSocket upgrade. */
  token: string[];
  /** API tokens: the API then needs one as a Bearer token. */
  apiToken?: string[];
  allowOrigin?: string[];
  auth: AuthMode;
  prefix: string;
  publicUrl?: string;
  firmwareDir?: string;
  wsVersion: '1' | '2' | '3';
  timezoneOffset?: number;
  visionUrl?: string;
  visionToken?: string;
  callTimeout?: number;
  maxConnections?: number;
  headersTimeout?: number;
  requestTimeout?: number;
  /** What the OTA reply offers boards (default websocket). */
  transport?: 'websocket' | 'mqtt';
  /** The embedded MQTT broker's port; given, the broker runs whatever the transport. */
  mqttPort?: number;
  /** The UDP audio endpoint's port (default 0: the OS chooses). */
  udpPort?: number;
  logLevel: LogLevel;
  json?: boolean;
  /** Resolves when the server should stop (Ctrl-C or SIGTERM by default). */
  until?: Promise<void>;
}

function integer(option: string, min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^[-+]?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max)
      throw new CliError(
        `${option} must be an integer from ${min} to ${max}, got ${JSON.stringify(value)}`,
        ExitCode.usage,
      );
    return n;
  };
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

/** The server's start options for `serve`'s flags (exported so the mapping is testable without binding). */
export function startOptions(options: ServeOptions): StartOptions {
  if (options.visionToken !== undefined && options.visionUrl === undefined)
    throw new CliError('--vision-token needs --vision-url', ExitCode.usage);
  return {
    host: options.host,
    port: options.port,
    tokens: options.token,
    apiTokens: options.apiToken ?? [],
    allowedOrigins: options.allowOrigin ?? [],
    auth: options.auth,
    prefix: options.prefix,
    publicUrl: options.publicUrl,
    firmwareDir: options.firmwareDir,
    websocketVersion: Number(options.wsVersion) as 1 | 2 | 3,
    logLevel: options.logLevel,
    ...(options.timezoneOffset === undefined
      ? {}
      : { timezoneOffsetMinutes: options.timezoneOffset }),
    ...(options.callTimeout === undefined ? {} : { callTimeoutMs: options.callTimeout }),
    ...(options.maxConnections === undefined ? {} : { maxConnections: options.maxConnections }),
    ...(options.headersTimeout === undefined ? {} : { headersTimeoutMs: options.headersTimeout }),
    ...(options.requestTimeout === undefined ? {} : { requestTimeoutMs: options.requestTimeout }),
    ...(options.transport === undefined ? {} : { transport: options.transport }),
    ...(options.mqttPort === undefined ? {} : { mqttPort: options.mqttPort }),
    ...(options.udpPort === undefined ? {} : { udpPort: options.udpPort }),
    ...(options.visionUrl === undefined
      ? {}
      : {
          vision: {
            url: options.visionUrl,
            ...(options.visionToken === undefined ? {} : { token: options.visionToken }),
          },
        }),
  };
}

/** Runs the backend until stopped, printing its endpoints and then one line per device event. */
export async function serveCommand(io: CliIo, options: ServeOptions): Promise<number> {
  let server: XiaozhiServer;
  try {
    server = await XiaozhiServer.start(startOptions(options));
  } catch (error) {
    if (error instanceof ServerError) {
      // A refused configuration is bad input; a port in use is a failure of the run.
      const code = error.code.startsWith('CONFIG_') ? ExitCode.usage : ExitCode.failed;
      throw new CliError(`${error.code}: ${error.message}`, code);
    }
    throw error;
  }
  const { urls, registry } = server;
  const print = (text: string, event: Record<string, unknown>) =>
    io.stdout(
      options.json
        ? `${JSON.stringify({ event: event.event, at: new Date().toISOString(), ...event })}\n`
        : `${text}\n`,
    );
  print(
    [
      `OTA        ${urls.ota}`,
      `WebSocket  ${urls.websocket}`,
      ...(urls.mqtt === undefined ? [] : [`MQTT       ${urls.mqtt}`]),
      ...(urls.udp === undefined ? [] : [`UDP        ${urls.udp}`]),
      `API        ${urls.api}`,
    ].join('\n'),
    {
      event: 'listening',
      http: urls.http,
      ota: urls.ota,
      websocket: urls.websocket,
      mqtt: urls.mqtt ?? null,
      udp: urls.udp ?? null,
      api: urls.api,
      transport: server.config.transport,
    },
  );
  const onConnected = (record: DeviceRecord) =>
    print(`connected ${record.deviceId} ${record.transport ?? '?'}`, {
      event: 'connected',
      deviceId: record.deviceId,
      transport: record.transport ?? null,
    });
  const onReady = (record: DeviceRecord) =>
    print(
      `ready ${record.deviceId} ${record.board ?? '?'} ${record.version ?? '?'} ${record.tools.length} tools`,
      {
        event: 'ready',
        deviceId: record.deviceId,
        board: record.board ?? null,
        version: record.version ?? null,
        tools: record.tools.length,
      },
    );
  const onDisconnected = (record: DeviceRecord, reason: string) =>
    print(`disconnected ${record.deviceId} ${reason}`, {
      event: 'disconnected',
      deviceId: record.deviceId,
      reason,
    });
  const onOtaCheck = (check: OtaCheckRecord) =>
    print(`ota-check ${check.deviceId} ${check.version}`, {
      event: 'ota-check',
      deviceId: check.deviceId,
      version: check.version,
      board: check.board ?? null,
      offered: check.offered ?? null,
    });
  registry.on('connected', onConnected);
  registry.on('ready', onReady);
  registry.on('disconnected', onDisconnected);
  registry.on('ota-check', onOtaCheck);
  io.stderr(`xiaozhi-mcp serve: listening on ${urls.http}; Ctrl-C to stop\n`);
  let signal: 'SIGINT' | 'SIGTERM' | undefined;
  try {
    signal = (await (options.until ?? interrupted())) ?? undefined;
  } finally {
    // Unsubscribed first: the disconnections the stop causes are not news.
    registry.off('connected', onConnected);
    registry.off('ready', onReady);
    registry.off('disconnected', onDisconnected);
    registry.off('ota-check', onOtaCheck);
    await server.stop();
  }
  io.stderr('xiaozhi-mcp serve: stopped\n');
  return signal === 'SIGINT' ? ExitCode.interrupted : ExitCode.ok;
}

export function registerServe(program: Command, io: CliIo, setExit: (code: number) => void): void {
  program
    .command('serve')
    .description(
      'run the backend boards connect to (OTA, WebSocket, MQTT + UDP, JSON API) until Ctrl-C, printing device events',
    )
    .option(
      '--host <address>',
      'bind address; other than loopback, it needs --api-token (or --auth off for an open API)',
      '127.0.0.1',
    )
    .option('--port <n>', 'port; 0 lets the OS choose', integer('--port', 0, 65535), 8000)
    .addOption(
      new Option(
        '--token <token>',
        'a device token accepted at the WebSocket upgrade (repeatable); it does not open the API',
      )
        .argParser(collect)
        .default([], 'none'),
    )
    .addOption(
      new Option(
        '--api-token <token>',
        'a Bearer token the API then requires (repeatable); without one the API is open, so loopback only',
      )
        .argParser(collect)
        .default([], 'none'),
    )
    .addOption(
      new Option(
        '--allow-origin <origin>',
        'an Origin (http://host:port) or Host (host[:port]) the API accepts besides its own (repeatable; * for any)',
      )
        .argParser(collect)
        .default([], 'none'),
    )
    .addOption(
      new Option(
        '--auth <mode>',
        'device upgrades: token needs the issued token or a --token; off: no check (and lets an open API bind a network address)',
      )
        .choices(['token', 'off'])
        .default('token'),
    )
    .option('--prefix <path>', 'prefix of the OTA, WebSocket and firmware paths', '/xiaozhi')
    .option(
      '--public-url <url>',
      'the base URL boards reach the server at, when not http://host:port',
    )
    .option('--firmware-dir <dir>', 'offer the app images in this directory as OTA upgrades')
    .addOption(
      new Option(
        '--transport <transport>',
        'what the OTA reply offers boards: websocket, or mqtt (the embedded broker: boards stay connected, no session click)',
      )
        .choices(['websocket', 'mqtt'])
        .default('websocket'),
    )
    .option(
      '--mqtt-port <n>',
      'the embedded MQTT broker port, on --host (default 1883 with --transport mqtt; given, the broker also runs for websocket, for boards switched per device); 0 lets the OS choose',
      integer('--mqtt-port', 0, 65535),
    )
    .option(
      '--udp-port <n>',
      'the UDP audio port for MQTT boards, on --host (default 0: the OS chooses)',
      integer('--udp-port', 0, 65535),
    )
    .addOption(
      new Option('--ws-version <n>', 'binary protocol version in the OTA reply')
        .choices(['1', '2', '3'])
        .default('1'),
    )
    .option(
      '--timezone-offset <minutes>',
      'server_time.timezone_offset in the OTA reply (default: this machine)',
      integer('--timezone-offset', -840, 840),
    )
    .option('--vision-url <url>', 'the vision endpoint offered to boards in initialize')
    .option('--vision-token <token>', 'the token boards send to the vision endpoint')
    .option(
      '--call-timeout <ms>',
      'default bound on each MCP request (default 30000)',
      integer('--call-timeout', 1, 2_147_483_647),
    )
    .option(
      '--max-connections <n>',
      'most open connections, HTTP and WebSocket together (default 0: no cap)',
      integer('--max-connections', 0, 1_000_000),
    )
    .option(
      '--headers-timeout <ms>',
      'how long a client gets to send its request headers (default 10000)',
      integer('--headers-timeout', 1, 2_147_483_647),
    )
    .option(
      '--request-timeout <ms>',
      'how long a client gets to send its whole request (default 30000)',
      integer('--request-timeout', 1, 2_147_483_647),
    )
    .addOption(
      new Option('--log-level <level>', 'pino log level (logs go to stderr)')
        .choices(['debug', 'info', 'warn', 'error', 'silent'])
        .default('info'),
    )
    .option('--json', 'print endpoints and device events as JSON lines')
    .action(async (options: ServeOptions) => setExit(await serveCommand(io, options)));
}
