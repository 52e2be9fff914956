// Churn benchmark of @xiaozhi-mcp/server's memory: does the server's heap stay
// bounded when devices come and go?
//
//   npm run bench:churn -- [--sessions N] [--devices N] [--max-devices N] [--concurrency C]
//   node --expose-gc bench/dist/churn.js [options]     (once compiled; re-runs itself with --expose-gc)
//
// (a) one device opens N sessions one after the other, listing a different tool list each time;
// (b) N one-off devices each do an OTA check and open one session, with `maxDevices` set low.
// Each prints the server's heap after GC and its RSS before and after. Expected: (a) flat within
// 2 MB; (b) bounded by the eviction limit (the heap at the end is the heap once the registry is
// full, not N devices' worth). The devices are minimal `ws` clients speaking the protocol in this
// process (hello, `initialize`, both `tools/list` walks), so that N sessions take seconds; the
// server closes each session, as a board's reboot would look to it. It asserts nothing and exits
// 0 when done (1 on an error).
import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { getHeapSpaceStatistics } from 'node:v8';
import { XiaozhiServer } from '@xiaozhi-mcp/server';
import WebSocket from 'ws';

const HERE = dirname(fileURLToPath(import.meta.url));

interface Options {
  sessions: number;
  devices: number;
  maxDevices: number;
  concurrency: number;
  json: string;
}

function parseOptions(argv: string[]): Options {
  const options: Options = {
    sessions: 10_000,
    devices: 10_000,
    maxDevices: 1000,
    concurrency: 16,
    // Beside the compiled script: bench/dist/ is git-ignored.
    json: resolve(HERE, 'last-churn.json'),
  };
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i] ?? '';
    const value = argv[++i];
    if (value === undefined) throw new Error(`${name} needs a value`);
    if (name === '--json') {
      options.json = resolve(value);
      continue;
    }
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer`);
    if (name === '--sessions') options.sessions = n;
    else if (name === '--devices') options.devices = n;
    else if (name === '--max-devices') options.maxDevices = n;
    else if (name === '--concurrency') options.concurrency = n;
    else throw new Error(`unknown option ${name}`);
  }
  return options;
}

const HELLO =
  '{"type":"hello","version":1,"features":{"mcp":true},"transport":"websocket","audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}';

interface Sample {
  heapUsed: number;
  /** V8's old space: the data the server keeps (heapUsed also counts JIT code, which grows as V8 optimises). */
  oldSpace: number;
  rss: number;
}

async function sample(): Promise<Sample> {
  for (let i = 0; i < 4; i++) {
    globalThis.gc?.();
    await sleep(20);
  }
  const { heapUsed, rss } = process.memoryUsage();
  const oldSpace =
    getHeapSpaceStatistics().find((space) => space.space_name === 'old_space')?.space_used_size ??
    0;
  return { heapUsed, oldSpace, rss };
}

const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(2)} MB`;
const signedMb = (bytes: number) => `${bytes >= 0 ? '+' : ''}${mb(bytes)}`;

function mac(i: number): string {
  const hex = i.toString(16).padStart(6, '0');
  return `f4:12:fa:${hex.slice(0, 2)}:${hex.slice(2, 4)}:${hex.slice(4, 6)}`;
}

function uuid(i: number): string {
  return `6c1f8f0e-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;
}

/** A tool list of about a real board's size, one tool's name and description changed by `n`. */
function toolsFor(n: number): Record<string, unknown>[] {
  const schema = {
    type: 'object',
    properties: { value: { type: 'integer', minimum: 0, maximum: 100 } },
    required: ['value'],
  };
  return [
    { name: 'self.get_device_status', description: 'Device status as JSON.', inputSchema: {} },
    { name: 'self.audio_speaker.set_volume', description: 'Set the volume.', inputSchema: schema },
    { name: 'self.screen.set_brightness', description: 'Set the brightness.', inputSchema: schema },
    { name: `self.bench.tool_${n}`, description: `Tool of session ${n}.`, inputSchema: schema },
  ];
}

/** The body of a 2.4.x board's OTA check (docs/protocol.md §7). */
function systemInfo(deviceId: string, clientId: string): string {
  return JSON.stringify({
    version: 2,
    language: 'zh-CN',
    flash_size: 16777216,
    minimum_free_heap_size: '123456',
    mac_address: deviceId,
    uuid: clientId,
    chip_model_name: 'esp32s3',
    chip_info: { model: 9, cores: 2, revision: 2, features: 18 },
    application: {
      name: 'xiaozhi',
      version: '2.4.2',
      compile_time: 'Jan  1 2026T00:00:00Z',
      idf_version: 'v5.4.1',
      elf_sha256: 'a'.repeat(64),
    },
    partition_table: [
      { label: 'nvs', type: 1, subtype: 2, address: 36864, size: 16384 },
      { label: 'otadata', type: 1, subtype: 0, address: 53248, size: 8192 },
      { label: 'ota_0', type: 0, subtype: 16, address: 131072, size: 6291456 },
      { label: 'ota_1', type: 0, subtype: 17, address: 6422528, size: 6291456 },
    ],
    ota: { label: 'ota_0' },
    display: { monochrome: false, width: 240, height: 240 },
    board: { type: 'bread-compact-wifi', name: 'bread-compact-wifi', ssid: 'lab', ip: '10.0.0.2' },
  });
}

async function otaCheck(
  server: XiaozhiServer,
  deviceId: string,
  clientId: string,
): Promise<string> {
  const response = await fetch(server.urls.ota, {
    method: 'POST',
    headers: {
      'Device-Id': deviceId,
      'Client-Id': clientId,
      'User-Agent': 'bread-compact-wifi/2.4.2',
      'Content-Type': 'application/json',
    },
    body: systemInfo(deviceId, clientId),
  });
  if (response.status !== 200)
    throw new Error(`OTA check: ${response.status} ${await response.text()}`);
  const reply = (await response.json()) as { websocket: { token: string } };
  return reply.websocket.token;
}

/**
 * One session of a minimal device: upgrade, hello, answers to `initialize` and `tools/list`,
 * until the registry has it ready; then the server closes it.
 */
async function deviceSession(
  server: XiaozhiServer,
  deviceId: string,
  clientId: string,
  token: string,
  tools: Record<string, unknown>[],
): Promise<void> {
  const ready = new Promise<void>((resolveReady, reject) => {
    const onReady = (record: { deviceId: string }) => {
      if (record.deviceId !== deviceId) return;
      done();
      resolveReady();
    };
    const onFailed = (record: { deviceId: string; lastError: string | undefined }) => {
      if (record.deviceId !== deviceId) return;
      done();
      reject(new Error(`session of ${deviceId} failed: ${record.lastError}`));
    };
    const done = () => {
      server.registry.off('ready', onReady);
      server.registry.off('session-failed', onFailed);
    };
    server.registry.on('ready', onReady);
    server.registry.on('session-failed', onFailed);
  });
  const ws = new WebSocket(server.urls.websocket, {
    headers: {
      Authorization: `Bearer ${token}`,
      'Protocol-Version': '1',
      'Device-Id': deviceId,
      'Client-Id': clientId,
    },
    perMessageDeflate: false,
  });
  ws.on('error', () => {});
  let sessionId = '';
  ws.on('message', (data: Buffer) => {
    const frame = JSON.parse(data.toString()) as {
      type: string;
      session_id?: string;
      payload?: { id: number; method: string };
    };
    if (frame.type === 'hello') {
      sessionId = frame.session_id ?? '';
      return;
    }
    if (frame.type !== 'mcp' || frame.payload === undefined) return;
    const { id, method } = frame.payload;
    const result =
      method === 'initialize'
        ? {
            protocolVersion: '2024-11-05',
            capabilities: { tools: {} },
            serverInfo: { name: 'bread-compact-wifi', version: '2.4.2' },
          }
        : { tools };
    ws.send(
      `{"session_id":"${sessionId}","type":"mcp","payload":${JSON.stringify({ jsonrpc: '2.0', id, result })}}`,
    );
  });
  await once(ws, 'open');
  ws.send(HELLO);
  await ready;
  const closed = once(ws, 'close');
  // Closed by the server: its side keeps the TIME_WAIT, not this process's ephemeral ports.
  server.registry.get(deviceId)?.session?.close('bench: next session');
  await closed;
}

async function inParallel(count: number, concurrency: number, run: (i: number) => Promise<void>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, count) }, async () => {
      for (let i = next++; i < count; i = next++) await run(i);
    }),
  );
}

async function start(maxDevices: number): Promise<XiaozhiServer> {
  const server = await XiaozhiServer.start({
    port: 0,
    logLevel: 'silent',
    auth: 'token',
    pingIntervalMs: 0,
    maxDevices,
  });
  // One 'ready' waiter per session in flight (--concurrency of them).
  server.registry.setMaxListeners(0);
  return server;
}

interface Row {
  label: string;
  at: number;
  devices: number;
  toolLists: number;
  memory: Sample;
}

function printRows(title: string, rows: Row[]): void {
  const first = rows[0];
  console.log(`\n${title}`);
  console.log(
    `${'point'.padEnd(28)}${'devices'.padStart(8)}${'tool lists'.padStart(11)}${'heap after gc'.padStart(15)}${'Δ heap'.padStart(11)}${'Δ old space'.padStart(13)}${'rss'.padStart(12)}`,
  );
  for (const row of rows) {
    console.log(
      `${row.label.padEnd(28)}${String(row.devices).padStart(8)}${String(row.toolLists).padStart(11)}${mb(row.memory.heapUsed).padStart(15)}${signedMb(row.memory.heapUsed - (first?.memory.heapUsed ?? 0)).padStart(11)}${signedMb(row.memory.oldSpace - (first?.memory.oldSpace ?? 0)).padStart(13)}${mb(row.memory.rss).padStart(12)}`,
    );
  }
}

async function row(server: XiaozhiServer, label: string, at: number): Promise<Row> {
  const memory = await sample();
  return {
    label,
    at,
    devices: server.registry.size,
    toolLists: server.registry.toolListCount,
    memory,
  };
}

/** (a) One device, N sessions, a new tool list each time. */
async function sameDevice(options: Options) {
  const server = await start(options.maxDevices);
  try {
    const deviceId = mac(1);
    const clientId = uuid(1);
    const token = await otaCheck(server, deviceId, clientId);
    const warmup = Math.min(500, Math.floor(options.sessions / 10));
    for (let i = 0; i < warmup; i++)
      await deviceSession(server, deviceId, clientId, token, toolsFor(-1 - i));
    const rows = [await row(server, `before (after ${warmup} warm-up)`, 0)];
    const started = performance.now();
    const checkpoints = new Set([Math.floor(options.sessions / 2), options.sessions]);
    for (let i = 1; i <= options.sessions; i++) {
      await deviceSession(server, deviceId, clientId, token, toolsFor(i));
      if (checkpoints.has(i)) rows.push(await row(server, `after ${i} sessions`, i));
    }
    const seconds = (performance.now() - started) / 1000;
    printRows(
      `(a) one device, ${options.sessions} sessions, a new tool list each time (${seconds.toFixed(1)} s, ${(options.sessions / seconds).toFixed(0)} sessions/s)`,
      rows,
    );
    const growth = (rows.at(-1)?.memory.heapUsed ?? 0) - (rows[0]?.memory.heapUsed ?? 0);
    const oldGrowth = (rows.at(-1)?.memory.oldSpace ?? 0) - (rows[0]?.memory.oldSpace ?? 0);
    console.log(
      `heap growth: ${signedMb(growth)} over ${options.sessions} sessions (${(growth / options.sessions).toFixed(0)} B/session; old space ${signedMb(oldGrowth)}); expected: flat within 2 MB — ${Math.abs(growth) <= 2 * 1024 * 1024 ? 'holds' : 'DOES NOT HOLD'}`,
    );
    return { rows, seconds, growth, oldGrowth };
  } finally {
    await server.stop();
  }
}

/** (b) N one-off devices (OTA check + one session each), maxDevices low. */
async function oneOffDevices(options: Options) {
  const server = await start(options.maxDevices);
  try {
    const rows = [await row(server, 'before', 0)];
    const started = performance.now();
    const points = [options.maxDevices, options.devices / 2, options.devices]
      .map(Math.floor)
      .filter((n, i, all) => n > 0 && n <= options.devices && all.indexOf(n) === i)
      .sort((a, b) => a - b);
    let done = 0;
    for (const point of points) {
      await inParallel(point - done, options.concurrency, async (k) => {
        const i = done + k + 2;
        const deviceId = mac(i);
        const clientId = uuid(i);
        const token = await otaCheck(server, deviceId, clientId);
        await deviceSession(server, deviceId, clientId, token, toolsFor(i % 7));
      });
      done = point;
      rows.push(await row(server, `after ${point} devices`, point));
    }
    const seconds = (performance.now() - started) / 1000;
    printRows(
      `(b) ${options.devices} one-off devices (OTA check + one session), maxDevices ${options.maxDevices} (${seconds.toFixed(1)} s)`,
      rows,
    );
    const full = rows.find((r) => r.at === options.maxDevices) ?? rows[1];
    const last = rows.at(-1);
    const sinceFull = (last?.memory.heapUsed ?? 0) - (full?.memory.heapUsed ?? 0);
    const perDevice =
      ((full?.memory.heapUsed ?? 0) - (rows[0]?.memory.heapUsed ?? 0)) / options.maxDevices;
    console.log(
      `heap once full (${options.maxDevices} devices): ${signedMb((full?.memory.heapUsed ?? 0) - (rows[0]?.memory.heapUsed ?? 0))} (${(perDevice / 1024).toFixed(1)} KiB/device); from then to ${options.devices} devices: ${signedMb(sinceFull)}; registry ${last?.devices} devices — expected: bounded by the eviction limit — ${(last?.devices ?? 0) <= options.maxDevices && sinceFull <= Math.max(2 * 1024 * 1024, 0.25 * perDevice * options.maxDevices) ? 'holds' : 'DOES NOT HOLD'}`,
    );
    return { rows, seconds, sinceFull, perDevice };
  } finally {
    await server.stop();
  }
}

async function main() {
  if (typeof globalThis.gc !== 'function') {
    // Heap after GC needs --expose-gc: run again with it.
    const child = spawnSync(
      process.execPath,
      ['--expose-gc', fileURLToPath(import.meta.url), ...process.argv.slice(2)],
      {
        stdio: 'inherit',
      },
    );
    process.exit(child.status ?? 1);
  }
  const options = parseOptions(process.argv.slice(2));
  console.log(
    `xiaozhi-mcp server churn benchmark (node ${process.version}, pid ${process.pid}); the server and the minimal devices share this process, every figure is after GC`,
  );
  const a = await sameDevice(options);
  const b = await oneOffDevices(options);
  writeFileSync(options.json, `${JSON.stringify({ options, a, b }, null, 2)}\n`);
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? (error.stack ?? error.message) : String(error));
  process.exit(1);
});
