/**
 * What a firmware file is, read from its bytes alone: a partition table, an app image
 * (`xiaozhi.bin`), a merged image (bootloader + partition table + apps, flashed at 0x0), or
 * anything else (raw data). The one classification that `flash`, `image info` and `hil run`
 * all use.
 */
import { type AppImage, IMAGE_MAGIC, readAppImage } from './app-image.js';
import type { ChipName } from './chips.js';
import { type MergedImageParts, readMergedImage } from './merged-image.js';
import { type PartitionTable, readPartitionTable } from './partition-table.js';
import { readVirtualFirmwareBoard } from './virtual-firmware.js';

/** The app inside an image: what `initialize` will report once it runs. */
export interface IdentifiedApp {
  readonly chip?: ChipName;
  readonly project: string;
  readonly version: string;
  /** The board variant the build is for, when the image says (virtual firmware marker). */
  readonly board?: string;
}

export type IdentifiedImage =
  | { readonly kind: 'partition-table'; readonly table: PartitionTable }
  | {
      readonly kind: 'app';
      readonly image: AppImage;
      readonly chip?: ChipName;
      readonly app: IdentifiedApp;
    }
  | {
      readonly kind: 'merged';
      readonly merged: MergedImageParts;
      readonly chip?: ChipName;
      /** The first app partition's app, if it holds one. */
      readonly app?: IdentifiedApp;
      /** The end of the last partition: the flash size the table needs. */
      readonly partitionsEnd: number;
    }
  | { readonly kind: 'data' };

const PARTITION_MAGIC = [0xaa, 0x50] as const;

function appOf(image: AppImage, bytes: Uint8Array, board?: string): IdentifiedApp | undefined {
  const description = image.appDescription;
  if (description === undefined) return undefined;
  const named = board ?? readVirtualFirmwareBoard(bytes, image);
  return {
    ...(image.chip === undefined ? {} : { chip: image.chip }),
    project: description.projectName,
    version: description.version,
    ...(named === undefined ? {} : { board: named }),
  };
}

/**
 * Classifies `bytes`. A file that starts like an image but is damaged throws `FirmwareError`
 * (as the readers do); anything unrecognised is `data`. A merged image (or flash dump) has a
 * bootloader at its chip's offset or app partitions (listed by a table at 0x8000) holding
 * images; a bootloader alone counts too.
 */
export function identifyImage(bytes: Uint8Array): IdentifiedImage {
  if (bytes[0] === PARTITION_MAGIC[0] && bytes[1] === PARTITION_MAGIC[1])
    return { kind: 'partition-table', table: readPartitionTable(bytes) };
  if (bytes[0] === IMAGE_MAGIC) {
    const image = readAppImage(bytes);
    const app = appOf(image, bytes);
    if (app !== undefined)
      return { kind: 'app', image, ...(image.chip === undefined ? {} : { chip: image.chip }), app };
  }
  const merged = readMergedImage(bytes);
  if (merged.bootloader === undefined && merged.apps.length === 0) return { kind: 'data' };
  const first = merged.apps[0];
  const app =
    first === undefined
      ? undefined
      : appOf(
          first.image,
          bytes.subarray(first.partition.offset, first.partition.offset + first.partition.size),
          first.board,
        );
  return {
    kind: 'merged',
    merged,
    ...(merged.chip === undefined ? {} : { chip: merged.chip }),
    ...(app === undefined ? {} : { app }),
    partitionsEnd: Math.max(
      0,
      ...(merged.partitionTable?.partitions ?? []).map((p) => p.offset + p.size),
    ),
  };
}
