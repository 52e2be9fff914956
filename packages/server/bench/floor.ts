// The floor under the connect storm: what a board's bring-up traffic costs on this machine with
// no logic on either side, beside the one-frame echo that the main benchmark's storm ratio uses.
//
//   npm run bench:floor -- [--devices N] [--rounds R] [--sim-processes K]
//   node bench/dist/floor.js [options]        (once compiled)
//
// Two kinds of phase, interleaved (echo, floor, echo, floor, ...), each with a fresh server
// process and K fresh client processes, clients opened `batch` at a time as in run.ts:
//   echo   the main benchmark's baseline: a `ws` connect and one hello-sized frame echoed;
//   floor  the exchanges a real board makes, with the bytes' sizes of a recorded bread-compact-wifi
//          bring-up and no logic: an HTTP POST of the OTA body (the firmware's header set, the
//          connection closed after the reply), the reply; a WebSocket upgrade with the firmware's
//          headers; hello and server hello; then initialize and the two tools/list walks, each a
//          server frame answered with a frame of the board's reply size.
// A storm ends when the server has seen every client's last frame. Each phase reports its wall
// time and the CPU time per device of the server process and of the clients together. On cores
// the two sides share, the storm lasts about their CPU time over the cores: the floor's ratio to
// the echo is the least any server, and any simulator speaking the firmware's protocol, can show.
// It asserts nothing and exits 0 when done (2 on a bad option, 1 on another error).
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { availableParallelism } from 'node:os';
import { fileURLToPath } from 'node:url';
import { buildDeviceHello } from '@xiaozhi-mcp/protocol';
import WebSocket, { WebSocketServer } from 'ws';
import { median } from './figures.js';

type Kind = 'echo' | 'floor';

/**
 * Sizes in bytes of bread-compact-wifi 2.4.2's bring-up against XiaozhiServer, recorded through a
 * TCP relay (OTA exchange) and the session's frame events (WebSocket texts, session id included).
 */
const RECORDED = {
  otaBody: 1103,
  otaReply: 196,
  serverHello: 237,
  /** [server request, board reply]: initialize, tools/list, tools/list with user tools. */
  exchanges: [
    [237, 232],
    [135, 1829],
    [155, 3779],
  ],
} as const;

/** A JSON-looking text of `bytes` bytes (the content does not matter to either side). */
const sized = (bytes: number) => `{"x":"${'x'.repeat(Math.max(0, bytes - 8))}"}`;
const HELLO = JSON.stringify(buildDeviceHello({ transport: 'websocket', version: 1 }));
const OTA_BODY = sized(RECORDED.otaBody);
const OTA_REPLY = sized(RECORDED.otaReply);
const SERVER_HELLO = sized(RECORDED.serverHello);
const REQUESTS = RECORDED.exchanges.map(([request]) => sized(request));
const REPLIES = RECORDED.exchanges.map(([, reply]) => sized(reply));
const cpuNow = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};
const wallNow = () => performance.timeOrigin + performance.now();

// --- server process -----------------------------------------------------------------------------
function serve(kind: Kind, n: number) {
  let done = 0;
  let cpuAtStart = 0;
  const finished = () => {
    if (++done === n) process.send?.({ doneAt: wallNow(), cpuUs: cpuNow() - cpuAtStart });
  };
  const http = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'Content-Type': 'application/json', Connection: 'close' });
      res.end(OTA_REPLY);
    });
  });
  const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false });
  http.on('upgrade', (req, socket, head) =>
    wss.handleUpgrade(req, socket, head, (ws) => {
      ws.on('error', () => {});
      if (kind === 'echo') {
        ws.once('message', (data) => {
          ws.send(data);
          finished();
        });
        return;
      }
      let step = -1;
      ws.on('message', () => {
        if (step === -1) ws.send(SERVER_HELLO);
        step++;
        if (step < REQUESTS.length) ws.send(REQUESTS[step] as string);
        else if (step === REQUESTS.length) finished();
      });
    }),
  );
  http.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, () => {
    process.send?.({ port: (http.address() as AddressInfo).port });
  });
  process.on('message', (m: { cmd: string }) => {
    if (m.cmd === 'start') cpuAtStart = cpuNow();
  });
}

// --- client process -----------------------------------------------------------------------------
function clients(kind: Kind, n: number, port: number, batch: number) {
  const sockets: WebSocket[] = [];
  let ready = 0;
  const openSocket = (onReady: () => void) => {
    const ws = new WebSocket(`ws://127.0.0.1:${port}/xiaozhi/v1/`, {
      perMessageDeflate: false,
      headers: {
        Authorization: `Bearer ${'t'.repeat(43)}`,
        'Protocol-Version': '1',
        'Device-Id': 'f4:12:fa:00:00:01',
        'Client-Id': crypto.randomUUID(),
      },
    });
    sockets.push(ws);
    ws.on('error', () => {});
    ws.on('open', () => ws.send(HELLO));
    let step = -1;
    ws.on('message', () => {
      if (kind === 'echo' || step === REPLIES.length - 1) {
        if (kind === 'floor') ws.send(REPLIES[step] as string);
        onReady();
        return;
      }
      if (step >= 0) ws.send(REPLIES[step] as string);
      step++;
    });
  };
  const board = () => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/xiaozhi/ota/',
        agent: false,
        headers: {
          'Activation-Version': '1',
          'Device-Id': 'f4:12:fa:00:00:01',
          'Client-Id': crypto.randomUUID(),
          'User-Agent': 'bread-compact-wifi/2.4.2',
          'Accept-Language': 'zh-CN',
          'Content-Type': 'application/json',
          Connection: 'close',
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => openSocket(() => ready++));
      },
    );
    req.on('error', () => {});
    req.end(OTA_BODY);
  };
  process.on('message', async (m: { cmd: string }) => {
    if (m.cmd === 'stop') {
      for (const ws of sockets) ws.terminate();
      process.exit(0);
    }
    const cpu0 = cpuNow();
    for (let i = 0; i < n; i += batch) {
      for (let j = i; j < Math.min(n, i + batch); j++) {
        if (kind === 'echo') openSocket(() => ready++);
        else board();
      }
      await new Promise((r) => setTimeout(r, 0));
    }
    const poll = setInterval(() => {
      if (ready < n) return;
      clearInterval(poll);
      process.send?.({ cpuUs: cpuNow() - cpu0 });
    }, 20);
  });
  process.send?.({ loaded: true });
}

// --- conductor ----------------------------------------------------------------------------------
interface Options {
  devices: number;
  rounds: number;
  simProcesses: number;
  batch: number;
}

function parseOptions(argv: string[]): Options {
  const options: Options = {
    devices: 10_000,
    rounds: 3,
    simProcesses: availableParallelism(),
    batch: 10,
  };
  const names: Record<string, keyof Options> = {
    '--devices': 'devices',
    '--rounds': 'rounds',
    '--sim-processes': 'simProcesses',
    '--sim-batch': 'batch',
  };
  for (let i = 0; i < argv.length; i += 2) {
    const key = names[argv[i] as string];
    const value = Number(argv[i + 1]);
    if (key === undefined || !Number.isInteger(value) || value < 1)
      throw new Error(
        `unknown option or bad value: ${argv[i]} ${argv[i + 1] ?? ''} (options: ${Object.keys(names).join(', ')}, each a positive integer)`,
      );
    options[key] = value;
  }
  return options;
}

const SELF = fileURLToPath(import.meta.url);
const message = <T>(child: ChildProcess) => once(child, 'message').then(([m]) => m as T);

interface Phase {
  stormMs: number;
  serverUs: number;
  clientsUs: number;
}

async function phase(kind: Kind, options: Options): Promise<Phase> {
  const { devices: n, simProcesses: k } = options;
  const server = fork(SELF, ['--serve', kind, String(n)]);
  const { port } = await message<{ port: number }>(server);
  const sims = Array.from({ length: k }, (_, i) => {
    const share = Math.floor(n / k) + (i < n % k ? 1 : 0);
    // The main benchmark's simulators run with the same young generation.
    return fork(SELF, ['--clients', kind, String(share), String(port), String(options.batch)], {
      execArgv: ['--max-semi-space-size=64'],
    });
  });
  await Promise.all(sims.map((s) => message(s)));
  const serverDone = message<{ doneAt: number; cpuUs: number }>(server);
  const simsDone = Promise.all(sims.map((s) => message<{ cpuUs: number }>(s)));
  server.send({ cmd: 'start' });
  const startedAt = wallNow();
  for (const s of sims) s.send({ cmd: 'go' });
  const done = await serverDone;
  const simCpu = await simsDone;
  for (const s of sims) s.send({ cmd: 'stop' });
  server.kill();
  await Promise.all([...sims, server].map((c) => (c.exitCode === null ? once(c, 'exit') : 0)));
  return {
    stormMs: done.doneAt - startedAt,
    serverUs: done.cpuUs / n,
    clientsUs: simCpu.reduce((sum, m) => sum + m.cpuUs, 0) / n,
  };
}

async function main() {
  let options: Options;
  try {
    options = parseOptions(process.argv.slice(2));
  } catch (error) {
    console.error(error instanceof Error ? error.message : String(error));
    process.exit(2);
  }
  const phases: Record<Kind, Phase[]> = { echo: [], floor: [] };
  console.log(
    `storm floor — ${options.devices} devices, ${options.rounds} rounds, ${options.simProcesses} client processes (node ${process.version})`,
  );
  for (let round = 1; round <= options.rounds; round++) {
    for (const kind of ['echo', 'floor'] as const) {
      const p = await phase(kind, options);
      phases[kind].push(p);
      console.log(
        `[${kind} r${round}] storm ${(p.stormMs / 1000).toFixed(2)} s · server ${p.serverUs.toFixed(0)} µs/device · clients ${p.clientsUs.toFixed(0)} µs/device`,
      );
    }
  }
  const m = (kind: Kind, key: keyof Phase) => median(phases[kind].map((p) => p[key]));
  const row = (name: string, key: keyof Phase, scale = 1, digits = 0) =>
    `${name.padEnd(34)}${(m('floor', key) / scale).toFixed(digits).padStart(10)}${(m('echo', key) / scale).toFixed(digits).padStart(10)}${`${(m('floor', key) / m('echo', key)).toFixed(2)}×`.padStart(9)}`;
  console.log(
    `${'median of rounds'.padEnd(34)}${'floor'.padStart(10)}${'echo'.padStart(10)}${'ratio'.padStart(9)}`,
  );
  console.log(row('connect storm (s)', 'stormMs', 1000, 2));
  console.log(row('server CPU per device (µs)', 'serverUs'));
  console.log(row('client CPU per device (µs)', 'clientsUs'));
  const total = (kind: Kind) => m(kind, 'serverUs') + m(kind, 'clientsUs');
  console.log(
    `both sides per device: floor ${total('floor').toFixed(0)} µs, echo ${total('echo').toFixed(0)} µs (${(total('floor') / total('echo')).toFixed(2)}×): no server and no board speaking the firmware's bring-up can make a storm on cores they share shorter than about that ratio times the echo's`,
  );
}

const [role, kind, a, b, c] = process.argv.slice(2);
if (role === '--serve') serve(kind as Kind, Number(a));
else if (role === '--clients') clients(kind as Kind, Number(a), Number(b), Number(c));
else
  main().catch((error) => {
    console.error(error instanceof Error ? error.message : String(error));
    process.exit(1);
  });
