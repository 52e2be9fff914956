/**
 * Virtual boards that live on disk: `virtual:<name>` is a board whose SPI flash is a file,
 * `<dir>/<name>.flash`, with a sidecar `<name>.json` saying what board it is. Resolving one
 * builds the board from those files and powers it on, as plugging in a real board does; after
 * that the serial commands run the same code as for a real port, only the binding and the
 * path differ. What one command writes (a firmware, NVS) is what the next one boots.
 *
 * It is a `PortProvider` of `@xiaozhi-mcp/serial/provider`, registered by whoever composes the
 * commands (`xiaozhi-mcp`, `hil`), so the serial layer never imports the device SDK. Its refusals
 * are `PortProviderError`s: the request to correct (`usage`) or the board it could not make
 * ready (`failed`); the CLIs turn them into exit codes.
 */
import { createHash } from 'node:crypto';
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  writeFileSync,
} from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import {
  findPartition,
  PARTITION_TABLE_MAX_SIZE,
  PARTITION_TABLE_OFFSET,
  readAppImage,
  readNvsPartition,
  readPartitionTable,
} from '@xiaozhi-mcp/firmware';
import {
  BoardLockError,
  lockBoard,
  type PortProvider,
  PortProviderError,
  type ProvidedBoard,
  type ProviderListing,
  type ProviderRequest,
  type ResolvedPort,
  SerialError,
} from '@xiaozhi-mcp/serial/provider';
import type { BoardPreset } from '../board-api.js';
import { DeviceError } from '../errors.js';
import { FlashStorage } from '../flash-storage.js';
import { BOARD_PRESETS } from '../presets.js';
import type { RunningApp } from '../virtual-board/types.js';
import { type BoardTiming, VirtualBoard } from '../virtual-board.js';
import { type BoardSilicon, efuseRegisters, parseChipRevision } from './efuse.js';
import { DEFAULT_REENUMERATE_MS, type VirtualSerialDevice } from './usb-device.js';
import { VirtualSerialBinding } from './virtual-binding.js';
import { virtualPort } from './virtual-bus.js';

export const VIRTUAL_PREFIX = 'virtual:';
export const DEFAULT_PRESET = 'bread-compact-wifi';
export const DEFAULT_FLASH_SIZE_MB = 16;
export const FLASH_SIZES_MB = [4, 8, 16] as const;
export type FlashSizeMb = (typeof FLASH_SIZES_MB)[number];

/** The sidecar `<name>.json`: what a virtual board is. Written once, when the board is created. */
export interface VirtualBoardSpec {
  readonly preset: string;
  readonly chip: string;
  /** Lowercase `aa:bb:cc:dd:ee:ff`, derived from the name. */
  readonly mac: string;
  readonly flashSizeMb: FlashSizeMb;
  /**
   * The chip's eFuses, added to the sidecar by hand (they are burnt once, so no command sets
   * them): Secure Boot on, flash encryption in release mode, the chip revision (`v0.2`).
   */
  readonly secureBoot?: boolean;
  readonly flashEncryption?: boolean;
  readonly chipRevision?: string;
}

export interface VirtualBoardEntry extends VirtualBoardSpec {
  readonly name: string;
  /** `virtual:<name>`, the selector that reaches it. */
  readonly port: string;
  readonly flashPath: string;
  readonly sidecarPath: string;
}

/** What a virtual board's flash file holds, read without booting it. */
export interface VirtualFlashSummary {
  /** The app's version, when the flash holds a bootable app. */
  readonly firmware?: string;
  readonly ssid?: string;
  readonly otaUrl?: string;
}

export interface VirtualPortListing extends VirtualBoardEntry, VirtualFlashSummary {}

/** A resolved virtual board: the board itself, plugged into its own bus. */
export interface ResolvedVirtual {
  readonly board: VirtualBoard;
  readonly device: VirtualSerialDevice;
  /** The bus the board is plugged into (tests unplug and re-plug it). */
  readonly binding: VirtualSerialBinding;
  readonly entry: VirtualBoardEntry;
  /** The board was created by this call (its sidecar and flash file are new). */
  readonly created: boolean;
}

/**
 * What the store's boards run instead of their sidecar's preset (a replica's identity and tool
 * set): the stored board keeps its flash file, its lock and its eFuses (Secure Boot, flash
 * encryption, chip revision).
 */
export interface VirtualStoreBoard {
  readonly preset: BoardPreset;
  /** Default: the stored board's MAC. */
  readonly mac?: string;
  /** The app it runs at first power-on (a replica's version). */
  readonly app?: Partial<RunningApp>;
}

export interface VirtualBoardStoreOptions {
  /** Default {@link defaultVirtualDir}. */
  readonly dir?: string;
  /** Firmware timing (tests shorten it). */
  readonly timing?: Partial<BoardTiming>;
  /** Called with each board once it is plugged in and powered (tests inject faults). */
  readonly onBoard?: (virtual: ResolvedVirtual) => void;
  /**
   * How the boards reach the host: `uart` (default, a CP2102 bridge at the path `virtual:<name>`)
   * or `native` (the chip's USB-Serial-JTAG at `/dev/ttyACM<n>`, re-enumerating under a new path
   * on every reset, `reenumerateMs` later; see `VirtualBusBoard.usb`).
   */
  readonly usb?: 'uart' | 'native';
  /** Native USB: how long the port is gone on each reset. Default `DEFAULT_REENUMERATE_MS`. */
  readonly reenumerateMs?: number;
  /**
   * Every board resolved runs this instead of its sidecar's preset; a board `--create` makes
   * gets this preset's flash size unless `--flash-size` says otherwise.
   */
  readonly board?: VirtualStoreBoard;
}

/** `$XIAOZHI_VIRTUAL_DIR`, else `~/.cache/xiaozhi-mcp/virtual`. */
export function defaultVirtualDir(env: NodeJS.ProcessEnv = process.env): string {
  const dir = env.XIAOZHI_VIRTUAL_DIR;
  return dir !== undefined && dir !== ''
    ? dir
    : join(homedir(), '.cache', 'xiaozhi-mcp', 'virtual');
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

/** Validates `<name>` of `virtual:<name>`: it names files, so no slashes or dots first. */
export function virtualName(selector: string): string {
  const name = selector.slice(VIRTUAL_PREFIX.length).trim();
  if (!NAME.test(name)) {
    throw new PortProviderError(
      'usage',
      `port selector '${selector}': a virtual board name is 1 to 64 letters, digits, '.', '_' or '-', not starting with '.', e.g. virtual:desk`,
    );
  }
  return name;
}

/** Espressif's OUI and three bytes of the name's hash: the same name, the same board. */
export function virtualMac(name: string): string {
  const hash = createHash('sha256').update(`xiaozhi-mcp virtual board ${name}`).digest();
  return ['f4', '12', 'fa', ...[...hash.subarray(0, 3)].map((b) => b.toString(16).padStart(2, '0'))]
    .join(':')
    .toLowerCase();
}

/** `--flash-size`: 4, 8 or 16. */
export function parseFlashSize(value: string | undefined): FlashSizeMb | undefined {
  if (value === undefined) return undefined;
  const size = FLASH_SIZES_MB.find((s) => String(s) === value.trim().replace(/\s*MB$/i, ''));
  if (size === undefined)
    throw new PortProviderError(
      'usage',
      `--flash-size must be 4, 8 or 16 (MB), got ${JSON.stringify(value)}`,
    );
  return size;
}

/** `--board`: a known preset. */
export function parsePreset(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (!Object.hasOwn(BOARD_PRESETS, value)) {
    throw new PortProviderError(
      'usage',
      `unknown board preset ${JSON.stringify(value)}; known: ${Object.keys(BOARD_PRESETS).join(', ')}`,
    );
  }
  return value;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function entryFor(dir: string, name: string, spec: VirtualBoardSpec): VirtualBoardEntry {
  return {
    ...spec,
    name,
    port: `${VIRTUAL_PREFIX}${name}`,
    flashPath: join(dir, `${name}.flash`),
    sidecarPath: join(dir, `${name}.json`),
  };
}

function readSpec(path: string): VirtualBoardSpec {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new PortProviderError(
      'failed',
      `cannot read the virtual board file ${path} (${errorMessage(error)}); delete it and its .flash file to start that board over`,
    );
  }
  const spec = parsed as Partial<Record<keyof VirtualBoardSpec, unknown>> | null;
  const flashSizeMb = FLASH_SIZES_MB.find((s) => s === spec?.flashSizeMb);
  const optional = (key: 'secureBoot' | 'flashEncryption' | 'chipRevision', type: string) =>
    spec?.[key] === undefined || typeof spec[key] === type;
  if (
    typeof spec?.preset !== 'string' ||
    !Object.hasOwn(BOARD_PRESETS, spec.preset) ||
    typeof spec.chip !== 'string' ||
    typeof spec.mac !== 'string' ||
    !/^([0-9a-f]{2}:){5}[0-9a-f]{2}$/.test(spec.mac) ||
    flashSizeMb === undefined ||
    !optional('secureBoot', 'boolean') ||
    !optional('flashEncryption', 'boolean') ||
    !optional('chipRevision', 'string')
  ) {
    throw new PortProviderError(
      'failed',
      `the virtual board file ${path} is not {preset, chip, mac, flashSizeMb} with a known preset and a size of 4, 8 or 16 (and optionally secureBoot, flashEncryption true or false, chipRevision "v0.2"); delete it and its .flash file to start that board over`,
    );
  }
  return {
    preset: spec.preset,
    chip: spec.chip,
    mac: spec.mac,
    flashSizeMb,
    ...(spec.secureBoot === true ? { secureBoot: true } : {}),
    ...(spec.flashEncryption === true ? { flashEncryption: true } : {}),
    ...(typeof spec.chipRevision === 'string' ? { chipRevision: spec.chipRevision } : {}),
  };
}

/**
 * The eFuses a sidecar gives its board's chip; one the chip cannot record is the sidecar's fault,
 * said before the board is built.
 */
function siliconOf(
  entry: VirtualBoardEntry,
  chip = BOARD_PRESETS[entry.preset]?.chip,
): BoardSilicon {
  try {
    const silicon: BoardSilicon = {
      ...(entry.secureBoot === true ? { secureBoot: true } : {}),
      ...(entry.flashEncryption === true ? { flashEncryption: true } : {}),
      ...(entry.chipRevision === undefined
        ? {}
        : { revision: parseChipRevision(entry.chipRevision) }),
    };
    if (chip !== undefined) efuseRegisters(chip, silicon);
    return silicon;
  } catch (error) {
    throw new PortProviderError(
      'failed',
      `the virtual board file ${entry.sidecarPath}: ${errorMessage(error)}; correct it, or delete it and its .flash file to start that board over`,
      { cause: error },
    );
  }
}

/** The virtual boards in `dir` (those with a sidecar), by name. A missing dir has none. */
export function listVirtualBoards(dir: string): VirtualBoardEntry[] {
  let files: string[];
  try {
    files = readdirSync(dir);
  } catch {
    return [];
  }
  const entries: VirtualBoardEntry[] = [];
  for (const file of files.sort()) {
    if (!file.endsWith('.json')) continue;
    const name = file.slice(0, -'.json'.length);
    if (!NAME.test(name)) continue;
    try {
      entries.push(entryFor(dir, name, readSpec(join(dir, file))));
    } catch {
      // Not one of ours, or damaged: resolving that board says so.
    }
  }
  return entries;
}

function readAt(fd: number, offset: number, size: number): Uint8Array {
  const buffer = new Uint8Array(size);
  const read = readSync(fd, buffer, 0, size, offset);
  return buffer.subarray(0, read);
}

/**
 * Reads the partition table, the first app's description and NVS `wifi` from a flash file,
 * as the virtual board's bootloader would; anything missing or damaged is simply left out.
 */
export function summarizeVirtualFlash(path: string): VirtualFlashSummary {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return {};
  }
  try {
    const table = readPartitionTable(readAt(fd, PARTITION_TABLE_OFFSET, PARTITION_TABLE_MAX_SIZE));
    const app = table.partitions.find(
      (p) => p.type === 0 && (p.subtype === 0x00 || p.subtype === 0x10),
    );
    let firmware: string | undefined;
    if (app !== undefined) {
      try {
        firmware = readAppImage(readAt(fd, app.offset, Math.min(app.size, 0x10000))).appDescription
          ?.version;
      } catch {
        firmware = undefined; // not a bootable app (erased or damaged)
      }
    }
    const nvs =
      findPartition(table, { label: 'nvs' }) ??
      findPartition(table, { type: 'data', subtype: 'nvs' });
    let ssid: string | undefined;
    let otaUrl: string | undefined;
    if (nvs !== undefined) {
      const bytes = readAt(fd, nvs.offset, nvs.size);
      if (!bytes.every((b) => b === 0xff)) {
        try {
          for (const entry of readNvsPartition(bytes)) {
            if (entry.namespace !== 'wifi' || typeof entry.value !== 'string') continue;
            if (entry.key === 'ssid') ssid = entry.value;
            if (entry.key === 'ota_url') otaUrl = entry.value;
          }
        } catch {
          // An unreadable NVS is what the firmware would erase: nothing provisioned.
        }
      }
    }
    return {
      ...(firmware === undefined ? {} : { firmware }),
      ...(ssid === undefined || ssid === '' ? {} : { ssid }),
      ...(otaUrl === undefined || otaUrl === '' ? {} : { otaUrl }),
    };
  } catch {
    return {}; // no partition table: an erased (or never flashed) board
  } finally {
    closeSync(fd);
  }
}

function listingLine(board: VirtualPortListing): string {
  const flash =
    board.firmware === undefined
      ? 'flash erased (no firmware)'
      : `firmware ${board.firmware}${board.ssid === undefined ? ', not provisioned' : `, wifi ${board.ssid}, ota ${board.otaUrl ?? '-'}`}`;
  return `${board.port.padEnd(22)} ${'virtual'.padEnd(10)} ${`${board.chip}/${board.flashSizeMb}MB`.padEnd(16)} ${board.mac.padEnd(18)} ${board.preset}: ${flash}`;
}

/** The virtual boards of one directory, as a port provider for the serial commands. */
export class VirtualBoardStore implements PortProvider {
  readonly prefix = VIRTUAL_PREFIX;
  readonly dir: string;
  readonly #timing: Partial<BoardTiming> | undefined;
  readonly #onBoard: ((virtual: ResolvedVirtual) => void) | undefined;
  readonly #usb: 'uart' | 'native';
  readonly #reenumerateMs: number;
  readonly #board: VirtualStoreBoard | undefined;

  constructor(options: VirtualBoardStoreOptions = {}) {
    this.dir = options.dir ?? defaultVirtualDir();
    this.#timing = options.timing;
    this.#onBoard = options.onBoard;
    this.#usb = options.usb ?? 'uart';
    this.#reenumerateMs = options.reenumerateMs ?? DEFAULT_REENUMERATE_MS;
    this.#board = options.board;
  }

  /** The boards with what their flash holds. */
  boards(): VirtualPortListing[] {
    return listVirtualBoards(this.dir).map((board) => ({
      ...board,
      ...summarizeVirtualFlash(board.flashPath),
    }));
  }

  listing(): ProviderListing {
    const boards = this.boards();
    return {
      boards: boards.map(
        (b): ProvidedBoard => ({
          port: b.port,
          summary: `${b.port} (${b.preset})`,
          line: listingLine(b),
        }),
      ),
      json: { virtual: boards, virtualDir: this.dir },
      none: `no virtual board in ${this.dir}`,
      selectorHint: 'virtual:<name> for a virtual board',
      createHint: '`flash <image> --port virtual:<name> --create` makes one',
    };
  }

  async resolve(selector: string, request: ProviderRequest = {}): Promise<ResolvedPort> {
    const preset = parsePreset(request.create?.board);
    const flashSizeMb = parseFlashSize(request.create?.flashSize);
    const name = virtualName(selector);
    const create =
      request.create === undefined
        ? undefined
        : {
            preset: preset ?? DEFAULT_PRESET,
            flashSizeMb: flashSizeMb ?? this.#boardFlashSize() ?? DEFAULT_FLASH_SIZE_MB,
          };
    const { entry, created } = this.#entry(name, create);
    const silicon = siliconOf(entry, this.#board?.preset.chip);
    // A real port is opened by one process at a time; the same goes for a flash file, or two
    // processes' boards would overwrite each other's NVS.
    let release: () => void;
    try {
      release = await lockBoard(entry.port, { dir: this.dir });
    } catch (error) {
      // A lock that cannot be taken here (its directory not writable) says so itself.
      if (!(error instanceof BoardLockError) || error.reason !== 'held') throw error;
      const pid = /pid (\d+)/.exec(error.message)?.[1];
      throw new SerialError(
        'PORT_BUSY',
        `${entry.port} is in use by another process${pid === undefined ? '' : ` (pid ${pid})`}; close the other program (a monitor, a flash) first`,
      );
    }
    let board: VirtualBoard;
    try {
      board = new VirtualBoard({
        preset: this.#board?.preset ?? entry.preset,
        mac: this.#board?.mac ?? entry.mac,
        ...(this.#board?.app === undefined ? {} : { app: this.#board.app }),
        flash: new FlashStorage({ size: entry.flashSizeMb * 1024 * 1024, path: entry.flashPath }),
        silicon,
        ...(this.#timing === undefined ? {} : { timing: this.#timing }),
      });
    } catch (error) {
      release();
      if (error instanceof DeviceError)
        throw new PortProviderError('failed', `cannot load ${entry.flashPath}: ${error.message}`, {
          cause: error,
        });
      if (this.#board !== undefined)
        throw new PortProviderError(
          'failed',
          `cannot run ${this.#board.preset.name} on ${entry.port}: ${errorMessage(error)}`,
          { cause: error },
        );
      throw error;
    }
    const binding = new VirtualSerialBinding();
    const device =
      this.#usb === 'native'
        ? binding.attach(board, { usbJtag: true, reenumerateMs: this.#reenumerateMs })
        : binding.attach(board, { path: entry.port });
    // USB power: the board runs whatever its flash holds (an erased flash boot-loops).
    board.powerOn();
    this.#announce(entry, created, preset, flashSizeMb, request);
    this.#onBoard?.({ board, device, binding, entry, created });
    let disposed = false;
    return virtualPort(binding, device, entry.port, () => {
      if (disposed) return;
      disposed = true;
      board.powerOff();
      binding.detach(device);
      release();
    });
  }

  /** The flash size of the board the store runs, for a board it creates. */
  #boardFlashSize(): FlashSizeMb | undefined {
    if (this.#board === undefined) return undefined;
    const size = this.#board.preset.flashSizeMb;
    const fits = FLASH_SIZES_MB.find((s) => s === size);
    if (fits === undefined)
      throw new PortProviderError(
        'usage',
        `${this.#board.preset.name} has ${size} MB of flash; a virtual board has 4, 8 or 16: give --flash-size`,
      );
    return fits;
  }

  /** Says that a board was created, or that creation options were ignored for an existing one. */
  #announce(
    entry: VirtualBoardEntry,
    created: boolean,
    preset: string | undefined,
    flashSizeMb: FlashSizeMb | undefined,
    request: ProviderRequest,
  ): void {
    if (created) {
      request.notify?.(
        'stdout',
        `created virtual board ${entry.port}: ${entry.preset} (${entry.chip}, ${entry.flashSizeMb} MB flash, MAC ${entry.mac}) in ${this.dir}\n`,
      );
    } else if (
      (preset !== undefined && preset !== entry.preset) ||
      (flashSizeMb !== undefined && flashSizeMb !== entry.flashSizeMb)
    ) {
      request.notify?.(
        'stderr',
        `${entry.port} already exists (${entry.preset}, ${entry.flashSizeMb} MB flash); --board and --flash-size apply only when creating a virtual board (delete ${entry.sidecarPath} and ${entry.flashPath} to start over)\n`,
      );
    }
  }

  /**
   * The board's entry, created (sidecar written) when missing and `create` says how; missing
   * without `create` is a usage error listing the boards in the directory.
   */
  #entry(
    name: string,
    create: { preset: string; flashSizeMb: FlashSizeMb } | undefined,
  ): { entry: VirtualBoardEntry; created: boolean } {
    const dir = this.dir;
    const sidecar = join(dir, `${name}.json`);
    if (existsSync(sidecar))
      return { entry: entryFor(dir, name, readSpec(sidecar)), created: false };
    if (create === undefined) {
      // A mistyped name must not become a new, erased board that boot-loops: creating one is
      // asked for (`--create`); bad usage, so exit 2, naming the boards there are.
      const known = listVirtualBoards(dir).map((board) => board.port);
      throw new PortProviderError(
        'usage',
        `no virtual board '${name}' in ${dir} (${known.length === 0 ? 'it has none' : `known: ${known.join(', ')}`}); add --create to make a new one, or set XIAOZHI_VIRTUAL_DIR if it lives elsewhere`,
      );
    }
    const preset = BOARD_PRESETS[create.preset];
    if (preset === undefined)
      throw new PortProviderError('usage', `unknown board preset ${JSON.stringify(create.preset)}`);
    const spec: VirtualBoardSpec = {
      preset: preset.name,
      chip: preset.chip,
      mac: virtualMac(name),
      flashSizeMb: create.flashSizeMb,
    };
    try {
      mkdirSync(dir, { recursive: true });
      writeFileSync(sidecar, `${JSON.stringify(spec, null, 2)}\n`, { flag: 'wx' });
    } catch (error) {
      // Another process created it meanwhile: use theirs.
      if ((error as NodeJS.ErrnoException).code === 'EEXIST')
        return { entry: entryFor(dir, name, readSpec(sidecar)), created: false };
      throw new PortProviderError(
        'failed',
        `cannot create virtual board '${name}' in ${dir}: ${errorMessage(error)}; set XIAOZHI_VIRTUAL_DIR to a writable directory`,
      );
    }
    return { entry: entryFor(dir, name, spec), created: true };
  }
}
