/**
 * The virtual rig's boards: plugged into the rig's bus (or shared behind a local RFC 2217
 * server), with the firmware the rig builds for them and its shortened pauses. Real boards take
 * the same steps through the same runner; only where the port comes from differs.
 */
import {
  type BoardTiming,
  type ReplicaFile,
  type ResolvedVirtual,
  replicaBoardOptions,
  VirtualBoard,
  VirtualBoardStore,
  type VirtualBus,
  type VirtualPortListing,
} from '@xiaozhi-mcp/device';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { placeImage, Rfc2217Server, resolvePort } from '@xiaozhi-mcp/serial';
import type { FirmwareUnderTest, RigPort } from './board-runner.js';
import type { BoardConfig } from './inventory.js';

/**
 * The version of the app a virtual board comes with, as from the factory: older than the
 * firmware the rig builds, so a run says which of the two the board runs.
 */
const VIRTUAL_FACTORY_VERSION = '2.4.0';

/**
 * What a virtual board's flash holds when it is plugged in: bootloader, partition table and an
 * app for its board, as a real board holds after its first merged flash (from the factory or a
 * previous flash). So an app image alone (`xiaozhi.bin`) can be flashed into it and boots.
 */
function factoryFlashFor(config: BoardConfig): Uint8Array {
  return buildVirtualFirmware({
    chip: config.chip ?? 'esp32s3',
    version: VIRTUAL_FACTORY_VERSION,
    board: config.variant ?? config.virtual?.preset ?? 'bread-compact-wifi',
    ...(config.virtual?.flashSizeMb === undefined
      ? {}
      : { flashSizeMb: config.virtual.flashSizeMb }),
  }).merged;
}

/**
 * What a board of the rig running `replica` takes from it: its preset, its app version and its
 * MAC, the inventory's `deviceId` when it names one, else the replica's.
 */
function replicaOptionsFor(
  config: BoardConfig,
  replica: ReplicaFile,
): ReturnType<typeof replicaBoardOptions> {
  return replicaBoardOptions(
    replica,
    config.deviceId === undefined ? {} : { mac: config.deviceId.toLowerCase() },
  );
}

/**
 * Plugs a virtual board into the rig's bus, holding its factory flash, with a hand on its BOOT
 * button for the session prompts a board on native USB gets, and on its RESET button for a
 * board on `reset: none`. With `virtual.replica` it runs the replica's tool set with its
 * identity, its MAC the inventory's `deviceId`, else the replica's.
 */
export function plugVirtual(bus: VirtualBus, config: BoardConfig): RigPort {
  const replica = config.replicaFile;
  const port = bus.plug(
    {
      ...(replica === undefined
        ? { preset: config.virtual?.preset ?? config.variant ?? 'bread-compact-wifi' }
        : replicaOptionsFor(config, replica)),
      flashImage: factoryFlashFor(config),
      ...(config.virtual?.flashSizeMb === undefined
        ? {}
        : { flashSizeMb: config.virtual.flashSizeMb }),
      ...(config.virtual?.faults === undefined ? {} : { faults: config.virtual.faults }),
      ...(config.virtual?.usb === undefined ? {} : { usb: config.virtual.usb }),
      ...(config.virtual?.secureBoot === undefined
        ? {}
        : { secureBoot: config.virtual.secureBoot }),
      ...(config.virtual?.flashEncryption === undefined
        ? {}
        : { flashEncryption: config.virtual.flashEncryption }),
      ...(config.virtual?.chipRevision === undefined
        ? {}
        : { chipRevision: config.virtual.chipRevision }),
      ...(config.virtual?.reenumerateMs === undefined
        ? {}
        : { reenumerateMs: config.virtual.reenumerateMs }),
    },
    `virtual:${config.name}`,
  );
  return {
    ...port,
    pressBoot: () => port.board.click(),
    pressReset: (options) => bus.binding.pressReset(port.device, options),
  };
}

/**
 * A board without port with `virtual.replica`: hil runs the replica itself as a network-only
 * virtual board, provisioned in memory with the rig's Wi-Fi and OTA URL, its MAC the board's
 * `deviceId` (the replica's, unless the inventory names another), opening a session whenever it
 * is idle, as `xiaozhi-mcp sim --session auto` does (a person pressing BOOT). `start` powers it
 * on; `stop` powers it off for good.
 */
export function networkReplica(
  config: BoardConfig,
  replica: ReplicaFile,
  rig: { readonly ssid: string; readonly password: string; readonly otaUrl: string },
): { readonly board: VirtualBoard; start(): void; stop(): void } {
  const board = new VirtualBoard({
    ...replicaOptionsFor(config, replica),
    wifi: { ssid: rig.ssid, password: rig.password },
    otaUrl: rig.otaUrl,
    timing: VIRTUAL_RIG_TIMING,
  });
  const timers = new Set<NodeJS.Timeout>();
  let stopped = false;
  let delay = 250;
  board.on('session', () => {
    delay = 250;
  });
  board.on('state', (state) => {
    // Over MQTT MCP needs no session (docs/protocol.md §5): no clicks.
    if (stopped || state !== 'idle' || board.transport === 'mqtt') return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      if (!stopped && board.state === 'idle') board.click();
    }, delay);
    timers.add(timer);
    // Backing off while sessions fail, as a person would.
    delay = Math.min(delay * 2, 5_000);
  });
  return {
    board,
    start: () => {
      if (!stopped) board.powerOn();
    },
    stop: () => {
      stopped = true;
      for (const timer of timers) clearTimeout(timer);
      board.powerOff();
    },
  };
}

/**
 * A virtual board behind a local RFC 2217 server (what `xiaozhi-mcp port serve` runs), reached
 * through `rfc2217://127.0.0.1:<port>` like a board on another host: the rig's steps (identify,
 * flash, provision, reset, console, BOOT click) all cross the RFC 2217 client and server. No hand
 * on its BOOT button: a click goes through the lines, as it would on a remote bridge board.
 */
export async function serveVirtual(
  bus: VirtualBus,
  config: BoardConfig,
  signal: AbortSignal,
  notify: (stream: 'stdout' | 'stderr', text: string) => void,
): Promise<RigPort> {
  return share(plugVirtual(bus, config), signal, notify);
}

async function share(
  board: RigPort,
  signal: AbortSignal,
  notify: (stream: 'stdout' | 'stderr', text: string) => void,
): Promise<RigPort> {
  const { pressBoot: _boot, pressReset: _reset, ...local } = board;
  let server: Rfc2217Server | undefined;
  try {
    server = await Rfc2217Server.start({ port: local, host: '127.0.0.1', listenPort: 0 });
    const remote = await resolvePort(server.url, { signal, request: { notify } });
    const shared = server;
    return {
      ...remote,
      dispose: () => {
        remote.dispose();
        void shared.close().finally(() => local.dispose());
      },
    };
  } catch (error) {
    await server?.close();
    local.dispose();
    throw error;
  }
}

/**
 * The board an inventory's `virtual:<name>` names in the virtual-board store `dir`
 * (`$XIAOZHI_VIRTUAL_DIR`): the one `xiaozhi-mcp flash --port virtual:<name> --create` or `hil
 * flash` made, with what its flash holds; undefined when the store has no board of that name.
 */
export function storedVirtualBoard(
  config: BoardConfig,
  dir: string,
): VirtualPortListing | undefined {
  const port = config.port;
  if (port?.startsWith('virtual:') !== true) return undefined;
  return new VirtualBoardStore({ dir }).boards().find((board) => board.port === port);
}

export interface OpenVirtualOptions {
  readonly signal: AbortSignal;
  readonly notify: (stream: 'stdout' | 'stderr', text: string) => void;
  /**
   * For an inventory's boards: the virtual-board store, whose board a `virtual:<name>` is when
   * it has one of that name. The default virtual rig gives none: its boards are new every run.
   */
  readonly store?: string;
}

/**
 * Opens a virtual board of the rig: the store's board of that name when there is one (the same
 * board `xiaozhi-mcp` and `hil flash` reach, its flash a file, locked like a real port while the
 * run holds it), else a new board on the rig's bus, gone after the run; reached directly or
 * behind a local RFC 2217 server (`virtual.via`).
 */
export async function openVirtual(
  bus: VirtualBus,
  config: BoardConfig,
  options: OpenVirtualOptions,
): Promise<RigPort> {
  const stored =
    options.store === undefined ? undefined : storedVirtualBoard(config, options.store);
  const board =
    stored === undefined || options.store === undefined
      ? plugVirtual(bus, config)
      : await openStored(config, stored, options.store, options.notify);
  return config.virtual?.via === 'rfc2217' ? share(board, options.signal, options.notify) : board;
}

/**
 * What a stored board's own file says, which the inventory's `virtual` settings cannot change
 * (`virtual.replica` does: the board runs the replica, on its own flash and eFuses).
 */
const STORED_SETTINGS = [
  'preset',
  'flashSizeMb',
  'secureBoot',
  'flashEncryption',
  'chipRevision',
  'faults',
] as const;

async function openStored(
  config: BoardConfig,
  stored: VirtualPortListing,
  dir: string,
  notify: (stream: 'stdout' | 'stderr', text: string) => void,
): Promise<RigPort> {
  let plugged: ResolvedVirtual | undefined;
  const replica = config.replicaFile;
  const store = new VirtualBoardStore({
    dir,
    timing: VIRTUAL_RIG_TIMING,
    // The inventory has taken the board's variant, chip and MAC from the replica: the board runs
    // it (its preset, app version and MAC), keeping its own flash and eFuses.
    ...(replica === undefined ? {} : { board: replicaOptionsFor(config, replica) }),
    ...(config.virtual?.usb === undefined ? {} : { usb: config.virtual.usb }),
    ...(config.virtual?.reenumerateMs === undefined
      ? {}
      : { reenumerateMs: config.virtual.reenumerateMs }),
    onBoard: (virtual) => {
      plugged = virtual;
    },
  });
  const port = await store.resolve(stored.port, { notify });
  const virtual = plugged;
  if (virtual === undefined) {
    port.dispose();
    throw new Error(`${stored.port}: the store gave no board`);
  }
  const holds = stored.firmware === undefined ? 'its flash erased' : `firmware ${stored.firmware}`;
  notify(
    'stdout',
    `${stored.port} is the board in ${dir} (${replica === undefined ? stored.preset : `running the replica of ${virtual.board.preset.name}`}, MAC ${virtual.board.mac}, ${holds}): what this run writes stays on it
`,
  );
  const ignored = STORED_SETTINGS.filter((key) => config.virtual?.[key] !== undefined);
  if (ignored.length > 0)
    notify(
      'stderr',
      `${stored.port}: ${ignored.map((key) => `virtual.${key}`).join(', ')} of the inventory do not apply to it: ${stored.sidecarPath} says what it is
`,
    );
  return {
    ...port,
    pressBoot: () => virtual.board.click(),
    pressReset: (options) => virtual.binding.pressReset(virtual.device, options),
  };
}

/**
 * The virtual boards' firmware pauses, shortened: Wi-Fi association (firmware 1.5 s), the pause
 * before a reboot (1 s) and after an upgrade (3 s). hil waits on events (console lines, OTA
 * checks, sessions opening and closing), never for fixed times, so a shorter pause only makes
 * the run shorter (the default rig's ota-upgrade took 5.4 s, almost all of it these pauses).
 * Over MQTT: the reconnect after a drop (firmware 60 s), and an audio session's uplink (the
 * device SDK's 50 frames 60 ms apart, 3 s of speech) cut to 10 frames 10 ms apart: the
 * `audio` suite judges their order, not their pace.
 */
export const VIRTUAL_RIG_TIMING = {
  wifiConnectMs: 300,
  rebootMs: 100,
  upgradeRebootMs: 300,
  mqttReconnectMs: 500,
  uplinkFrames: 10,
  uplinkFrameMs: 10,
} as const satisfies Partial<BoardTiming>;

/** The next patch version: the virtual rig's ota-upgrade candidate. */
function nextVersion(version: string): string {
  const parts = version.split('.').map((p) => Number.parseInt(p, 10));
  const last = parts.length - 1;
  parts[last] = (parts[last] ?? 0) + 1;
  return parts.join('.');
}

/**
 * The virtual firmware the rig flashes into a virtual board when not told what to flash: for a
 * replica, of the replica's firmware version, so `initialize.version` holds the board to it.
 */
export function virtualFirmwareFor(config: BoardConfig): FirmwareUnderTest & { app: Uint8Array } {
  const built = buildVirtualFirmware({
    chip: config.chip ?? 'esp32s3',
    version: config.replicaFile?.board.firmwareVersion ?? '2.4.2',
    board: config.variant ?? config.virtual?.preset ?? 'bread-compact-wifi',
  });
  return {
    image: placeImage('virtual firmware', built.merged, 0),
    version: built.version,
    chip: built.chip,
    app: built.app,
  };
}

/** The virtual rig's ota-upgrade candidate: the same board's firmware, one patch version on. */
export function virtualCandidateFor(config: BoardConfig, version: string): Uint8Array {
  return buildVirtualFirmware({
    chip: config.chip ?? 'esp32s3',
    version: nextVersion(version),
    board: config.variant ?? config.virtual?.preset ?? 'bread-compact-wifi',
  }).app;
}
