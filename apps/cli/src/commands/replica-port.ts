import {
  FlashStorage,
  type ReplicaFile,
  replicaBoardOptions,
  VirtualBoard,
  type VirtualBoardStore,
  VirtualSerialBinding,
  virtualPort,
} from '@xiaozhi-mcp/device';
import {
  BoardLockError,
  lockBoard,
  type PortProvider,
  PortProviderError,
  type ProviderListing,
  type ProviderRequest,
  type ResolvedPort,
  SerialError,
} from '@xiaozhi-mcp/serial/provider';

const VIRTUAL_PREFIX = 'virtual:';

/**
 * `port serve virtual:NAME --replica FILE`: the stored virtual board (its flash file, its lock,
 * its serial port with the ROM and console) running the replica instead of its preset: the
 * replica's identity and tool set, its MAC when the replica has one, else the stored board's.
 * Creating and listing boards stay the store's.
 */
export class ReplicaBoardProvider implements PortProvider {
  readonly prefix = VIRTUAL_PREFIX;

  constructor(
    private readonly store: VirtualBoardStore,
    private readonly replica: ReplicaFile,
  ) {}

  listing(): ProviderListing {
    return this.store.listing();
  }

  async resolve(selector: string, request: ProviderRequest = {}): Promise<ResolvedPort> {
    const port = `${VIRTUAL_PREFIX}${selector.slice(VIRTUAL_PREFIX.length).trim()}`;
    let entry = this.store.boards().find((board) => board.port === port);
    if (entry === undefined) {
      // The store names a bad selector or a missing board, or creates it as asked (`--create`,
      // with the replica's flash size unless `--flash-size` says otherwise).
      const flashSize = request.create?.flashSize ?? String(this.replica.board.flashSizeMb);
      const created = await this.store.resolve(selector, {
        ...request,
        ...(request.create === undefined ? {} : { create: { ...request.create, flashSize } }),
      });
      created.dispose();
      entry = this.store.boards().find((board) => board.port === port);
      if (entry === undefined)
        throw new PortProviderError('failed', `${port}: the store made no board`);
    }
    let release: () => void;
    try {
      release = await lockBoard(entry.port, { dir: this.store.dir });
    } catch (error) {
      if (!(error instanceof BoardLockError) || error.reason !== 'held') throw error;
      throw new SerialError(
        'PORT_BUSY',
        `${entry.port} is in use by another process; close the other program (a monitor, a flash) first`,
      );
    }
    let board: VirtualBoard;
    try {
      board = new VirtualBoard({
        ...replicaBoardOptions(this.replica, { mac: this.replica.board.mac ?? entry.mac }),
        flash: new FlashStorage({ size: entry.flashSizeMb * 1024 * 1024, path: entry.flashPath }),
      });
    } catch (error) {
      release();
      throw new PortProviderError(
        'failed',
        `cannot run the replica on ${entry.port}: ${error instanceof Error ? error.message : String(error)}`,
        { cause: error },
      );
    }
    const binding = new VirtualSerialBinding();
    const device = binding.attach(board, { path: entry.port });
    board.powerOn();
    request.notify?.(
      'stdout',
      `${entry.port} runs the replica of ${this.replica.board.variant} (${this.replica.tools.length} tools, MAC ${board.mac})\n`,
    );
    let disposed = false;
    return virtualPort(binding, device, entry.port, () => {
      if (disposed) return;
      disposed = true;
      board.powerOff();
      binding.detach(device);
      release();
    });
  }
}
