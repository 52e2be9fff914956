import { createHash } from 'node:crypto';
import {
  BOARD_PRESETS,
  type McpProfile,
  NvsStorage,
  type ReplicaFile,
  replicaBoardOptions,
  VirtualBoard,
} from '@xiaozhi-mcp/device';
import { ProtocolError, parseFirmwareVersion } from '@xiaozhi-mcp/protocol';
import { type Command, Option } from 'commander';
import { CliError, type CliIo, checkMac, ExitCode, interrupted, parseMac } from '../io.js';
import { loadReplica } from './replica.js';

export interface SimOptions {
  otaUrl: string;
  board: string;
  /** A replica file (`xiaozhi-mcp replica`, hil's `<board>/replica.json`): the boards run it. */
  replica?: string;
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
  if (options.replica === undefined && !(options.board in BOARD_PRESETS)) {
    throw new CliError(
      `unknown board preset ${JSON.stringify(options.board)}; known: ${Object.keys(BOARD_PRESETS).join(', ')}`,
      ExitCode.usage,
    );
  }
  const version = firmwareVersion(options);
  const firstMac = options.firstMac === undefined ? undefined : checkMac(options.firstMac);
  // Read and checked whole before any board starts: a bad file is exit 2 with nothing running.
  const replica: ReplicaFile | undefined =
    options.replica === undefined ? undefined : await loadReplica(io, options.replica);
  const recordedMac =
    replica?.board.mac === undefined
      ? undefined
      : checkMac(replica.board.mac, `${options.replica}: board.mac`);
  // A replica's boards count up from its own MAC, or from its variant's as a preset's do.
  const family = replica === undefined ? options.board : replica.board.variant;
  const name = replica === undefined ? options.board : `${replica.board.variant} (replica)`;
  const boards = Array.from({ length: options.count }, (_, index) => {
    const mac = simMac(family, index, firstMac ?? recordedMac);
    return new VirtualBoard({
      ...(replica === undefined ? { preset: options.board } : replicaBoardOptions(replica)),
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
    `xiaozhi-mcp sim: ${options.count} ${name} board${options.count === 1 ? '' : 's'} against ${options.otaUrl}; Ctrl-C to stop\n`,
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
    .option(
      '--replica <file>',
      "run a board's replica (`xiaozhi-mcp replica`, hil's <board>/replica.json) instead of a preset",
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
      "the first board's MAC; the others count up from it (default: the replica's MAC, else derived from the preset or the replica's variant, the same every run)",
    )
    .action(async (options: SimOptions, command: Command) => {
      if (options.replica !== undefined && command.getOptionValueSource('board') === 'cli')
        throw new CliError(
          '--replica and --board are exclusive: a replica is its own board',
          ExitCode.usage,
        );
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
