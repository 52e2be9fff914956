/**
 * Where the serial commands (`flash`, `provision`, `monitor`, `ports`) find a board: a real
 * port (path, `serial:`, `usb:`, `by-id:`, through the native binding) or `virtual:<name>`, a
 * virtual board whose SPI flash is a file, `$XIAOZHI_VIRTUAL_DIR/<name>.flash`, with a sidecar
 * `<name>.json` saying what board it is. Each command process builds the virtual board from
 * those files and powers it on, as plugging in a real board does; after that everything is
 * the same code as for a real port, only the binding and the path differ. What one command
 * writes (a firmware, NVS) is what the next one boots, like real hardware.
 *
 * Also the plumbing the commands share: their context (output, environment, how failures
 * exit) and the one-line failure report.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import {
  BOARD_PRESETS,
  type BoardTiming,
  DeviceError,
  FlashStorage,
  VirtualBoard,
  VirtualSerialBinding,
  type VirtualSerialDevice,
} from '@xiaozhi-mcp/device';
import {
  describePorts,
  FirmwareError,
  findPort,
  listPorts,
  type PortInfo,
  parsePortSelector,
  type SerialBinding,
} from '@xiaozhi-mcp/firmware';
import { BoardLockError, lockBoard } from '../lock.js';
import type { Output } from './boards.js';

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
}

export interface VirtualBoardEntry extends VirtualBoardSpec {
  readonly name: string;
  /** `virtual:<name>`, the selector that reaches it. */
  readonly port: string;
  readonly flashPath: string;
  readonly sidecarPath: string;
}

export interface ResolvePortOptions {
  /** Default {@link defaultVirtualDir}. */
  readonly virtualDir?: string;
  /** Create a missing virtual board like this (a missing board without it is an error). */
  readonly create?: { readonly preset: string; readonly flashSizeMb: FlashSizeMb };
  /** Virtual boards only: firmware timing (tests shorten it). */
  readonly timing?: Partial<BoardTiming>;
  /** Real ports only; default {@link listPorts}. */
  readonly lister?: () => Promise<PortInfo[]>;
  /** How long to look for a real port (it may be enumerating). Default 3000 ms. */
  readonly findTimeoutMs?: number;
}

export interface ResolvedVirtual {
  readonly board: VirtualBoard;
  readonly device: VirtualSerialDevice;
  /** The bus the board is plugged into (tests unplug and re-plug it). */
  readonly binding: VirtualSerialBinding;
  readonly entry: VirtualBoardEntry;
  /** The board was created by this call (its sidecar and flash file are new). */
  readonly created: boolean;
  /** Powers the board off, unplugs it and releases its lock; safe to call twice. */
  dispose(): void;
}

export interface ResolvedPort {
  readonly binding: SerialBinding;
  readonly path: string;
  readonly info: PortInfo;
  /** How messages name the port: `virtual:desk`, or the device path. */
  readonly label: string;
  readonly virtual?: ResolvedVirtual;
  /** Whether the device is still there (an unplug does not always emit `close`). */
  present(path: string): Promise<boolean>;
  /** The same device (by USB serial number) again, e.g. after it re-enumerated on reset. */
  refind(timeoutMs: number, signal?: AbortSignal): Promise<{ path: string; info: PortInfo }>;
}

// ---------------------------------------------------------------------------------------
// Failures

/** usage: exit 2; failed: exit 1; port (missing, busy, lost): the context's `portExitCode`. */
export type FailureKind = 'usage' | 'failed' | 'port';

export class SerialCommandError extends Error {
  override readonly name = 'SerialCommandError';
  constructor(
    message: string,
    readonly kind: FailureKind,
    options: { cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
  }
}

/** What every serial command gets from the CLI that registered it. */
export interface SerialCommandContext {
  /** `hil` or `xiaozhi-mcp`: the prefix of every failure line. */
  readonly program: string;
  readonly out: Output;
  /** Default `process.env`: `XIAOZHI_VIRTUAL_DIR`, `FORCE_COLOR`, `NO_COLOR`. */
  readonly env?: NodeJS.ProcessEnv;
  /** The real stdout when the CLI writes to it: a TTY gets a progress bar and colour. */
  readonly terminal?: NodeJS.WritableStream & { readonly isTTY?: boolean };
  /** Default {@link listPorts}. */
  readonly lister?: () => Promise<PortInfo[]>;
  /** Stops a running `monitor` (Ctrl-C does too). */
  readonly signal?: AbortSignal;
  /** Virtual boards' firmware timing (tests shorten it). */
  readonly timing?: Partial<BoardTiming>;
  /** Exit code when the port is missing, busy or lost: 1 (xiaozhi-mcp) or 3 (hil). */
  readonly portExitCode?: number;
  /** How long `monitor` waits for a vanished port to come back. Default 10 s. */
  readonly refindMs?: number;
  /** Called with a virtual board once it is plugged in and powered (tests inject faults). */
  readonly onVirtual?: (virtual: ResolvedVirtual) => void;
}

export function usageError(message: string): SerialCommandError {
  return new SerialCommandError(message, 'usage');
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The kind of a failure from any layer (firmware, device, lock, ours). */
export function failureKind(error: unknown): FailureKind {
  if (error instanceof SerialCommandError) return error.kind;
  if (error instanceof FirmwareError) {
    if (error.code === 'OPTION_INVALID') return 'usage';
    if (error.code === 'PORT_NOT_FOUND' || error.code === 'PORT_BUSY') return 'port';
    return 'failed';
  }
  if (error instanceof BoardLockError) return 'port';
  return 'failed';
}

/**
 * Runs a command body; a failure becomes one line, `<program>: <what>: <reason>`, and its
 * exit code. `what` names the command and the port (`flash virtual:desk`).
 */
export async function runReported(
  context: SerialCommandContext,
  what: () => string,
  body: () => Promise<number>,
): Promise<number> {
  try {
    return await body();
  } catch (error) {
    const kind = failureKind(error);
    const reason = errorMessage(error).replace(/\s*\n\s*/g, ' ');
    const prefix = what();
    context.out.stderr(`${context.program}: ${prefix === '' ? '' : `${prefix}: `}${reason}\n`);
    if (kind === 'usage') return 2;
    if (kind === 'port') return context.portExitCode ?? 1;
    return 1;
  }
}

// ---------------------------------------------------------------------------------------
// Option parsing shared by the commands

/** `--flash-size`: 4, 8 or 16. */
export function parseFlashSize(value: string | undefined): FlashSizeMb | undefined {
  if (value === undefined) return undefined;
  const size = FLASH_SIZES_MB.find((s) => String(s) === value.trim().replace(/\s*MB$/i, ''));
  if (size === undefined)
    throw usageError(`--flash-size must be 4, 8 or 16 (MB), got ${JSON.stringify(value)}`);
  return size;
}

/** `--board`: a known preset. */
export function parsePreset(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (!Object.hasOwn(BOARD_PRESETS, value)) {
    throw usageError(
      `unknown board preset ${JSON.stringify(value)}; known: ${Object.keys(BOARD_PRESETS).join(', ')}`,
    );
  }
  return value;
}

/** `--baud`: a positive integer rate. */
export function parseBaud(value: string, flag = '--baud'): number {
  const baud = Number(value);
  if (!Number.isInteger(baud) || baud < 300 || baud > 10_000_000)
    throw usageError(`${flag} must be a baud rate such as 115200, got ${JSON.stringify(value)}`);
  return baud;
}

// ---------------------------------------------------------------------------------------
// Virtual boards on disk

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
    throw usageError(
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
    throw new SerialCommandError(
      `cannot read the virtual board file ${path} (${errorMessage(error)}); delete it and its .flash file to start that board over`,
      'failed',
    );
  }
  const spec = parsed as Partial<Record<keyof VirtualBoardSpec, unknown>> | null;
  const flashSizeMb = FLASH_SIZES_MB.find((s) => s === spec?.flashSizeMb);
  if (
    typeof spec?.preset !== 'string' ||
    !Object.hasOwn(BOARD_PRESETS, spec.preset) ||
    typeof spec.chip !== 'string' ||
    typeof spec.mac !== 'string' ||
    !/^([0-9a-f]{2}:){5}[0-9a-f]{2}$/.test(spec.mac) ||
    flashSizeMb === undefined
  ) {
    throw new SerialCommandError(
      `the virtual board file ${path} is not {preset, chip, mac, flashSizeMb} with a known preset and a size of 4, 8 or 16; delete it and its .flash file to start that board over`,
      'failed',
    );
  }
  return { preset: spec.preset, chip: spec.chip, mac: spec.mac, flashSizeMb };
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
      // Not one of ours, or damaged: `resolvePort` says so when that board is used.
    }
  }
  return entries;
}

/** The board's entry, created (sidecar written) when missing and `create` says how. */
function virtualEntry(
  dir: string,
  name: string,
  create: ResolvePortOptions['create'],
): { entry: VirtualBoardEntry; created: boolean } {
  const sidecar = join(dir, `${name}.json`);
  if (existsSync(sidecar)) return { entry: entryFor(dir, name, readSpec(sidecar)), created: false };
  if (create === undefined) {
    throw new SerialCommandError(
      `no virtual board '${name}' in ${dir}; \`flash\` creates it on first use (set XIAOZHI_VIRTUAL_DIR if it lives elsewhere)`,
      'port',
    );
  }
  const preset = BOARD_PRESETS[create.preset];
  if (preset === undefined)
    throw usageError(`unknown board preset ${JSON.stringify(create.preset)}`);
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
    throw new SerialCommandError(
      `cannot create virtual board '${name}' in ${dir}: ${errorMessage(error)}; set XIAOZHI_VIRTUAL_DIR to a writable directory`,
      'failed',
    );
  }
  return { entry: entryFor(dir, name, spec), created: true };
}

function portInfoOf(info: Awaited<ReturnType<VirtualSerialBinding['list']>>[number]): PortInfo {
  const vendorId = info.vendorId?.toLowerCase();
  const productId = info.productId?.toLowerCase();
  return {
    path: info.path,
    ...(info.serialNumber ? { serialNumber: info.serialNumber } : {}),
    ...(vendorId ? { vendorId } : {}),
    ...(productId ? { productId } : {}),
    ...(info.manufacturer ? { manufacturer: info.manufacturer } : {}),
    kind: vendorId === '303a' && productId === '1001' ? 'usb-serial-jtag' : 'usb-uart',
  };
}

async function pollUntil<T>(
  find: () => Promise<T | undefined>,
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    signal?.throwIfAborted();
    const found = await find();
    if (found !== undefined) return found;
    if (Date.now() >= deadline) return undefined;
    await new Promise((resolve) => setTimeout(resolve, Math.min(250, deadline - Date.now())));
  }
}

async function resolveVirtual(
  selector: string,
  options: ResolvePortOptions,
): Promise<ResolvedPort> {
  const name = virtualName(selector);
  const dir = options.virtualDir ?? defaultVirtualDir();
  const { entry, created } = virtualEntry(dir, name, options.create);
  // A real port is opened by one process at a time; the same goes for a flash file, or two
  // processes' boards would overwrite each other's NVS.
  let release: () => void;
  try {
    release = await lockBoard(entry.port, { dir });
  } catch (error) {
    if (!(error instanceof BoardLockError)) throw error;
    const pid = /pid (\d+)/.exec(error.message)?.[1];
    throw new FirmwareError(
      'PORT_BUSY',
      `${entry.port} is in use by another process${pid === undefined ? '' : ` (pid ${pid})`}; close the other program (a monitor, a flash) first`,
    );
  }
  let board: VirtualBoard;
  try {
    board = new VirtualBoard({
      preset: entry.preset,
      mac: entry.mac,
      flash: new FlashStorage({ size: entry.flashSizeMb * 1024 * 1024, path: entry.flashPath }),
      ...(options.timing === undefined ? {} : { timing: options.timing }),
    });
  } catch (error) {
    release();
    if (error instanceof DeviceError)
      throw new SerialCommandError(`cannot load ${entry.flashPath}: ${error.message}`, 'failed', {
        cause: error,
      });
    throw error;
  }
  const binding = new VirtualSerialBinding();
  const device = binding.attach(board, { path: entry.port });
  // USB power: the board runs whatever its flash holds (an erased flash boot-loops).
  board.powerOn();
  let disposed = false;
  const virtual: ResolvedVirtual = {
    board,
    device,
    binding,
    entry,
    created,
    dispose: () => {
      if (disposed) return;
      disposed = true;
      board.powerOff();
      binding.detach(device);
      release();
    },
  };
  const serialNumber = device.serialNumber;
  return {
    binding,
    path: device.path,
    info: portInfoOf(device.info),
    label: entry.port,
    virtual,
    present: async (path) => binding.device(path) !== undefined,
    refind: async (timeoutMs, signal) => {
      const found = await pollUntil(
        async () => (await binding.list()).find((p) => p.serialNumber === serialNumber),
        timeoutMs,
        signal,
      );
      if (found === undefined)
        throw new FirmwareError(
          'PORT_NOT_FOUND',
          `${entry.port} did not come back within ${timeoutMs} ms`,
        );
      return { path: found.path, info: portInfoOf(found) };
    },
  };
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function resolveReal(
  selectorText: string,
  options: ResolvePortOptions,
): Promise<ResolvedPort> {
  const selector = parsePortSelector(selectorText);
  const lister = { list: options.lister ?? (() => listPorts()) };
  let info: PortInfo;
  try {
    info = await findPort(selector, { lister, timeoutMs: options.findTimeoutMs ?? 3000 });
  } catch (error) {
    // A tty no listing knows (a pty, a serial header): usable by path when it exists.
    if ('path' in selector && (await exists(selector.path)))
      info = { path: selector.path, kind: 'unknown' };
    else if (error instanceof FirmwareError && /^no serial port/.test(error.message))
      throw new FirmwareError(
        'PORT_NOT_FOUND',
        `${error.message}; check the cable, or run \`ports\` to see what is attached`,
        { cause: error },
      );
    else throw error;
  }
  // Loaded on demand so that commands on virtual boards never load the native addon.
  const { autoDetect } = await import('@serialport/bindings-cpp');
  const binding = autoDetect() as unknown as SerialBinding;
  const serialNumber = info.serialNumber;
  return {
    binding,
    path: info.path,
    info,
    label: info.path,
    present: (path) => exists(path),
    refind: async (timeoutMs, signal) => {
      if (serialNumber === undefined)
        throw new FirmwareError(
          'PORT_NOT_FOUND',
          `${info.path} went away and has no USB serial number to find it again by`,
        );
      const found = await findPort(
        { serialNumber },
        { lister, timeoutMs, ...(signal === undefined ? {} : { signal }) },
      );
      return { path: found.path, info: found };
    },
  };
}

/**
 * A port for `selector`: `virtual:<name>` builds and powers on that virtual board (creating
 * it when `create` is given); anything else is a real port ({@link parsePortSelector}).
 * Throws `OPTION_INVALID` for a bad selector, `PORT_NOT_FOUND`, `PORT_BUSY`.
 */
export function resolvePort(
  selector: string,
  options: ResolvePortOptions = {},
): Promise<ResolvedPort> {
  return selector.trim().toLowerCase().startsWith(VIRTUAL_PREFIX)
    ? resolveVirtual(selector.trim(), options)
    : resolveReal(selector, options);
}

/** USB serial ports worth offering: what a board shows up as. */
export function isBoardPort(port: PortInfo): boolean {
  return port.kind !== 'unknown' || port.vendorId !== undefined;
}

/**
 * The selector to use: `--port` when given, else the only board there is (attached USB ports
 * and virtual boards). None or several is an error that lists them.
 */
export async function chooseSelector(
  given: string | undefined,
  options: { virtualDir: string; lister?: () => Promise<PortInfo[]> },
): Promise<string> {
  if (given !== undefined) {
    if (given.trim() === '') throw usageError('--port is empty');
    return given;
  }
  const real = (await (options.lister ?? (() => listPorts()))().catch(() => [])).filter(
    isBoardPort,
  );
  const virtual = listVirtualBoards(options.virtualDir);
  const [only, ...rest] = [...real.map((p) => p.path), ...virtual.map((v) => v.port)];
  if (only !== undefined && rest.length === 0) return only;
  if (only === undefined) {
    throw new SerialCommandError(
      `no board attached and no virtual board in ${options.virtualDir}; plug a board in, or name one with --port (a path, serial:<sn>, or virtual:<name> for a virtual board)`,
      'port',
    );
  }
  const listed = [
    ...(real.length > 0 ? [describePorts(real)] : []),
    ...virtual.map((v) => `${v.port} (${v.preset})`),
  ].join('; ');
  throw usageError(
    `${real.length + virtual.length} boards attached: ${listed}; choose one with --port`,
  );
}

/** `--port`, `--board` and `--flash-size` as the commands take them. */
export interface PortOptions {
  readonly port?: string;
  /** Virtual boards, when creating one: the preset. */
  readonly board?: string;
  /** Virtual boards, when creating one: 4, 8 or 16. */
  readonly flashSize?: string;
}

/**
 * `--port` (or the only board there is) resolved for a command, virtual boards created on
 * first use. Says on stdout when it created one, and when `--board`/`--flash-size` were given
 * for an existing virtual board whose sidecar says otherwise (they apply only when creating).
 */
export async function openCommandPort(
  context: SerialCommandContext,
  options: PortOptions,
  onSelector: (selector: string) => void = () => {},
): Promise<ResolvedPort> {
  const preset = parsePreset(options.board);
  const flashSizeMb = parseFlashSize(options.flashSize);
  const virtualDir = defaultVirtualDir(context.env ?? process.env);
  const lister = context.lister;
  const selector = await chooseSelector(options.port, {
    virtualDir,
    ...(lister === undefined ? {} : { lister }),
  });
  onSelector(selector);
  const port = await resolvePort(selector, {
    virtualDir,
    create: { preset: preset ?? DEFAULT_PRESET, flashSizeMb: flashSizeMb ?? DEFAULT_FLASH_SIZE_MB },
    ...(context.timing === undefined ? {} : { timing: context.timing }),
    ...(lister === undefined ? {} : { lister }),
  });
  const virtual = port.virtual;
  if (virtual === undefined) {
    if (preset !== undefined || flashSizeMb !== undefined)
      context.out.stderr(
        `${context.program}: note: --board and --flash-size are for virtual boards; ignored for ${port.label}\n`,
      );
    return port;
  }
  context.onVirtual?.(virtual);
  const { entry } = virtual;
  if (virtual.created) {
    context.out.stdout(
      `created virtual board ${entry.port}: ${entry.preset} (${entry.chip}, ${entry.flashSizeMb} MB flash, MAC ${entry.mac}) in ${virtualDir}\n`,
    );
  } else if (
    (preset !== undefined && preset !== entry.preset) ||
    (flashSizeMb !== undefined && flashSizeMb !== entry.flashSizeMb)
  ) {
    context.out.stderr(
      `${context.program}: note: ${entry.port} already exists (${entry.preset}, ${entry.flashSizeMb} MB flash); --board and --flash-size apply only when creating a virtual board (delete ${entry.sidecarPath} and ${entry.flashPath} to start over)\n`,
    );
  }
  return port;
}
