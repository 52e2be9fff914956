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

/** Reads an image file; `what` names it as the user gave it (`--firmware FILE`). */
function read(what: string, path: string): Uint8Array {
  try {
    return new Uint8Array(readFileSync(path));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new RunInputError(
      `${what}: ${code === 'ENOENT' ? 'no such file' : code === 'EISDIR' ? 'is a folder, not an image file' : (error as Error).message}`,
    );
  }
}

/**
 * Where an image file goes, as the flasher places it; undefined for a file that is no image
 * (raw data, a partition table alone). placeImage's refusal of such a file advises the flash
 * command's `--offset`, which hil run does not have: its callers say what hil run takes instead.
 */
function placeRunImage(what: string, data: Uint8Array): ImageToFlash | undefined {
  try {
    return placeImage(what, data, undefined);
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
    if (damaged) throw new RunInputError((error as Error).message);
    return undefined;
  }
}

/** The boards an image for `chip` must not go to: the inventory names another chip for them. */
function otherChips(boards: readonly BoardConfig[], chip: string): string[] {
  return boards
    .filter((b) => b.chip !== undefined && b.chip !== chip)
    .map((b) => `${b.name} (${b.chip})`);
}

/** The boards an image built for board `built` must not go to: the inventory names another variant. */
function otherVariants(boards: readonly BoardConfig[], built: string): string[] {
  return boards
    .filter((b) => b.variant !== undefined && b.variant !== built)
    .map((b) => `${b.name} (${b.variant})`);
}

/** How the next fix is given, said with each refusal of an image for the wrong boards. */
const PER_BOARD =
  'give each board its own image (--firmware BOARD=FILE, or firmware in the inventory)';

/**
 * An image to flash: a merged image (flashed at 0x0) or an app image, with an app description (a
 * version) and a chip id; refused when the inventory says a board it goes to has another chip, or
 * another variant than the board the image names (its app's board marker). `what` names the
 * image as the user gave it: `--firmware FILE`, `--firmware BOARD=FILE`, `boards[1].firmware FILE`.
 */
function readFirmwareFile(path: string, boards: readonly BoardConfig[], what: string): ImageFile {
  const data = read(what, path);
  if (data.length === 0) throw new RunInputError(`${what} is empty`);
  const image = placeRunImage(what, data);
  if (image === undefined)
    throw new RunInputError(
      `${what} is neither a merged image (bootloader, partition table and app, flashed at 0x0) nor an app image (xiaozhi.bin, flashed at the board's first app partition): hil run flashes only those`,
    );
  if (image.version === undefined || image.chip === undefined)
    throw new RunInputError(
      `${what} is neither a merged image with an app nor an app image (no app description with a version and a chip id)`,
    );
  const wrongChip = otherChips(boards, image.chip);
  if (wrongChip.length > 0)
    throw new RunInputError(
      `${what} is a build for ${image.chip}, but the rig's ${wrongChip.length === 1 ? 'board' : 'boards'} ${wrongChip.join(', ')} ${wrongChip.length === 1 ? 'is' : 'are'} not: ${PER_BOARD}, or --board to pick boards`,
    );
  const wrongBoard = image.board === undefined ? [] : otherVariants(boards, image.board);
  if (wrongBoard.length > 0)
    throw new RunInputError(
      `${what} is a build for board ${image.board}, but the rig's ${wrongBoard.length === 1 ? 'board' : 'boards'} ${wrongBoard.join(', ')} ${wrongBoard.length === 1 ? 'is' : 'are'} not: ${PER_BOARD}, or --board to pick boards`,
    );
  return {
    image,
    info: { ...imageInfo(path, image), version: image.version, chip: image.chip },
  };
}

/** `--firmware FILE`: every board's image; `--firmware BOARD=FILE`: one board's. */
export interface FirmwareArgument {
  readonly board?: string;
  readonly file: string;
}

/** A board name as the inventory spells it, then `=`: the rest is that board's image. */
const BOARD_IMAGE = /^([A-Za-z0-9][A-Za-z0-9._-]{0,63})=(.+)$/s;

/**
 * Reads one `--firmware` value. A file whose name starts with `NAME=` is given with its folder
 * (`./NAME=...`), which no board name matches.
 */
export function parseFirmwareArgument(value: string): FirmwareArgument {
  const named = BOARD_IMAGE.exec(value);
  return named?.[1] === undefined || named[2] === undefined
    ? { file: value }
    : { board: named[1], file: named[2] };
}

/**
 * Each board's image, by board name (boards given none are absent: the run flashes nothing onto
 * them, or, on the virtual rig, the image it builds). The first that names one: `--firmware
 * BOARD=FILE`, `--firmware FILE` (every board), the board's `firmware` in the inventory, the
 * inventory's `firmware` for the board's variant. Every image is read and checked against the
 * boards it goes to before any board is touched.
 */
export function readBoardFirmware(
  rig: RigConfig,
  boards: readonly BoardConfig[],
  args: readonly FirmwareArgument[],
): Map<string, ImageFile> {
  const names = rig.boards.map((b) => b.name);
  const everyBoard = args.filter((a) => a.board === undefined);
  if (everyBoard.length > 1)
    throw new RunInputError(
      `--firmware names ${everyBoard.length} images for every board (${everyBoard.map((a) => a.file).join(', ')}): give one, or one per board as --firmware BOARD=FILE`,
    );
  const perBoard = new Map<string, string>();
  for (const { board, file } of args) {
    if (board === undefined) continue;
    if (!names.includes(board))
      throw new RunInputError(
        `--firmware ${board}=${file}: no board ${board} in the inventory; boards: ${names.join(', ')} (a file whose name holds "=" is given with its folder: ./${board}=${file})`,
      );
    if (perBoard.has(board))
      throw new RunInputError(
        `--firmware names two images for board ${board} (${perBoard.get(board)}, ${file}): give one`,
      );
    perBoard.set(board, file);
  }
  // Each image as the user named it, with the boards it goes to: one file named twice is read twice.
  const sources = new Map<string, { path: string; boards: BoardConfig[] }>();
  for (const config of boards) {
    const index = rig.boards.indexOf(config);
    const own = perBoard.get(config.name);
    const variant = config.variant;
    const forVariant =
      variant !== undefined && rig.firmware !== undefined && Object.hasOwn(rig.firmware, variant)
        ? rig.firmware[variant]
        : undefined;
    const source =
      own !== undefined
        ? { what: `--firmware ${config.name}=${own}`, path: own }
        : everyBoard[0] !== undefined
          ? { what: `--firmware ${everyBoard[0].file}`, path: everyBoard[0].file }
          : config.firmware !== undefined
            ? { what: `boards[${index}].firmware ${config.firmware}`, path: config.firmware }
            : forVariant !== undefined
              ? { what: `firmware.${config.variant} ${forVariant}`, path: forVariant }
              : undefined;
    if (source === undefined) continue;
    const entry = sources.get(source.what) ?? { path: source.path, boards: [] };
    entry.boards.push(config);
    sources.set(source.what, entry);
  }
  const images = new Map<string, ImageFile>();
  for (const [what, { path, boards: to }] of sources) {
    const file = readFirmwareFile(path, to, what);
    for (const config of to) images.set(config.name, file);
  }
  return images;
}

/** `--ota-image`: an app image (xiaozhi.bin) with a version, for the boards' chip. */
export function readOtaImageFile(path: string, boards: readonly BoardConfig[]): ImageFile {
  const what = `--ota-image ${path}`;
  const data = read(what, path);
  if (data.length === 0) throw new RunInputError(`--ota-image ${path} is empty`);
  const image = placeRunImage(what, data);
  if (image?.kind !== 'app' || image.version === undefined || image.chip === undefined)
    throw new RunInputError(
      `--ota-image ${path} is ${image?.kind === 'merged' ? 'a merged image' : 'not an app image'}: the OTA upgrade takes the app image (xiaozhi.bin)`,
    );
  const wrong = otherChips(boards, image.chip);
  if (wrong.length > 0)
    throw new RunInputError(
      `--ota-image ${path} is a build for ${image.chip}, but the rig's ${wrong.length === 1 ? 'board' : 'boards'} ${wrong.join(', ')} ${wrong.length === 1 ? 'is' : 'are'} not`,
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
