import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import {
  type AppImage,
  FirmwareError,
  identifyImage,
  readVirtualFirmwareBoard,
} from '@xiaozhi-mcp/firmware';
import type { Command } from 'commander';
import { CliError, type CliIo, ExitCode } from '../io.js';

function describeApp(image: AppImage, bytes: Uint8Array, offset: number) {
  const app = image.appDescription;
  return {
    offset,
    chip: image.chip ?? `unknown (id ${image.chipId})`,
    chipId: image.chipId,
    project: app?.projectName ?? null,
    version: app?.version ?? null,
    board: readVirtualFirmwareBoard(bytes) ?? null,
    idfVersion: app?.idfVersion ?? null,
    compiled: app ? `${app.date} ${app.time}` : null,
    elfSha256: app?.elfSha256 ?? null,
    size: image.size,
    segments: image.segments.length,
    checksumValid: image.checksum.valid,
    hashValid: image.hash?.valid ?? null,
  };
}

/** Reads an app image (`xiaozhi.bin`), a merged image or a partition table and describes it. */
export async function imageInfoCommand(
  io: CliIo,
  file: string,
  options: { json?: boolean },
): Promise<number> {
  let bytes: Uint8Array;
  try {
    bytes = new Uint8Array(await readFile(file));
  } catch (error) {
    throw new CliError(
      `cannot read ${file}: ${(error as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (error as Error).message}`,
      ExitCode.usage,
    );
  }
  const sha256 = createHash('sha256').update(bytes).digest('hex');
  let report: Record<string, unknown>;
  try {
    const identified = identifyImage(bytes);
    if (identified.kind === 'partition-table') {
      const { table } = identified;
      report = {
        file,
        kind: 'partition-table',
        sha256,
        partitions: table.partitions,
        md5Valid: table.md5?.valid ?? null,
      };
    } else if (identified.kind === 'app') {
      report = { file, kind: 'app', sha256, ...describeApp(identified.image, bytes, 0) };
    } else {
      if (identified.kind === 'data')
        throw new FirmwareError(
          'IMAGE_INVALID',
          'neither an app image, a merged image nor a partition table',
        );
      const { merged } = identified;
      report = {
        file,
        kind: 'merged',
        sha256,
        size: bytes.length,
        chip: merged.chip ?? null,
        bootloader: merged.bootloader
          ? {
              offset: merged.bootloader.offset,
              chip: merged.bootloader.image.chip ?? null,
              checksumValid: merged.bootloader.image.checksum.valid,
            }
          : null,
        partitions:
          merged.partitionTable?.partitions.map((p) => ({
            label: p.label,
            type: p.typeName,
            subtype: p.subtypeName,
            offset: p.offset,
            size: p.size,
          })) ?? [],
        apps: merged.apps.map((a) => ({
          partition: a.partition.label,
          ...describeApp(
            a.image,
            bytes.subarray(a.partition.offset, a.partition.offset + a.partition.size),
            a.partition.offset,
          ),
        })),
      };
    }
  } catch (error) {
    if (error instanceof FirmwareError)
      throw new CliError(`${file}: ${error.message}`, ExitCode.failed);
    throw error;
  }
  if (options.json) {
    io.stdout(`${JSON.stringify(report)}\n`);
    return ExitCode.ok;
  }
  const hex = (n: unknown) => (typeof n === 'number' ? `0x${n.toString(16)}` : String(n));
  const lines: string[] = [
    `${file}: ${String(report.kind)} image, ${bytes.length} bytes, sha256 ${sha256}`,
  ];
  const appLines = (app: Record<string, unknown>, indent: string) => {
    lines.push(
      `${indent}chip ${String(app.chip)}, ${String(app.project)} ${String(app.version)}${app.board ? ` for ${String(app.board)}` : ''}`,
    );
    lines.push(
      `${indent}IDF ${String(app.idfVersion)}, compiled ${String(app.compiled)}, ELF sha256 ${String(app.elfSha256)}`,
    );
    lines.push(
      `${indent}${String(app.segments)} segments, checksum ${app.checksumValid ? 'ok' : 'BAD'}, hash ${app.hashValid === null ? 'none' : app.hashValid ? 'ok' : 'BAD'}`,
    );
  };
  if (report.kind === 'app') appLines(report, '  ');
  if (report.kind === 'merged') {
    const bootloader = report.bootloader as Record<string, unknown> | null;
    if (bootloader)
      lines.push(
        `  bootloader at ${hex(bootloader.offset)} (${String(bootloader.chip)}, checksum ${bootloader.checksumValid ? 'ok' : 'BAD'})`,
      );
    for (const app of report.apps as Record<string, unknown>[]) {
      lines.push(`  app in ${String(app.partition)} at ${hex(app.offset)}:`);
      appLines(app, '    ');
    }
  }
  if (Array.isArray(report.partitions) && report.partitions.length > 0) {
    lines.push('  partitions:');
    for (const p of report.partitions as {
      label: string;
      offset: number;
      size: number;
      typeName?: string;
      type?: string;
      subtypeName?: string;
      subtype?: string;
    }[]) {
      lines.push(
        `    ${p.label.padEnd(10)} ${String(p.typeName ?? p.type).padEnd(5)} ${String(p.subtypeName ?? p.subtype).padEnd(9)} ${hex(p.offset).padStart(9)} ${hex(p.size).padStart(9)}`,
      );
    }
  }
  io.stdout(`${lines.join('\n')}\n`);
  return ExitCode.ok;
}

export function registerImage(program: Command, io: CliIo, setExit: (code: number) => void): void {
  const image = program.command('image').description('ESP32 firmware images');
  image
    .command('info')
    .description(
      'describe an app image (xiaozhi.bin), a merged image or a partition table: chip, version, sha',
    )
    .argument('<file>', 'the image file')
    .option('--json', 'print the description as JSON')
    .action(async (file: string, options: { json?: boolean }) =>
      setExit(await imageInfoCommand(io, file, options)),
    );
}
