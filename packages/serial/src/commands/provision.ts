/**
 * `provision`: writes Wi-Fi credentials and the OTA URL (optionally the WebSocket URL and
 * token) into the board's NVS partition, found through the partition table the board itself
 * holds at 0x8000. Entries already there that we do not set (`board/uuid`, the volume...) are
 * kept, so the board keeps its identity. Then a hard reset, so it boots with them.
 */
import { FirmwareError } from '@xiaozhi-mcp/firmware';
import type { Command } from 'commander';
import { describeChip, flasherFor, hex } from '../flash-image.js';
import { flashBaudLadder } from '../flash-timing.js';
import { type ProvisionSettings, provisionBoard, provisionEntries } from '../provision.js';
import {
  type PortOptions,
  parseBaud,
  runPortCommand,
  type SerialCommandContext,
  SerialCommandError,
  usageError,
  withPortOptions,
} from './context.js';
import {
  BAUD_OPTION_HELP,
  DEFAULT_FLASH_BAUD,
  parseResetOption,
  RESET_OPTION_HELP,
} from './flash.js';

export interface ProvisionCommandOptions extends PortOptions {
  readonly ssid?: string;
  readonly password?: string;
  readonly otaUrl?: string;
  readonly wsUrl?: string;
  readonly wsToken?: string;
  readonly baud?: string;
  readonly reset?: string;
}

/** The settings, checked as the firmware would before anything touches the board. */
export function provisionSettings(options: ProvisionCommandOptions): ProvisionSettings {
  if (options.ssid === undefined) throw usageError('--ssid is required');
  if (options.password === undefined)
    throw usageError('--password is required (use --password "" for an open network)');
  if (options.otaUrl === undefined) throw usageError('--ota-url is required');
  if (options.wsToken !== undefined && options.wsUrl === undefined)
    throw usageError('--ws-token needs --ws-url');
  const settings: ProvisionSettings = {
    ssid: options.ssid,
    password: options.password,
    otaUrl: options.otaUrl,
    ...(options.wsUrl === undefined
      ? {}
      : {
          websocket: {
            url: options.wsUrl,
            ...(options.wsToken === undefined ? {} : { token: options.wsToken }),
          },
        }),
  };
  // Throws OPTION_INVALID (exit 2) for an SSID, password or URL the firmware would not take.
  provisionEntries(settings);
  return settings;
}

/** `provision`: resolves to the exit code; failures are reported as one line. */
export async function provisionCommand(
  context: SerialCommandContext,
  options: ProvisionCommandOptions,
): Promise<number> {
  return runPortCommand(context, 'provision', options, async (open) => {
    const settings = provisionSettings(options);
    const baud = parseBaud(options.baud ?? String(DEFAULT_FLASH_BAUD));
    const reset = parseResetOption(options.reset);
    const port = await open();
    // An rfc2217:// port writes its lines one after the other: the flasher plans its resets
    // for that (`ResolvedPort.linePlatform`).
    const flasher = flasherFor(port, {
      reset,
      ...(port.linePlatform === undefined ? {} : { platform: port.linePlatform }),
    });
    try {
      const chip = await flasher.connect();
      context.out.stdout(`${port.label}: ${describeChip(chip)}\n`);
      const result = await provisionBoard(
        {
          readPartitionTable: () =>
            flasher.readPartitionTable().catch((error: unknown) => {
              if (!(error instanceof FirmwareError && error.code === 'PARTITION_INVALID'))
                throw error;
              throw new SerialCommandError(
                `the board has no valid partition table at 0x8000 (${error.message}); flash a firmware first`,
                'failed',
              );
            }),
          readFlash: (offset, size) => flasher.readFlash(offset, size),
          flash: (parts) =>
            flasher.flash(parts, { reset: false, baudRates: flashBaudLadder(baud) }),
        },
        settings,
      );
      // The password is a secret: say that it is set, never what it is.
      const written = result.entries
        .filter((e) => !result.kept.includes(e))
        .map((e) =>
          e.namespace === 'wifi' && e.key === 'password'
            ? `wifi/password (${String(e.value).length === 0 ? 'empty' : 'set'})`
            : e.key === 'token'
              ? `${e.namespace}/token (set)`
              : `${e.namespace}/${e.key}=${String(e.value)}`,
        );
      const kept = result.kept.map((e) => `${e.namespace}/${e.key}`);
      context.out.stdout(
        `nvs partition '${result.partition.label}' at ${hex(result.partition.offset)} (${result.partition.size} bytes): wrote ${written.join(', ')}\n`,
      );
      context.out.stdout(
        `kept ${kept.length} existing entr${kept.length === 1 ? 'y' : 'ies'}${kept.length === 0 ? '' : `: ${kept.join(', ')}`}\n`,
      );
      await flasher.disconnect({ reset: true });
      // Reset none: no line touched (esptool's --after no_reset); a person presses RESET.
      context.out.stdout(
        reset === 'none'
          ? `${port.label}: left in its bootloader (reset none: no line touched): press RESET on the board, then it joins ${settings.ssid} and checks ${settings.otaUrl}\n`
          : `${port.label}: hard reset; the board joins ${settings.ssid} and checks ${settings.otaUrl}\n`,
      );
      return 0;
    } finally {
      await flasher.disconnect().catch(() => {});
    }
  });
}

export function registerProvisionCommand(
  program: Command,
  context: SerialCommandContext,
  setExit: (code: number) => void,
): Command {
  return withPortOptions(program.command('provision'))
    .description(
      "write Wi-Fi and the OTA URL into the board's NVS (keeping its other entries, like board/uuid), then reset it",
    )
    .requiredOption('--ssid <ssid>', 'the Wi-Fi network')
    .requiredOption('--password <password>', 'the Wi-Fi password ("" for an open network)')
    .requiredOption('--ota-url <url>', 'the OTA endpoint the board checks at boot (wifi/ota_url)')
    .option(
      '--ws-url <url>',
      'a WebSocket URL to store (websocket/url); the OTA reply usually sets it',
    )
    .option('--ws-token <token>', 'the WebSocket token (websocket/token), with --ws-url')
    .option('--baud <rate>', BAUD_OPTION_HELP, String(DEFAULT_FLASH_BAUD))
    .option('--reset <strategy>', RESET_OPTION_HELP, 'auto')
    .action(async (options: ProvisionCommandOptions) =>
      setExit(await provisionCommand(context, options)),
    );
}
