/**
 * Benchmark of `@xiaozhi-mcp/bridge`: `tools/call` through the bridge, by the official SDK
 * `Client` over stdio and over Streamable HTTP, against the same call through the server's API
 * (`POST /api/devices/:id/call`), in the same run, at each concurrency. The server and its
 * virtual board run in one child process (bench/rig.ts), each bridge in another
 * (bench/bridge-process.ts), the clients here. Prints a table and the ratios; asserts nothing.
 *
 *   npm run bench -- [--calls 2000] [--rounds 3] [--concurrency 1,16] [--warmup 200] [--preset NAME]
 *
 * Every round runs every path at every concurrency, interleaved, so that a busy machine slows
 * them alike; each figure is the median of its rounds.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { percentile } from '@xiaozhi-mcp/protocol';

const here = dirname(fileURLToPath(import.meta.url));
/** The board's tool every path calls, with `{volume}` varying per call. */
const TOOL = 'self.audio_speaker.set_volume';

interface Options {
  calls: number;
  rounds: number;
  concurrency: number[];
  warmup: number;
  preset: string;
}

function positive(name: string, text: string | undefined): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`${name} must be a positive integer`);
  return n;
}

function parseOptions(argv: readonly string[]): Options {
  const options: Options = {
    calls: 2000,
    rounds: 3,
    concurrency: [1, 16],
    warmup: 200,
    preset: 'bread-compact-wifi',
  };
  for (let i = 0; i < argv.length; i += 2) {
    const [name, value] = [argv[i], argv[i + 1]];
    if (name === '--calls') options.calls = positive(name, value);
    else if (name === '--rounds') options.rounds = positive(name, value);
    else if (name === '--warmup') options.warmup = Number(value) >= 0 ? Number(value) : 0;
    else if (name === '--preset' && value !== undefined) options.preset = value;
    else if (name === '--concurrency')
      options.concurrency = (value ?? '').split(',').map((c) => positive(name, c));
    else throw new Error(`unknown option ${name}`);
  }
  return options;
}

interface Rig {
  readonly base: string;
  readonly token: string;
  readonly deviceId: string;
}

/** A child process whose first stdout line is what it has to say. */
async function firstLine(child: ChildProcess, what: string): Promise<string> {
  if (child.stdout === null) throw new Error(`${what}: no stdout`);
  const lines = createInterface({ input: child.stdout });
  const exited = once(child, 'exit').then(([code]) => {
    throw new Error(`${what} exited with ${code} before it was ready`);
  });
  const line = once(lines, 'line').then(([text]) => text as string);
  const result = await Promise.race([line, exited]);
  lines.close();
  return result;
}

function node(script: string, args: string[], env: NodeJS.ProcessEnv = {}): ChildProcess {
  return spawn(process.execPath, [join(here, script), ...args], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, ...env },
  });
}

/** What each path does for call `i`: resolves once the result is in, rejects on an error. */
type Call = (i: number) => Promise<void>;

interface Summary {
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly callsPerSecond: number;
  readonly errors: number;
}

/** `n` calls, `c` in flight at a time; each call's latency, and the calls per second of wall time. */
async function load(n: number, c: number, call: Call): Promise<Summary> {
  const latencies: number[] = new Array(n);
  let next = 0;
  let errors = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      for (;;) {
        const i = next++;
        if (i >= n) return;
        const begin = performance.now();
        try {
          await call(i);
        } catch {
          errors++;
        }
        latencies[i] = performance.now() - begin;
      }
    }),
  );
  const wall = performance.now() - start;
  const sorted = latencies.sort((a, b) => a - b);
  return {
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
    callsPerSecond: (n / wall) * 1000,
    errors,
  };
}

function apiCall(rig: Rig): Call {
  const url = `${rig.base}/api/devices/${encodeURIComponent(rig.deviceId)}/call`;
  const headers = { authorization: `Bearer ${rig.token}`, 'content-type': 'application/json' };
  return async (i) => {
    const response = await fetch(url, {
      method: 'POST',
      headers,
      body: JSON.stringify({ name: TOOL, arguments: { volume: i % 101 } }),
    });
    const body = (await response.json()) as { result?: { isError?: boolean } };
    if (!response.ok || body.result?.isError !== false)
      throw new Error(`API ${response.status}: ${JSON.stringify(body)}`);
  };
}

/** The bridge's name for the tool: the one whose title is the board's own name. */
async function bridgeCall(client: Client): Promise<Call> {
  const { tools } = await client.listTools();
  const name = tools.find((tool) => tool.title === TOOL)?.name;
  if (name === undefined) throw new Error(`the bridge serves no ${TOOL}`);
  return async (i) => {
    const result = await client.callTool({ name, arguments: { volume: i % 101 } });
    if (result.isError !== false) throw new Error(`isError: ${JSON.stringify(result.content)}`);
  };
}

function fmt(value: number): string {
  return value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2);
}

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2));
  const cpus = os.cpus().length;
  process.stderr.write(
    `bridge bench: ${options.calls} calls of ${TOOL} per path, concurrency ${options.concurrency.join(', ')} and round (${options.rounds} rounds, warmup ${options.warmup}), ${options.preset}, ${cpus} cores, node ${process.version}\n`,
  );

  const rigProcess = node('rig.js', [options.preset]);
  const rig = JSON.parse(await firstLine(rigProcess, 'the rig')) as Rig;
  const env = { XIAOZHI_TOKEN: rig.token };

  const stdioClient = new Client({ name: 'bench-stdio', version: '1.0.0' });
  await stdioClient.connect(
    new StdioClientTransport({
      command: process.execPath,
      args: [join(here, 'bridge-process.js'), rig.base],
      env: { ...(process.env as Record<string, string>), ...env },
      stderr: 'ignore',
    }),
  );
  const httpProcess = node('bridge-process.js', [rig.base, '--http'], env);
  const url = await firstLine(httpProcess, 'the HTTP bridge');
  const httpClient = new Client({ name: 'bench-http', version: '1.0.0' });
  await httpClient.connect(new StreamableHTTPClientTransport(new URL(url)));

  const paths: [string, Call][] = [
    ['API (POST /api/devices/:id/call)', apiCall(rig)],
    ['bridge, SDK Client over stdio', await bridgeCall(stdioClient)],
    ['bridge, SDK Client over Streamable HTTP', await bridgeCall(httpClient)],
  ];
  const runs = new Map<string, Summary[]>();
  for (let round = 1; round <= options.rounds; round++) {
    for (const c of options.concurrency) {
      for (const [label, call] of paths) {
        await load(options.warmup, c, call);
        const key = `${label}|${c}`;
        runs.set(key, [...(runs.get(key) ?? []), await load(options.calls, c, call)]);
      }
    }
    process.stderr.write(`  round ${round} of ${options.rounds} done\n`);
  }
  const median = (key: string, pick: (s: Summary) => number) => {
    const values = (runs.get(key) ?? []).map(pick).sort((a, b) => a - b);
    return percentile(values, 0.5);
  };
  const rows: string[] = [];
  for (const c of options.concurrency) {
    const apiKey = `${paths[0]?.[0]}|${c}`;
    for (const [label] of paths) {
      const key = `${label}|${c}`;
      const p50 = median(key, (s) => s.p50Ms);
      const perSecond = median(key, (s) => s.callsPerSecond);
      const errors = (runs.get(key) ?? []).reduce((sum, s) => sum + s.errors, 0);
      const vs = (x: number, y: number) => (key === apiKey ? '1' : `${(x / y).toFixed(2)}x`);
      rows.push(
        `| ${label} | ${c} | ${fmt(p50)} | ${fmt(median(key, (s) => s.p99Ms))} | ${perSecond.toFixed(0)} | ${vs(
          p50,
          median(apiKey, (s) => s.p50Ms),
        )} | ${vs(
          perSecond,
          median(apiKey, (s) => s.callsPerSecond),
        )} | ${errors} |`,
      );
    }
  }
  process.stdout.write(
    [
      `tools/call ${TOOL}, ${options.calls} calls per row and round (after ${options.warmup} untimed), median of ${options.rounds} rounds, ${cpus} cores, node ${process.version}, ${new Date().toISOString().slice(0, 10)}`,
      '',
      '| path | concurrency | p50 (ms) | p99 (ms) | calls/s | p50 vs API | calls/s vs API | errors |',
      '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ...rows,
      '',
    ].join('\n'),
  );

  await stdioClient.close();
  await httpClient.close();
  httpProcess.stdin?.end();
  rigProcess.stdin?.end();
  await Promise.all([once(httpProcess, 'exit'), once(rigProcess, 'exit')]);
}

await main();
