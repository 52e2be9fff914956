/**
 * Firmware offered by the OTA endpoint: app images (`xiaozhi.bin`, not merged images), read
 * from a directory at start-up or added at run time. A device is offered the newest image
 * for its chip (and board, when the image sits in a folder named after the board) that is
 * newer than what it runs. An image added with an audience goes only to the devices it names
 * (by `Device-Id` or `Client-Id`): a rig's candidate build is for the boards it qualifies, not
 * for any board of that variant that checks in. Versions the firmware cannot parse are refused
 * when loaded.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { readAppImage } from '@xiaozhi-mcp/firmware';
import { compareFirmwareVersions, parseFirmwareVersion } from '@xiaozhi-mcp/protocol';
import { ServerError } from './errors.js';

/** Who an image is offered to: a device whose `Device-Id` (its MAC) or `Client-Id` is listed. */
export interface FirmwareAudience {
  readonly deviceIds?: readonly string[];
  readonly clientIds?: readonly string[];
}

/** What the OTA endpoint knows of a device when it looks for an offer. */
export interface FirmwareCandidate {
  readonly chip: string | undefined;
  readonly board: string | undefined;
  readonly version: string;
  /** `Device-Id`; an image with an audience is offered only to a device it names. */
  readonly deviceId?: string;
  readonly clientId?: string;
}

export interface FirmwareImage {
  /** The name in the download URL. */
  readonly name: string;
  readonly version: string;
  readonly projectName: string;
  readonly chip: string;
  /** Only offered to this board (`BOARD_NAME`), or to every board when undefined. */
  readonly board: string | undefined;
  /** Only offered to these devices, or to every device when undefined. */
  readonly audience: FirmwareAudience | undefined;
  readonly size: number;
  readonly sha256: string;
  readonly bytes: Uint8Array;
}

/** Whether `device` is among `audience` (MACs compare in any case). */
function inAudience(audience: FirmwareAudience, device: FirmwareCandidate): boolean {
  const deviceId = device.deviceId?.toLowerCase();
  return (
    (deviceId !== undefined &&
      (audience.deviceIds ?? []).some((id) => id.toLowerCase() === deviceId)) ||
    (device.clientId !== undefined && (audience.clientIds ?? []).includes(device.clientId))
  );
}

function describe(
  bytes: Uint8Array,
  name: string,
  board: string | undefined,
  audience: FirmwareAudience | undefined,
): FirmwareImage {
  let image: ReturnType<typeof readAppImage>;
  try {
    image = readAppImage(bytes);
  } catch (error) {
    throw new ServerError(
      'CONFIG_INVALID',
      `firmware ${name} is not an ESP app image: ${(error as Error).message}`,
      { cause: error },
    );
  }
  const description = image.appDescription;
  if (description === undefined || image.chip === undefined) {
    throw new ServerError(
      'CONFIG_INVALID',
      `firmware ${name} has no app description or an unknown chip (a merged image? offer the app image, xiaozhi.bin)`,
    );
  }
  if (!image.checksum.valid || image.hash?.valid === false) {
    throw new ServerError(
      'CONFIG_INVALID',
      `firmware ${name} fails its checksum or hash: a board would reject it`,
    );
  }
  try {
    parseFirmwareVersion(description.version);
  } catch (error) {
    // Offered to a board, this version makes its std::stoi throw and the board abort.
    throw new ServerError(
      'CONFIG_HAZARD',
      `firmware ${name} has version "${description.version}", which boards cannot parse: ${(error as Error).message}`,
      { cause: error },
    );
  }
  return {
    name,
    version: description.version,
    projectName: description.projectName,
    chip: image.chip,
    board,
    audience,
    size: bytes.length,
    sha256: createHash('sha256').update(bytes).digest('hex'),
    bytes,
  };
}

export class FirmwareStore {
  readonly #images = new Map<string, FirmwareImage>();

  /** Loads `dir/*.bin` (every board) and `dir/<board>/*.bin` (that board only). */
  static fromDirectory(dir: string): FirmwareStore {
    const store = new FirmwareStore();
    let entries: string[];
    try {
      entries = readdirSync(dir).sort();
    } catch (error) {
      throw new ServerError(
        'CONFIG_INVALID',
        `firmware directory ${dir} cannot be read: ${(error as Error).message}`,
        { cause: error },
      );
    }
    for (const entry of entries) {
      const path = join(dir, entry);
      if (statSync(path).isDirectory()) {
        for (const file of readdirSync(path)
          .filter((f) => f.endsWith('.bin'))
          .sort()) {
          store.add(readFileSync(join(path, file)), { name: `${entry}/${file}`, board: entry });
        }
      } else if (entry.endsWith('.bin')) {
        store.add(readFileSync(path), { name: entry });
      }
    }
    return store;
  }

  /**
   * Adds an app image, for every board, `board` only, or the devices of `audience` only; throws
   * `CONFIG_INVALID` or `CONFIG_HAZARD` for one no board should get.
   */
  add(
    bytes: Uint8Array,
    options: { name?: string; board?: string; audience?: FirmwareAudience } = {},
  ): FirmwareImage {
    const name =
      options.name ??
      `${options.board ? `${options.board}/` : ''}xiaozhi-${basename(String(this.#images.size + 1))}.bin`;
    const image = describe(bytes, name, options.board, options.audience);
    this.#images.set(name, image);
    return image;
  }

  remove(name: string): boolean {
    return this.#images.delete(name);
  }

  get(name: string): FirmwareImage | undefined {
    return this.#images.get(name);
  }

  list(): FirmwareImage[] {
    return [...this.#images.values()];
  }

  /** The newest image for this device that is newer than what it runs, if any. */
  offerFor(device: FirmwareCandidate): FirmwareImage | undefined {
    return this.#choose(device).offered;
  }

  /**
   * The newest image this device would be offered, newer than its offer (if any), were it among
   * that image's audience: what the OTA endpoint keeps from a device it was not meant for.
   */
  withheldFrom(device: FirmwareCandidate): FirmwareImage | undefined {
    return this.#choose(device).withheld;
  }

  #choose(device: FirmwareCandidate): { offered?: FirmwareImage; withheld?: FirmwareImage } {
    let running: number[];
    try {
      running = parseFirmwareVersion(device.version);
    } catch {
      // The device's own version cannot be parsed: any firmware section would make it abort.
      return {};
    }
    if (running.length === 0) return {};
    let offered: FirmwareImage | undefined;
    let withheld: FirmwareImage | undefined;
    const newer = (image: FirmwareImage, than: FirmwareImage | undefined) =>
      than === undefined || compareFirmwareVersions(image.version, than.version) > 0;
    for (const image of this.#images.values()) {
      if (device.chip !== undefined && image.chip !== device.chip) continue;
      if (image.board !== undefined && image.board !== device.board) continue;
      if (compareFirmwareVersions(image.version, device.version) <= 0) continue;
      if (image.audience === undefined || inAudience(image.audience, device)) {
        if (newer(image, offered)) offered = image;
      } else if (newer(image, withheld)) withheld = image;
    }
    return {
      ...(offered === undefined ? {} : { offered }),
      ...(withheld === undefined || !newer(withheld, offered) ? {} : { withheld }),
    };
  }
}
