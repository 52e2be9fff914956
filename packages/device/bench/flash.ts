// Benchmark of flashing a virtual board: the real esptool-js, through our Flasher and
// NodeWebSerialPort, into a VirtualBoard behind the throttled virtual serial binding. Every flash
// is printed against the wire time of the bytes it moved at the emulated baud rate, and against
// an echo baseline measured in this run: the same writes, replayed through the same throttled
// port to the ROM emulator, with no esptool in the way. Each case runs directly and through our
// RFC 2217 client and server on 127.0.0.1 (`--via`), the board's port shared as
// `xiaozhi-mcp port serve` shares it and reached through `rfc2217://`, as a board on another host.
//
//   npm run bench -- [--bauds 115200,460800,921600] [--images merged-padded,merged-app,app-1m] [--via direct,rfc2217] ...
//   node bench/dist/flash.js [options]      (once `npm run bench` has compiled it)
//
// See bench/README.md for what each figure means. `npm run bench` compiles bench/ with tsc into
// bench/dist (git-ignored) and runs it as plain JavaScript. It imports the BUILT packages (dist/):
// run `npx turbo run build` first (`npm run bench` from the root does). Exit codes: 0 done (whatever the figures), 1 error, 3 the global
// timeout, 130 interrupted.
import { createCipheriv, createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import { basename, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { deflateSync } from 'node:zlib';
import {
  FlashStorage,
  VirtualBoard,
  VirtualSerialBinding,
  type VirtualSerialDevice,
  virtualPort,
} from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import {
  Flasher,
  type FlasherOptions,
  NodeWebSerialPort,
  Rfc2217Server,
  resolvePort,
} from '@xiaozhi-mcp/serial';

const HERE = dirname(fileURLToPath(import.meta.url));
/** bench/, where last-run.json goes: this file runs compiled, from bench/dist/. */
const BENCH_DIR = basename(HERE) === 'dist' ? dirname(HERE) : HERE;
const MiB = 1024 * 1024;
const FLASH_SIZE = 4 * MiB;
const TIMING = { ...FAST_TIMING, panicRebootMs: 200 };
const TARGET = 1.1;
const IMAGE_NAMES = ['merged-padded', 'merged-app', 'app-1m'];
/** How the host reaches the board's port: as it is, or through our RFC 2217 client and server. */
const VIAS = ['direct', 'rfc2217'] as const;
type Via = (typeof VIAS)[number];

// --- options --------------------------------------------------------------------------------------
interface Options {
  bauds: number[];
  images: string[];
  via: Via[];
  appMb: number;
  appRatio: number;
  baseline: boolean;
  warmup: boolean;
  timeout: number;
  json: string;
}
type Parse<T> = (name: string, value: string) => T;

function parseOptions(argv: string[]): Options {
  const list = <T>(name: string, value: string, parse: Parse<T>): T[] => {
    const items = String(value)
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    if (items.length === 0) throw new Error(`--${name} needs at least one value`);
    return items.map((item) => parse(name, item));
  };
  const baud: Parse<number> = (name, value) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 9600 || n > 5_000_000)
      throw new Error(`--${name}: ${JSON.stringify(value)} is not a baud rate`);
    return n;
  };
  const via: Parse<Via> = (name, value) => {
    const found = VIAS.find((v) => v === value);
    if (found === undefined)
      throw new Error(`--${name}: unknown path ${value} (one of ${VIAS.join(', ')})`);
    return found;
  };
  const image: Parse<string> = (name, value) => {
    if (!IMAGE_NAMES.includes(value))
      throw new Error(`--${name}: unknown image ${value} (one of ${IMAGE_NAMES.join(', ')})`);
    return value;
  };
  const number =
    (min: number, max: number): Parse<number> =>
    (name, value) => {
      const n = Number(value);
      if (!Number.isFinite(n) || n < min || n > max)
        throw new Error(`--${name} must be a number from ${min} to ${max}, got ${value}`);
      return n;
    };
  const options: Options = {
    bauds: [115_200, 460_800, 921_600],
    images: [...IMAGE_NAMES],
    via: [...VIAS],
    appMb: 2.5,
    appRatio: 1,
    baseline: true,
    warmup: true,
    timeout: 1800,
    json: resolve(BENCH_DIR, 'last-run.json'),
  };
  const names: Record<string, [keyof Options, Parse<unknown>]> = {
    '--bauds': ['bauds', (n, v) => list(n, v, baud)],
    '--images': ['images', (n, v) => list(n, v, image)],
    '--via': ['via', (n, v) => list(n, v, via)],
    '--app-mb': ['appMb', number(0.0625, 2.9)],
    '--app-ratio': ['appRatio', number(1, 8)],
    '--timeout': ['timeout', number(10, 86_400)],
    '--json': ['json', (_n, v) => resolve(v)],
  };
  for (let i = 0; i < argv.length; i++) {
    let arg = argv[i] as string;
    if (arg === '--help' || arg === '-h') {
      console.log(`usage: node bench/dist/flash.js [options]
  --bauds LIST        flash baud rates (default 115200,460800,921600)
  --images LIST       merged-padded, merged-app, app-1m (default: all three)
  --via LIST          direct, rfc2217 (default both): the board's port as it is, or shared by
                      our RFC 2217 server on 127.0.0.1 and reached through rfc2217://
  --app-mb MB         app size in the merged-app image, from 0x10000 (default 2.5)
  --app-ratio R       how compressible the random app data is (default 1: incompressible;
                      1.6 is what a real xiaozhi app does)
  --no-baseline       skip the echo baseline (halves the run time)
  --no-warmup         skip the untimed warm-up flash
  --timeout S         bound on the whole run, seconds (default 1800)
  --json PATH         where to write the figures (default bench/last-run.json)`);
      process.exit(0);
    }
    if (arg === '--no-baseline') {
      options.baseline = false;
      continue;
    }
    if (arg === '--no-warmup') {
      options.warmup = false;
      continue;
    }
    let value: string | undefined;
    if (arg.includes('='))
      [arg, value] = [arg.slice(0, arg.indexOf('=')), arg.slice(arg.indexOf('=') + 1)];
    const spec = names[arg];
    if (spec === undefined) throw new Error(`unknown option ${arg} (try --help)`);
    value ??= argv[++i];
    if (value === undefined) throw new Error(`${arg} needs a value`);
    Object.assign(options, {
      [spec[0]]: spec[1](
        spec[0].replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`),
        value,
      ),
    });
  }
  return options;
}

// --- images ---------------------------------------------------------------------------------------
interface Image {
  name: string;
  description?: string;
  /** Shaped like what a real build flashes (the verdict is about these). */
  realistic: boolean;
  offset: number;
  data: Uint8Array;
}

const md5 = (data: Uint8Array) => createHash('md5').update(data).digest('hex');

/** Deterministic pseudo-random bytes (AES-128-CTR of zeros), so every run flashes the same images. */
function randomBytesSeeded(length: number, seed: string): Uint8Array {
  const key = createHash('sha256').update(`flash-bench/${seed}`).digest().subarray(0, 16);
  const cipher = createCipheriv('aes-128-ctr', key, Buffer.alloc(16));
  return new Uint8Array(cipher.update(Buffer.alloc(length)));
}

/**
 * `length` bytes of app-like filler: incompressible when `ratio` is 1; otherwise each 4 KiB holds
 * 4096/ratio random bytes and a repeated pattern, so zlib compresses it about `ratio` times.
 */
function appFiller(length: number, ratio: number, seed: string): Uint8Array {
  const random = randomBytesSeeded(length, seed);
  if (ratio <= 1) return random;
  const out = new Uint8Array(length);
  const keep = Math.round(4096 / ratio);
  for (let at = 0; at < length; at += 4096) {
    const end = Math.min(length, at + 4096);
    out.set(random.subarray(at, Math.min(end, at + keep)), at);
    for (let i = at + keep; i < end; i++) out[i] = (i * 7) & 0x3f;
  }
  return out;
}

function buildImages(options: Options): Image[] {
  const fw = buildVirtualFirmware({
    chip: 'esp32s3',
    version: '2.6.0',
    board: 'bread-compact-wifi',
    flashSizeMb: 4,
    padToFlashSize: true,
  });
  const images: Record<string, Image> = {};
  images['merged-padded'] = {
    name: 'merged-padded',
    description: `4 MB merged image (bootloader, table, ${fw.app.length} B app, 0xFF to the flash size) at 0x0`,
    realistic: false,
    offset: 0,
    data: fw.merged,
  };
  const appBytes = Math.round(options.appMb * MiB);
  const merged = new Uint8Array(fw.merged);
  merged.set(
    appFiller(appBytes - fw.app.length, options.appRatio, 'merged-app'),
    fw.appOffset + fw.app.length,
  );
  images['merged-app'] = {
    name: 'merged-app',
    description: `the same with a ${options.appMb} MiB app at 0x${fw.appOffset.toString(16)} (the virtual app, then random data${options.appRatio > 1 ? ` compressible ${options.appRatio}×` : ''}), 0xFF after it`,
    realistic: true,
    offset: 0,
    data: merged,
  };
  const app = appFiller(MiB, options.appRatio, 'app-1m');
  app.set(fw.app);
  images['app-1m'] = {
    name: 'app-1m',
    description: `a 1 MiB app image at 0x20000 (the virtual app's header and segments, then random data${options.appRatio > 1 ? ` compressible ${options.appRatio}×` : ''})`,
    realistic: true,
    offset: 0x20000,
    data: app,
  };
  return options.images.map((name) => images[name] as Image);
}

// --- a rig: a board with an empty 4 MB flash on a CP2102, as flash.test.ts builds it --------------
let nextMac = 1;

interface Rig {
  flash: FlashStorage;
  board: VirtualBoard;
  binding: VirtualSerialBinding;
  device: VirtualSerialDevice;
  /** The host's port: the board's own, or `rfc2217://127.0.0.1:<port>` of a server sharing it. */
  port: NodeWebSerialPort;
  /** What the Flasher needs to know of that port (an rfc2217:// port writes RTS, then DTR). */
  flasherOptions: Pick<FlasherOptions, 'platform' | 'portKind'>;
  close: () => Promise<void>;
}

/**
 * `rfc2217`: the board's port is shared by our RFC 2217 server on 127.0.0.1 (a port the OS
 * picks), as `xiaozhi-mcp port serve` shares it, and the host reaches it through our client, as
 * `--port rfc2217://...` does (`resolvePort`: the port's kind from the server's signature, the
 * lines written one at a time).
 */
async function rig(via: Via = 'direct'): Promise<Rig> {
  const flash = new FlashStorage({ size: FLASH_SIZE });
  const mac = `f4:12:fa:5e:01:${(nextMac++ & 0xff).toString(16).padStart(2, '0')}`;
  const board = new VirtualBoard({ flash, timing: TIMING, mac });
  const binding = new VirtualSerialBinding();
  const device = binding.attach(board);
  const [info] = await binding.list();
  if (info === undefined) throw new Error('the virtual board is not listed');
  const unplug = () => {
    board.powerOff();
    binding.detach(device);
  };
  if (via === 'direct') {
    const port = NodeWebSerialPort.fromPortInfo(binding, info);
    return { flash, board, binding, device, port, flasherOptions: {}, close: async () => unplug() };
  }
  const local = virtualPort(binding, device, 'virtual:bench', () => {});
  const server = await Rfc2217Server.start({ port: local, host: '127.0.0.1', listenPort: 0 });
  try {
    const remote = await resolvePort(server.url);
    const port = NodeWebSerialPort.fromPortInfo(remote.binding, {
      ...remote.info,
      path: remote.path,
    });
    const flasherOptions = {
      ...(remote.linePlatform === undefined ? {} : { platform: remote.linePlatform }),
      portKind: remote.info.kind,
    };
    const close = async () => {
      await server.close();
      unplug();
    };
    return { flash, board, binding, device, port, flasherOptions, close };
  } catch (error) {
    await server.close();
    unplug();
    throw error;
  }
}

/** Wire counters and clocks at one instant. */
interface Snapshot {
  at: number;
  cpu: NodeJS.CpuUsage;
  boardBytes: number;
  boardMs: number;
  hostBytes: number;
  hostMs: number;
}

function snapshot(device: VirtualSerialDevice): Snapshot {
  const { toBoard, toHost } = device.stats;
  return {
    at: performance.now(),
    cpu: process.cpuUsage(),
    boardBytes: toBoard.bytes,
    boardMs: toBoard.wireMs,
    hostBytes: toHost.bytes,
    hostMs: toHost.wireMs,
  };
}

/** From snapshot `a` to snapshot `b`: wall, CPU and wire in each direction. */
interface Span {
  wallMs: number;
  cpuMs: number;
  toBoardBytes: number;
  toHostBytes: number;
  toBoardMs: number;
  toHostMs: number;
  wireMs: number;
}

function span(a: Snapshot, b: Snapshot): Span {
  const cpuUs = b.cpu.user - a.cpu.user + (b.cpu.system - a.cpu.system);
  const toBoardMs = b.boardMs - a.boardMs;
  const toHostMs = b.hostMs - a.hostMs;
  return {
    wallMs: b.at - a.at,
    cpuMs: cpuUs / 1000,
    toBoardBytes: b.boardBytes - a.boardBytes,
    toHostBytes: b.hostBytes - a.hostBytes,
    toBoardMs,
    toHostMs,
    wireMs: toBoardMs + toHostMs,
  };
}

// --- one flash ------------------------------------------------------------------------------------
/** A host write of the flash: its size and the rate it went at. */
interface Write {
  bytes: number;
  baud: number;
}

interface Echo extends Span {
  roundTrips: number;
}

interface Row {
  image: string;
  realistic: boolean;
  baudRate: number;
  via: Via;
  /** Resets into download mode the connect took (1: its first attempt synced). */
  connectResets: number;
  imageBytes: number;
  compressedBytes: number | undefined;
  chip: string;
  connect: Span;
  flash: Span;
  phases: { prepare: Span; blocks: Span; verify: Span; resetClose: Span };
  blockCount: number;
  blockOverheadMs: { mean: number; p50: number; max: number };
  md5Ok: boolean;
  writes: Write[];
  echo?: Echo;
  error?: undefined;
}

/** A case that threw. */
interface FailedRow {
  image: string;
  realistic: boolean;
  baudRate: number;
  via: Via;
  error: string;
}

type Mark = 'blocksStart' | 'blocksEnd' | 'verified';

async function flashCase(image: Image, baudRate: number, via: Via = 'direct'): Promise<Row> {
  const { flash, board, device, port, flasherOptions, close } = await rig(via);
  const marks: Partial<Record<Mark, Snapshot>> = {};
  const blockMarks: Snapshot[] = [];
  let writes: Write[];
  let compressedBytes: number | undefined;
  let connectResets = 0;
  // The flash as the hard reset after the verify finds it: the app it boots then writes its NVS
  // (a copy, taken as the chip starts, before the app; the MD5 is computed untimed).
  let atBoot: Uint8Array | undefined;
  const onBoot = () => {
    if (marks.verified !== undefined) atBoot ??= flash.read(image.offset, image.data.length);
  };
  board.on('boot', onBoot);
  const flasher = new Flasher({
    port,
    ...flasherOptions,
    log: (line) => {
      // esptool-js's messages, timed as they are printed (the callback is synchronous).
      if (line.startsWith('Writing at ')) {
        const s = snapshot(device);
        marks.blocksStart ??= s;
        blockMarks.push(s);
      } else if (line.startsWith('Compressed ')) {
        compressedBytes = Number(/to (\d+)/.exec(line)?.[1]);
      } else if (line.startsWith('Wrote ')) {
        marks.blocksEnd = snapshot(device);
      } else if (line.startsWith('Hash of data verified')) {
        marks.verified = snapshot(device);
      } else if (line.startsWith('Resetting into download mode')) {
        connectResets++;
      }
    },
  });
  try {
    board.powerOn();
    const c0 = snapshot(device);
    const chip = await flasher.connect();
    const c1 = snapshot(device);
    // Every host write of the flash, with its rate: the echo baseline replays them. Observation
    // only: the wrapper calls through to the device's own method.
    writes = [];
    const hostSend = device.hostSend.bind(device);
    device.hostSend = (bytes, baud) => {
      writes.push({ bytes: bytes.length, baud });
      return hostSend(bytes, baud);
    };
    const f0 = snapshot(device);
    const result = await flasher.flash([{ offset: image.offset, data: image.data }], { baudRate });
    const f1 = snapshot(device);
    device.hostSend = hostSend;
    const md5Ok = md5(atBoot ?? flash.read(image.offset, image.data.length)) === md5(image.data);
    if (result.flaky) throw new Error(`the flash was retried: ${result.firstError}`);
    const need = (mark: Mark): Snapshot => {
      const at = marks[mark];
      if (at === undefined)
        throw new Error(`esptool-js did not print the line that marks ${mark}: its log changed?`);
      return at;
    };
    const blocksStart = need('blocksStart');
    const blocksEnd = need('blocksEnd');
    const verified = need('verified');
    const blocks = blockMarks.length;
    const blockSpan = span(blocksStart, blocksEnd);
    // Per block: from one "Writing at" to the next (the last one to "Wrote", which includes FLASH_DEFL_END).
    const gaps: number[] = [];
    const ends = [...blockMarks.slice(1), blocksEnd];
    for (let i = 0; i < blocks; i++) {
      const from = blockMarks[i];
      const to = ends[i];
      if (from === undefined || to === undefined) break;
      const s = span(from, to);
      gaps.push(s.wallMs - s.wireMs);
    }
    gaps.sort((a, b) => a - b);
    return {
      image: image.name,
      realistic: image.realistic,
      baudRate,
      via,
      connectResets,
      imageBytes: image.data.length,
      compressedBytes,
      chip: chip.description,
      connect: span(c0, c1),
      flash: span(f0, f1),
      phases: {
        prepare: span(f0, blocksStart),
        blocks: blockSpan,
        verify: span(blocksEnd, verified),
        resetClose: span(verified, f1),
      },
      blockCount: blocks,
      blockOverheadMs: {
        mean: gaps.reduce((a, b) => a + b, 0) / Math.max(1, gaps.length),
        p50: gaps[Math.floor(gaps.length / 2)] ?? Number.NaN,
        max: gaps.at(-1) ?? Number.NaN,
      },
      md5Ok,
      writes,
    };
  } finally {
    board.off('boot', onBoot);
    await flasher.disconnect().catch(() => {});
    await close();
  }
}

// --- the echo baseline ----------------------------------------------------------------------------
const SLIP_END = 0xc0;
const READ_REG = 0x0a;

/**
 * A frame of exactly `n` bytes on the wire that the ROM decodes and answers at once: a READ_REG
 * request whose size field (0xFFFF) does not match its data, which the ROM refuses with a
 * 12-byte status reply, the size of the stub's FLASH_DEFL_DATA acknowledgement. The filler
 * (0x55) needs no SLIP escaping.
 */
function echoFrame(n: number): Uint8Array {
  if (n < 10) throw new Error(`cannot replay a ${n}-byte write`);
  const frame = new Uint8Array(n).fill(0x55);
  frame.set([SLIP_END, 0x00, READ_REG, 0xff, 0xff, 0, 0, 0, 0]);
  frame[n - 1] = SLIP_END;
  return frame;
}

/**
 * Replays `writes` (the flash's host writes, each at its rate) to a fresh board's ROM through the
 * same binding, NodeWebSerialPort and throttle (and, `via` rfc2217, the same RFC 2217 client and
 * server), stop-and-wait as esptool does: write a frame (directly, the write resolves when its
 * last byte has reached the board), then read until the ROM's reply frame is in. No esptool, no
 * compression, no flash writes, no sleeps.
 */
async function echoBaseline(writes: Write[], via: Via = 'direct'): Promise<Echo> {
  const { board, device, port, close } = await rig(via);
  let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
  let writer: WritableStreamDefaultWriter<Uint8Array> | undefined;
  try {
    board.reset('EXT_SYS_RST', { download: true });
    await board.waitForState('download', 5000);
    // Opened after the reset, so the ROM's banner (sent only to an open port) is not in the way.
    await port.open({ baudRate: (writes[0] as Write).baud });
    reader = (port.readable as ReadableStream<Uint8Array>).getReader();
    writer = (port.writable as WritableStream<Uint8Array>).getWriter();
    const frames = writes.map((w) => echoFrame(w.bytes));
    let ends = 0;
    let needed = 0;
    const s0 = snapshot(device);
    for (let i = 0; i < writes.length; i++) {
      const { baud } = writes[i] as Write;
      if (port.baudRate !== baud) await port.setBaudRate(baud);
      await writer.write(frames[i] as Uint8Array);
      needed += 2;
      while (ends < needed) {
        const { value, done } = await reader.read();
        if (done) throw new Error('the port closed during the echo baseline');
        for (const byte of value) if (byte === SLIP_END) ends++;
      }
    }
    const s1 = snapshot(device);
    return { ...span(s0, s1), roundTrips: writes.length };
  } finally {
    reader?.releaseLock();
    writer?.releaseLock();
    await port.close().catch(() => {});
    await close();
  }
}

// --- printing -------------------------------------------------------------------------------------
const s = (ms: number) => (ms / 1000).toFixed(2);
const size = (bytes: number) =>
  bytes >= MiB ? `${(bytes / MiB).toFixed(2)}M` : `${(bytes / 1024).toFixed(1)}K`;
const ratio = (x: number) => (Number.isFinite(x) ? `${x.toFixed(3)}×` : '-');
/** The first `left` cells (image, baud, via) to the left, the figures to the right. */
const pad = (cells: (string | number)[], widths: number[], left = 3) =>
  cells
    .map((c, i) =>
      i < left ? String(c).padEnd(widths[i] ?? 0) : String(c).padStart(widths[i] ?? 0),
    )
    .join(' ');

function tables(rows: (Row | FailedRow)[]): string {
  const head1 = [
    'image',
    'baud',
    'via',
    'image',
    'sent',
    'connect s',
    'conn wire',
    'flash s',
    '→board s',
    '→host s',
    'wire s',
    'wall/wire',
    'echo s',
    'echo/wire',
    'flash/echo',
    'KiB/s',
    'md5',
  ];
  const w1 = [14, 7, 8, 6, 7, 9, 9, 8, 9, 8, 7, 9, 7, 9, 10, 6, 4];
  const out = [pad(head1, w1)];
  for (const r of rows) {
    if (r.error !== undefined) {
      out.push(`${pad([r.image, r.baudRate, r.via], w1.slice(0, 3))} FAILED: ${r.error}`);
      continue;
    }
    const f = r.flash;
    const e = r.echo;
    out.push(
      pad(
        [
          r.image,
          r.baudRate,
          r.via,
          size(r.imageBytes),
          size(f.toBoardBytes),
          s(r.connect.wallMs),
          s(r.connect.wireMs),
          s(f.wallMs),
          s(f.toBoardMs),
          s(f.toHostMs),
          s(f.wireMs),
          ratio(f.wallMs / f.wireMs),
          e ? s(e.wallMs) : '-',
          e ? ratio(e.wallMs / e.wireMs) : '-',
          e ? ratio(f.wallMs / e.wallMs) : '-',
          Math.round(r.imageBytes / 1024 / (f.wallMs / 1000)),
          r.md5Ok ? 'ok' : 'BAD',
        ],
        w1,
      ),
    );
  }
  const head2 = [
    'image',
    'baud',
    'via',
    'prepare ms',
    '(cpu)',
    'blocks',
    'blocks s',
    'wire s',
    'over/blk ms',
    'p50',
    'max',
    'cpu/blk ms',
    'verify ms',
    'reset ms',
    'echo over/rt ms',
  ];
  const w2 = [14, 7, 8, 10, 6, 6, 8, 7, 11, 6, 7, 10, 9, 8, 15];
  out.push('', 'where the flash time goes', pad(head2, w2));
  for (const r of rows) {
    if (r.error !== undefined) continue;
    const p = r.phases;
    const e = r.echo;
    out.push(
      pad(
        [
          r.image,
          r.baudRate,
          r.via,
          p.prepare.wallMs.toFixed(0),
          p.prepare.cpuMs.toFixed(0),
          r.blockCount,
          s(p.blocks.wallMs),
          s(p.blocks.wireMs),
          r.blockOverheadMs.mean.toFixed(2),
          r.blockOverheadMs.p50.toFixed(1),
          r.blockOverheadMs.max.toFixed(0),
          (p.blocks.cpuMs / r.blockCount).toFixed(2),
          p.verify.wallMs.toFixed(0),
          p.resetClose.wallMs.toFixed(0),
          e ? ((e.wallMs - e.wireMs) / e.roundTrips).toFixed(2) : '-',
        ],
        w2,
      ),
    );
  }
  out.push(...viaTable(rows));
  return out.join('\n');
}

/** A case's flash wall time over the same case's direct one (undefined: not run directly). */
function overDirect(
  rows: (Row | FailedRow)[],
  row: Pick<Row, 'image' | 'baudRate' | 'flash'>,
): number | undefined {
  const direct = rows.find(
    (r): r is Row =>
      r.error === undefined &&
      r.via === 'direct' &&
      r.image === row.image &&
      r.baudRate === row.baudRate,
  );
  return direct === undefined ? undefined : row.flash.wallMs / direct.flash.wallMs;
}

/** Each case that ran both ways, side by side: wall against wire, and rfc2217 wall / direct wall. */
function viaTable(rows: (Row | FailedRow)[]): string[] {
  const ok = rows.filter((r): r is Row => r.error === undefined);
  const pairs = ok.flatMap((direct) => {
    if (direct.via !== 'direct') return [];
    const remote = ok.find(
      (r) => r.via === 'rfc2217' && r.image === direct.image && r.baudRate === direct.baudRate,
    );
    return remote === undefined ? [] : [{ direct, remote }];
  });
  if (pairs.length === 0) return [];
  const head = [
    'image',
    'baud',
    'direct s',
    'wire s',
    'wall/wire',
    'rfc2217 s',
    'wire s',
    'wall/wire',
    'rfc2217/direct',
    'connect s (direct, rfc2217)',
    'resets',
  ];
  const w = [14, 7, 8, 7, 9, 9, 7, 9, 14, 27, 6];
  const out = [
    '',
    'through RFC 2217 (our client and server on 127.0.0.1) against direct',
    pad(head, w, 2),
  ];
  for (const { direct: d, remote: r } of pairs) {
    out.push(
      pad(
        [
          d.image,
          d.baudRate,
          s(d.flash.wallMs),
          s(d.flash.wireMs),
          ratio(d.flash.wallMs / d.flash.wireMs),
          s(r.flash.wallMs),
          s(r.flash.wireMs),
          ratio(r.flash.wallMs / r.flash.wireMs),
          ratio(r.flash.wallMs / d.flash.wallMs),
          `${s(d.connect.wallMs)}, ${s(r.connect.wallMs)}`,
          `${d.connectResets}, ${r.connectResets}`,
        ],
        w,
        2,
      ),
    );
  }
  return out;
}

function verdict(rows: (Row | FailedRow)[]): string {
  const realistic = rows.filter((r): r is Row => r.realistic && !r.error);
  if (realistic.length === 0) return 'verdict: no realistic case (merged-app, app-1m) was run';
  const worst = realistic.reduce((a, b) =>
    a.flash.wallMs / a.flash.wireMs >= b.flash.wallMs / b.flash.wireMs ? a : b,
  );
  const worstRatio = worst.flash.wallMs / worst.flash.wireMs;
  const misses = realistic.filter((r) => r.flash.wallMs / r.flash.wireMs > TARGET);
  const failed = rows.filter((r) => r.error).length;
  const name = (r: Row) => `${r.image}@${r.baudRate}${r.via === 'direct' ? '' : ` via ${r.via}`}`;
  return `verdict: realistic cases (${realistic.length}): flash wall/wire ${ratio(Math.min(...realistic.map((r) => r.flash.wallMs / r.flash.wireMs)))} to ${ratio(worstRatio)} (worst ${name(worst)}) — ${misses.length === 0 ? 'within' : `MISSES (${misses.map(name).join(', ')})`} the ${TARGET}× target${failed > 0 ? `; ${failed} case(s) FAILED` : ''}`;
}

// --- main -----------------------------------------------------------------------------------------
const log = (text: string) => process.stderr.write(`${text}\n`);
const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error));
const stackOf = (error: unknown) =>
  error instanceof Error ? (error.stack ?? error.message) : String(error);

async function main() {
  const options = parseOptions(process.argv.slice(2));
  const rows: (Row | FailedRow)[] = [];
  const started = performance.now();
  const header = `xiaozhi-mcp flash benchmark — esptool-js ${esptoolVersion()} → Flasher → NodeWebSerialPort → ${options.via.includes('rfc2217') ? '(rfc2217: RFC 2217 client → 127.0.0.1 → RFC 2217 server →) ' : ''}virtual binding (throttled, 10 bits/byte) → ROM/stub emulator (node ${process.version}, ${os.availableParallelism()} cpus)`;
  const finish = (code: number, reason?: string) => {
    console.log(`${header}\n${tables(rows)}\n${verdict(rows)}${reason ? `\n${reason}` : ''}`);
    const result = {
      at: new Date().toISOString(),
      node: process.version,
      cpus: os.availableParallelism(),
      options,
      target: TARGET,
      elapsedMs: performance.now() - started,
      rows: rows.map((row) => {
        if (row.error !== undefined) return { ...row, ratios: undefined };
        const { writes: _writes, ...r } = row;
        return {
          ...r,
          ratios: {
            wallOverWire: r.flash.wallMs / r.flash.wireMs,
            echoOverWire: r.echo ? r.echo.wallMs / r.echo.wireMs : undefined,
            flashOverEcho: r.echo ? r.flash.wallMs / r.echo.wallMs : undefined,
            overDirect: overDirect(rows, r),
          },
        };
      }),
      verdict: verdict(rows),
      incomplete: reason,
    };
    writeFileSync(options.json, `${JSON.stringify(result, null, 2)}\n`);
    log(`figures written to ${options.json}`);
    process.exit(code);
  };
  const global = setTimeout(
    () => finish(3, `stopped: the run took longer than --timeout ${options.timeout} s`),
    options.timeout * 1000,
  );
  global.unref();
  process.on('SIGINT', () => finish(130, 'interrupted'));

  const images = buildImages(options);
  if (options.warmup) {
    // JIT-compile esptool-js, pako, the emulator (and the RFC 2217 path) once, untimed.
    for (const via of options.via) {
      log(`warm-up: 64 KiB at 921600 baud, ${via} (untimed)`);
      await flashCase(
        {
          name: 'warmup',
          realistic: false,
          offset: 0x20000,
          data: (images.at(-1) as Image).data.subarray(0, 64 * 1024),
        },
        921_600,
        via,
      ).catch((error) => log(`warm-up failed: ${messageOf(error)}`));
    }
  }
  for (const image of images) {
    log(`${image.name}: ${image.description}`);
    // For the progress line only: about what esptool will send (it deflates at level 9).
    const compressed = deflateSync(image.data, { level: 1 }).length;
    for (const baudRate of options.bauds) {
      for (const via of options.via) {
        const expected = (compressed * 10) / baudRate;
        log(
          `  ${baudRate} baud, ${via} (about ${expected.toFixed(1)} s of wire, twice that with the baseline)…`,
        );
        try {
          const row = await flashCase(image, baudRate, via);
          log(
            `    flash ${s(row.flash.wallMs)} s, wire ${s(row.flash.wireMs)} s (${ratio(row.flash.wallMs / row.flash.wireMs)}), md5 ${row.md5Ok ? 'ok' : 'BAD'}, ${row.connectResets} reset(s) to connect`,
          );
          if (options.baseline) {
            row.echo = await echoBaseline(row.writes, via);
            log(
              `    echo baseline ${s(row.echo.wallMs)} s, wire ${s(row.echo.wireMs)} s (${ratio(row.echo.wallMs / row.echo.wireMs)})`,
            );
          }
          rows.push(row);
        } catch (error) {
          log(`    FAILED: ${stackOf(error)}`);
          rows.push({
            image: image.name,
            realistic: image.realistic,
            baudRate,
            via,
            error: messageOf(error),
          });
        }
      }
    }
  }
  clearTimeout(global);
  finish(0);
}

/** The esptool-js the serial package (the Flasher's) resolves (it has no exports map, so package.json resolves). */
function esptoolVersion(): string {
  try {
    const require = createRequire(import.meta.url);
    const serial = require.resolve('@xiaozhi-mcp/serial');
    const path = createRequire(serial).resolve('esptool-js/package.json');
    return JSON.parse(readFileSync(path, 'utf8')).version;
  } catch {
    return '?';
  }
}

try {
  await main();
} catch (error) {
  log(stackOf(error));
  process.exit(1);
}
