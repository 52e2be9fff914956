/**
 * esptool's compressed write, block by block, under one write attempt: each step bounded, the
 * attempt aborted ({@link NoReply}) when the board stops answering, so that the flasher can
 * cancel it and reconnect before the next one.
 */
import { createHash } from 'node:crypto';
import { createInflate, deflateSync, constants as zlibConstants } from 'node:zlib';
import { encodeWords } from '@xiaozhi-mcp/firmware';
import type { ESPLoader } from 'esptool-js';
import {
  ERASE_WRITE_TIMEOUT_PER_MB_MS,
  type FlasherTimeouts,
  MD5_TIMEOUT_PER_MB_MS,
  timeoutPerMb,
  WRITE_BLOCK_ATTEMPTS,
} from './flash-timing.js';
import { abortableWait } from './wait.js';

/** Bytes to write at an offset (a merged image is one part at 0x0). */
export interface FlashPart {
  readonly offset: number;
  readonly data: Uint8Array;
}

/** What one write attempt runs on. */
export interface WriteAttempt {
  /** The connected loader, its stub running. */
  readonly loader: ESPLoader;
  /** The rate both ends are at. */
  readonly baudRate: number;
  readonly timeouts: FlasherTimeouts;
  /** Aborted by a step past its bound ({@link NoReply}), or by whoever cancels the attempt. */
  readonly control: AbortController;
  /** esptool's messages, line by line. */
  readonly log: (line: string) => void;
}

/**
 * A failure in which the board stopped answering (a block without reply, a step over its
 * bound): the attempt is cancelled and the retry reconnects.
 */
export class NoReply extends Error {
  override readonly name = 'NoReply';
}

function padTo4(data: Uint8Array): Uint8Array {
  const padded = new Uint8Array(Math.ceil(data.length / 4) * 4).fill(0xff);
  padded.set(data);
  return padded;
}

/** The MD5 the stub computes of what it wrote, as hex. */
export function md5Hex(data: Uint8Array): string {
  return createHash('md5').update(data).digest('hex');
}

function hex(value: number): string {
  return `0x${value.toString(16)}`;
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The byte sizes the blocks of a zlib stream inflate to, block by block (as the stub will). */
async function inflatedBlockSizes(compressed: Uint8Array, blockSize: number): Promise<number[]> {
  const inflate = createInflate();
  let out = 0;
  let failure: Error | undefined;
  inflate.on('data', (chunk: Buffer) => {
    out += chunk.length;
  });
  inflate.on('error', (error: Error) => {
    failure = error;
  });
  const sizes: number[] = [];
  try {
    for (let at = 0; at < compressed.length; at += blockSize) {
      const before = out;
      await new Promise<void>((resolve) => {
        inflate.write(compressed.subarray(at, at + blockSize));
        inflate.flush(zlibConstants.Z_SYNC_FLUSH, () => resolve());
      });
      if (failure !== undefined) throw failure;
      sizes.push(out - before);
    }
  } finally {
    inflate.close();
  }
  return sizes;
}

/**
 * esptool's compressed write (`cmds.py` `write_flash`), driven block by block through the
 * loader's public commands. Each block's timeout is esptool's: `timeout_per_mb(
 * ERASE_WRITE_TIMEOUT_PER_MB, size the block inflates to)`, at least DEFAULT_TIMEOUT; the stub
 * acknowledges a block when it has it and writes it while the next one arrives, so a block
 * waits with the previous block's timeout, and after the last one a register read waits with
 * the last one's. Each block is sent up to WRITE_BLOCK_ATTEMPTS times. (`ESPLoader.writeFlash`
 * re-inflates every block on the host one byte at a time just to report progress, over 10% of
 * the wire time at 921600 baud; here zlib inflates each block once, to size its timeout.)
 * Every step runs under the attempt's signal and a bound; a step past its bound aborts the
 * attempt ({@link NoReply}).
 */
export async function writeCompressed(
  attempt: WriteAttempt,
  parts: readonly FlashPart[],
  eraseAll: boolean,
  onPart: (part: number) => void,
  onProgress: (part: number, written: number, compressedTotal: number) => void,
): Promise<void> {
  const { loader, control, timeouts, log } = attempt;
  const { signal } = control;
  const floor = timeouts.commandMs;
  const wireMs = (bytes: number) => (bytes * 10 * 1000) / attempt.baudRate;
  if (eraseAll) {
    // esptool-js's eraseFlash waits CHIP_ERASE_TIMEOUT (esptool's 120 s).
    await guard('erase', control, 120_000 + timeouts.stepMs, () => loader.eraseFlash());
  }
  for (const [index, part] of parts.entries()) {
    onPart(index);
    if (part.data.length === 0) continue;
    const image = part.data.length % 4 === 0 ? part.data : padTo4(part.data);
    const compressed = new Uint8Array(deflateSync(image, { level: 9 }));
    const blockSize = loader.FLASH_WRITE_SIZE;
    const inflated = await inflatedBlockSizes(compressed, blockSize);
    // The messages esptool prints, so flash logs read as they do with esptool's own write.
    log(`Compressed ${image.length} bytes to ${compressed.length}...`);
    const started = performance.now();
    const blocks = await guard('begin', control, floor + timeouts.stepMs, () =>
      loader.flashDeflBegin(image.length, compressed.length, part.offset),
    );
    let timeout = floor;
    let written = 0;
    for (let seq = 0; seq < blocks; seq++) {
      signal.throwIfAborted();
      const block = compressed.subarray(seq * blockSize, (seq + 1) * blockSize);
      const blockTimeout = timeoutPerMb(ERASE_WRITE_TIMEOUT_PER_MB_MS, inflated[seq] ?? 0, floor);
      if (!loader.IS_STUB) timeout = blockTimeout; // the ROM writes a block before it answers
      log(
        `Writing at ${hex(part.offset + written)}... (${Math.floor(((seq + 1) * 100) / blocks)}%)`,
      );
      log(
        `trace: block ${seq + 1}/${blocks}, ${block.length} bytes inflating to ${inflated[seq] ?? 0}, timeout ${Math.round(timeout)} ms`,
      );
      await sendBlock(attempt, block, seq, timeout);
      if (loader.IS_STUB) timeout = blockTimeout; // the stub writes it while the next arrives
      written += inflated[seq] ?? 0;
      onProgress(index, Math.min((seq + 1) * blockSize, compressed.length), compressed.length);
    }
    if (loader.IS_STUB) {
      // esptool: "Stub only writes each block to flash after 'ack'ing the receive, so do a
      // final dummy operation which will not be 'ack'ed until the last block has actually
      // been written out to flash".
      log(`trace: waiting for the last block to be written, timeout ${Math.round(timeout)} ms`);
      await guard('last block', control, timeout + timeouts.stepMs, () =>
        loader.readReg(loader.CHIP_DETECT_MAGIC_REG_ADDR, timeout),
      );
    }
    await guard('end', control, floor + timeouts.stepMs, () => loader.flashDeflFinish(false));
    const seconds = ((performance.now() - started) / 1000).toFixed(2);
    log(
      `Wrote ${image.length} bytes (${compressed.length} compressed) at ${hex(part.offset)} in ${seconds} seconds.`,
    );
    const expected = md5Hex(image);
    const md5Ms = timeoutPerMb(MD5_TIMEOUT_PER_MB_MS, image.length, floor);
    const actual = await guard('MD5', control, md5Ms + wireMs(64) + timeouts.stepMs, () =>
      loader.flashMd5sum(part.offset, image.length),
    );
    if (actual !== expected) {
      throw new Error(
        `MD5 of file does not match data in flash! (file ${expected}, flash ${actual})`,
      );
    }
    log(`Hash of data verified. (${expected})`);
  }
}

/**
 * One FLASH_DEFL_DATA block, sent up to WRITE_BLOCK_ATTEMPTS times (esptool's
 * `flash_defl_block`), each send waiting `timeout` for the reply, 150 ms between sends
 * (esptool-js's WRITE_BLOCK_RETRY_DELAY_MS). Nothing is sent once the attempt is aborted. All
 * sends unanswered: {@link NoReply}; an error reply passes through.
 */
async function sendBlock(
  attempt: WriteAttempt,
  block: Uint8Array,
  seq: number,
  timeout: number,
): Promise<void> {
  const { loader, control, timeouts, log } = attempt;
  const { signal } = control;
  const packet = new Uint8Array(16 + block.length);
  packet.set(encodeWords(block.length, seq, 0, 0));
  packet.set(block, 16);
  const checksum = loader.checksum(block);
  const bound = timeout + (2 * block.length * 10 * 1000) / attempt.baudRate + timeouts.stepMs;
  let last: unknown;
  for (let send = 1; send <= WRITE_BLOCK_ATTEMPTS; send++) {
    signal.throwIfAborted();
    try {
      await guard(`block ${seq}`, control, bound, () =>
        loader.checkCommand(
          `write compressed data to flash after seq ${seq}`,
          loader.ESP_FLASH_DEFL_DATA,
          packet,
          checksum,
          0,
          timeout,
        ),
      );
      return;
    } catch (error) {
      if (signal.aborted) throw signal.reason;
      last = error;
      // An error status is an answer: sending the same block again is esptool's retry too.
      if (send < WRITE_BLOCK_ATTEMPTS) {
        log(`trace: block ${seq} not written (${message(error)}), sending it again`);
        await abortableWait(loader.WRITE_BLOCK_RETRY_DELAY_MS, signal);
      }
    }
  }
  if (/failed with status/i.test(message(last))) throw last;
  throw new NoReply(
    `block ${seq} (seq ${seq}): no reply within ${Math.round(timeout)} ms, ${WRITE_BLOCK_ATTEMPTS} times`,
    { cause: last },
  );
}

/**
 * Runs one step of a write attempt. Past `ms` the attempt is aborted ({@link NoReply}): the
 * step's pending read rejects at once, and the caller cancels the attempt.
 */
export async function guard<T>(
  step: string,
  control: AbortController,
  ms: number,
  work: () => Promise<T>,
): Promise<T> {
  const { signal } = control;
  signal.throwIfAborted();
  const timer = setTimeout(
    () => control.abort(new NoReply(`${step}: no reply within ${Math.round(ms)} ms`)),
    ms,
  );
  let onAbort: (() => void) | undefined;
  // A step stuck outside a read (a write that does not complete) ends with the attempt too.
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  try {
    return await Promise.race([work(), aborted]);
  } catch (error) {
    if (signal.aborted) throw signal.reason;
    throw error;
  } finally {
    clearTimeout(timer);
    if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
  }
}
