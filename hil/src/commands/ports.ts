/**
 * `ports`: the serial ports a board can be on (`listPorts`, which falls back to
 * `/dev/serial/by-id` and sysfs where `udevadm` is missing) and the virtual boards in the
 * virtual directory, with what their flash holds (firmware version, provisioned network).
 */
import { closeSync, openSync, readSync } from 'node:fs';
import {
  findPartition,
  listPorts,
  PARTITION_TABLE_MAX_SIZE,
  PARTITION_TABLE_OFFSET,
  type PortInfo,
  readAppImage,
  readNvsPartition,
  readPartitionTable,
} from '@xiaozhi-mcp/firmware';
import type { Command } from 'commander';
import {
  defaultVirtualDir,
  isBoardPort,
  listVirtualBoards,
  runReported,
  type SerialCommandContext,
  type VirtualBoardEntry,
} from './port-resolver.js';

export interface PortsCommandOptions {
  readonly json?: boolean;
  /** Also ports without a USB id (built-in UARTs, ptys). */
  readonly all?: boolean;
}

/** What a virtual board's flash file holds, read without booting it. */
export interface VirtualFlashSummary {
  /** The app's version, when the flash holds a bootable app. */
  readonly firmware?: string;
  readonly ssid?: string;
  readonly otaUrl?: string;
}

export interface VirtualPortListing extends VirtualBoardEntry, VirtualFlashSummary {}

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

function realLine(port: PortInfo): string {
  const id = port.vendorId && port.productId ? `${port.vendorId}:${port.productId}` : '-';
  const what = [port.manufacturer, port.product].filter((p) => p !== undefined).join(' ');
  return `${port.path.padEnd(22)} ${id.padEnd(10)} ${port.kind.padEnd(16)} ${(port.serialNumber ?? '-').padEnd(18)} ${what}`.trimEnd();
}

function virtualLine(board: VirtualPortListing): string {
  const flash =
    board.firmware === undefined
      ? 'flash erased (no firmware)'
      : `firmware ${board.firmware}${board.ssid === undefined ? ', not provisioned' : `, wifi ${board.ssid}, ota ${board.otaUrl ?? '-'}`}`;
  return `${board.port.padEnd(22)} ${'virtual'.padEnd(10)} ${`${board.chip}/${board.flashSizeMb}MB`.padEnd(16)} ${board.mac.padEnd(18)} ${board.preset}: ${flash}`;
}

/** `ports`: resolves to the exit code. A failing port listing is a warning, not a failure. */
export async function portsCommand(
  context: SerialCommandContext,
  options: PortsCommandOptions,
): Promise<number> {
  return runReported(
    context,
    () => 'ports',
    async () => {
      let real: PortInfo[];
      try {
        real = await (context.lister ?? (() => listPorts()))();
      } catch (error) {
        context.out.stderr(
          `${context.program}: note: cannot list serial ports (${error instanceof Error ? error.message : String(error)}); showing virtual boards only\n`,
        );
        real = [];
      }
      const shown = options.all === true ? real : real.filter(isBoardPort);
      const hidden = real.length - shown.length;
      const dir = defaultVirtualDir(context.env ?? process.env);
      const virtual: VirtualPortListing[] = listVirtualBoards(dir).map((board) => ({
        ...board,
        ...summarizeVirtualFlash(board.flashPath),
      }));
      if (options.json === true) {
        context.out.stdout(`${JSON.stringify({ ports: shown, virtual, virtualDir: dir })}\n`);
        return 0;
      }
      const lines = [
        `${'PORT'.padEnd(22)} ${'USB ID'.padEnd(10)} ${'KIND'.padEnd(16)} ${'SERIAL/MAC'.padEnd(18)} DESCRIPTION`,
        ...shown.map(realLine),
        ...virtual.map(virtualLine),
      ];
      if (shown.length === 0 && virtual.length === 0) {
        context.out.stdout(
          `no board attached and no virtual board in ${dir}; \`flash <image> --port virtual:<name>\` makes one\n`,
        );
      } else {
        context.out.stdout(`${lines.join('\n')}\n`);
      }
      if (hidden > 0)
        context.out.stdout(
          `(${hidden} serial port${hidden === 1 ? '' : 's'} without a USB id not shown; --all shows them)\n`,
        );
      return 0;
    },
  );
}

export function registerPortsCommand(
  program: Command,
  context: SerialCommandContext,
  setExit: (code: number) => void,
): Command {
  return program
    .command('ports')
    .description(
      'list the serial ports boards are on, and the virtual boards ($XIAOZHI_VIRTUAL_DIR) with their firmware',
    )
    .option('--json', 'print {ports, virtual, virtualDir} as JSON')
    .option('--all', 'also list serial ports without a USB id')
    .action(async (options: PortsCommandOptions) => setExit(await portsCommand(context, options)));
}
