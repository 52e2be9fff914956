/**
 * Where a board's serial port comes from: a real port (found by serial number, VID:PID, by-id
 * name or path, through the native binding) or a virtual board on the virtual USB bus. Both
 * give a binding and a path; everything after (flashing, console, lines) is the same code.
 */
import {
  type BoardTiming,
  boardPreset,
  FlashStorage,
  VirtualBoard,
  VirtualSerialBinding,
  type VirtualSerialDevice,
} from '@xiaozhi-mcp/device';
import {
  findPort,
  type PortInfo,
  parsePortSelector,
  type SerialBinding,
} from '@xiaozhi-mcp/firmware';
import type { BoardConfig } from './inventory.js';

export interface RigPort {
  readonly binding: SerialBinding;
  readonly path: string;
  readonly info: PortInfo;
  /** The virtual board behind a `virtual:` port. */
  readonly virtual?: { readonly board: VirtualBoard; readonly device: VirtualSerialDevice };
}

/** Virtual boards of a run: one bus, boards powered on as they are plugged in. */
export class VirtualBus {
  readonly binding = new VirtualSerialBinding();
  readonly #timing: Partial<BoardTiming>;

  constructor(timing: Partial<BoardTiming> = {}) {
    this.#timing = timing;
  }

  plug(config: BoardConfig, index: number): RigPort {
    const virtual = config.virtual ?? {};
    const preset = boardPreset(virtual.preset ?? config.variant ?? 'bread-compact-wifi');
    const flashSizeMb = virtual.flashSizeMb ?? preset.flashSizeMb;
    const board = new VirtualBoard({
      preset,
      mac: `f4:12:fa:7e:00:${(index + 1).toString(16).padStart(2, '0')}`,
      flash: new FlashStorage({ size: flashSizeMb * 1024 * 1024 }),
      timing: this.#timing,
      ...(virtual.faults
        ? { faults: (({ unplugOnCall: _, ...board }) => board)(virtual.faults) }
        : {}),
    });
    const device = this.binding.attach(board, { path: `/dev/ttyVIRT${index}` });
    const unplugOn = virtual.faults?.unplugOnCall;
    if (unplugOn !== undefined) {
      board.on('tool-call', (name) => {
        if (name === unplugOn && device.plugged) this.binding.unplug(device.path);
      });
    }
    // USB power: the board starts running (from an erased flash it boot-loops until flashed).
    board.powerOn();
    return {
      binding: this.binding,
      path: device.path,
      info: toPortInfo(device.info),
      virtual: { board, device },
    };
  }

  /** Unplugs every board and stops them. */
  close(): void {
    for (const device of [...this.binding.devices]) {
      device.board.powerOff();
      this.binding.detach(device);
    }
  }
}

function toPortInfo(info: {
  path: string;
  serialNumber?: string | undefined;
  vendorId?: string | undefined;
  productId?: string | undefined;
  manufacturer?: string | undefined;
}): PortInfo {
  return {
    path: info.path,
    ...(info.serialNumber ? { serialNumber: info.serialNumber } : {}),
    ...(info.vendorId ? { vendorId: info.vendorId.toLowerCase() } : {}),
    ...(info.productId ? { productId: info.productId.toLowerCase() } : {}),
    ...(info.manufacturer ? { manufacturer: info.manufacturer } : {}),
    kind:
      info.vendorId?.toLowerCase() === '303a' && info.productId?.toLowerCase() === '1001'
        ? 'usb-serial-jtag'
        : 'usb-uart',
  };
}

/** Finds a real board's port (waiting up to `timeoutMs`, e.g. while it re-enumerates). */
export async function findRealPort(
  config: BoardConfig,
  options: { timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<RigPort> {
  const { autoDetect } = await import('@serialport/bindings-cpp');
  const binding = autoDetect() as unknown as SerialBinding;
  const info = await findPort(parsePortSelector(config.port), {
    timeoutMs: options.timeoutMs ?? 10_000,
    ...(options.signal ? { signal: options.signal } : {}),
  });
  return { binding, path: info.path, info };
}
