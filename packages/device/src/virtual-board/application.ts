/**
 * The firmware's `Application` from `app_main` on: the app's start lines, Wi-Fi (or the setup
 * portal), the OTA check with its retries (`CheckNewVersion`, docs/protocol.md §7), activation,
 * upgrades (`UpgradeFirmware`), and the transport the stored settings select. The retry
 * schedule, the progress steps and the transport are decided as data ({@link otaRetry},
 * {@link progressPercent}, {@link chooseTransport}); the {@link Application} does the waiting
 * and the talking.
 */
import type { BoardConsole } from '../console.js';
import { BoardPanic } from '../errors.js';
import type { NvsStorage } from '../nvs-storage.js';
import type { OtaCheck, OtaClient } from '../ota-client.js';
import {
  type BoardTiming,
  type BoardTransport,
  type BootSignal,
  type ConsoleOutput,
  type DeviceState,
  type FaultKnobs,
  print,
  Reset,
  type ResetReason,
  type RunningApp,
} from './types.js';

/** The lines `app_main` prints about the running app (`cpu_start`, `app_init`). */
export function appStartLines(app: RunningApp): ConsoleOutput[] {
  return [
    { level: 'I', tag: 'cpu_start', text: `Project name:     ${app.projectName}` },
    { level: 'I', tag: 'app_init', text: `App version:      ${app.version}` },
    { level: 'I', tag: 'app_init', text: `ELF file SHA256:  ${app.elfSha256.slice(0, 16)}...` },
    { level: 'I', tag: 'app_init', text: `ESP-IDF:          ${app.idfVersion}` },
  ];
}

/** After a failed OTA check: give up, or wait `delay` (and double it for the next failure). */
export type RetryDecision =
  | { readonly kind: 'give-up'; readonly line: string }
  | {
      readonly kind: 'retry';
      readonly line: string;
      readonly delay: number;
      readonly next: number;
    };

/** `CheckNewVersion`'s schedule after the `failures`-th failure in a row, waiting `delay`. */
export function otaRetry(failures: number, delay: number, timing: BoardTiming): RetryDecision {
  if (failures >= timing.otaMaxRetries)
    return { kind: 'give-up', line: 'Too many retries, exit version check' };
  return {
    kind: 'retry',
    line: `Check new version failed, retry in ${delay / 1000} seconds (${failures}/${timing.otaMaxRetries})`,
    delay,
    next: delay * 2,
  };
}

/** The download progress the OTA code logs: whole tens of percent. */
export function progressPercent(received: number, total: number): number {
  return Math.floor((received * 10) / total) * 10;
}

/**
 * The transport after a successful OTA check, from what NVS holds (keys are only ever
 * overwritten): a non-empty `mqtt/endpoint` means MQTT, even when `websocket/url` is set too
 * (docs/protocol.md §7: MQTT wins), so a board goes back to WebSocket only once a reply blanks
 * the endpoint (`"mqtt":{"endpoint":""}`); else a stored `websocket/url` means WebSocket.
 */
export function chooseTransport(stored: {
  readonly mqttEndpoint: string;
  readonly websocketUrl: string;
}): BoardTransport | undefined {
  if (stored.mqttEndpoint !== '') return 'mqtt';
  if (stored.websocketUrl !== '') return 'websocket';
  return undefined;
}

/** What the application needs from the board. */
export interface ApplicationHost {
  readonly console: BoardConsole;
  readonly storage: NvsStorage;
  readonly timing: BoardTiming;
  readonly faults: FaultKnobs;
  /** The preset's `BOARD_NAME`. */
  readonly boardName: string;
  /** The board's IP address once Wi-Fi is up. */
  readonly ip: string;
  app(): RunningApp;
  uuid(): string;
  state(): DeviceState;
  setState(state: DeviceState): void;
  /** A fresh MCP server with the board's tools registered, as `app_main` builds it. */
  startMcp(): void;
  otaClient(): OtaClient;
  /** NVS `wifi/ota_url`, else the build's default. */
  otaUrl(): string;
  /** A successful OTA check. */
  checked(check: OtaCheck): void;
  /** An OTA check succeeded this boot. */
  otaChecked(): boolean;
  /** `InitializeProtocol` and `protocol_->Start()`: MQTT connects here, WebSocket waits for a click. */
  startTransport(transport: BoardTransport): Promise<void>;
  closeSession(reason: string): void;
  installApp(image: Uint8Array): RunningApp;
  restart(reason: ResetReason): void;
}

export class Application {
  readonly #host: ApplicationHost;

  constructor(host: ApplicationHost) {
    this.#host = host;
  }

  /** `app_main` after the bootloader handed over, up to idle (or the setup portal). */
  async start(signal: BootSignal): Promise<void> {
    const host = this.#host;
    print(host.console, appStartLines(host.app()));
    if (host.faults.panicAtBoot) {
      throw new BoardPanic(
        'abort',
        'assert failed: app_main main.cc:42 (fault knob: panic at boot)',
      );
    }
    host.setState('starting');
    host.console.log('I', 'Board', `UUID=${host.uuid()} SKU=${host.boardName}`);
    host.startMcp();

    const wifi = host.storage.open('wifi');
    const ssid = wifi.getString('ssid');
    if (wifi.getInt('force_ap') === 1 || ssid === '') {
      wifi.setInt('force_ap', 0);
      host.setState('wifi_configuring');
      host.console.log('I', 'WifiBoard', 'WiFi config mode entered');
      return;
    }
    await signal.sleep(host.timing.wifiConnectMs);
    host.console.log('I', 'WifiStation', `Got IP: ${host.ip}`);
    host.console.log('I', 'WifiBoard', `Connected to WiFi: ${ssid}`);
    host.console.log('I', 'Application', 'Network connected');
    await this.checkNewVersion(signal);
    if (signal.aborted) throw new Reset();
    if (host.otaChecked()) {
      const transport = chooseTransport({
        mqttEndpoint: host.storage.open('mqtt').getString('endpoint'),
        websocketUrl: host.storage.open('websocket').getString('url'),
      });
      if (transport !== undefined) await host.startTransport(transport);
      if (signal.aborted) throw new Reset();
    }
    if (host.state() === 'activating') host.setState('idle');
  }

  /** `Application::CheckNewVersion`: retries with a doubling delay, upgrades, activates. */
  async checkNewVersion(signal: BootSignal): Promise<void> {
    const host = this.#host;
    const ota = host.otaClient();
    let failures = 0;
    let delay = host.timing.otaRetryMs;
    for (;;) {
      host.setState('activating');
      const url = host.otaUrl();
      const check = await ota.check(url);
      if (signal.aborted) throw new Reset();
      if (check === undefined) {
        failures++;
        const decision = otaRetry(failures, delay, host.timing);
        if (decision.kind === 'give-up') {
          host.console.log('E', 'Application', decision.line);
          return;
        }
        host.console.log('W', 'Application', decision.line);
        await signal.sleep(decision.delay);
        delay = decision.next;
        continue;
      }
      failures = 0;
      delay = host.timing.otaRetryMs;
      host.checked(check);
      if (check.hasNewVersion && check.firmware !== undefined) {
        if (await this.upgrade(check.firmware.url, signal)) return;
        host.setState('activating');
      }
      if (check.activation === undefined) return;
      if (check.activation.code !== undefined) {
        host.console.log(
          'I',
          'Application',
          `Activation code: ${check.activation.code} ${check.activation.message ?? ''}`.trim(),
        );
      }
      for (let attempt = 1; attempt <= 10; attempt++) {
        host.console.log('I', 'Application', `Activating... ${attempt}/10`);
        const outcome = await ota.activate(url, check.activation);
        if (signal.aborted) throw new Reset();
        if (outcome === 'done') break;
        await signal.sleep(
          outcome === 'retry' ? host.timing.activationRetryMs : host.timing.activationFailMs,
        );
        if (host.state() === 'idle') break;
      }
    }
  }

  /** `Application::UpgradeFirmware`: download, validate, install, reboot. False when it fails. */
  async upgrade(url: string, signal: BootSignal): Promise<boolean> {
    const host = this.#host;
    host.console.log('I', 'Application', `Upgrading firmware from ${url}`);
    host.closeSession('upgrade');
    host.setState('upgrading');
    let lastPercent = -1;
    try {
      const image = await host.otaClient().download(url, (received, total) => {
        const percent = progressPercent(received, total);
        if (percent !== lastPercent) {
          lastPercent = percent;
          host.console.log('I', 'Ota', `Progress: ${percent}% (${received}/${total})`);
        }
      });
      if (signal.aborted) throw new Reset();
      const previous = host.app().version;
      const installed = host.installApp(image);
      host.console.log(
        'I',
        'Ota',
        `Current version: ${previous}, New version: ${installed.version}`,
      );
      host.console.log(
        'I',
        'Ota',
        `Firmware upgrade successful, rebooting in ${host.timing.upgradeRebootMs / 1000} seconds...`,
      );
    } catch (error) {
      if (error instanceof Reset || signal.aborted) throw error;
      host.console.log('E', 'Ota', (error as Error).message);
      host.console.log('E', 'Application', 'Firmware upgrade failed...');
      return false;
    }
    await signal.sleep(host.timing.upgradeRebootMs);
    host.restart('RTC_SW_CPU_RST');
    return true;
  }
}
