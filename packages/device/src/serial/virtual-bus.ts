/**
 * The virtual USB bus of a rig run: virtual boards kept in memory (their flash is not a file),
 * plugged in one after another and powered on as they are plugged, each reached as a
 * `ResolvedPort` of `@xiaozhi-mcp/serial/provider` exactly like a real board's port. A board is on a
 * USB-UART bridge with the auto-reset circuit, or on its chip's native USB (USB-Serial-JTAG),
 * where it re-enumerates under a new path on every reset.
 */
import {
  findPort,
  portInfoFromBinding,
  type ResolvedPort,
  SerialError,
} from '@xiaozhi-mcp/serial/provider';
import type { BoardPreset } from '../board-api.js';
import { FlashStorage } from '../flash-storage.js';
import { boardPreset } from '../presets.js';
import type { RunningApp } from '../virtual-board/types.js';
import { type BoardTiming, type FaultKnobs, VirtualBoard } from '../virtual-board.js';
import { parseChipRevision } from './efuse.js';
import { DEFAULT_REENUMERATE_MS, type VirtualSerialDevice } from './usb-device.js';
import { VirtualSerialBinding, type VirtualSerialBindingOptions } from './virtual-binding.js';

/** A board to plug in: what it is, and the faults it is built with. */
export interface VirtualBusBoard {
  /** A preset name (`bread-compact-wifi`, `otto-robot`), or a preset (a replica's). */
  readonly preset: string | BoardPreset;
  /** Lowercase Wi-Fi MAC (a replica's). Default: numbered in plug order. */
  readonly mac?: string;
  /** The app it runs at first power-on (a replica's version). */
  readonly app?: Partial<RunningApp>;
  /** Default: the preset's flash size. */
  readonly flashSizeMb?: number;
  /**
   * What its flash holds when it is plugged in, written at 0x0: a merged image (bootloader,
   * partition table, app), as a real board holds after the factory's flash or a previous one,
   * so an app image alone can be flashed into its app partition. Default: erased, and an erased
   * board boot-loops until it is flashed.
   */
  readonly flashImage?: Uint8Array;
  /**
   * How the board reaches the host. `uart` (default): a CP2102 bridge (10c4:ea60) with the
   * auto-reset transistors, at `/dev/ttyVIRT<n>`. `native`: the chip's USB-Serial-JTAG
   * (303a:1001, serial number = the MAC) at `/dev/ttyACM<n>`: no transistors, so DTR clicks
   * nothing; the usbJtag reset sequence enters download mode and an RTS pulse resets into the
   * app; and every reset but power-on re-enumerates it under a new path `reenumerateMs` later.
   */
  readonly usb?: 'uart' | 'native';
  /** Native USB: how long the port is gone on each reset. Default {@link DEFAULT_REENUMERATE_MS}. */
  readonly reenumerateMs?: number;
  /** Secure Boot burnt in its chip's eFuse: the ROM refuses writes below 0x8000. */
  readonly secureBoot?: boolean;
  /** Flash encryption in release mode (encrypted download disabled) burnt in its chip's eFuse. */
  readonly flashEncryption?: boolean;
  /** Its chip's revision as esptool prints it (`v0.1`); default the emulator's for the chip. */
  readonly chipRevision?: string;
  readonly faults?: Partial<Omit<FaultKnobs, 'dropReply'>> & {
    /** The board vanishes from the USB bus when this tool is called. */
    readonly unplugOnCall?: string;
  };
}

/** A port on the bus, with the board behind it. */
export interface VirtualBusPort extends ResolvedPort {
  readonly board: VirtualBoard;
  readonly device: VirtualSerialDevice;
}

/**
 * A virtual device as a `ResolvedPort`: present while plugged, found again by its USB serial
 * number after it re-enumerates, as a real board's port is.
 */
export function virtualPort(
  binding: VirtualSerialBinding,
  device: VirtualSerialDevice,
  label: string,
  dispose: () => void,
): ResolvedPort {
  const lister = {
    list: async () => (await binding.list()).map((p) => portInfoFromBinding(p)),
  };
  return {
    binding,
    path: device.path,
    info: portInfoFromBinding(device.info),
    label,
    provider: 'virtual:',
    present: async (path) => binding.device(path) !== undefined,
    refind: async (timeoutMs, signal) => {
      try {
        const found = await findPort(
          { serialNumber: device.serialNumber },
          { lister, timeoutMs, ...(signal === undefined ? {} : { signal }) },
        );
        return { path: found.path, info: found };
      } catch (error) {
        if (!(error instanceof SerialError) || error.code !== 'PORT_NOT_FOUND') throw error;
        throw new SerialError(
          'PORT_NOT_FOUND',
          `${label} did not come back within ${timeoutMs} ms`,
          {
            cause: error,
          },
        );
      }
    },
    dispose,
  };
}

export class VirtualBus {
  readonly binding: VirtualSerialBinding;
  readonly #timing: Partial<BoardTiming>;
  #plugged = 0;

  /** `binding`: how the host's driver behaves (its `platform`); default the ideal host. */
  constructor(timing: Partial<BoardTiming> = {}, binding: VirtualSerialBindingOptions = {}) {
    this.#timing = timing;
    this.binding = new VirtualSerialBinding(binding);
  }

  /**
   * Plugs in a new board and powers it on: its MAC numbered in plug order unless given, a bridge at
   * `/dev/ttyVIRT<index>`, a native-USB board at the bus's next `/dev/ttyACM<n>`.
   */
  plug(spec: VirtualBusBoard, label: string): VirtualBusPort {
    const index = this.#plugged++;
    const preset = typeof spec.preset === 'string' ? boardPreset(spec.preset) : spec.preset;
    const { unplugOnCall, ...faults } = spec.faults ?? {};
    const flash = new FlashStorage({
      size: (spec.flashSizeMb ?? preset.flashSizeMb) * 1024 * 1024,
    });
    if (spec.flashImage !== undefined) flash.write(0, spec.flashImage);
    const board = new VirtualBoard({
      preset,
      mac: spec.mac ?? `f4:12:fa:7e:00:${(index + 1).toString(16).padStart(2, '0')}`,
      ...(spec.app === undefined ? {} : { app: spec.app }),
      flash,
      timing: this.#timing,
      ...(spec.faults === undefined ? {} : { faults }),
      silicon: {
        ...(spec.secureBoot === true ? { secureBoot: true } : {}),
        ...(spec.flashEncryption === true ? { flashEncryption: true } : {}),
        ...(spec.chipRevision === undefined
          ? {}
          : { revision: parseChipRevision(spec.chipRevision) }),
      },
    });
    const device =
      spec.usb === 'native'
        ? this.binding.attach(board, {
            usbJtag: true,
            reenumerateMs: spec.reenumerateMs ?? DEFAULT_REENUMERATE_MS,
          })
        : this.binding.attach(board, { path: `/dev/ttyVIRT${index}` });
    if (unplugOnCall !== undefined) {
      board.on('tool-call', (name) => {
        if (name === unplugOnCall && device.plugged) this.binding.unplug(device.path);
      });
    }
    // USB power: the board starts running (from an erased flash it boot-loops until flashed).
    board.powerOn();
    return { ...virtualPort(this.binding, device, label, () => {}), board, device };
  }

  /** Unplugs every board and stops them. */
  close(): void {
    for (const device of [...this.binding.devices]) {
      device.board.powerOff();
      this.binding.detach(device);
    }
  }
}
