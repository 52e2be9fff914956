/**
 * esptool-js's reads, as the flasher makes them: a reply that arrives while this process is
 * starved of CPU (a busy CI machine) is read, not mistaken for a board that never answered.
 */
import { describe, expect, it } from 'vitest';
import { QuietTransport } from './esptool-transport.js';

/** A transport on a port whose bytes the test sends; esptool-js's read loop moves them to its buffer. */
function transportOnFakePort(): { transport: QuietTransport; send: (bytes: number[]) => void } {
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  const readable = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
  });
  const transport = new QuietTransport({ readable } as never, () => {});
  void transport.readLoop();
  return { transport, send: (bytes) => controller?.enqueue(Uint8Array.from(bytes)) };
}

/** Blocks the event loop, as a process does that another's work keeps off the CPU. */
function stall(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // starved
  }
}

// A ROM reply to MEM_END (0x06), SLIP-framed: direction 1, command, size 2, value, status 0 0.
const MEM_END_REPLY = [0xc0, 0x01, 0x06, 0x02, 0x00, 0, 0, 0, 0, 0x00, 0x00, 0xc0];

describe('QuietTransport.read', () => {
  it('reads a reply that came while the process was stalled past the deadline', async () => {
    const { transport, send } = transportOnFakePort();
    // esptool-js waits 200 ms for MEM_END; the board answers at once, but this process does
    // not run again for 400 ms.
    const reply = transport.read(200);
    setTimeout(() => {
      send(MEM_END_REPLY);
      stall(400);
    }, 0);
    await expect(reply).resolves.toEqual(Uint8Array.from(MEM_END_REPLY.slice(1, -1)));
  });

  it('still times out, with esptool-js own error, when nothing comes', async () => {
    const { transport } = transportOnFakePort();
    await expect(transport.read(20)).rejects.toThrow(/Serial data stream stopped/);
  });

  it('ends at once when its attempt is cancelled', async () => {
    const { transport } = transportOnFakePort();
    const abort = new AbortController();
    transport.cancelWith(abort.signal);
    const read = transport.read(60_000);
    abort.abort(new Error('attempt cancelled'));
    await expect(read).rejects.toThrow('attempt cancelled');
  });
});
