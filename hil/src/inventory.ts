/**
 * The rig inventory, `hil.config.json`: which boards, how to find and reset them, how their
 * sessions start, what they must list. Validated against hil.config.schema.json; an error
 * names the field (`boards[1].port`). With no inventory and no board attached, the default
 * virtual rig stands in: a bread-compact-wifi board and the tool-rich robot board.
 */

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  BOARD_PRESETS,
  parseReplica,
  ReplicaError,
  type ReplicaFile,
  virtualMac,
} from '@xiaozhi-mcp/device';
import type { RegressionName } from '@xiaozhi-mcp/device/testing';
import { XIAOZHI_CHIP_NAMES, type XiaozhiChipName } from '@xiaozhi-mcp/firmware';
import {
  formatPortSelector,
  type PortInfo,
  type PortKind,
  portIdentity,
} from '@xiaozhi-mcp/serial';
import type { Ajv, ErrorObject } from 'ajv';
import type { CompareThresholds, SuiteName } from './model.js';

/** The inventory's `compare` thresholds; unset ones keep their defaults. */
export type CompareConfig = Partial<CompareThresholds>;

/**
 * How the flasher resets the board into download mode (esptool's reset strategies): `none` when
 * someone holds BOOT while resetting. Unset: the port's own (USB-JTAG on a native-USB port,
 * else tight then classic; classic on Windows). With `none` neither the flasher nor the rig
 * touches DTR or RTS: a person presses the board's buttons when asked.
 */
export type ResetStyle = 'classic' | 'tight' | 'usb-jtag' | 'none';
/**
 * How a board's session starts: a BOOT click through DTR, a person pressing BOOT, by itself
 * (`none`), or `mqtt`: our OTA reply gives the board MQTT, it connects at boot and stays
 * connected, and MCP needs no session start at all (docs/protocol.md §5).
 */
export type SessionStart = 'boot-click' | 'manual' | 'none' | 'mqtt';

export interface LatencyConfig {
  readonly calls?: number;
  readonly warmup?: number;
  readonly tool?: string;
  readonly p50Ms?: number;
  readonly p99Ms?: number;
}

export interface BoardConfig {
  readonly name: string;
  /**
   * A path, `serial:<sn>`, `usb:<vid>:<pid>`, `by-id:<name>`, `rfc2217://<host>:<port>` (a board
   * on another host), or `virtual:<name>`. None: a board
   * without a serial cable, reached over the network only (network-board.ts).
   */
  readonly port?: string;
  /**
   * The board's Device-Id (MAC). A board without `port`: it tells its OTA check apart. A board
   * on `mqtt`: the rig offers it MQTT before its OTA check, which needs its MAC (a serial board
   * has it read by the identify step, or from its native USB port's serial number, otherwise).
   */
  readonly deviceId?: string;
  /** A board without `port`: its Client-Id (UUID), when its MAC is not known. */
  readonly clientId?: string;
  readonly chip?: XiaozhiChipName;
  readonly variant?: string;
  /**
   * The image `hil run` flashes onto this board (a merged image or an app image), relative to
   * the inventory file; `--firmware` overrides it.
   */
  readonly firmware?: string;
  readonly baud?: number;
  readonly flashBaud?: number;
  /**
   * The baud ladder of a flash, tried in order: a failed write steps down to the next rate
   * (default `flashBaud`, then 460800 and 115200 below it).
   */
  readonly flashBauds?: readonly number[];
  readonly reset?: ResetStyle;
  readonly session?: SessionStart;
  readonly expectedTools?: readonly string[];
  /** How many tools the board lists with user tools (`tools-list.stable`). */
  readonly expectedToolCount?: number;
  /**
   * Tools `tools-call.safe-tools` may call, with arguments from their schemas (default: a
   * conservative built-in list; `self.reboot` and `self.upgrade_firmware` are never called).
   */
  readonly safeTools?: readonly string[];
  /** Bound on each call of the safe-tools sweep (default 5000 ms). */
  readonly safeToolTimeoutMs?: number;
  readonly skip?: readonly string[];
  readonly latency?: LatencyConfig;
  /**
   * The replica `virtual.replica` names, read and checked when the inventory was read
   * (loadInventory): not an inventory setting of its own.
   */
  readonly replicaFile?: ReplicaFile;
  readonly virtual?: {
    /**
     * A replica file (`replica.json`, relative to the inventory file): on a `virtual:<name>`
     * port, the virtual board runs its tool set with its identity; on a board without port, hil
     * itself runs it as a network-only virtual board.
     */
    readonly replica?: string;
    readonly preset?: 'bread-compact-wifi' | 'otto-robot';
    readonly flashSizeMb?: 4 | 8 | 16;
    /**
     * `uart` (default): a USB-UART bridge with the auto-reset circuit. `native`: the chip's
     * USB-Serial-JTAG (303a:1001), re-enumerating under a new path on every reset.
     */
    readonly usb?: 'uart' | 'native';
    /**
     * `usb: native`: how long the board is off the bus on each reset (default 250 ms; a real
     * board takes 1–3 s). What it prints meanwhile is lost, as on a real USB-Serial-JTAG console.
     */
    readonly reenumerateMs?: number;
    /**
     * `direct` (default): hil opens the board's port itself. `rfc2217`: a local RFC 2217 server
     * shares it and hil reaches it through `rfc2217://127.0.0.1:<port>`, the path of a board on
     * another host.
     */
    readonly via?: 'direct' | 'rfc2217';
    /** Secure Boot burnt in the chip's eFuse: a merged image is refused before it is written. */
    readonly secureBoot?: boolean;
    /** Flash encryption in release mode burnt in the chip's eFuse: no plaintext is written. */
    readonly flashEncryption?: boolean;
    /** The chip's revision as esptool prints it (`v0.1`); default the virtual chip's own. */
    readonly chipRevision?: string;
    readonly faults?: {
      readonly replyLatencyMs?: number;
      readonly disconnectOnCall?: string;
      readonly pageBudgetBytes?: number;
      readonly crashOnHello?: boolean;
      readonly panicAtBoot?: boolean;
      /** Fields the board leaves out of its hello (`transport`, `features.mcp`). */
      readonly helloWithout?: readonly string[];
      /** Fields the board leaves out of `initialize`'s result (`serverInfo`). */
      readonly initializeWithout?: readonly string[];
      /** Every `tools/list` page's `nextCursor` names its own first tool. */
      readonly cursorLoop?: boolean;
      /** The board vanishes from the USB bus when this tool is called. */
      readonly unplugOnCall?: string;
      /** Firmware regressions the virtual board is built with, by name (device `regressions.ts`). */
      readonly regressions?: readonly RegressionName[];
    };
  };
}

export interface RigConfig {
  readonly server?: {
    readonly host?: string;
    readonly port?: number;
    readonly publicUrl?: string;
    /** The embedded MQTT broker's port, on `host`, when a board runs over MQTT (default 0: the OS's). */
    readonly mqttPort?: number;
  };
  readonly wifi?: { readonly ssid: string; readonly password?: string };
  readonly suites?: readonly SuiteName[];
  /**
   * The image for each board of a variant (`{"otto-robot": "builds/otto/merged-binary.bin"}`),
   * relative to the inventory file; a board's own `firmware` and `--firmware` override it.
   */
  readonly firmware?: Readonly<Record<string, string>>;
  readonly baseline?: string;
  readonly latency?: LatencyConfig;
  /** When `hil compare` and `hil run --compare-to` call a difference a regression (docs/ci.md §1). */
  readonly compare?: CompareConfig;
  readonly boards: readonly BoardConfig[];
}

export class InventoryError extends Error {
  override readonly name = 'InventoryError';
  constructor(
    message: string,
    /** The offending field, e.g. `boards[1].port`. */
    readonly field: string | undefined,
  ) {
    super(message);
  }
}

const here = dirname(fileURLToPath(import.meta.url));
/** The JSON Schema shipped with the package (one level up from src/ and from dist/). */
export const SCHEMA_PATH = join(here, '..', 'hil.config.schema.json');

let validator: ReturnType<Ajv['compile']> | undefined;
function validate(value: unknown): readonly ErrorObject[] {
  if (validator === undefined) {
    const schema = JSON.parse(readFileSync(SCHEMA_PATH, 'utf8')) as object;
    // Loaded with the first inventory read: the default virtual rig reads none.
    const { Ajv: Validator } = createRequire(import.meta.url)('ajv') as typeof import('ajv');
    validator = new Validator({ allErrors: true, strict: false }).compile(schema);
  }
  return validator(value) ? [] : (validator.errors ?? []);
}

/** `/boards/1/port` → `boards[1].port`. */
function fieldOf(error: ErrorObject): string {
  let field = error.instancePath
    .split('/')
    .filter(Boolean)
    .map((part) => (/^\d+$/.test(part) ? `[${part}]` : `.${part}`))
    .join('')
    .replace(/^\./, '');
  if (error.keyword === 'required')
    field += `${field ? '.' : ''}${String(error.params.missingProperty)}`;
  if (error.keyword === 'additionalProperties')
    field += `${field ? '.' : ''}${String(error.params.additionalProperty)}`;
  return field;
}

function describe(error: ErrorObject): string {
  const field = fieldOf(error) || '(root)';
  switch (error.keyword) {
    case 'required':
      return `${field} is required`;
    case 'additionalProperties':
      return `${field} is not a known setting`;
    case 'enum':
      return `${field} must be one of ${(error.params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`;
    default:
      return `${field} ${error.message ?? 'is invalid'}`;
  }
}

/**
 * A `virtual:` port stands in for a board of one of the device SDK's presets: `virtual.preset`,
 * else the board's `variant`. Refused here, as bad input, rather than when the rig plugs it in.
 */
function virtualBoardRefusal(
  board: BoardConfig,
  index: number,
): { message: string; field: string } | undefined {
  if (board.port?.startsWith('virtual:') !== true) return undefined;
  // A replica is its own board: its tool set stands in, whatever the variant.
  if (board.virtual?.replica !== undefined) return undefined;
  const known = Object.keys(BOARD_PRESETS);
  const preset = board.virtual?.preset;
  if (preset !== undefined)
    return Object.hasOwn(BOARD_PRESETS, preset)
      ? undefined
      : {
          message: `boards[${index}].virtual.preset "${preset}" is not a virtual board; known presets: ${known.join(', ')}`,
          field: `boards[${index}].virtual.preset`,
        };
  const variant = board.variant;
  if (variant === undefined || Object.hasOwn(BOARD_PRESETS, variant)) return undefined;
  return {
    message: `boards[${index}].variant "${variant}" is not a virtual board's; known variants: ${known.join(', ')} (or name one in virtual.preset to stand in for ${variant})`,
    field: `boards[${index}].variant`,
  };
}

/** Validates a parsed inventory; throws an {@link InventoryError} naming the first bad field. */
export function parseInventory(value: unknown, source = 'hil.config.json'): RigConfig {
  const errors = validate(value);
  const first = errors[0];
  if (first !== undefined) {
    const more =
      errors.length > 1
        ? ` (and ${errors.length - 1} more: ${errors.slice(1, 4).map(describe).join('; ')})`
        : '';
    throw new InventoryError(`${source}: ${describe(first)}${more}`, fieldOf(first) || undefined);
  }
  const config = value as RigConfig;
  // The firmware speaks TLS to an endpoint on 8883 (docs/protocol.md §5); our broker is plain MQTT.
  if (config.server?.mqttPort === 8883)
    throw new InventoryError(
      `${source}: server.mqttPort 8883 is where boards speak TLS; the embedded broker is plain MQTT: take 1883, another port, or 0 (the OS's)`,
      'server.mqttPort',
    );
  const names = new Set<string>();
  for (const [index, board] of config.boards.entries()) {
    if (names.has(board.name))
      throw new InventoryError(
        `${source}: boards[${index}].name "${board.name}" is used twice`,
        `boards[${index}].name`,
      );
    names.add(board.name);
    if (board.virtual !== undefined && board.port?.startsWith('virtual:') !== true) {
      // A board without port takes a replica, which hil runs itself: nothing else of `virtual`.
      const other = Object.keys(board.virtual).find((key) => key !== 'replica');
      if (board.port !== undefined || other !== undefined)
        throw new InventoryError(
          board.port === undefined
            ? `${source}: boards[${index}].virtual is only for virtual:<name> ports: a board without port takes only virtual.replica, not virtual.${other}`
            : `${source}: boards[${index}].virtual is only for virtual:<name> ports and boards without port (virtual.replica)`,
          board.port === undefined
            ? `boards[${index}].virtual.${other}`
            : `boards[${index}].virtual`,
        );
    }
    const virtualBoard = virtualBoardRefusal(board, index);
    if (virtualBoard !== undefined)
      throw new InventoryError(`${source}: ${virtualBoard.message}`, virtualBoard.field);
    if (board.virtual?.reenumerateMs !== undefined && board.virtual.usb !== 'native') {
      throw new InventoryError(
        `${source}: boards[${index}].virtual.reenumerateMs is for a board on native USB, which re-enumerates on reset: add "usb": "native", or leave it out`,
        `boards[${index}].virtual.reenumerateMs`,
      );
    }
    // A replica hil runs gives its MAC (loadInventory's withReplicas).
    if (
      board.port === undefined &&
      board.session === 'mqtt' &&
      board.deviceId === undefined &&
      board.virtual?.replica === undefined
    ) {
      throw new InventoryError(
        `${source}: boards[${index}].session mqtt needs the board's MAC before its OTA check (our reply offers MQTT by Device-Id): give its deviceId (aa:bb:cc:dd:ee:ff)`,
        `boards[${index}].deviceId`,
      );
    }
    if (board.port === undefined && board.session === 'boot-click') {
      throw new InventoryError(
        `${source}: boards[${index}].session boot-click needs a serial port (DTR presses BOOT); a board without port opens its sessions by itself (none) or a person starts them (manual)`,
        `boards[${index}].session`,
      );
    }
  }
  // A board without port and without deviceId or clientId takes the first device nobody
  // claims: only one such board can tell which device is whose. A replica hil runs is known
  // by its MAC.
  const anonymous = config.boards.flatMap((board, index) =>
    board.port === undefined &&
    board.deviceId === undefined &&
    board.clientId === undefined &&
    board.virtual?.replica === undefined
      ? [index]
      : [],
  );
  if (anonymous.length > 1) {
    throw new InventoryError(
      `${source}: boards ${anonymous.map((i) => config.boards[i]?.name).join(', ')} have no port and no deviceId or clientId: give each its deviceId (MAC) or clientId, so their OTA checks can be told apart`,
      `boards[${anonymous[1]}].deviceId`,
    );
  }
  return config;
}

/** Reads and validates an inventory file. */
export function loadInventory(path: string): RigConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new InventoryError(
      `cannot read ${path}: ${(error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (error as Error).message}`,
      undefined,
    );
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new InventoryError(`${path} is not valid JSON: ${(error as Error).message}`, undefined);
  }
  return withReplicas(withPathsFrom(parseInventory(value, path), dirname(path)), path);
}

/** The chips a virtual board can be (the inventory's `chip`): those xiaozhi-esp32 builds for. */
const VIRTUAL_CHIPS: readonly string[] = XIAOZHI_CHIP_NAMES;

/**
 * Reads each board's `virtual.replica` (bad input, exit 2, before any board is touched: the
 * message names the file and the replica's field), checks that the inventory's `variant` and
 * `chip` agree with the replica's, takes them from it where the inventory leaves them out, and
 * gives a board without port the replica's MAC (its `deviceId`) unless the inventory names one.
 */
function withReplicas(config: RigConfig, source: string): RigConfig {
  // Two boards of a rig with one MAC could not be told apart at the backend.
  const macs = new Map<string, number>();
  const claim = (mac: string | undefined, index: number) => {
    if (mac === undefined) return;
    const other = macs.get(mac.toLowerCase());
    if (other !== undefined)
      throw new InventoryError(
        `${source}: boards[${index}] would have the MAC ${mac.toLowerCase()} of boards[${other}] (a replica's): give one of them its own deviceId`,
        `boards[${index}].deviceId`,
      );
    macs.set(mac.toLowerCase(), index);
  };
  for (const [index, board] of config.boards.entries()) claim(board.deviceId, index);
  return {
    ...config,
    boards: config.boards.map((board, index) => {
      const file = board.virtual?.replica;
      if (file === undefined) return board;
      const at = `boards[${index}].virtual.replica`;
      let text: string;
      try {
        text = readFileSync(file, 'utf8');
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code;
        throw new InventoryError(
          `${source}: ${at} ${file}: ${code === 'ENOENT' ? 'no such file' : (error as Error).message}`,
          at,
        );
      }
      let replica: ReplicaFile;
      try {
        replica = parseReplica(text, file);
      } catch (error) {
        if (!(error instanceof ReplicaError)) throw error;
        const message = error.message.includes(file) ? error.message : `${file}: ${error.message}`;
        throw new InventoryError(
          `${source}: ${at} ${message}${message.includes(error.field) ? '' : ` (${error.field})`}`,
          `${at}: ${error.field}`,
        );
      }
      const { variant, chip, mac } = replica.board;
      if (board.variant !== undefined && board.variant !== variant)
        throw new InventoryError(
          `${source}: boards[${index}].variant "${board.variant}" is not the replica's: ${file} is a ${variant} (board.variant); leave variant out to take the replica's`,
          `boards[${index}].variant`,
        );
      if (board.chip !== undefined && board.chip !== chip)
        throw new InventoryError(
          `${source}: boards[${index}].chip "${board.chip}" is not the replica's: ${file} runs on ${chip} (board.chip); leave chip out to take the replica's`,
          `boards[${index}].chip`,
        );
      if (!VIRTUAL_CHIPS.includes(chip))
        throw new InventoryError(
          `${source}: ${at} ${file}: board.chip "${chip}" is not a chip a virtual board can be: ${VIRTUAL_CHIPS.join(', ')}`,
          `${at}: board.chip`,
        );
      const deviceId =
        board.deviceId ?? (board.port === undefined ? (mac ?? virtualMac(board.name)) : undefined);
      // The MAC the board will have: its deviceId, else the replica's.
      if (board.deviceId === undefined) claim(deviceId ?? mac, index);
      return {
        ...board,
        variant,
        chip: chip as XiaozhiChipName,
        ...(deviceId === undefined ? {} : { deviceId }),
        replicaFile: replica,
      };
    }),
  };
}

/** The inventory's image paths, which are relative to its file, resolved from its folder. */
function withPathsFrom(config: RigConfig, folder: string): RigConfig {
  const firmware = config.firmware;
  return {
    ...config,
    ...(firmware === undefined
      ? {}
      : {
          firmware: Object.fromEntries(
            Object.entries(firmware).map(([variant, path]) => [variant, resolve(folder, path)]),
          ),
        }),
    boards: config.boards.map((board) => {
      const replica = board.virtual?.replica;
      const withReplica =
        replica === undefined
          ? board
          : { ...board, virtual: { ...board.virtual, replica: resolve(folder, replica) } };
      return board.firmware === undefined
        ? withReplica
        : { ...withReplica, firmware: resolve(folder, board.firmware) };
    }),
  };
}

/** The rig used when there is no inventory and no board: two virtual boards. */
export const DEFAULT_VIRTUAL_RIG: RigConfig = {
  wifi: { ssid: 'hil-virtual', password: 'virtual-rig' },
  // Stricter than the default budget (suites/latency.ts): a virtual board answers in-process.
  latency: { p50Ms: 50, p99Ms: 500 },
  boards: [
    {
      name: 'bread-compact-wifi',
      port: 'virtual:bread-compact-wifi',
      chip: 'esp32s3',
      variant: 'bread-compact-wifi',
      // Over MQTT: reached with no click; a click opens its UDP audio session (audio.uplink).
      session: 'mqtt',
      expectedTools: [
        'self.get_device_status',
        'self.audio_speaker.set_volume',
        'self.lamp.turn_on',
        'self.reboot',
      ],
      virtual: { preset: 'bread-compact-wifi', flashSizeMb: 16 },
    },
    {
      name: 'otto-robot',
      port: 'virtual:otto-robot',
      chip: 'esp32s3',
      variant: 'otto-robot',
      session: 'boot-click',
      expectedTools: ['self.get_device_status', 'self.otto.walk', 'self.otto.home', 'self.reboot'],
      // Behind a local RFC 2217 server, so every run qualifies the path of a board on another host,
      // and over WebSocket, so every run qualifies both transports.
      virtual: { preset: 'otto-robot', flashSizeMb: 16, via: 'rfc2217' },
    },
  ],
};

/**
 * An inventory entry for an attached port, as `hil boards` prints it. Its selector is the
 * board's identity among the `listed` ports (`serial:<sn>`, or `by-path:<USB location>` where
 * the serial number is missing, generic or shared), else `usb:<vid>:<pid>` when no other listed
 * port has those, else the path.
 */
export function boardEntryFor(
  port: PortInfo,
  index: number,
  listed: readonly PortInfo[] = [port],
): BoardConfig {
  const identity = portIdentity(port, listed);
  const vidPid =
    port.vendorId && port.productId ? `usb:${port.vendorId}:${port.productId}` : undefined;
  const selector =
    !('path' in identity) ||
    vidPid === undefined ||
    listed.some(
      (other) =>
        other.path !== port.path &&
        other.vendorId === port.vendorId &&
        other.productId === port.productId,
    )
      ? formatPortSelector(identity)
      : vidPid;
  const native = port.kind === 'usb-serial-jtag';
  const mac = native ? macOfSerialNumber(port.serialNumber) : undefined;
  return {
    name: `board-${index + 1}`,
    port: selector,
    ...(mac === undefined ? {} : { deviceId: mac }),
    baud: 115200,
    // What the port's kind implies on native USB; a bridge gets no `reset`, so the flasher's
    // own plan applies (esptool's: tight then classic on Unix, classic on Windows), not a
    // classic reset forced on every host.
    ...(native ? { reset: 'usb-jtag' as const } : {}),
    // Native USB boards cannot be clicked through DTR (docs/protocol.md §9): over MQTT they
    // need no click (§5).
    session: native ? 'mqtt' : 'boot-click',
  };
}

/**
 * The MAC a native USB port names as its USB serial number: the ROM's USB-Serial-JTAG
 * descriptor's serial string is the chip's MAC (Espressif, esp-iot-solution "usb_device_const_COM":
 * on ESP32-S3/C3/C5/C6/P4 the `Serial` is the MAC address string), e.g. `F4:12:FA:43:3B:E4`. Lower case.
 */
export function macOfSerialNumber(serialNumber: string | undefined): string | undefined {
  if (serialNumber === undefined || !/^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$/.test(serialNumber))
    return undefined;
  return serialNumber.toLowerCase();
}

/** Whether the inventory says the board is on its chip's native USB (USB-Serial-JTAG). */
export function isNativeUsb(config: BoardConfig, portKind?: PortKind): boolean {
  return (
    portKind === 'usb-serial-jtag' ||
    config.virtual?.usb === 'native' ||
    config.reset === 'usb-jtag'
  );
}

/**
 * How a board's sessions start: the inventory's `session`; unset, `none` for a board without
 * port (it opens its own), `mqtt` for a board on native USB (DTR cannot press its BOOT; over
 * MQTT it needs no press), else `boot-click`. `portKind`: the opened port's, once known.
 */
export function sessionStartFor(config: BoardConfig, portKind?: PortKind): SessionStart {
  if (config.session !== undefined) return config.session;
  if (config.port === undefined) return 'none';
  return isNativeUsb(config, portKind) ? 'mqtt' : 'boot-click';
}

/** Resolves the baseline path against the inventory's folder. */
export function baselinePath(
  config: RigConfig,
  inventoryPath: string | undefined,
): string | undefined {
  if (config.baseline === undefined) return undefined;
  return inventoryPath === undefined
    ? resolve(config.baseline)
    : resolve(dirname(inventoryPath), config.baseline);
}
