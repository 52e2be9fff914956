/**
 * `hil run`: starts our backend where the boards can reach it, runs every board in parallel
 * (one lock per board), and writes the reports. With no inventory and no board attached, it
 * qualifies the default virtual rig, flashing a virtual firmware image into each board.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { defaultVirtualDir, VirtualBus } from '@xiaozhi-mcp/device';
import { resolvePort } from '@xiaozhi-mcp/serial';
import { type StartOptions, XiaozhiServer } from '@xiaozhi-mcp/server';
import { type Baseline, DEFAULT_BASELINE_PATH, loadBaseline } from './baseline.js';
import { BoardRunner, type FirmwareUnderTest } from './board-runner.js';
import {
  type BoardConfig,
  InventoryError,
  isNativeUsb,
  type RigConfig,
  sessionStartFor,
} from './inventory.js';
import {
  type BoardReport,
  DEFAULT_SUITES,
  exitCodeFor,
  type RigStepName,
  type RunReport,
  type SuiteName,
  summarize,
} from './model.js';
import { BoardClaims, isNetworkBoard, type ListenAddress } from './network-board.js';
import { type ConsoleReporter, isLiveTerminal } from './reporters/console.js';
import {
  type FirmwareArgument,
  hostInfo,
  type ImageFile,
  imageInfo,
  readBoardFirmware,
  readOtaImageFile,
  selectBoards,
} from './run-inputs.js';
import { HIL_VERSION } from './version.js';
import {
  networkReplica,
  openVirtual,
  storedVirtualBoard,
  VIRTUAL_RIG_TIMING,
  virtualCandidateFor,
  virtualFirmwareFor,
} from './virtual-rig.js';

export interface RigRunOptions {
  readonly rig: RigConfig;
  readonly rigKind: 'virtual' | 'inventory';
  /** Only these boards (inventory names). */
  readonly boards?: readonly string[];
  /**
   * `--firmware`: an image (a merged image, flashed at 0x0, or an app image) for every board, or
   * for one board; before the inventory's.
   */
  readonly firmware?: readonly FirmwareArgument[];
  readonly provision: boolean;
  /** `--suite`: overrides the inventory's `suites`. */
  readonly suites?: readonly SuiteName[];
  /** An app image offered in `ota-upgrade`. */
  readonly otaImagePath?: string;
  readonly baselinePath?: string;
  /** A listed deviation that is gone passes (reported as fixed) instead of failing the run. */
  readonly allowFixedDeviations?: boolean;
  /**
   * `--listen HOST:PORT`: where the backend listens (overrides `server.host`/`server.port`); a
   * board without port needs a fixed address to be pointed at.
   */
  readonly listen?: ListenAddress;
  readonly outDir: string;
  readonly reporter: ConsoleReporter;
  readonly signal: AbortSignal;
  /** How long to wait for a board another hil holds. */
  readonly lockWaitMs?: number;
  /**
   * Someone at the terminal can press a board's buttons when asked (`reset: none`). Default: the
   * output is a terminal outside CI (the console reporter's live mode); else a step that needs a
   * hand fails at once.
   */
  readonly attended?: boolean;
}

/** A board's image: a merged image goes to 0x0, an app image alone to the board's first app partition. */
function underTest(file: ImageFile): FirmwareUnderTest {
  return { image: file.image, version: file.info.version, chip: file.info.chip };
}

/**
 * The rig's backend: on `--listen` it faces a lab network, so its API is closed by a random token
 * (the rig reads the registry in process; only the `bridge` suite's bridge uses the API, with that
 * token). `mqttPort` (a number) runs the embedded MQTT broker too, on `host`
 * like the rest (0: the OS's port); the server offers boards `publicUrl`'s host with the port it
 * bound, as it does for WebSocket. Its default offer stays WebSocket: the rig offers MQTT board
 * by board.
 */
export function rigServerOptions(
  host: string,
  port: number,
  publicUrl: string | undefined,
  mqttPort?: number,
): StartOptions {
  return {
    host,
    port,
    ...(publicUrl ? { publicUrl } : {}),
    ...(mqttPort === undefined ? {} : { mqttBroker: true, mqttPort }),
    logLevel: 'silent',
    pingIntervalMs: 0,
    apiTokens: [randomUUID()],
  };
}

/**
 * Whether a board may run over MQTT: its session is `mqtt`, or unset on a serial port that may
 * turn out to be native USB once opened (sessionStartFor's default there).
 */
function mayUseMqtt(config: BoardConfig): boolean {
  if (sessionStartFor(config) === 'mqtt') return true;
  return (
    config.session === undefined && config.port !== undefined && !config.port.startsWith('virtual:')
  );
}

/**
 * A board on `mqtt` is offered MQTT by its MAC before its OTA check (board-runner.ts
 * `#offerTransport`); refused before any board is touched when nothing can tell it: a board
 * without port needs its `deviceId`, a bridge board its `deviceId` or the identify step
 * (`--provision`, `--firmware`; always on the virtual rig). A native USB board names its MAC as
 * its USB serial number.
 */
function assertMacKnowable(
  boards: readonly BoardConfig[],
  inventory: readonly BoardConfig[],
  identifies: (config: BoardConfig) => boolean,
): void {
  for (const config of boards) {
    if (sessionStartFor(config) !== 'mqtt' || config.deviceId !== undefined) continue;
    const port = config.port;
    if (port !== undefined) {
      // The virtual rig always provisions its boards; the identify step reads the MAC.
      if (identifies(config) || port.startsWith('virtual:')) continue;
      // A local native USB port names its MAC as its serial number (a remote one's is not passed on).
      if (!port.startsWith('rfc2217://') && isNativeUsb(config)) continue;
    }
    throw new InventoryError(
      `board ${config.name} runs over MQTT (session mqtt), which our OTA reply offers by MAC before the board's OTA check, but its MAC is not known by then: give its deviceId (aa:bb:cc:dd:ee:ff) in the inventory${port === undefined ? '' : ', or run with --provision or --firmware (the identify step reads it from the chip)'}`,
      `boards[${inventory.indexOf(config)}].deviceId`,
    );
  }
}

export async function runRig(options: RigRunOptions): Promise<RunReport> {
  const started = performance.now();
  const { rig, reporter, signal } = options;
  // Bad input is refused here, before the backend starts and any board is touched (exit 2).
  const boards = selectBoards(rig, options.boards);
  const baselineFile = options.baselinePath ?? DEFAULT_BASELINE_PATH;
  const baseline: Baseline = loadBaseline(baselineFile);
  // A replica without port is a virtual board too: hil runs it.
  const virtual = boards.every(
    (b) => b.port?.startsWith('virtual:') === true || b.replicaFile !== undefined,
  );
  const host = options.listen?.host ?? rig.server?.host ?? '127.0.0.1';
  const listenPort = options.listen?.port ?? rig.server?.port ?? 0;
  // A replica hil runs itself is pointed at wherever the backend listens.
  const network = boards.find((b) => isNetworkBoard(b) && b.replicaFile === undefined);
  if (network !== undefined && listenPort === 0) {
    throw new InventoryError(
      `board ${network.name} has no port: it is met at its OTA check, so hil must listen at a fixed address the device is pointed at: give --listen HOST:PORT (e.g. --listen 0.0.0.0:8000 with server.publicUrl, the address the device reaches) or server.port in the inventory`,
      'server.port',
    );
  }
  const images = readBoardFirmware(rig, boards, options.firmware ?? []);
  // One image on every board flashed (a board with a port): the run's firmware, as reports name it.
  const flashed = boards.filter((b) => b.port !== undefined).map((b) => images.get(b.name));
  const firmware =
    flashed.length > 0 && flashed.every((file) => file !== undefined && file === flashed[0])
      ? flashed[0]
      : undefined;
  const otaFile =
    options.otaImagePath === undefined ? undefined : readOtaImageFile(options.otaImagePath, boards);
  const otaImage = otaFile?.image.data;
  assertMacKnowable(boards, rig.boards, (config) => options.provision || images.has(config.name));
  // The session suite is judged while each session opens: it always runs. `--suite`, else the
  // inventory's `suites`, else the defaults.
  const suites: SuiteName[] = [
    'session',
    ...(options.suites ??
      rig.suites ??
      (virtual || otaImage ? [...DEFAULT_SUITES, 'ota-upgrade'] : DEFAULT_SUITES)),
  ].filter((suite, i, all): suite is SuiteName => all.indexOf(suite) === i);

  const runReport = (boardReports: BoardReport[], urls: RunReport['server']): RunReport => ({
    tool: { name: 'hil', version: HIL_VERSION },
    startedAt: new Date(Date.now() - (performance.now() - started)).toISOString(),
    durationMs: performance.now() - started,
    rig: options.rigKind,
    server: urls,
    host: hostInfo(),
    ...(firmware === undefined ? {} : { firmware: firmware.info }),
    ...(otaFile === undefined ? {} : { otaImage: otaFile.info }),
    suites,
    baseline: baselineFile,
    boards: boardReports,
    summary: summarize(boardReports),
    exitCode: exitCodeFor(boardReports, signal.aborted),
    interrupted: signal.aborted,
  });

  const mqtt = boards.some(mayUseMqtt);
  let server: XiaozhiServer;
  try {
    server = await XiaozhiServer.start(
      rigServerOptions(
        host,
        listenPort,
        rig.server?.publicUrl,
        mqtt ? (rig.server?.mqttPort ?? 0) : undefined,
      ),
    );
  } catch (error) {
    // The rig failed before any board was touched: each board asked for says so in the reports.
    const reason = `the backend could not start: ${error instanceof Error ? error.message : String(error)}`;
    const address = `not started (${host}:${listenPort})`;
    return runReport(
      boards.map((config) => backendFailure(config, reason)),
      { ota: address, websocket: address },
    );
  }
  const bus = new VirtualBus(VIRTUAL_RIG_TIMING);
  // An inventory's virtual:NAME is the board of that name xiaozhi-mcp keeps, when it has one; the
  // default rig's boards are new each run.
  const store = options.rigKind === 'inventory' ? defaultVirtualDir() : undefined;
  const reports: BoardReport[] = [];
  // Every inventory board's identity, run or not: the anonymous network board takes none of them.
  const claims = new BoardClaims(rig.boards);
  const quote = (path: string) => (/[\s"'$`\\]/.test(path) ? JSON.stringify(path) : path);
  const acceptCommand = `hil baseline accept --from ${quote(join(options.outDir, 'report.json'))} --baseline ${quote(baselineFile)}`;
  try {
    const wifi = rig.wifi ?? { ssid: 'hil-virtual', password: 'virtual-rig' };
    await Promise.all(
      boards.map(async (config: BoardConfig) => {
        const isVirtual = config.port?.startsWith('virtual:') === true;
        const selector = config.port;
        // A replica without port: hil runs it, over the network only, until the board's run ends.
        const replicaBoard =
          selector === undefined && config.replicaFile !== undefined
            ? networkReplica(config, config.replicaFile, {
                ssid: wifi.ssid,
                password: wifi.password ?? '',
                otaUrl: server.urls.ota,
              })
            : undefined;
        // The virtual rig flashes a virtual firmware image built for each board unless told what to flash.
        const image = images.get(config.name);
        const stored =
          isVirtual && store !== undefined ? storedVirtualBoard(config, store) : undefined;
        // A stored board keeps its own firmware unless told what to flash. A replica without port
        // is not flashed, but its build is the one under test: initialize expects its version,
        // and ota-upgrade offers the next.
        const boardFirmware: FirmwareUnderTest | undefined =
          image === undefined
            ? (isVirtual && stored === undefined) || replicaBoard !== undefined
              ? virtualFirmwareFor(config)
              : undefined
            : underTest(image);
        const runs = boardFirmware?.version ?? stored?.firmware;
        const candidate =
          otaImage ??
          ((isVirtual || replicaBoard !== undefined) && runs !== undefined
            ? virtualCandidateFor(config, runs)
            : undefined);
        // A remote port's notes (connection lost, reconnected) go to the board's lines.
        const notify = (_stream: 'stdout' | 'stderr', text: string) =>
          reporter.log(config.name, text.trim());
        const runner = new BoardRunner({
          config,
          port: async () =>
            selector === undefined
              ? Promise.reject(new Error(`board ${config.name} has no port`))
              : isVirtual
                ? openVirtual(bus, config, {
                    signal,
                    notify,
                    ...(store === undefined ? {} : { store }),
                  })
                : // Locked by the board's identity, not by the selector's text, until disposed.
                  resolvePort(selector, {
                    request: { notify },
                    listCommand: 'hil boards',
                    findTimeoutMs: 10_000,
                    lockWaitMs: options.lockWaitMs ?? 0,
                    signal,
                  }),
          server,
          outDir: options.outDir,
          firmware: boardFirmware,
          provision:
            options.provision || isVirtual
              ? { ssid: wifi.ssid, password: wifi.password ?? '' }
              : undefined,
          candidateImage: candidate,
          suites,
          latency: { ...rig.latency, ...config.latency },
          baseline,
          fixedDeviations: {
            allowFixed: options.allowFixedDeviations === true,
            acceptCommand,
          },
          claims,
          reporter,
          signal,
          attended: options.attended ?? isLiveTerminal(process.stdout, process.env),
          ...(replicaBoard === undefined
            ? {}
            : {
                networkBoard: {
                  start: () => replicaBoard.start(),
                  pressBoot: () => replicaBoard.board.click(),
                },
              }),
        });
        // What the report says was flashed: the file, or the image the rig built (a board
        // without a port is not flashed by the rig).
        if (boardFirmware !== undefined && selector !== undefined)
          runner.report.image =
            image?.info ?? imageInfo('virtual firmware built by hil', boardFirmware.image);
        try {
          reports.push(await runner.run());
        } finally {
          replicaBoard?.stop();
        }
      }),
    );
  } finally {
    bus.close();
    await server.stop();
  }
  reports.sort(
    (a, b) =>
      boards.findIndex((x) => x.name === a.name) - boards.findIndex((x) => x.name === b.name),
  );
  return runReport(reports, {
    ota: server.urls.ota,
    websocket: server.urls.websocket,
    ...(server.urls.mqtt === undefined ? {} : { mqtt: server.urls.mqtt }),
  });
}

/**
 * The step a board fails at when the rig's backend (OTA endpoint, WebSocket gateway, MQTT
 * broker) does not start: before any of its own steps ran.
 */
const BACKEND_STEP: RigStepName = 'backend';

/** A board the rig could not run because its backend did not start (exit 3). */
function backendFailure(config: BoardConfig, reason: string): BoardReport {
  return {
    name: config.name,
    kind: isNetworkBoard(config)
      ? 'network'
      : config.port?.startsWith('virtual:') === true
        ? 'virtual'
        : 'serial',
    ...(config.port === undefined ? {} : { port: config.port }),
    ...(config.chip === undefined ? {} : { chip: config.chip }),
    ...(config.variant === undefined ? {} : { variant: config.variant }),
    status: 'rig-failed',
    failure: { step: BACKEND_STEP, reason },
    steps: [{ step: BACKEND_STEP, status: 'failed', durationMs: 0, message: reason }],
    checks: [],
    latency: [],
    startedAt: new Date().toISOString(),
    durationMs: 0,
  };
}
