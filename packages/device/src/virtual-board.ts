/**
 * A whole xiaozhi board in one object: identity, NVS storage that survives reboots, the boot
 * sequence with its console lines, the OTA check, a session opened by a BOOT click, MCP over
 * the WebSocket (or over MQTT from boot on, with UDP audio), reboots that lose the reply, OTA
 * upgrades, and the firmware's crashes.
 * It behaves like a real board at each interface, so tests, benchmarks and HIL runs can put
 * it in place of one. The serial side (DTR/RTS, ROM download mode, flash) attaches through
 * {@link VirtualBoard.reset}, {@link VirtualBoard.powerOff} and {@link VirtualBoard.installApp}.
 *
 * The board is composed of rooms, each in `virtual-board/`: the bootloader (ROM banner, flash,
 * partitions, NVS), the application (start, OTA check, activation, upgrade), the session
 * (WebSocket, frames, replies), panics and reboots, and the system info it reports. This class
 * holds the board's state (power, device state, running app, boot count) and wires the rooms.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { buildOtaRequestHeaders, type JsonValue, type OtaRequestBody } from '@xiaozhi-mcp/protocol';
import type { BoardApi, BoardHardware, BoardPreset } from './board-api.js';
import { BoardConsole } from './console.js';
import { BoardPanic, DeviceError } from './errors.js';
import type { FlashStorage } from './flash-storage.js';
import { McpServer } from './mcp-server.js';
import { NvsStorage } from './nvs-storage.js';
import { type ActivationIdentity, type OtaCheck, OtaClient } from './ota-client.js';
import { boardPreset } from './presets.js';
import type { BoardSilicon } from './serial/efuse.js';
import { Application } from './virtual-board/application.js';
import { Bootloader, bootFailureLine } from './virtual-board/bootloader.js';
import { crash, type ShutdownHost, softReboot } from './virtual-board/panic.js';
import { regressionPageBudget } from './virtual-board/regressions.js';
import { clickAction, Session } from './virtual-board/session.js';
import { boardIp, deviceStatus, flashLayout, systemInfo } from './virtual-board/system-info.js';
import {
  type BoardTiming,
  type BoardTransport,
  BootSignal,
  type DeviceState,
  type FaultKnobs,
  FIRMWARE_TIMING,
  Reset,
  type ResetReason,
  type RunningApp,
  type UplinkSessionStats,
  type UplinkStats,
  type VirtualBoardEvents,
  type VirtualBoardOptions,
} from './virtual-board/types.js';

export {
  type BoardTiming,
  type BoardTransport,
  type DeviceState,
  type FaultKnobs,
  FIRMWARE_TIMING,
  type ResetReason,
  type RunningApp,
  type UplinkSessionStats,
  type UplinkStats,
  type VirtualBoardEvents,
  type VirtualBoardOptions,
};

const DEFAULT_APP: RunningApp = {
  projectName: 'xiaozhi',
  version: '2.4.2',
  idfVersion: 'v5.5.2',
  elfSha256: 'c1b2f3e4a5d6978812345678abcdef0123456789abcdef0123456789abcdef01',
  compileTime: 'Aug 20 2026T10:12:03Z',
};

/** Chips without the HMAC peripheral (`SOC_HMAC_SUPPORTED` unset): their payload's `hmac` is empty. */
const CHIPS_WITHOUT_HMAC: ReadonlySet<string> = new Set(['esp32', 'esp32c2']);

/** The eFuse identity the options describe, checked as eFuse holds it. */
function activationIdentity(
  options: Pick<VirtualBoardOptions, 'serialNumber' | 'activationKey'>,
  chip: string,
): ActivationIdentity | undefined {
  const { serialNumber, activationKey } = options;
  if (serialNumber === undefined || serialNumber === '') {
    if (activationKey !== undefined)
      throw new DeviceError('BOARD_OPTIONS_INVALID', 'activationKey needs a serialNumber');
    return undefined;
  }
  // USER_DATA holds 32 bytes; the firmware sends them as a C string in a header.
  if (!/^[\x21-\x7e]{1,32}$/.test(serialNumber))
    throw new DeviceError(
      'BOARD_OPTIONS_INVALID',
      `serialNumber must be 1 to 32 printable ASCII characters, got ${JSON.stringify(serialNumber)}`,
    );
  if (activationKey !== undefined && !/^(?:[0-9a-f]{2}){16,64}$/i.test(activationKey))
    throw new DeviceError('BOARD_OPTIONS_INVALID', 'activationKey must be 16 to 64 bytes of hex');
  return { serialNumber, key: activationKey, hasHmac: !CHIPS_WITHOUT_HMAC.has(chip) };
}

function randomMac(): string {
  return [
    'f4',
    '12',
    'fa',
    ...[...randomBytes(3)].map((b) => b.toString(16).padStart(2, '0')),
  ].join(':');
}

export class VirtualBoard extends EventEmitter<VirtualBoardEvents> {
  readonly preset: BoardPreset;
  readonly console = new BoardConsole();
  readonly storage: NvsStorage;
  readonly mac: string;
  readonly timing: BoardTiming;
  readonly faults: FaultKnobs;
  /** What the chip's eFuse says in download mode (see `VirtualBoardOptions.silicon`). */
  readonly silicon: BoardSilicon;
  hardware: BoardHardware;
  #app: RunningApp;
  #state: DeviceState = 'off';
  #bootCount = 0;
  #reset = new BootSignal();
  /** Made at each application start; until the first one, on demand. */
  #mcp: McpServer | undefined;
  #lastOta: OtaCheck | undefined;
  #transport: BoardTransport | undefined;
  #powered = false;
  readonly #activation: ActivationIdentity | undefined;
  /** The DHCP lease, a function of the MAC: worked out once. */
  readonly #ip: string;
  readonly #options: VirtualBoardOptions;
  readonly #bootloader: Bootloader;
  readonly #application: Application;
  readonly #session: Session;
  readonly #shutdown: ShutdownHost;

  constructor(options: VirtualBoardOptions = {}) {
    super();
    this.#options = options;
    this.preset =
      typeof options.preset === 'object'
        ? options.preset
        : boardPreset(options.preset ?? 'bread-compact-wifi');
    this.mac = (options.mac ?? randomMac()).toLowerCase();
    this.#ip = boardIp(this.mac);
    this.#activation = activationIdentity(options, this.preset.chip);
    this.timing = { ...FIRMWARE_TIMING, ...options.timing };
    this.silicon = options.silicon ?? {};
    this.faults = {
      replyLatencyMs: 0,
      dropReply: undefined,
      disconnectOnCall: undefined,
      pageBudgetBytes: undefined,
      crashOnHello: false,
      panicAtBoot: false,
      helloWithout: [],
      initializeWithout: [],
      cursorLoop: false,
      regressions: [],
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
    this.#bootloader = new Bootloader({
      flash: options.flash,
      storage: this.storage,
      console: this.console,
      chip: this.preset.chip,
      board: this.preset.name,
    });
    this.#session = this.#newSession();
    this.#application = this.#newApplication();
    this.#shutdown = this.#newShutdownHost();
    this.storage.onChange(() => this.#bootloader.persistNvs());
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
    this.#mcp ??= this.#newMcpServer();
    return this.#mcp;
  }

  get sessionId(): string | undefined {
    return this.#session.sessionId;
  }

  /**
   * The transport this boot runs, chosen after a successful OTA check from what NVS holds:
   * `mqtt` (connected from boot on) or `websocket` (opened by a click); undefined before the
   * check, without one, or with neither stored.
   */
  get transport(): BoardTransport | undefined {
    return this.#transport;
  }

  /** True while the MQTT connection is up. */
  get mqttConnected(): boolean {
    return this.#session.mqttConnected;
  }

  /** What the board sent over UDP in MQTT audio sessions, since it was made. */
  get uplink(): UplinkStats {
    return this.#session.uplink;
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
    this.#mcp?.loop.stop();
    this.#session.drop('power off');
    this.#transport = undefined;
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
    this.#app = this.#bootloader.install(image);
    return this.#app;
  }

  /** A BOOT button click: toggles the chat state (`Application::ToggleChatState`). */
  click(): void {
    switch (clickAction(this.#state)) {
      case 'cancel-activation':
        this.#setState('idle');
        return;
      case 'open':
        this.mcp.loop.schedule(() => this.#session.open());
        return;
      case 'close':
        this.mcp.loop.schedule(() => this.#session.close('button'));
        return;
      case 'abort':
        this.mcp.loop.schedule(() => this.#session.abortSpeaking());
        return;
      case 'none':
        return;
    }
  }

  /** `Application::Reboot`: closes the channel, drops queued work, restarts after a pause. */
  reboot(): void {
    softReboot(this.#shutdown, this.timing.rebootMs);
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

  /**
   * The system-info JSON the OTA check posts (and `self.get_system_info` returns): the flash
   * size the board has and the partition table in its flash (without a modelled flash, the
   * preset's size and xiaozhi's table for it).
   */
  systemInfo(): OtaRequestBody {
    return systemInfo({
      preset: this.preset,
      mac: this.mac,
      uuid: this.uuid,
      language: this.#options.language ?? 'zh-CN',
      ssid: this.storage.open('wifi').getString('ssid'),
      app: this.#app,
      flash: flashLayout(this.preset, this.#bootloader.flashFacts()),
      ip: this.#ip,
    });
  }

  /** The JSON `self.get_device_status` returns. */
  deviceStatus(): JsonValue {
    return deviceStatus(this.preset, this.hardware, this.storage.open('wifi').getString('ssid'));
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
    const budget = this.faults.pageBudgetBytes ?? regressionPageBudget(this.faults.regressions);
    const server = new McpServer({
      board: { name: this.preset.name, version: this.#app.version },
      profile: this.#options.profile ?? 'firmware',
      console: this.console,
      onToolCall: (tool) => {
        this.emit('tool-call', tool.name);
        if (tool.name === this.faults.disconnectOnCall)
          this.#session.disconnect('fault: disconnect mid-call');
      },
      ...(budget === undefined ? {} : { pageBudgetBytes: budget }),
    });
    server.setSender((payload) => this.#session.send(payload));
    return server;
  }

  #newSession(): Session {
    return new Session({
      console: this.console,
      storage: this.storage,
      timing: this.timing,
      faults: this.faults,
      mac: this.mac,
      hello: this.preset.hello,
      closeFrame: this.#options.closeFrame ?? false,
      uuid: () => this.uuid,
      otaChecked: () => this.#lastOta !== undefined,
      state: () => this.#state,
      setState: (state) => this.#setState(state),
      mcp: () => this.mcp,
      panic: (panic) => this.#panic(panic),
      opened: (sessionId) => this.emit('session', sessionId),
      reboot: () => this.reboot(),
      mqtt: (connected) => this.emit('mqtt', connected),
      uplinkEnded: (stats) => this.emit('uplink-end', stats),
    });
  }

  #newApplication(): Application {
    return new Application({
      console: this.console,
      storage: this.storage,
      timing: this.timing,
      faults: this.faults,
      boardName: this.preset.name,
      ip: this.#ip,
      app: () => this.#app,
      uuid: () => this.uuid,
      state: () => this.#state,
      setState: (state) => this.#setState(state),
      startMcp: () => {
        const mcp = this.#newMcpServer();
        this.#mcp = mcp;
        this.preset.registerTools(mcp, this.#boardApi());
      },
      otaClient: () => this.#otaClient(),
      otaUrl: () =>
        this.storage.open('wifi').getString('ota_url') || (this.#options.defaultOtaUrl ?? ''),
      checked: (check) => {
        this.#lastOta = check;
        this.emit('ota', check);
      },
      otaChecked: () => this.#lastOta !== undefined,
      startTransport: async (transport) => {
        this.#transport = transport;
        if (transport === 'mqtt') await this.#session.startMqtt();
      },
      closeSession: (reason) => this.#session.close(reason),
      installApp: (image) => this.installApp(image),
      restart: (reason) => this.#restart(reason),
    });
  }

  #newShutdownHost(): ShutdownHost {
    const board = this;
    return {
      console: this.console,
      stopLoop: () => this.#mcp?.loop.stop(),
      dropChannel: (reason) => this.#session.drop(reason),
      get signal() {
        return board.#reset;
      },
      restart: (reason) => this.#restart(reason),
    };
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
          ...(this.#activation === undefined
            ? {}
            : { serialNumber: this.#activation.serialNumber }),
        }),
      body: () => this.systemInfo(),
      storage: this.storage,
      console: this.console,
      timeoutMs: this.timing.httpTimeoutMs,
      ...(this.#activation === undefined ? {} : { activation: this.#activation }),
    });
  }

  #restart(reason: ResetReason, download = false): void {
    this.#powered = true;
    this.#reset.abort();
    this.#reset = new BootSignal();
    this.#mcp?.loop.stop();
    this.#session.drop('reset');
    this.#lastOta = undefined;
    this.#transport = undefined;
    this.#state = 'off';
    this.hardware = { ...this.preset.hardware(), volume: this.hardware.volume };
    const signal = this.#reset;
    this.#boot(reason, signal, download).catch((error: unknown) => this.#onFailure(error, signal));
  }

  /** Reset to running firmware: the ROM and bootloader rooms, then the application's. */
  async #boot(reason: ResetReason, signal: BootSignal, download: boolean): Promise<void> {
    this.#bootCount++;
    this.#bootloader.banner(reason, download, this.#app.idfVersion);
    this.emit('boot', reason, this.#bootCount, download);
    if (download) {
      this.#setState('download');
      return;
    }
    await signal.sleep(this.timing.bootMs);
    try {
      this.#app = this.#bootloader.load() ?? this.#app;
    } catch (error) {
      // The ROM or bootloader cannot start an app: it says why and resets, over and over.
      this.console.raw(bootFailureLine(error as Error));
      await signal.sleep(this.timing.panicRebootMs);
      this.#restart('RTC_WDT_RTC_RST');
      return;
    }
    await this.#application.start(signal);
  }

  #onFailure(error: unknown, signal: BootSignal): void {
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
    crash(this.#shutdown, panic, this.#app.elfSha256, this.timing.panicRebootMs);
  }

  #boardApi(): BoardApi {
    return {
      hardware: this.hardware,
      storage: this.storage,
      schedule: (task) => this.mcp.loop.schedule(task),
      reboot: () => this.reboot(),
      upgradeFirmware: (url) => this.#application.upgrade(url, this.#reset),
      systemInfo: () => this.systemInfo(),
      deviceStatus: () => this.deviceStatus(),
      enterWifiConfigMode: () => {
        this.storage.open('wifi').setInt('force_ap', 1);
        this.reboot();
      },
      vision: () => this.mcp.vision,
      deviceId: this.mac,
      clientId: this.uuid,
      log: (level, tag, text) => this.console.log(level, tag, text),
    };
  }
}
