/**
 * The inputs of `hil run` checked before any board is touched (docs/hil.md §5, exit 2): the
 * boards asked for, the image to flash and the candidate to offer (readable images, for the
 * inventory's chips), the output folder. Each refusal names the option or the field and what
 * would be accepted.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, statSync } from 'node:fs';
import { arch, hostname, platform, release } from 'node:os';
import { identifyImage } from '@xiaozhi-mcp/firmware';
import { type ImageToFlash, placeImage } from '@xiaozhi-mcp/serial';
import type { BoardConfig, RigConfig } from './inventory.js';
import type { HostInfo, ImageInfo } from './model.js';

/** Bad usage or input: exit 2, before any board is touched. */
export class RunInputError extends Error {
  override readonly name = 'RunInputError';
}

/** An image file as the run uses it: where it goes, and what the report says about it. */
export interface ImageFile {
  readonly image: ImageToFlash;
  readonly info: ImageInfo & { readonly version: string; readonly chip: string };
}

/** What the report says of an image (its bytes hashed). */
export function imageInfo(file: string, image: ImageToFlash): ImageInfo {
  return {
    file,
    sha256: createHash('sha256').update(image.data).digest('hex'),
    bytes: image.data.length,
    kind: image.kind,
    ...(image.project === undefined ? {} : { project: image.project }),
    ...(image.version === undefined ? {} : { version: image.version }),
    ...(image.board === undefined ? {} : { board: image.board }),
    ...(image.chip === undefined ? {} : { chip: image.chip }),
  };
}

function read(flag: string, path: string): Uint8Array {
  try {
    return new Uint8Array(readFileSync(path));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new RunInputError(
      `${flag} ${path}: ${code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'is a folder, not an image file' : (error as Error).message}`,
    );
  }
}

/**
 * Where an image file goes, as the flasher places it; undefined for a file that is no image
 * (raw data, a partition table alone). placeImage's refusal of such a file advises the flash
 * command's `--offset`, which hil run does not have: its callers say what hil run takes instead.
 */
function placeRunImage(flag: string, path: string, data: Uint8Array): ImageToFlash | undefined {
  try {
    return placeImage(path, data, undefined);
  } catch (error) {
    const damaged = (() => {
      try {
        identifyImage(data);
        return false;
      } catch {
        return true;
      }
    })();
    // A damaged image: placeImage says what is wrong with it.
    if (damaged) throw new RunInputError(`${flag} ${(error as Error).message}`);
    return undefined;
  }
}

/** The boards an image for `chip` must not go to: the inventory names another chip for them. */
function otherChips(boards: readonly BoardConfig[], chip: string): string[] {
  return boards
    .filter((b) => b.chip !== undefined && b.chip !== chip)
    .map((b) => `${b.name} (${b.chip})`);
}

/**
 * `--firmware`: a merged image (flashed at 0x0) or an app image, with an app description (a
 * version) and a chip id; refused when the inventory says a board has another chip.
 */
export function readFirmwareFile(path: string, boards: readonly BoardConfig[]): ImageFile {
  const data = read('--firmware', path);
  if (data.length === 0) throw new RunInputError(`--firmware ${path} is empty`);
  const image = placeRunImage('--firmware', path, data);
  if (image === undefined)
    throw new RunInputError(
      `--firmware ${path} is neither a merged image (bootloader, partition table and app, flashed at 0x0) nor an app image (xiaozhi.bin, flashed at the board's first app partition): hil run flashes only those`,
    );
  if (image.version === undefined || image.chip === undefined)
    throw new RunInputError(
      `--firmware ${path} is neither a merged image with an app nor an app image (no app description with a version and a chip id)`,
    );
  const wrong = otherChips(boards, image.chip);
  if (wrong.length > 0)
    throw new RunInputError(
      `--firmware ${path} is a build for ${image.chip}, but the inventory's ${wrong.join(', ')} ${wrong.length === 1 ? 'is' : 'are'} not: flash each board a build for its chip (--board to pick boards)`,
    );
  return {
    image,
    info: { ...imageInfo(path, image), version: image.version, chip: image.chip },
  };
}

/** `--ota-image`: an app image (xiaozhi.bin) with a version, for the boards' chip. */
export function readOtaImageFile(path: string, boards: readonly BoardConfig[]): ImageFile {
  const data = read('--ota-image', path);
  if (data.length === 0) throw new RunInputError(`--ota-image ${path} is empty`);
  const image = placeRunImage('--ota-image', path, data);
  if (image?.kind !== 'app' || image.version === undefined || image.chip === undefined)
    throw new RunInputError(
      `--ota-image ${path} is ${image?.kind === 'merged' ? 'a merged image' : 'not an app image'}: the OTA upgrade takes the app image (xiaozhi.bin)`,
    );
  const wrong = otherChips(boards, image.chip);
  if (wrong.length > 0)
    throw new RunInputError(
      `--ota-image ${path} is a build for ${image.chip}, but the inventory's ${wrong.join(', ')} ${wrong.length === 1 ? 'is' : 'are'} not`,
    );
  return {
    image,
    info: { ...imageInfo(path, image), version: image.version, chip: image.chip },
  };
}

/** `--board`: the inventory's boards by those names; an unknown name lists the valid ones. */
export function selectBoards(rig: RigConfig, names: readonly string[] | undefined): BoardConfig[] {
  if (names === undefined) return [...rig.boards];
  const unknown = names.filter((name) => !rig.boards.some((b) => b.name === name));
  if (unknown.length > 0)
    throw new RunInputError(
      `--board ${unknown.join(', ')}: no such board in the inventory; boards: ${rig.boards.map((b) => b.name).join(', ')}`,
    );
  return rig.boards.filter((b) => names.includes(b.name));
}

/** `--out`: a folder (created when missing), not a file. */
export function prepareOutDir(path: string): void {
  const existing = (() => {
    try {
      return statSync(path);
    } catch {
      return undefined;
    }
  })();
  if (existing !== undefined && !existing.isDirectory())
    throw new RunInputError(`--out ${path} is a file, not a folder: name a folder for the reports`);
  try {
    mkdirSync(path, { recursive: true });
  } catch (error) {
    throw new RunInputError(
      `--out ${path}: cannot create the folder (${(error as Error).message})`,
    );
  }
}

/** Where the run ran, for the report. */
export function hostInfo(): HostInfo {
  return {
    hostname: hostname(),
    os: `${platform()} ${release()} ${arch()}`,
    node: process.version,
  };
}
