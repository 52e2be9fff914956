import { BOARD_PRESETS, type McpProfile, VirtualBoard } from '@xiaozhi-mcp/device';
import type { Command } from 'commander';
import { CliError, type CliIo, ExitCode, interrupted } from '../io.js';

export interface SimOptions {
  otaUrl: string;
  board: string;
  count: number;
  session: 'auto' | 'none';
  profile: McpProfile;
  ssid: string;
  version?: string;
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

function macFor(index: number): string {
  const n = index + 1;
  return ['f4', '12', 'fa', (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff]
    .map((part) => (typeof part === 'number' ? part.toString(16).padStart(2, '0') : part))
    .join(':');
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
  const boards = Array.from(
    { length: options.count },
    (_, index) =>
      new VirtualBoard({
        preset: options.board,
        mac: macFor(index),
        wifi: { ssid: options.ssid, password: 'virtual' },
        otaUrl: options.otaUrl,
        profile: options.profile,
        ...(options.version === undefined ? {} : { app: { version: options.version } }),
      }),
  );
  const timers = new Set<NodeJS.Timeout>();
  for (const board of boards) {
    const label = options.count === 1 ? '' : `${board.mac} | `;
    board.console.on('line', (line) => io.stdout(`${label}${line.text}\n`));
    if (options.session === 'auto') {
      // Like a person pressing BOOT whenever the board is idle; backing off while sessions fail.
      let delay = 250;
      board.on('session', () => {
        delay = 250;
      });
      board.on('state', (state) => {
        if (state !== 'idle') return;
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
  await (options.until ?? interrupted());
  for (const timer of timers) clearTimeout(timer);
  const sessions = boards.filter((b) => b.sessionId !== undefined).length;
  for (const board of boards) board.powerOff();
  io.stderr(
    `xiaozhi-mcp sim: stopped ${options.count} board${options.count === 1 ? '' : 's'} (${sessions} in a session)\n`,
  );
  return ExitCode.ok;
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
    .option('--session <mode>', 'auto: press BOOT whenever a board is idle; none: never', 'auto')
    .option(
      '--profile <profile>',
      'MCP answers: firmware (exact) or strict (spec-compliant)',
      'firmware',
    )
    .option('--ssid <name>', 'the Wi-Fi network the boards are provisioned with', 'xiaozhi-sim')
    .option('--version <version>', 'the firmware version the boards run (default 2.4.2)')
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
