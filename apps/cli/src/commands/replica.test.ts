import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { VirtualBoard } from '@xiaozhi-mcp/device';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { readDeviceFrame } from '@xiaozhi-mcp/protocol';
import { type StartOptions, XiaozhiServer } from '@xiaozhi-mcp/server';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { capture, runCli, spawnCommand } from '../io.test-helper.js';
import { type SimOptions, simCommand, simMac } from './sim.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../../..');
const xiaozhiMcp = join(root, 'apps/cli/bin/xiaozhi-mcp.js');
const corpusDir = join(root, 'fixtures/corpus/mcp');
/** 40 tools with Chinese descriptions, four of them user-only: three pages each walk. */
const homeTools = join(root, 'apps/cli/fixtures/home-tools.json');

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'xiaozhi-replica-'));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Replica {
  schemaVersion: number;
  board: { variant: string; mac?: string; firmwareVersion: string };
  tools: { name: string; user_only?: boolean }[];
  pages: { plain: string[]; withUserTools: string[] };
  calls?: { tool: string; arguments: Record<string, unknown>; reply: string; delayMs: number }[];
  defaults?: Record<string, { text: string; isError?: boolean }>;
}

/** A reply payload without its id: the one thing a page may differ in from another walk's. */
const REPLY_ID = /^\{"jsonrpc":"2\.0","id":-?\d+,/;
function withoutId(payload: string): string {
  expect(payload, 'a reply payload as the firmware writes it').toMatch(REPLY_ID);
  return payload.replace(REPLY_ID, '{"jsonrpc":"2.0","id":0,');
}

function write(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

/** `replica --tools FILE`, the replica it printed. */
async function replicaOf(toolsFile: string, ...more: string[]): Promise<Replica> {
  const out = await runCli('replica', '--tools', toolsFile, ...more);
  expect(out.stderr).toBe('');
  expect(out.code).toBe(0);
  return JSON.parse(out.stdout) as Replica;
}

interface CorpusCase {
  tools: Record<string, unknown>[];
  exchanges?: { request: string; replies: string[] }[];
}

/**
 * The steps of a tools/list walk a corpus case recorded, from the first cursor on, following
 * each page's nextCursor through the case's own exchanges, up to the first step it did not
 * record; `complete` when it recorded the walk to its last page.
 */
function recordedWalk(
  c: CorpusCase,
  withUserTools: boolean,
): { pages: string[]; complete: boolean } {
  const replies = new Map<string, string>();
  for (const exchange of c.exchanges ?? []) {
    const request = JSON.parse(exchange.request) as {
      method?: string;
      params?: { cursor?: unknown; withUserTools?: unknown };
    };
    const reply = exchange.replies[0];
    if (request.method !== 'tools/list' || reply === undefined) continue;
    const cursor = request.params?.cursor ?? '';
    const users = request.params?.withUserTools ?? false;
    if (typeof cursor !== 'string' || typeof users !== 'boolean') continue;
    const key = `${users}:${cursor}`;
    if (!replies.has(key)) replies.set(key, reply);
  }
  const pages: string[] = [];
  let cursor = '';
  for (;;) {
    const reply = replies.get(`${withUserTools}:${cursor}`);
    if (reply === undefined) return { pages, complete: false };
    pages.push(reply);
    const next = (JSON.parse(reply) as { result?: { nextCursor?: string } }).result?.nextCursor;
    if (next === undefined) return { pages, complete: true };
    cursor = next;
  }
}

/** A real server whose boards' MCP reply payloads (tools/list pages among them) are kept. */
async function recordingServer(options: StartOptions = {}) {
  const server = await XiaozhiServer.start({ port: 0, logLevel: 'silent', ...options });
  cleanups.push(() => server.stop());
  const replies: string[] = [];
  server.registry.on('connected', (record) => {
    record.session?.on('frame', (direction, text) => {
      if (direction !== 'in') return;
      const frame = readDeviceFrame(text);
      if (frame.kind === 'mcp' && frame.payloadText !== null) replies.push(frame.payloadText);
    });
  });
  return { server, replies };
}

/** `sim --replica FILE` in-process until the test ends. */
function simReplica(otaUrl: string, replica: string, more: Partial<SimOptions> = {}) {
  const { io, out } = capture();
  let stop = () => {};
  const stopped = new Promise<void>((resolveStop) => {
    stop = resolveStop;
  });
  const done = simCommand(io, {
    otaUrl,
    board: 'bread-compact-wifi',
    replica,
    count: 1,
    session: 'auto',
    profile: 'firmware',
    ssid: 'replica-lab',
    ...more,
    until: stopped,
  });
  done.catch(() => {});
  cleanups.push(async () => {
    stop();
    await done;
  });
  return { out, done };
}

describe('xiaozhi-mcp replica --tools: the firmware pager, byte for byte', () => {
  const cases = readdirSync(corpusDir).filter((file) => file.startsWith('list-'));

  it('covers the corpus tools/list cases', () => {
    expect(cases).toEqual(
      expect.arrayContaining([
        'list-only-user-tools.json',
        'list-oversize.json',
        'list-paging.json',
        'list-small.json',
        'list-user-only.json',
      ]),
    );
  });

  for (const file of cases) {
    it(`pages ${file}'s tools as the firmware replied`, async () => {
      const c = JSON.parse(readFileSync(join(corpusDir, file), 'utf8')) as CorpusCase;
      // The tool set in the replica's terms: what the tool returns is the recording's business.
      const tools = c.tools.map(({ returns: _r, echo_args: _e, ...tool }) => tool);
      const replica = await replicaOf(write(`tools-${file}`, JSON.stringify({ tools })));
      let steps = 0;
      for (const [users, pages] of [
        [false, replica.pages.plain],
        [true, replica.pages.withUserTools],
      ] as const) {
        const recorded = recordedWalk(c, users);
        steps += recorded.pages.length;
        const what = `${file} withUserTools ${users}`;
        if (recorded.complete) expect(pages.length, what).toBe(recorded.pages.length);
        expect(pages.slice(0, recorded.pages.length).map(withoutId), what).toEqual(
          recorded.pages.map(withoutId),
        );
      }
      expect(steps, `${file} records pages of a walk`).toBeGreaterThan(0);
    });
  }

  it('pages 40 tools with Chinese descriptions: several pages, user-only tools in the second walk only', async () => {
    const replica = await replicaOf(homeTools);
    const userOnly = replica.tools.filter((t) => t.user_only === true).map((t) => t.name);
    expect(replica.tools).toHaveLength(40);
    expect(userOnly).toHaveLength(4);
    expect(replica.pages.plain.length).toBeGreaterThanOrEqual(3);
    expect(replica.pages.withUserTools.length).toBeGreaterThanOrEqual(3);
    const listed = (pages: string[]) =>
      pages.flatMap((page) =>
        (JSON.parse(page) as { result: { tools: { name: string }[] } }).result.tools.map(
          (t) => t.name,
        ),
      );
    expect(listed(replica.pages.withUserTools)).toEqual(replica.tools.map((t) => t.name));
    expect(listed(replica.pages.plain)).toEqual(
      replica.tools.map((t) => t.name).filter((name) => !userOnly.includes(name)),
    );
    // The firmware writes UTF-8 as it is, no \u escapes.
    expect(replica.pages.plain[0]).toContain('打开客厅的灯');
    // Each page within the firmware's 8000-byte budget.
    for (const page of [...replica.pages.plain, ...replica.pages.withUserTools])
      expect(Buffer.byteLength(page)).toBeLessThan(8000 + 64);
  });

  it('--out writes the same replica; --mac sets the board MAC', async () => {
    const out = join(dir, 'home.replica.json');
    const run = await runCli(
      'replica',
      '--tools',
      homeTools,
      '--out',
      out,
      '--mac',
      'F4-12-FA-AB-CD-01',
    );
    expect(run.code).toBe(0);
    expect(run.stdout).toBe('');
    const written = JSON.parse(readFileSync(out, 'utf8')) as Replica;
    expect(written.board.mac).toBe('f4:12:fa:ab:cd:01');
    const printed = await replicaOf(homeTools);
    expect({ ...written, board: { ...written.board, mac: undefined } }).toEqual({
      ...printed,
      board: { ...printed.board, mac: undefined },
    });
  });
});

describe('xiaozhi-mcp replica and sim --replica: refusals (exit 2, one line naming the field)', () => {
  async function refused(argv: string[], field: RegExp) {
    const out = await runCli(...argv);
    expect(out.code, out.stderr).toBe(2);
    expect(out.stdout).toBe('');
    expect(out.stderr).toMatch(/^xiaozhi-mcp: [^\n]+\n$/);
    expect(out.stderr).toMatch(field);
    return out;
  }

  it('wants exactly one of --from and --tools, and --replica without --board', async () => {
    await refused(['replica'], /exactly one of --from .* and --tools/);
    await refused(['replica', '--from', 'a.jsonl', '--tools', 'b.json'], /exactly one of/);
    await refused(
      ['replica', '--tools', homeTools, '--mac', '01:00:5e:00:00:01'],
      /--mac must be a unicast MAC/,
    );
    const ota = 'http://127.0.0.1:1/xiaozhi/ota/';
    await refused(
      ['sim', '--ota-url', ota, '--replica', 'r.json', '--board', 'otto-robot'],
      /--replica and --board are exclusive/,
    );
    await refused(
      ['replica', '--tools', join(dir, 'none.json')],
      /cannot read .*none\.json: no such file/,
    );
  });

  it('refuses a bad tools file, writing nothing', async () => {
    const out = join(dir, 'never.json');
    const bad = write(
      'bad-tools.json',
      JSON.stringify({
        tools: [
          {
            name: 'self.x',
            description: 'x',
            properties: [{ name: 'n', type: 'float' }],
          },
        ],
      }),
    );
    await refused(
      ['replica', '--tools', bad, '--out', out],
      /bad-tools\.json.*tools\[0\]\.properties\[0\]\.type/,
    );
    expect(existsSync(out)).toBe(false);
    expect(readdirSync(dir).filter((name) => name.includes('never'))).toEqual([]);
  });

  it("refuses an --out it cannot write: the path is the user's, no check ran", async () => {
    await refused(
      ['replica', '--tools', homeTools, '--out', join(dir, 'no-such-dir', 'r.json')],
      /cannot write .*no-such-dir/,
    );
  });

  it('refuses a transcript with no tools/list walk, writing nothing', async () => {
    const out = join(dir, 'never-from.json');
    const transcript = write(
      'empty-transcript.jsonl',
      `${JSON.stringify({ t: '2026-01-01T00:00:00.000Z', event: 'closed', reason: 'x' })}\n`,
    );
    await refused(
      ['replica', '--from', transcript, '--out', out],
      /empty-transcript\.jsonl.*pages/,
    );
    expect(existsSync(out)).toBe(false);
  });

  it('refuses a replica with a wrong schemaVersion, pages that differ, or a secret', async () => {
    const good = await replicaOf(homeTools);
    const ota = 'http://127.0.0.1:1/xiaozhi/ota/';
    const plain = [...good.pages.plain];
    plain[1] = (plain[1] ?? '').replace('打开', '关上');
    const files: [string, unknown, RegExp][] = [
      ['version.json', { ...good, schemaVersion: 2 }, /version\.json.*schemaVersion/],
      [
        'pages.json',
        { ...good, pages: { ...good.pages, plain } },
        /pages\.json.*pages\.plain\[1\]/,
      ],
      [
        'secret.json',
        { ...good, board: { ...good.board, wifiPassword: 'hunter2' } },
        /secret\.json.*board\.wifiPassword/,
      ],
    ];
    for (const [name, content, field] of files) {
      const file = write(name, JSON.stringify(content));
      // `sim` checks the file before any board starts: it returns, nothing runs.
      const out = await refused(['sim', '--ota-url', ota, '--replica', file], field);
      expect(out.stderr).not.toContain('hunter2');
    }
  });
});

describe('xiaozhi-mcp sim --replica against a real server', { timeout: 90_000 }, () => {
  let replicaFile: string;
  let replica: Replica;
  beforeAll(async () => {
    replica = await replicaOf(homeTools);
    // A recorded call, as hil records them: the reply payload as the board sent it.
    replica.calls = [
      {
        tool: 'self.living_room.light.turn_on',
        arguments: { brightness: 40 },
        reply:
          '{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"客厅的灯已打开，亮度 40%"}],"isError":false}}',
        delayMs: 0,
      },
    ];
    replicaFile = join(dir, 'home-with-call.replica.json');
    writeFileSync(replicaFile, `${JSON.stringify(replica, null, 2)}\n`);
  });

  for (const transport of ['websocket', 'mqtt'] as const) {
    it(`over ${transport}: the server lists exactly the replica's pages and a recorded call answers its reply`, async () => {
      const { server, replies } = await recordingServer(
        transport === 'mqtt' ? { transport: 'mqtt', mqttPort: 0 } : {},
      );
      const sim = simReplica(server.urls.ota, replicaFile);
      const mac = simMac('smart-home-hub', 0);
      const record = await server.registry.waitForReady(mac, 60_000).catch((error: unknown) => {
        throw new Error(`${String(error)}; the sim said: ${sim.out.stdout}${sim.out.stderr}`);
      });
      expect(record.transport).toBe(transport);
      expect(record.tools.map((t) => t.name)).toEqual(replica.tools.map((t) => t.name));
      expect(record.pageViolations).toEqual([]);
      const pages = replies.filter((payload) =>
        /^\{"jsonrpc":"2\.0","id":\d+,"result":\{"tools":/.test(payload),
      );
      expect(pages.map(withoutId)).toEqual(
        [...replica.pages.plain, ...replica.pages.withUserTools].map(withoutId),
      );
      const session = server.registry.session(mac);
      expect(
        await session.callTool('self.living_room.light.turn_on', { brightness: 40 }),
      ).toMatchObject({
        content: [{ type: 'text', text: '客厅的灯已打开，亮度 40%' }],
        isError: false,
      });
      // An unrecorded call answers the replica's stated default.
      expect(await session.callTool('self.door.status', {})).toMatchObject({
        content: [{ type: 'text', text: 'true' }],
      });
      // Validated by the firmware's rules before any answer.
      await expect(
        session.callTool('self.living_room.light.turn_on', { brightness: 400 }),
      ).rejects.toThrow('Value exceeds maximum allowed: 100');
    });
  }

  it('--count 3: each board its own MAC, counted up from the replica MAC', async () => {
    const withMac = join(dir, 'home-mac.replica.json');
    const run = await runCli(
      'replica',
      '--tools',
      homeTools,
      '--out',
      withMac,
      '--mac',
      'f4:12:fa:10:00:fe',
    );
    expect(run.code).toBe(0);
    const { server } = await recordingServer();
    simReplica(server.urls.ota, withMac, { count: 3 });
    const macs = ['f4:12:fa:10:00:fe', 'f4:12:fa:10:00:ff', 'f4:12:fa:10:01:00'];
    for (const mac of macs) await server.registry.waitForReady(mac, 60_000);
    expect(
      server.registry
        .list()
        .map((r) => r.deviceId)
        .sort(),
    ).toEqual(macs);
  });

  it('behind xiaozhi-mcp bridge: the SDK client lists the replica tools and calls one', async () => {
    expect(existsSync(join(root, 'apps/cli/dist/bin.js')), 'build apps/cli first').toBe(true);
    const { server } = await recordingServer();
    simReplica(server.urls.ota, replicaFile);
    const mac = simMac('smart-home-hub', 0);
    await server.registry.waitForReady(mac, 60_000);
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [xiaozhiMcp, 'bridge', '--server', server.urls.http, '--device', mac],
      stderr: 'pipe',
    });
    const client = new Client({ name: 'cli-replica-test', version: '1.0.0' });
    await client.connect(transport);
    cleanups.push(() => client.close());
    const names = (await client.listTools()).tools.map((t) => t.name);
    // The bridge's names: `.` written `-`; user-only tools left out.
    expect(names.sort()).toEqual(
      replica.tools
        .filter((t) => t.user_only !== true)
        .map((t) => t.name.replaceAll('.', '-'))
        .sort(),
    );
    expect(
      await client.callTool({
        name: 'self-living_room-light-turn_on',
        arguments: { brightness: 40 },
      }),
    ).toEqual({ content: [{ type: 'text', text: '客厅的灯已打开，亮度 40%' }], isError: false });
  });
});

/** The built CLI, spawned with its virtual boards in `virtualDir`, killed when the test ends. */
function cliIn(virtualDir: string) {
  expect(existsSync(join(root, 'apps/cli/dist/bin.js')), 'build apps/cli first').toBe(true);
  const env: NodeJS.ProcessEnv = { ...process.env, XIAOZHI_VIRTUAL_DIR: virtualDir };
  delete env.FORCE_COLOR;
  return (...args: string[]) => {
    const started = spawnCommand(xiaozhiMcp, args, { env, timeoutMs: 120_000 });
    cleanups.push(async () => {
      if (started.child.exitCode === null && started.child.signalCode === null)
        started.child.kill('SIGKILL');
      await started.done;
    });
    return started;
  };
}

/** Creates `port` in the store holding a smart-home-hub firmware; the image's path. */
async function flashedHub(cli: ReturnType<typeof cliIn>, port: string): Promise<string> {
  const image = join(dir, 'smart-home-hub.bin');
  writeFileSync(
    image,
    buildVirtualFirmware({ chip: 'esp32s3', version: '2.4.2', board: 'smart-home-hub' }).merged,
  );
  const flash = await cli('flash', image, '--port', port, '--create').done;
  expect(flash.code, flash.stderr).toBe(0);
  return image;
}

describe('xiaozhi-mcp port serve --replica', { timeout: 180_000 }, () => {
  it('the served virtual board runs the replica: its tools reach a server over MQTT', async () => {
    const cli = cliIn(join(dir, 'virtual'));
    const replica = await replicaOf(homeTools);
    const replicaFile = write('served.replica.json', JSON.stringify(replica));
    // A board on MQTT connects from boot on: no BOOT click needed over the serial port.
    const { server } = await recordingServer({ transport: 'mqtt', mqttPort: 0 });
    await flashedHub(cli, 'virtual:hub');
    const provision = await cli(
      'provision',
      '--ssid',
      'replica-lab',
      '--password',
      'lab-password',
      '--ota-url',
      server.urls.ota,
      '--port',
      'virtual:hub',
    ).done;
    expect(provision.code, provision.stderr).toBe(0);

    const served = cli('port', 'serve', 'virtual:hub', '--replica', replicaFile, '--listen', ':0');
    await until(() => /^serving /m.test(served.run.stdout) || served.run.code !== null, {
      what: 'serving',
      seen: () => served.run,
    });
    expect(served.run.stdout).toMatch(
      /^virtual:hub runs the replica of smart-home-hub \(40 tools, MAC (\S+)\)$/m,
    );
    const mac = /MAC (\S+)\)$/m.exec(served.run.stdout)?.[1] ?? '';
    const names = replica.tools.map((t) => t.name);
    // The provisioning's own boot (the stored preset) may have come and gone first.
    await until(
      () => {
        const record = server.registry.get(mac);
        return record?.ready === true && record.tools.map((t) => t.name).join() === names.join();
      },
      { what: "the replica's tools on the server", seen: () => served.run },
    );
    const record = server.registry.get(mac);
    expect(record?.transport).toBe('mqtt');
    expect(record?.pageViolations).toEqual([]);
    served.child.kill('SIGTERM');
    expect((await served.done).code).toBe(0);
  });

  it("keeps the stored board's eFuses (Secure Boot), and --create makes the board for the replica from its first boot", async () => {
    const virtualDir = join(dir, 'virtual-fused');
    const cli = cliIn(virtualDir);
    const serving = async (...args: string[]) => {
      const served = cli('port', 'serve', ...args, '--listen', ':0');
      await until(() => /^serving /m.test(served.run.stdout) || served.run.code !== null, {
        what: 'serving',
        seen: () => served.run,
      });
      const port = /^serving \S+ on (rfc2217:\/\/\S+)$/m.exec(served.run.stdout)?.[1];
      if (port === undefined)
        throw new Error(`not serving: ${served.run.stdout}${served.run.stderr}`);
      return { ...served, port };
    };
    const replica = await replicaOf(homeTools);
    const replicaFile = write(
      'fused.replica.json',
      JSON.stringify({ ...replica, board: { ...replica.board, flashSizeMb: 8 } }),
    );
    const image = await flashedHub(cli, 'virtual:fused');
    // Secure Boot is burnt once: the sidecar says so by hand, as the store's README tells.
    const sidecar = join(virtualDir, 'fused.json');
    writeFileSync(
      sidecar,
      JSON.stringify({ ...JSON.parse(readFileSync(sidecar, 'utf8')), secureBoot: true }),
    );

    const fused = await serving('virtual:fused', '--replica', replicaFile);
    expect(fused.run.stdout).toMatch(
      /^virtual:fused runs the replica of smart-home-hub \(40 tools, /m,
    );
    // The ROM behind the served port refuses a bootloader, as the stored board's would.
    const refused = await cli('flash', image, '--port', fused.port).done;
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/Secure Boot is enabled/);
    fused.child.kill('SIGTERM');
    expect((await fused.done).code).toBe(0);

    // A new board: made the replica's size, and the one board it plugs in runs the replica.
    const fresh = await serving('virtual:fresh', '--create', '--replica', replicaFile);
    expect(fresh.run.stdout).toMatch(
      /^created virtual board virtual:fresh: [^\n]*\(esp32s3, 8 MB flash, MAC [^\n]*\nvirtual:fresh runs the replica of smart-home-hub \(40 tools, MAC [0-9a-f:]+\)\nserving /m,
    );
    expect((await stat(join(virtualDir, 'fresh.flash'))).size).toBe(8 * 1024 * 1024);
    fresh.child.kill('SIGTERM');
    expect((await fresh.done).code).toBe(0);
  });

  it('refuses a bad replica, or one on a real port, with exit 2 before the port is touched', async () => {
    const bad = write('bad-version.json', JSON.stringify({ schemaVersion: 9 }));
    const out = await runCli('port', 'serve', 'virtual:nowhere', '--replica', bad);
    expect(out.code).toBe(2);
    expect(out.stderr).toMatch(/^xiaozhi-mcp: [^\n]*bad-version\.json[^\n]*schemaVersion[^\n]*\n$/);
    const real = await runCli('port', 'serve', '/dev/ttyUSB9', '--replica', bad);
    expect(real.code).toBe(2);
    expect(real.stderr).toMatch(/--replica runs on a virtual board/);
  });
});

describe('xiaozhi-mcp replica --from: a recorded board, played back', { timeout: 120_000 }, () => {
  it("rebuilds a board from its transcript; the replica's board lists the recorded pages and answers the recorded call", async () => {
    // A board recorded as hil records one: its identity note, each session's hello, each frame.
    const recorded = await recordingServer();
    const lines: string[] = [];
    const note = (event: string, detail: Record<string, unknown>) =>
      lines.push(JSON.stringify({ t: new Date().toISOString(), event, ...detail }));
    const mac = 'f4:12:fa:77:00:01';
    note('board', {
      variant: 'otto-robot',
      firmwareVersion: '2.4.2',
      chip: 'esp32s3',
      flashSizeMb: 16,
      mac,
    });
    recorded.server.registry.on('connected', (record) => {
      const session = record.session;
      if (session === undefined) return;
      const sessionId = session.info.sessionId;
      note('session', {
        sessionId,
        deviceId: session.info.deviceId,
        hello: session.info.helloText,
      });
      session.on('frame', (dir, text) =>
        lines.push(JSON.stringify({ t: new Date().toISOString(), session: sessionId, dir, text })),
      );
    });
    const board = new VirtualBoard({
      preset: 'otto-robot',
      mac,
      wifi: { ssid: 'rig' },
      otaUrl: recorded.server.urls.ota,
    });
    cleanups.push(() => board.powerOff());
    board.powerOn();
    await board.waitForState('idle', 30_000);
    board.click();
    const record = await recorded.server.registry.waitForReady(mac, 30_000);
    const volume = await recorded.server.registry
      .session(mac)
      .callTool('self.audio_speaker.set_volume', { volume: 33 });
    expect(volume).toMatchObject({ isError: false });
    board.powerOff();
    const transcript = write('otto-transcript.jsonl', `${lines.join('\n')}\n`);

    const out = join(dir, 'otto.replica.json');
    const made = await runCli('replica', '--from', transcript, '--out', out);
    expect(made.code, made.stderr).toBe(0);
    const replica = JSON.parse(readFileSync(out, 'utf8')) as Replica;
    expect(replica.board).toMatchObject({ variant: 'otto-robot', mac, firmwareVersion: '2.4.2' });
    expect(replica.tools.map((t) => t.name)).toEqual(record.tools.map((t) => t.name));
    expect(replica.calls).toEqual([
      expect.objectContaining({ tool: 'self.audio_speaker.set_volume', arguments: { volume: 33 } }),
    ]);

    // Played back against another server: the same pages, the same reply to the same call.
    const replay = await recordingServer();
    simReplica(replay.server.urls.ota, out);
    await replay.server.registry.waitForReady(mac, 60_000);
    const pages = (replies: string[]) =>
      replies
        .filter((payload) => /^\{"jsonrpc":"2\.0","id":\d+,"result":\{"tools":/.test(payload))
        .map(withoutId);
    expect(pages(replay.replies)).toEqual(pages(recorded.replies));
    expect(
      await replay.server.registry
        .session(mac)
        .callTool('self.audio_speaker.set_volume', { volume: 33 }),
    ).toEqual(volume);
  });
});
