/**
 * A whole xiaozhi board in one object: identity, NVS storage that survives reboots, the boot
 * sequence with its console lines, the OTA check, a session opened by a BOOT click, MCP over
 * the WebSocket, reboots that lose the reply, OTA upgrades, and the firmware's crashes.
 * It behaves like a real board at each interface, so tests, benchmarks and HIL runs can put
 * it in place of one. The serial side (DTR/RTS, ROM download mode, flash) attaches through
 * {@link VirtualBoard.reset}, {@link VirtualBoard.powerOff} and {@link VirtualBoard.installApp}.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  bootloaderOffset,
  findPartition,
  type Partition,
  readAppImage,
  readNvsPartition,
  readPartitionTable,
  readVirtualFirmwareBoard,
  writeNvsPartition,
} from '@xiaozhi-mcp/firmware';
import {
  type AudioFrameVersion,
  type BackendFrame,
  buildDeviceHello,
  buildOtaRequestHeaders,
  cString,
  encodeDeviceEnvelope,
  encodeDeviceMessage,
  getItem,
  type JsonValue,
  type OtaRequestBody,
} from '@xiaozhi-mcp/protocol';
import type { BoardApi, BoardHardware, BoardPreset } from './board-api.js';
import { BoardConsole } from './console.js';
import { BoardPanic, DeviceError } from './errors.js';
import type { FlashStorage } from './flash-storage.js';
import { type McpProfile, McpServer } from './mcp-server.js';
import { NvsStorage } from './nvs-storage.js';
import { type OtaCheck, OtaClient } from './ota-client.js';
import { boardPreset } from './presets.js';
import { WebsocketChannel } from './websocket-channel.js';

/** The firmware's device states (`StateMachine`), plus `off`. */
export type DeviceState =
  | 'off'
  | 'starting'
  | 'wifi_configuring'
  | 'activating'
  | 'idle'
  | 'connecting'
  | 'listening'
  | 'speaking'
  | 'upgrading'
  | 'fatal_error'
  /** Held in the ROM's serial download mode (GPIO0 low at reset): the flasher talks to the ROM. */
  | 'download';

/** Durations the firmware uses; tests shorten them. */
export interface BoardTiming {
  /** Reset to application start (ROM and second-stage bootloader). */
  bootMs: number;
  wifiConnectMs: number;
  /** First OTA retry delay; it doubles after each failure (firmware: 10 s, 10 tries). */
  otaRetryMs: number;
  otaMaxRetries: number;
  /** Wait after a 202 from `/activate` (firmware: 3 s), and after another failure (10 s). */
  activationRetryMs: number;
  activationFailMs: number;
  helloTimeoutMs: number;
  /** No incoming data for this long and the channel is dead (firmware: 120 s). */
  channelIdleMs: number;
  /** `Application::Reboot`'s pause before `esp_restart`. */
  rebootMs: number;
  /** Pause after a panic dump before the reset. */
  panicRebootMs: number;
  /** Pause after a successful upgrade (firmware: 3 s). */
  upgradeRebootMs: number;
  /** Bound on each HTTP exchange of the OTA client. */
  httpTimeoutMs: number;
}

export const FIRMWARE_TIMING: BoardTiming = {
  bootMs: 300,
  wifiConnectMs: 1500,
  otaRetryMs: 10_000,
  otaMaxRetries: 10,
  activationRetryMs: 3000,
  activationFailMs: 10_000,
  helloTimeoutMs: 10_000,
  channelIdleMs: 120_000,
  rebootMs: 1000,
  panicRebootMs: 500,
  upgradeRebootMs: 3000,
  httpTimeoutMs: 10_000,
};

/** Faults a test or benchmark can switch on. */
export interface FaultKnobs {
  /** Delay every MCP reply by this many milliseconds (replies keep their order). */
  replyLatencyMs: number;
  /** Return true to drop a reply instead of sending it. */
  dropReply: ((payload: string) => boolean) | undefined;
  /** Drop the connection when this tool is called, before it answers. */
  disconnectOnCall: string | undefined;
  /** Page `tools/list` with this budget instead of the firmware's 8000 (a board that pages wrong). */
  pageBudgetBytes: number | undefined;
  /** Crash on the server hello as if it had no `transport` (the firmware's null dereference). */
  crashOnHello: boolean;
  /** Abort during boot, after printing the app version: a build that panics at boot. */
  panicAtBoot: boolean;
}

/** The running app image's description (what `esp_app_get_description()` returns). */
export interface RunningApp {
  readonly projectName: string;
  readonly version: string;
  readonly idfVersion: string;
  readonly elfSha256: string;
  readonly compileTime: string;
}

export interface VirtualBoardOptions {
  /** A preset name (`bread-compact-wifi`, `otto-robot`) or a preset. Default `bread-compact-wifi`. */
  readonly preset?: string | BoardPreset;
  /** Lowercase Wi-Fi MAC; random with an Espressif prefix by default. */
  readonly mac?: string;
  /** The app the board runs at first power-on. */
  readonly app?: Partial<RunningApp>;
  /** Storage to start from (it is kept and mutated, so it can outlive the board). */
  readonly storage?: NvsStorage;
  /** Provisions `wifi/ssid` and `wifi/password` in NVS. */
  readonly wifi?: { readonly ssid: string; readonly password?: string };
  /** Provisions `wifi/ota_url` in NVS. */
  readonly otaUrl?: string;
  /** The build's default OTA URL, used when NVS has none. */
  readonly defaultOtaUrl?: string;
  readonly profile?: McpProfile;
  readonly timing?: Partial<BoardTiming>;
  readonly faults?: Partial<FaultKnobs>;
  readonly language?: string;
  /** Send a close frame when closing the channel; the firmware does not. */
  readonly closeFrame?: boolean;
  /**
   * The board's SPI flash. With one, every boot reads the partition table, the app's
   * description and the NVS partition from it (what a flasher wrote is what runs), and NVS
   * changes are written back. Without one, the app and NVS live in memory.
   */
  readonly flash?: FlashStorage;
}

export interface VirtualBoardEvents {
  state: [state: DeviceState, previous: DeviceState];
  /** The OTA check succeeded. */
  ota: [OtaCheck];
  /** A session is open: the server hello was accepted. */
  session: [sessionId: string];
  panic: [BoardPanic];
  /** The board (re)started: `reason` as the ROM prints it. */
  boot: [reason: ResetReason, count: number];
  /** A valid `tools/call` is about to run this tool. */
  'tool-call': [name: string];
}

export type ResetReason = 'POWERON' | 'RTC_SW_CPU_RST' | 'RTC_WDT_RTC_RST' | 'EXT_SYS_RST';

const RESET_CODES: Record<ResetReason, string> = {
  POWERON: '0x1 (POWERON)',
  RTC_SW_CPU_RST: '0xc (RTC_SW_CPU_RST)',
  RTC_WDT_RTC_RST: '0x10 (RTC_WDT_RTC_RST)',
  EXT_SYS_RST: '0x15 (USB_UART_HPSYS)',
};

const DEFAULT_APP: RunningApp = {
  projectName: 'xiaozhi',
  version: '2.4.2',
  idfVersion: 'v5.5.2',
  elfSha256: 'c1b2f3e4a5d6978812345678abcdef0123456789abcdef0123456789abcdef01',
  compileTime: 'Aug 20 2026T10:12:03Z',
};

const PARTITIONS_16M = [
  { label: 'nvs', type: 1, subtype: 2, address: 0x9000, size: 0x4000 },
  { label: 'otadata', type: 1, subtype: 0, address: 0xd000, size: 0x2000 },
  { label: 'phy_init', type: 1, subtype: 1, address: 0xf000, size: 0x1000 },
  { label: 'ota_0', type: 0, subtype: 0x10, address: 0x20000, size: 0x3f0000 },
  { label: 'ota_1', type: 0, subtype: 0x11, address: 0x410000, size: 0x3f0000 },
  { label: 'assets', type: 1, subtype: 0x82, address: 0x800000, size: 0x800000 },
];

const CHIP_MODEL_IDS: Record<string, number> = {
  esp32: 1,
  esp32s3: 9,
  esp32c3: 5,
  esp32c5: 23,
  esp32c6: 13,
  esp32p4: 18,
};

function randomMac(): string {
  return [
    'f4',
    '12',
    'fa',
    ...[...randomBytes(3)].map((b) => b.toString(16).padStart(2, '0')),
  ].join(':');
}

class Reset extends Error {}

export class VirtualBoard extends EventEmitter<VirtualBoardEvents> {
  readonly preset: BoardPreset;
  readonly console = new BoardConsole();
  readonly storage: NvsStorage;
  readonly mac: string;
  readonly timing: BoardTiming;
  readonly faults: FaultKnobs;
  hardware: BoardHardware;
  #app: RunningApp;
  #state: DeviceState = 'off';
  #bootCount = 0;
  #reset = new AbortController();
  #mcp: McpServer;
  #channel: WebsocketChannel | undefined;
  #lastOta: OtaCheck | undefined;
  #sendChain: Promise<void> = Promise.resolve();
  #nvsPartition: Partition | undefined;
  #loadingNvs = false;
  #powered = false;
  readonly #options: VirtualBoardOptions;

  constructor(options: VirtualBoardOptions = {}) {
    super();
    this.#options = options;
    this.preset =
      typeof options.preset === 'object'
        ? options.preset
        : boardPreset(options.preset ?? 'bread-compact-wifi');
    this.mac = (options.mac ?? randomMac()).toLowerCase();
    this.timing = { ...FIRMWARE_TIMING, ...options.timing };
    this.faults = {
      replyLatencyMs: 0,
      dropReply: undefined,
      disconnectOnCall: undefined,
      pageBudgetBytes: undefined,
      crashOnHello: false,
      panicAtBoot: false,
      ...options.faults,
    };
    this.storage = options.storage ?? new NvsStorage();
    this.hardware = this.preset.hardware();
    this.#app = { ...DEFAULT_APP, ...options.app };
    const wifi = this.storage.open('wifi');
    if (options.wifi) {
      wifi.setString('ssid', options.wifi.ssid);
      wifi.setString('password', options.wifi.password ?? '');
    }
    if (options.otaUrl !== undefined) wifi.setString('ota_url', options.otaUrl);
    this.#mcp = this.#newMcpServer();
    this.storage.onChange(() => this.#persistNvs());
  }

  /** The SPI flash, when the board has one modelled. */
  get flash(): FlashStorage | undefined {
    return this.#options.flash;
  }

  get state(): DeviceState {
    return this.#state;
  }

  /** The running app (changes after an OTA upgrade or a flash). */
  get app(): RunningApp {
    return this.#app;
  }

  get version(): string {
    return this.#app.version;
  }

  /** NVS `board/uuid`, the Client-Id; created at first boot. */
  get uuid(): string {
    const settings = this.storage.open('board');
    let uuid = settings.getString('uuid');
    if (uuid === '') {
      uuid = randomUUID();
      settings.setString('uuid', uuid);
    }
    return uuid;
  }

  get mcp(): McpServer {
    return this.#mcp;
  }

  get sessionId(): string | undefined {
    return this.#channel?.isOpen ? this.#channel.sessionId : undefined;
  }

  get bootCount(): number {
    return this.#bootCount;
  }

  /** The last successful OTA check of this boot. */
  get lastOta(): OtaCheck | undefined {
    return this.#lastOta;
  }

  /** Applies power: the ROM prints its banner and the firmware boots. Nothing happens if already on. */
  powerOn(): void {
    if (this.#powered) return;
    this.#restart('POWERON');
  }

  /** True from `powerOn` (or a reset) until `powerOff`, whatever the firmware is doing. */
  get powered(): boolean {
    return this.#powered;
  }

  /** Removes power: everything stops at once, nothing is sent. */
  powerOff(): void {
    this.#powered = false;
    this.#reset.abort();
    this.#mcp.loop.stop();
    this.#channel?.close('power off');
    this.#channel = undefined;
    this.#setState('off');
  }

  /**
   * A reset from outside (EN pin, watchdog). With `download`, GPIO0 is low as the chip comes
   * out of reset: the ROM waits for a flasher instead of booting the firmware.
   */
  reset(reason: ResetReason = 'EXT_SYS_RST', options: { download?: boolean } = {}): void {
    this.#restart(reason, options.download === true);
  }

  /** Replaces the running app, as flashing or an OTA upgrade does; it runs from the next boot. */
  installApp(image: Uint8Array): RunningApp {
    const read = readAppImage(image);
    const description = read.appDescription;
    if (description === undefined)
      throw new DeviceError('OTA_DOWNLOAD_FAILED', 'the image has no app description');
    if (!read.checksum.valid || read.hash?.valid === false) {
      throw new DeviceError('OTA_DOWNLOAD_FAILED', 'Image validation failed, image is corrupted');
    }
    if (read.chip !== this.preset.chip) {
      throw new DeviceError(
        'OTA_DOWNLOAD_FAILED',
        `the image is built for ${read.chip}, this board is ${this.preset.chip}`,
      );
    }
    const partition = this.#appPartition();
    if (partition !== undefined && this.flash !== undefined) {
      if (image.length > partition.size)
        throw new DeviceError(
          'OTA_DOWNLOAD_FAILED',
          `the image (${image.length} bytes) does not fit ${partition.label}`,
        );
      this.flash.program(partition.offset, image);
    }
    this.#app = {
      projectName: description.projectName,
      version: description.version,
      idfVersion: description.idfVersion,
      elfSha256: description.elfSha256,
      compileTime: `${description.date}T${description.time}Z`,
    };
    return this.#app;
  }

  /** A BOOT button click: toggles the chat state (`Application::ToggleChatState`). */
  click(): void {
    switch (this.#state) {
      case 'activating':
        this.#setState('idle');
        return;
      case 'idle':
        this.#mcp.loop.schedule(() => this.#openSession());
        return;
      case 'listening':
        this.#mcp.loop.schedule(() => this.#closeSession('button'));
        return;
      case 'speaking':
        this.#mcp.loop.schedule(() => {
          this.#channel?.sendText(
            encodeDeviceMessage({ type: 'abort', session_id: this.#channel.sessionId }),
          );
        });
        return;
      default:
        return;
    }
  }

  /** `Application::Reboot`: closes the channel, drops queued work, restarts after a pause. */
  reboot(): void {
    this.#mcp.loop.stop();
    this.console.log('I', 'Application', 'Rebooting...');
    this.#channel?.close('reboot');
    this.#channel = undefined;
    const signal = this.#reset.signal;
    sleep(this.timing.rebootMs, undefined, { signal }).then(
      () => this.#restart('RTC_SW_CPU_RST'),
      () => {},
    );
  }

  /** Resolves when the board is in `state` (now or later); rejects after `timeoutMs`. */
  waitForState(state: DeviceState, timeoutMs = 30_000): Promise<void> {
    if (this.#state === state) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const onState = (next: DeviceState) => {
        if (next !== state) return;
        clearTimeout(timer);
        this.off('state', onState);
        resolve();
      };
      const timer = setTimeout(() => {
        this.off('state', onState);
        reject(
          new DeviceError(
            'BOARD_TIMEOUT',
            `board ${this.mac}: not ${state} within ${timeoutMs} ms (now ${this.#state})`,
          ),
        );
      }, timeoutMs);
      this.on('state', onState);
    });
  }

  /** Resolves with the first console line matching `pattern` from now on. */
  waitForLine(pattern: RegExp, timeoutMs = 30_000): Promise<string> {
    return new Promise((resolve, reject) => {
      const onLine = (line: { text: string }) => {
        if (!pattern.test(line.text)) return;
        clearTimeout(timer);
        this.console.off('line', onLine);
        resolve(line.text);
      };
      const timer = setTimeout(() => {
        this.console.off('line', onLine);
        reject(
          new DeviceError(
            'BOARD_TIMEOUT',
            `board ${this.mac}: no console line matching ${pattern} within ${timeoutMs} ms`,
          ),
        );
      }, timeoutMs);
      this.console.on('line', onLine);
    });
  }

  #setState(state: DeviceState): void {
    const previous = this.#state;
    if (previous === state) return;
    this.#state = state;
    if (state !== 'off' && previous !== 'off')
      this.console.log('I', 'StateMachine', `State: ${previous} -> ${state}`);
    this.emit('state', state, previous);
  }

  #newMcpServer(): McpServer {
    const server = new McpServer({
      board: { name: this.preset.name, version: this.#app.version },
      profile: this.#options.profile ?? 'firmware',
      console: this.console,
      onToolCall: (tool) => {
        this.emit('tool-call', tool.name);
        if (tool.name === this.faults.disconnectOnCall)
          this.#channel?.close('fault: disconnect mid-call');
      },
      ...(this.faults.pageBudgetBytes === undefined
        ? {}
        : { pageBudgetBytes: this.faults.pageBudgetBytes }),
    });
    server.setSender((payload) => this.#sendMcp(payload));
    return server;
  }

  #restart(reason: ResetReason, download = false): void {
    this.#powered = true;
    this.#reset.abort();
    this.#reset = new AbortController();
    this.#mcp.loop.stop();
    this.#channel?.close('reset');
    this.#channel = undefined;
    this.#lastOta = undefined;
    this.#state = 'off';
    this.hardware = { ...this.preset.hardware(), volume: this.hardware.volume };
    const signal = this.#reset.signal;
    this.#boot(reason, signal, download).catch((error: unknown) => this.#onFailure(error, signal));
  }

  #onFailure(error: unknown, signal: AbortSignal): void {
    if (signal.aborted || error instanceof Reset || (error as Error).name === 'AbortError') return;
    if (error instanceof BoardPanic) {
      this.#panic(error);
      return;
    }
    this.console.log('E', 'Application', `Unexpected error: ${(error as Error).message}`);
    this.#setState('fatal_error');
  }

  #panic(panic: BoardPanic): void {
    this.emit('panic', panic);
    this.#mcp.loop.stop();
    this.#channel?.close('panic');
    this.#channel = undefined;
    if (panic.kind === 'abort') {
      for (const line of panic.reason.split(' what(): ')) this.console.raw(line);
      this.console.raw('');
      this.console.raw('abort() was called at PC 0x4037a1f6 on core 1');
    } else {
      this.console.raw(
        `Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.`,
      );
      this.console.raw('');
      this.console.raw('Core  1 register dump:');
      this.console.raw(
        'PC      : 0x42012c4e  PS      : 0x00060a30  A0      : 0x82013a6d  A1      : 0x3fcb7d10',
      );
      this.console.raw(`EXCVADDR: 0x00000000  (${panic.reason})`);
    }
    this.console.raw('');
    this.console.raw(
      'Backtrace: 0x4037a1f3:0x3fcb7b90 0x4037f2a1:0x3fcb7bb0 0x42012c4b:0x3fcb7d10',
    );
    this.console.raw('');
    this.console.raw(`ELF file SHA256: ${this.#app.elfSha256.slice(0, 16)}`);
    this.console.raw('');
    this.console.raw('Rebooting...');
    const signal = this.#reset.signal;
    sleep(this.timing.panicRebootMs, undefined, { signal }).then(
      () => this.#restart('RTC_SW_CPU_RST'),
      () => {},
    );
  }

  #romBanner(reason: ResetReason, download: boolean): void {
    const chip = this.preset.chip;
    this.console.resetClock();
    this.console.raw(`ESP-ROM:${chip}-20210327`);
    this.console.raw('Build:Mar 27 2021');
    this.console.raw(
      `rst:${RESET_CODES[reason]},boot:${download ? '0x0 (DOWNLOAD(USB/UART0))' : '0x8 (SPI_FAST_FLASH_BOOT)'}`,
    );
    if (download) {
      this.console.raw('waiting for download');
      return;
    }
    this.console.raw('SPIWP:0xee');
    this.console.raw('mode:DIO, clock div:1');
    this.console.raw('entry 0x403c8924');
    this.console.log('I', 'boot', `ESP-IDF ${this.#app.idfVersion} 2nd stage bootloader`);
  }

  /**
   * Reads what the second-stage bootloader and the app read from flash: the partition table,
   * the app image at the first app partition, and the NVS partition. Throws FLASH_INVALID.
   */
  #loadFromFlash(flash: FlashStorage): void {
    // The ROM first checks the second-stage bootloader's image header.
    const header = flash.read(bootloaderOffset(this.preset.chip), 4);
    if (header[0] !== 0xe9) {
      throw new DeviceError(
        'FLASH_INVALID',
        `invalid header: 0x${Buffer.from(header).readUInt32LE(0).toString(16).padStart(8, '0')}`,
      );
    }
    let table: ReturnType<typeof readPartitionTable>;
    try {
      table = readPartitionTable(flash.read(0x8000, 0xc00));
    } catch (error) {
      throw new DeviceError(
        'FLASH_INVALID',
        `Failed to verify partition table: ${(error as Error).message}`,
        { cause: error },
      );
    }
    const app = this.#appPartition(table.partitions);
    if (app === undefined)
      throw new DeviceError('FLASH_INVALID', 'no app partition in the partition table');
    this.console.log('I', 'boot', 'Partition Table:');
    for (const [i, p] of table.partitions.entries()) {
      this.console.log(
        'I',
        'boot',
        `${String(i).padStart(2)} ${p.label.padEnd(16)} ${p.typeName.padEnd(4)} ${p.subtypeName.padEnd(8)} ${p.offset.toString(16).padStart(8, '0')} ${p.size.toString(16).padStart(8, '0')}`,
      );
    }
    const image = flash.read(app.offset, app.size);
    if (image[0] !== 0xe9)
      throw new DeviceError(
        'FLASH_INVALID',
        `invalid header: 0x${Buffer.from(image.subarray(0, 4)).readUInt32LE(0).toString(16).padStart(8, '0')}`,
      );
    const read = readAppImage(image);
    const description = read.appDescription;
    if (description === undefined || !read.checksum.valid || read.hash?.valid === false) {
      throw new DeviceError(
        'FLASH_INVALID',
        `image at 0x${app.offset.toString(16)} is corrupted (checksum or hash)`,
      );
    }
    this.console.log(
      'I',
      'boot',
      `Loaded app from partition at offset 0x${app.offset.toString(16)}`,
    );
    this.#app = {
      projectName: description.projectName,
      version: description.version,
      idfVersion: description.idfVersion,
      elfSha256: description.elfSha256,
      compileTime: `${description.date}T${description.time}Z`,
    };
    const board = readVirtualFirmwareBoard(image);
    if (board !== undefined && board !== this.preset.name) {
      this.console.log(
        'W',
        'Board',
        `this firmware was built for ${board}, not ${this.preset.name}`,
      );
    }
    this.#nvsPartition =
      findPartition(table, { label: 'nvs' }) ??
      findPartition(table, { type: 'data', subtype: 'nvs' });
    const nvs = this.#nvsPartition;
    if (nvs !== undefined) {
      const bytes = flash.read(nvs.offset, nvs.size);
      // An erased partition (after a full-flash write) is an empty NVS: nvs_flash_init formats it.
      this.#loadingNvs = true;
      try {
        this.storage.load(bytes.every((b) => b === 0xff) ? [] : readNvsPartition(bytes));
      } finally {
        this.#loadingNvs = false;
      }
    }
  }

  #appPartition(partitions?: readonly Partition[]): Partition | undefined {
    let list = partitions;
    if (list === undefined) {
      if (this.flash === undefined) return undefined;
      try {
        list = readPartitionTable(this.flash.read(0x8000, 0xc00)).partitions;
      } catch {
        return undefined;
      }
    }
    return list.find((p) => p.type === 0 && (p.subtype === 0x00 || p.subtype === 0x10));
  }

  /** Writes the NVS partition back after a change, as nvs_set_* followed by nvs_commit does. */
  #persistNvs(): void {
    const flash = this.flash;
    const partition = this.#nvsPartition;
    if (flash === undefined || partition === undefined || this.#loadingNvs) return;
    flash.program(partition.offset, writeNvsPartition(this.storage.nvsEntries(), partition.size));
  }

  async #boot(reason: ResetReason, signal: AbortSignal, download: boolean): Promise<void> {
    this.#bootCount++;
    this.#romBanner(reason, download);
    this.emit('boot', reason, this.#bootCount);
    if (download) {
      this.#setState('download');
      return;
    }
    await sleep(this.timing.bootMs, undefined, { signal });
    if (this.flash !== undefined) {
      try {
        this.#loadFromFlash(this.flash);
      } catch (error) {
        // The ROM or bootloader cannot start an app: it says why and resets, over and over.
        this.console.raw(
          (error as Error).message.startsWith('invalid header')
            ? (error as Error).message
            : `E boot: ${(error as Error).message}`,
        );
        await sleep(this.timing.panicRebootMs, undefined, { signal });
        this.#restart('RTC_WDT_RTC_RST');
        return;
      }
    }
    this.console.log('I', 'cpu_start', `Project name:     ${this.#app.projectName}`);
    this.console.log('I', 'app_init', `App version:      ${this.#app.version}`);
    this.console.log('I', 'app_init', `ELF file SHA256:  ${this.#app.elfSha256.slice(0, 16)}...`);
    this.console.log('I', 'app_init', `ESP-IDF:          ${this.#app.idfVersion}`);
    if (this.faults.panicAtBoot) {
      throw new BoardPanic(
        'abort',
        'assert failed: app_main main.cc:42 (fault knob: panic at boot)',
      );
    }
    this.#setState('starting');
    this.console.log('I', 'Board', `UUID=${this.uuid} SKU=${this.preset.name}`);
    this.#mcp = this.#newMcpServer();
    this.preset.registerTools(this.#mcp, this.#boardApi());

    const wifi = this.storage.open('wifi');
    const ssid = wifi.getString('ssid');
    if (wifi.getInt('force_ap') === 1 || ssid === '') {
      wifi.setInt('force_ap', 0);
      this.#setState('wifi_configuring');
      this.console.log('I', 'WifiBoard', 'WiFi config mode entered');
      return;
    }
    await sleep(this.timing.wifiConnectMs, undefined, { signal });
    this.console.log('I', 'WifiStation', `Got IP: ${this.#ip()}`);
    this.console.log('I', 'WifiBoard', `Connected to WiFi: ${ssid}`);
    this.console.log('I', 'Application', 'Network connected');
    await this.#checkNewVersion(signal);
    if (this.#state === 'activating') this.#setState('idle');
  }

  #otaUrl(): string {
    return this.storage.open('wifi').getString('ota_url') || (this.#options.defaultOtaUrl ?? '');
  }

  #otaClient(): OtaClient {
    return new OtaClient({
      currentVersion: this.#app.version,
      headers: () =>
        buildOtaRequestHeaders({
          macAddress: this.mac,
          uuid: this.uuid,
          board: this.preset.name,
          version: this.#app.version,
          language: this.#options.language ?? 'zh-CN',
        }),
      body: () => this.systemInfo(),
      storage: this.storage,
      console: this.console,
      timeoutMs: this.timing.httpTimeoutMs,
    });
  }

  /** `Application::CheckNewVersion`: retries with a doubling delay, upgrades, activates. */
  async #checkNewVersion(signal: AbortSignal): Promise<void> {
    const ota = this.#otaClient();
    let retries = 0;
    let delay = this.timing.otaRetryMs;
    for (;;) {
      this.#setState('activating');
      const url = this.#otaUrl();
      const check = await ota.check(url);
      if (signal.aborted) throw new Reset();
      if (check === undefined) {
        retries++;
        if (retries >= this.timing.otaMaxRetries) {
          this.console.log('E', 'Application', 'Too many retries, exit version check');
          return;
        }
        this.console.log(
          'W',
          'Application',
          `Check new version failed, retry in ${delay / 1000} seconds (${retries}/${this.timing.otaMaxRetries})`,
        );
        await sleep(delay, undefined, { signal });
        delay *= 2;
        continue;
      }
      retries = 0;
      delay = this.timing.otaRetryMs;
      this.#lastOta = check;
      this.emit('ota', check);
      if (check.hasNewVersion && check.firmware !== undefined) {
        if (await this.#upgrade(check.firmware.url, signal)) return;
        this.#setState('activating');
      }
      if (check.hasMqtt)
        this.console.log(
          'W',
          'Application',
          'MQTT is not supported by the virtual board; using WebSocket',
        );
      if (check.activation === undefined) return;
      if (check.activation.code !== undefined) {
        this.console.log(
          'I',
          'Application',
          `Activation code: ${check.activation.code} ${check.activation.message ?? ''}`.trim(),
        );
      }
      for (let attempt = 1; attempt <= 10; attempt++) {
        this.console.log('I', 'Application', `Activating... ${attempt}/10`);
        const outcome = await ota.activate(url, check.activation);
        if (signal.aborted) throw new Reset();
        if (outcome === 'done') break;
        await sleep(
          outcome === 'retry' ? this.timing.activationRetryMs : this.timing.activationFailMs,
          undefined,
          { signal },
        );
        if (this.#state === 'idle') break;
      }
    }
  }

  /** `Application::UpgradeFirmware`: download, validate, install, reboot. False when it fails. */
  async #upgrade(url: string, signal: AbortSignal): Promise<boolean> {
    this.console.log('I', 'Application', `Upgrading firmware from ${url}`);
    this.#closeSession('upgrade');
    this.#setState('upgrading');
    let lastPercent = -1;
    try {
      const image = await this.#otaClient().download(url, (received, total) => {
        const percent = Math.floor((received * 10) / total) * 10;
        if (percent !== lastPercent) {
          lastPercent = percent;
          this.console.log('I', 'Ota', `Progress: ${percent}% (${received}/${total})`);
        }
      });
      if (signal.aborted) throw new Reset();
      const previous = this.#app.version;
      const installed = this.installApp(image);
      this.console.log(
        'I',
        'Ota',
        `Current version: ${previous}, New version: ${installed.version}`,
      );
      this.console.log(
        'I',
        'Ota',
        `Firmware upgrade successful, rebooting in ${this.timing.upgradeRebootMs / 1000} seconds...`,
      );
    } catch (error) {
      if (error instanceof Reset || signal.aborted) throw error;
      this.console.log('E', 'Ota', (error as Error).message);
      this.console.log('E', 'Application', 'Firmware upgrade failed...');
      return false;
    }
    await sleep(this.timing.upgradeRebootMs, undefined, { signal });
    this.#restart('RTC_SW_CPU_RST');
    return true;
  }

  async #openSession(): Promise<void> {
    const settings = this.storage.open('websocket');
    const url = settings.getString('url');
    if (this.#lastOta === undefined || url === '') {
      this.console.log('E', 'Application', 'Protocol not initialized');
      return;
    }
    this.#setState('connecting');
    const storedVersion = settings.getInt('version');
    const version = (
      storedVersion === 2 || storedVersion === 3 ? storedVersion : 1
    ) as AudioFrameVersion;
    const channel = new WebsocketChannel({
      url,
      token: settings.getString('token'),
      version,
      deviceId: this.mac,
      clientId: this.uuid,
      hello: buildDeviceHello({ transport: 'websocket', version }),
      console: this.console,
      helloTimeoutMs: this.timing.helloTimeoutMs,
      idleTimeoutMs: this.timing.channelIdleMs,
      closeFrame: this.#options.closeFrame ?? false,
    });
    this.#channel = channel;
    channel.on('json', (frame) => this.#onJson(frame));
    channel.on('panic', (panic) => this.#panic(panic));
    channel.on('closed', () => {
      if (this.#channel !== channel) return;
      this.#channel = undefined;
      this.#mcp.loop.schedule(() => {
        if (
          this.#state === 'listening' ||
          this.#state === 'speaking' ||
          this.#state === 'connecting'
        )
          this.#setState('idle');
      });
    });
    try {
      await channel.open();
    } catch (error) {
      if (this.#channel === channel) this.#channel = undefined;
      if (error instanceof BoardPanic) return;
      this.console.log('E', 'Application', `Alert: ${(error as Error).message}`);
      if (this.#state === 'connecting') this.#setState('idle');
      return;
    }
    if (this.#channel !== channel) return;
    if (this.faults.crashOnHello) {
      this.#panic(
        new BoardPanic(
          'load-prohibited',
          'WebsocketProtocol::ParseServerHello read a hello without a string transport (fault knob)',
        ),
      );
      return;
    }
    this.emit('session', channel.sessionId);
    this.#setState('listening');
    channel.sendText(
      encodeDeviceMessage({
        type: 'listen',
        session_id: channel.sessionId,
        state: 'start',
        mode: 'auto',
      }),
    );
  }

  #closeSession(reason: string): void {
    this.#channel?.close(reason);
  }

  /** `Application::OnIncomingJson`. */
  #onJson(frame: BackendFrame): void {
    const text = (key: string) => {
      const node = getItem(frame.root, key);
      return node?.kind === 'string' ? cString(node.value) : undefined;
    };
    switch (frame.type) {
      case 'mcp':
        if (frame.payload !== undefined) this.#mcp.handlePayload(frame.payload);
        return;
      case 'tts': {
        const state = text('state');
        if (state === 'start') this.#mcp.loop.schedule(() => this.#setState('speaking'));
        else if (state === 'stop')
          this.#mcp.loop.schedule(() => this.#state === 'speaking' && this.#setState('listening'));
        else if (state === 'sentence_start')
          this.console.log('I', 'Application', `<< ${text('text') ?? ''}`);
        return;
      }
      case 'stt':
        this.console.log('I', 'Application', `>> ${text('text') ?? ''}`);
        return;
      case 'llm':
        return;
      case 'system':
        if (text('command') === 'reboot') this.#mcp.loop.schedule(() => this.reboot());
        else
          this.console.log('W', 'Application', `Unknown system command: ${text('command') ?? ''}`);
        return;
      case 'alert': {
        const [status, message, emotion] = [text('status'), text('message'), text('emotion')];
        if (status === undefined || message === undefined || emotion === undefined) {
          this.console.log(
            'W',
            'Application',
            'Alert command requires status, message and emotion',
          );
        } else {
          this.console.log('W', 'Application', `Alert ${status}: ${message} [${emotion}]`);
        }
        return;
      }
      default:
        this.console.log('W', 'Application', `Unknown message type: ${frame.type ?? ''}`);
    }
  }

  /** The reply path: the fault knobs, then the envelope on the open channel. */
  #sendMcp(payload: string): void {
    if (this.faults.dropReply?.(payload) === true) return;
    const channel = this.#channel;
    if (channel === undefined) return;
    const envelope = () => channel.sendText(encodeDeviceEnvelope(channel.sessionId, payload));
    if (this.faults.replyLatencyMs <= 0) {
      envelope();
      return;
    }
    const latency = this.faults.replyLatencyMs;
    this.#sendChain = this.#sendChain
      .then(() => sleep(latency))
      .then(
        () => {
          envelope();
        },
        () => {},
      );
  }

  #ip(): string {
    const [a = 0, b = 0] = this.mac
      .split(':')
      .slice(-2)
      .map((part) => Number.parseInt(part, 16));
    return `192.168.${a % 255}.${(b % 250) + 2}`;
  }

  /** The system-info JSON the OTA check posts (and `self.get_system_info` returns). */
  systemInfo(): OtaRequestBody {
    const { preset } = this;
    const ssid = this.storage.open('wifi').getString('ssid');
    return {
      version: 2,
      language: this.#options.language ?? 'zh-CN',
      flash_size: preset.flashSizeMb * 1024 * 1024,
      minimum_free_heap_size: '98304',
      mac_address: this.mac,
      uuid: this.uuid,
      chip_model_name: preset.chip,
      chip_info: {
        model: CHIP_MODEL_IDS[preset.chip] ?? 0,
        cores: preset.chip === 'esp32c3' ? 1 : 2,
        revision: 2,
        features: 18,
      },
      application: {
        name: this.#app.projectName,
        version: this.#app.version,
        compile_time: this.#app.compileTime,
        idf_version: this.#app.idfVersion,
        elf_sha256: this.#app.elfSha256,
      },
      partition_table: PARTITIONS_16M,
      ota: { label: 'ota_0' },
      ...(preset.display ? { display: { ...preset.display } } : {}),
      board: {
        type: 'wifi',
        name: preset.name,
        ssid,
        rssi: -52,
        channel: 6,
        ip: this.#ip(),
        mac: this.mac,
      },
    };
  }

  /** The JSON `self.get_device_status` returns. */
  deviceStatus(): JsonValue {
    const { hardware, preset } = this;
    const status: Record<string, JsonValue> = { audio_speaker: { volume: hardware.volume } };
    if (preset.display) {
      status.screen = preset.backlight
        ? { brightness: hardware.brightness, theme: hardware.theme }
        : { theme: hardware.theme };
    }
    if (hardware.battery) status.battery = { ...hardware.battery };
    status.network = {
      type: 'wifi',
      ssid: this.storage.open('wifi').getString('ssid'),
      signal: 'strong',
    };
    status.chip = { temperature: 41.5 };
    return status;
  }

  #boardApi(): BoardApi {
    return {
      hardware: this.hardware,
      storage: this.storage,
      schedule: (task) => this.#mcp.loop.schedule(task),
      reboot: () => this.reboot(),
      upgradeFirmware: (url) => this.#upgrade(url, this.#reset.signal),
      systemInfo: () => this.systemInfo(),
      deviceStatus: () => this.deviceStatus(),
      enterWifiConfigMode: () => {
        this.storage.open('wifi').setInt('force_ap', 1);
        this.reboot();
      },
      vision: () => this.#mcp.vision,
      deviceId: this.mac,
      clientId: this.uuid,
      log: (level, tag, text) => this.console.log(level, tag, text),
    };
  }
}
