import { createHash } from 'node:crypto';
import { BOARD_PRESETS, type McpProfile, NvsStorage, VirtualBoard } from '@xiaozhi-mcp/device';
import { ProtocolError, parseFirmwareVersion } from '@xiaozhi-mcp/protocol';
import { type Command, Option } from 'commander';
import { CliError, type CliIo, ExitCode, interrupted } from '../io.js';

export interface SimOptions {
  otaUrl: string;
  board: string;
  count: number;
  session: 'auto' | 'none';
  profile: McpProfile;
  ssid: string;
  /** The firmware version the boards run (`--fw-version`). */
  fwVersion?: string;
  /** `--version` after `sim`, the old spelling of `--fw-version`. */
  version?: string;
  /** The first board's MAC (`--first-mac`); the others count up from it. */
  firstMac?: string;
  /** Resolves when the simulation should stop (Ctrl-C by default). */
  until?: Promise<void>;
}

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 100_000)
    throw new CliError(
      `--count must be an integer from 1 to 100000, got ${JSON.stringify(value)}`,
      ExitCode.usage,
    );
  return n;
}

const ESPRESSIF_OUI = [0xf4, 0x12, 0xfa];

function parseMac(text: string): number[] | undefined {
  const match =
    /^([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})[:-]?([0-9a-f]{2})$/i.exec(
      text.trim(),
    );
  return match?.slice(1).map((byte) => Number.parseInt(byte, 16));
}

/**
 * The MAC of board `index` of a `sim` run: the first board's MAC (`first`, else Espressif's OUI
 * and three bytes of the preset's hash) counted up by `index` in its last three bytes. So each
 * board of a run has its own MAC, the same one every run (a backend that pins a device to its
 * first Client-Id knows it again), and runs of different presets do not share MACs.
 */
export function simMac(preset: string, index: number, first?: string): string {
  const base =
    first === undefined
      ? [
          ...ESPRESSIF_OUI,
          ...createHash('sha256').update(`xiaozhi-mcp sim ${preset}`).digest().subarray(0, 3),
        ]
      : parseMac(first);
  if (base === undefined || base.length !== 6) throw new Error(`not a MAC: ${String(first)}`);
  const nic = (((base[3] ?? 0) << 16) | ((base[4] ?? 0) << 8) | (base[5] ?? 0)) + index;
  return [base[0], base[1], base[2], (nic >> 16) & 0xff, (nic >> 8) & 0xff, nic & 0xff]
    .map((byte) => (byte ?? 0).toString(16).padStart(2, '0'))
    .join(':');
}

/**
 * The Client-Id (NVS `board/uuid`) of a simulated board, derived from its MAC (a name-based
 * UUID, version 5): a real board keeps its uuid in NVS across reboots, and a backend that pins
 * a device to it refuses a board that comes back with another one.
 */
export function simUuid(mac: string): string {
  const hash = createHash('sha1').update(`xiaozhi-mcp sim board ${mac}`).digest();
  hash[6] = ((hash[6] ?? 0) & 0x0f) | 0x50;
  hash[8] = ((hash[8] ?? 0) & 0x3f) | 0x80;
  const hex = hash.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** `--first-mac`: six bytes, unicast (a board's own address never has the group bit). */
function checkFirstMac(text: string): string {
  const bytes = parseMac(text);
  if (bytes === undefined)
    throw new CliError(
      `--first-mac must be a MAC such as f4:12:fa:00:00:01, got ${JSON.stringify(text)}`,
      ExitCode.usage,
    );
  if (((bytes[0] ?? 0) & 1) !== 0)
    throw new CliError(
      `--first-mac must be a unicast MAC (the first byte even), got ${JSON.stringify(text)}`,
      ExitCode.usage,
    );
  return text;
}

/** `--fw-version` (or the old `--version`): a version the firmware reads as it is meant. */
function firmwareVersion(options: SimOptions): string | undefined {
  const { fwVersion, version } = options;
  if (fwVersion !== undefined && version !== undefined && fwVersion !== version)
    throw new CliError(
      `--fw-version ${fwVersion} and --version ${version} disagree; give --fw-version only`,
      ExitCode.usage,
    );
  const chosen = fwVersion ?? version;
  if (chosen === undefined) return undefined;
  try {
    parseFirmwareVersion(chosen);
  } catch (error) {
    if (!(error instanceof ProtocolError)) throw error;
    throw new CliError(`--fw-version: ${error.message}`, ExitCode.usage);
  }
  return chosen;
}

/** Runs virtual boards against a backend until stopped, printing their console lines. */
export async function simCommand(io: CliIo, options: SimOptions): Promise<number> {
  if (!/^https?:\/\/\S+$/.test(options.otaUrl))
    throw new CliError(
      `--ota-url must be an http:// or https:// URL, got ${JSON.stringify(options.otaUrl)}`,
      ExitCode.usage,
    );
  if (!(options.board in BOARD_PRESETS)) {
    throw new CliError(
      `unknown board preset ${JSON.stringify(options.board)}; known: ${Object.keys(BOARD_PRESETS).join(', ')}`,
      ExitCode.usage,
    );
  }
  const version = firmwareVersion(options);
  const firstMac = options.firstMac === undefined ? undefined : checkFirstMac(options.firstMac);
  const boards = Array.from({ length: options.count }, (_, index) => {
    const mac = simMac(options.board, index, firstMac);
    return new VirtualBoard({
      preset: options.board,
      mac,
      storage: new NvsStorage({ board: { uuid: simUuid(mac) } }),
      wifi: { ssid: options.ssid, password: 'virtual' },
      otaUrl: options.otaUrl,
      profile: options.profile,
      ...(version === undefined ? {} : { app: { version } }),
    });
  });
  const timers = new Set<NodeJS.Timeout>();
  for (const board of boards) {
    const label = options.count === 1 ? '' : `${board.mac} | `;
    board.console.on('line', (line) => io.stdout(`${label}${line.text}\n`));
    if (options.session === 'auto') {
      // Like a person pressing BOOT whenever the board is idle (over WebSocket, the only way
      // to reach it); backing off while sessions fail.
      let delay = 250;
      board.on('session', () => {
        delay = 250;
      });
      board.on('state', (state) => {
        // A board on MQTT is reachable without a session (docs/protocol.md §5): no clicks.
        if (state !== 'idle' || board.transport === 'mqtt') return;
        const timer = setTimeout(() => {
          timers.delete(timer);
          if (board.state === 'idle') board.click();
        }, delay);
        timers.add(timer);
        delay = Math.min(delay * 2, 30_000);
      });
    }
    board.powerOn();
  }
  io.stderr(
    `xiaozhi-mcp sim: ${options.count} ${options.board} board${options.count === 1 ? '' : 's'} against ${options.otaUrl}; Ctrl-C to stop\n`,
  );
  const signal = await (options.until ?? interrupted());
  for (const timer of timers) clearTimeout(timer);
  const sessions = boards.filter((b) => b.sessionId !== undefined).length;
  for (const board of boards) board.powerOff();
  io.stderr(
    `xiaozhi-mcp sim: stopped ${options.count} board${options.count === 1 ? '' : 's'} (${sessions} in a session)\n`,
  );
  return signal === 'SIGINT' ? ExitCode.interrupted : ExitCode.ok;
}

export function registerSim(program: Command, io: CliIo, setExit: (code: number) => void): void {
  program
    .command('sim')
    .description('run virtual boards against a backend until Ctrl-C, printing their console lines')
    .requiredOption(
      '--ota-url <url>',
      'the OTA URL the boards check at boot (provisioned as NVS wifi/ota_url)',
    )
    .option(
      '--board <preset>',
      `board preset: ${Object.keys(BOARD_PRESETS).join(', ')}`,
      'bread-compact-wifi',
    )
    .option('--count <n>', 'how many boards', positiveInt, 1)
    .option(
      '--session <mode>',
      'auto: press BOOT whenever a board on WebSocket is idle; none: never',
      'auto',
    )
    .option(
      '--profile <profile>',
      'MCP answers: firmware (exact) or strict (spec-compliant)',
      'firmware',
    )
    .option('--ssid <name>', 'the Wi-Fi network the boards are provisioned with', 'xiaozhi-sim')
    .option(
      '--fw-version <version>',
      'the firmware version the boards run and report, e.g. 2.5.0 (default 2.4.2)',
    )
    // The old spelling; the program's own --version (before `sim`) still prints the tool's.
    .addOption(new Option('--version <version>', 'same as --fw-version').hideHelp())
    .option(
      '--first-mac <mac>',
      "the first board's MAC; the others count up from it (default: derived from the preset, the same every run)",
    )
    .action(async (options: SimOptions) => {
      if (options.session !== 'auto' && options.session !== 'none') {
        throw new CliError(
          `--session must be auto or none, got ${JSON.stringify(options.session)}`,
          ExitCode.usage,
        );
      }
      if (options.profile !== 'firmware' && options.profile !== 'strict') {
        throw new CliError(
          `--profile must be firmware or strict, got ${JSON.stringify(options.profile)}`,
          ExitCode.usage,
        );
      }
      setExit(await simCommand(io, options));
    });
}
