import { EventEmitter } from 'node:events';
import {
  type BoardPreset,
  boardPreset,
  registerLampTools,
  VirtualBoard,
  type VirtualBoardOptions,
} from '@xiaozhi-mcp/device';
import { FAST_TIMING } from '@xiaozhi-mcp/device/testing';
import { buildAppImage } from '@xiaozhi-mcp/firmware';
import { byteLength, defineTool, Prop, WireError } from '@xiaozhi-mcp/protocol';
import {
  type DeviceRecord,
  DeviceRegistry,
  type DeviceSession,
  XiaozhiServer,
} from '@xiaozhi-mcp/server';
import { afterEach, describe, expect, it } from 'vitest';
import {
  applyBaseline,
  DEFAULT_BASELINE_PATH,
  FIXED_DEVIATION_NOTE,
  loadBaseline,
} from '../baseline.js';
import { type CheckResult, DEFAULT_SUITES, type LatencyStats, type SuiteName } from '../model.js';
import type { LatencyBudget, SuiteBoard, SuiteContext } from '../suite.js';
import { SUITE_CHECKS, SUITES } from './index.js';

const LATENCY: LatencyBudget = { calls: 20, warmup: 3, tool: 'self.get_device_status' };
const DEVIATIONS = ['robustness.error-code', 'robustness.escaped-messages', 'robustness.ping'];

const servers: XiaozhiServer[] = [];
const boards: VirtualBoard[] = [];
let macCounter = 0;

afterEach(async () => {
  for (const board of boards.splice(0)) board.powerOff();
  for (const server of servers.splice(0)) await server.stop();
});

interface Rig {
  readonly server: XiaozhiServer;
  readonly board: VirtualBoard;
  readonly context: SuiteContext;
}

interface RigOptions {
  readonly board?: VirtualBoardOptions;
  readonly suiteBoard?: Partial<SuiteBoard>;
  readonly latency?: Partial<LatencyBudget>;
  readonly candidate?: Uint8Array;
  /** The board is offered MQTT: connected from boot on, no click; a click opens UDP audio. */
  readonly mqtt?: boolean;
}

/** A server, a virtual board connected to it over real sockets, and the context the rig gives suites. */
async function virtualRig(options: RigOptions = {}): Promise<Rig> {
  const server = await XiaozhiServer.start({
    port: 0,
    logLevel: 'silent',
    ...(options.mqtt ? { transport: 'mqtt', mqttPort: 0 } : {}),
  });
  servers.push(server);
  macCounter++;
  const board = new VirtualBoard({
    mac: `f4:12:fa:20:00:${macCounter.toString(16).padStart(2, '0')}`,
    wifi: { ssid: 'lab' },
    otaUrl: server.urls.ota,
    timing: { ...FAST_TIMING, ...(options.mqtt ? { uplinkFrames: 6, uplinkFrameMs: 5 } : {}) },
    ...options.board,
  });
  boards.push(board);
  const { registry } = server;
  // What the rig does for a `boot-click` board: wait for idle, press BOOT, wait until listed;
  // for an `mqtt` board: wait until listed.
  const reconnect = async (timeoutMs: number) => {
    if (!options.mqtt) {
      await board.waitForState('idle', timeoutMs);
      board.click();
    }
    return registry.waitForReady(board.mac, timeoutMs);
  };
  board.powerOn();
  await reconnect(5000);
  const context: SuiteContext = {
    board: { name: `virtual-${board.preset.name}`, ...options.suiteBoard },
    registry,
    deviceId: board.mac,
    session: () => registry.session(board.mac),
    record: () => {
      const record = registry.get(board.mac);
      if (record === undefined) throw new Error(`no record for ${board.mac}`);
      return record;
    },
    reconnect,
    offerFirmware: (image) => {
      server.firmware.add(image);
    },
    candidateImage: options.candidate,
    bootButton: { press: async () => board.click() },
    audioStats: () => server.audioStatsFor(board.mac),
    endAudioSession: () => server.endAudioSession(board.mac),
    latency: { ...LATENCY, ...options.latency },
    log: () => {},
    signal: new AbortController().signal,
  };
  return { server, board, context };
}

async function runSuites(context: SuiteContext, names: readonly SuiteName[]) {
  const checks: CheckResult[] = [];
  const latency: LatencyStats[] = [];
  for (const name of names) {
    const outcome = await SUITES[name].run(context);
    checks.push(...outcome.checks);
    latency.push(...(outcome.latency ?? []));
  }
  return { checks, latency };
}

function byId(checks: readonly CheckResult[], id: string): CheckResult {
  const check = checks.find((c) => c.id === id);
  if (check === undefined)
    throw new Error(`no check ${id} in ${checks.map((c) => c.id).join(', ')}`);
  return check;
}

/** `id: status` of every check that did not pass, for readable assertions. */
function notPassed(checks: readonly CheckResult[]): Record<string, string> {
  return Object.fromEntries(
    checks.filter((c) => c.status !== 'passed').map((c) => [c.id, c.status]),
  );
}

function idsOf(names: readonly SuiteName[]): string[] {
  return names.flatMap((suite) => SUITE_CHECKS[suite].map((check) => `${suite}.${check.id}`));
}

describe('suites on virtual boards over real sockets', () => {
  it('bread-compact-wifi passes every default suite but the three known deviations, then reboot and ota-upgrade', async () => {
    const rig = await virtualRig({
      suiteBoard: {
        variant: 'bread-compact-wifi',
        expectedVersion: '2.4.2',
        expectedTools: [
          'self.get_device_status',
          'self.audio_speaker.set_volume',
          'self.lamp.turn_on',
          'self.reboot',
        ],
      },
      candidate: buildAppImage({ chip: 'esp32s3', version: '2.9.0' }),
    });
    const { checks, latency } = await runSuites(rig.context, DEFAULT_SUITES);

    expect(checks.map((c) => c.id)).toEqual(idsOf(DEFAULT_SUITES));
    expect(notPassed(checks)).toEqual({
      ...Object.fromEntries(DEVIATIONS.map((id) => [id, 'failed'])),
      'audio.uplink': 'skipped',
    });
    expect(byId(checks, 'audio.uplink').message).toBe('audio over WebSocket is not judged');
    expect(byId(checks, 'robustness.error-code').message).toMatch(/numeric JSON-RPC code.*without/);
    expect(byId(checks, 'robustness.escaped-messages').message).toMatch(/invalid JSON/);
    expect(byId(checks, 'robustness.ping')).toMatchObject({
      message: expect.stringContaining('Method not implemented: ping'),
      expected: 'a result ({})',
    });
    // The unescaped reply is still read: id and message recovered.
    expect(byId(checks, 'robustness.quoted-tool-name').message).toMatch(/recovered/);
    // No budget in the inventory: the default one applies.
    expect(byId(checks, 'latency.calls').message).toMatch(
      /within p50 <= 250 ms, p99 <= 1000 ms \(the default budget\)$/,
    );
    // The safe-tools sweep called what this board has of the default list, and put the volume back.
    expect(byId(checks, 'tools-call.safe-tools').data).toEqual({
      tools: [
        'self.get_device_status',
        'self.audio_speaker.set_volume',
        'self.screen.set_theme',
        'self.screen.get_info',
        'self.get_system_info',
      ],
      calls: 7,
    });
    expect(latency).toEqual([
      expect.objectContaining({ method: 'tools/call self.get_device_status', samples: 20 }),
    ]);
    expect(latency[0]?.valuesMs).toHaveLength(20);
    expect(latency[0]?.pingP50Ms).toBeGreaterThan(0);
    // The volume was restored.
    expect(rig.board.hardware.volume).toBe(70);

    const applied = applyBaseline(checks, loadBaseline(DEFAULT_BASELINE_PATH));
    expect(notPassed(applied)).toEqual({
      ...Object.fromEntries(DEVIATIONS.map((id) => [id, 'known-deviation'])),
      'audio.uplink': 'skipped',
    });
    for (const id of DEVIATIONS) {
      expect(byId(applied, id).deviation).toEqual({
        reason: expect.stringContaining('docs/protocol.md'),
        fixed: false,
      });
    }

    const reboot = await SUITES.reboot.run(rig.context);
    expect(notPassed(reboot.checks)).toEqual({});
    expect(byId(reboot.checks, 'reboot.back').data).toEqual({ readyMs: expect.any(Number) });
    expect(rig.context.record().sessions).toBe(2);

    const ota = await SUITES['ota-upgrade'].run(rig.context);
    expect(notPassed(ota.checks)).toEqual({});
    expect(byId(ota.checks, 'ota-upgrade.version').message).toBe('runs 2.9.0');
    expect(rig.board.version).toBe('2.9.0');
  });

  it('a board over MQTT passes every default suite but the three known deviations, its audio uplink in order, then reboot and ota-upgrade', async () => {
    const rig = await virtualRig({
      mqtt: true,
      suiteBoard: {
        variant: 'bread-compact-wifi',
        expectedVersion: '2.4.2',
        expectedTools: ['self.get_device_status', 'self.lamp.turn_on'],
      },
      candidate: buildAppImage({ chip: 'esp32s3', version: '2.9.0' }),
    });
    expect(rig.context.record().transport).toBe('mqtt');
    const { checks, latency } = await runSuites(rig.context, DEFAULT_SUITES);
    expect(checks.map((c) => c.id)).toEqual(idsOf(DEFAULT_SUITES));
    // Over MQTT the server has no ping: the calls are measured alone.
    expect(notPassed(checks)).toEqual({
      ...Object.fromEntries(DEVIATIONS.map((id) => [id, 'failed'])),
      'latency.ping': 'skipped',
    });
    expect(byId(checks, 'latency.ping').message).toMatch(/on mqtt, where the server has no ping/);
    expect(latency[0]?.samples).toBe(20);
    // The board's 6 frames, numbered 1 to 6, as the server decrypted and counted them.
    expect(byId(checks, 'audio.uplink')).toMatchObject({
      status: 'passed',
      message: expect.stringMatching(
        /^6 packets \(\d+ bytes\) decrypted in order, sequence 1\.\.6/,
      ),
      data: { packets: 6, gaps: 0, outOfOrder: 0, rejected: 0, firstSequence: 1, lastSequence: 6 },
    });
    expect(rig.board.uplink.packets).toBe(6);

    // Back after a reboot and an upgrade over MQTT again, with no click.
    const reboot = await SUITES.reboot.run(rig.context);
    expect(notPassed(reboot.checks)).toEqual({});
    const ota = await SUITES['ota-upgrade'].run(rig.context);
    expect(notPassed(ota.checks)).toEqual({});
    expect(rig.board.version).toBe('2.9.0');
    expect(rig.context.record().transport).toBe('mqtt');
    expect(rig.board.transport).toBe('mqtt');
  });

  it('otto-robot (multi-page lists) passes every default suite but the three known deviations', async () => {
    const rig = await virtualRig({
      board: { preset: 'otto-robot' },
      suiteBoard: {
        variant: 'otto-robot',
        expectedVersion: '2.4.2',
        expectedTools: ['self.camera.take_photo'],
      },
    });
    const { checks } = await runSuites(rig.context, DEFAULT_SUITES);
    expect(notPassed(checks)).toEqual({
      ...Object.fromEntries(DEVIATIONS.map((id) => [id, 'failed'])),
      'audio.uplink': 'skipped',
    });
    const pages = byId(checks, 'tools-list.page-budget').data?.pages as {
      walk: string;
      resultBytes: number;
    }[];
    expect(pages.filter((p) => p.walk === 'plain walk').length).toBeGreaterThanOrEqual(3);
    expect(pages.every((p) => p.resultBytes > 0)).toBe(true);
  });

  it('a spec-compliant board (strict profile) passes the deviation checks: the baseline reports them gone', async () => {
    const rig = await virtualRig({ board: { profile: 'strict' } });
    const { checks } = await runSuites(rig.context, ['robustness']);
    for (const id of DEVIATIONS) expect(byId(checks, id).status).toBe('passed');
    // It answers what the firmware drops: those checks say what came back.
    expect(byId(checks, 'robustness.string-id')).toMatchObject({
      status: 'failed',
      message: expect.stringMatching(
        /^expected no reply \(the firmware drops these\), got \{"jsonrpc"/,
      ),
    });
    // A deviation that is gone fails until a person accepts it, or the run allows it.
    const applied = applyBaseline(checks, loadBaseline(DEFAULT_BASELINE_PATH));
    const allowed = applyBaseline(checks, loadBaseline(DEFAULT_BASELINE_PATH), {
      allowFixed: true,
    });
    for (const id of DEVIATIONS) {
      expect(byId(applied, id)).toMatchObject({
        status: 'failed',
        deviation: { fixed: true },
        message: expect.stringContaining(FIXED_DEVIATION_NOTE),
      });
      expect(byId(allowed, id)).toMatchObject({ status: 'passed', deviation: { fixed: true } });
    }
  });

  it('a board without the common tools: tool-specific checks are skipped with the reason', async () => {
    const bare: BoardPreset = {
      ...boardPreset('bread-compact-wifi'),
      name: 'bare-lamp',
      registerTools: (server, api) => {
        registerLampTools(server, api);
        // The firmware always has user-only tools; none of the safe-tools sweep's.
        server.addUserOnlyTool(
          { name: 'self.lamp.reset_counter', description: 'Resets the switch counter.' },
          () => true,
        );
      },
    };
    const rig = await virtualRig({
      board: { preset: bare },
      suiteBoard: { expectedTools: ['self.lamp.turn_on', 'self.get_device_status'] },
    });
    const { checks } = await runSuites(rig.context, [...DEFAULT_SUITES, 'reboot']);
    expect(notPassed(checks)).toEqual({
      'initialize.version': 'skipped',
      'initialize.variant': 'skipped',
      'tools-list.expected-tools': 'failed',
      'tools-call.device-status': 'skipped',
      'tools-call.volume-round-trip': 'skipped',
      'tools-call.argument-errors': 'skipped',
      'tools-call.safe-tools': 'skipped',
      ...Object.fromEntries(DEVIATIONS.map((id) => [id, 'failed'])),
      'latency.calls': 'skipped',
      'latency.ping': 'skipped',
      'audio.uplink': 'skipped',
      'reboot.reply-lost': 'skipped',
    });
    expect(byId(checks, 'tools-call.volume-round-trip').message).toBe(
      'the board lists no self.get_device_status and no self.audio_speaker.set_volume',
    );
    expect(byId(checks, 'tools-list.expected-tools').message).toMatch(
      /^expected tools self\.get_device_status to be listed/,
    );
    expect(byId(checks, 'reboot.reply-lost').message).toMatch(/system reboot message/);
  });
});

describe('faults make checks fail, saying what was expected and what came back', () => {
  it('a wrong version or variant fails initialize with both values', async () => {
    const rig = await virtualRig({
      suiteBoard: { expectedVersion: '2.5.0', variant: 'otto-robot' },
    });
    const { checks } = await runSuites(rig.context, ['initialize']);
    expect(byId(checks, 'initialize.version')).toMatchObject({
      status: 'failed',
      message: 'expected serverInfo.version "2.5.0" (the build under test), got "2.4.2"',
      expected: '2.5.0',
      actual: '2.4.2',
    });
    expect(byId(checks, 'initialize.variant')).toMatchObject({
      status: 'failed',
      expected: 'otto-robot',
      actual: 'bread-compact-wifi',
    });
  });

  it('a slow board fails a latency budget, and its samples are still reported', async () => {
    const rig = await virtualRig({
      board: { faults: { replyLatencyMs: 25 } },
      latency: { calls: 5, warmup: 1, p50Ms: 10 },
    });
    const outcome = await SUITES.latency.run(rig.context);
    expect(byId(outcome.checks, 'latency.calls')).toMatchObject({
      status: 'failed',
      message: expect.stringMatching(
        /^expected p50 <= 10 ms over 5 calls of self\.get_device_status, got p50 \d+(\.\d+)? ms > 10 ms/,
      ),
      expected: 'p50 <= 10 ms',
    });
    expect(byId(outcome.checks, 'latency.ping').status).toBe('passed');
    const stats = outcome.latency?.[0];
    expect(stats?.valuesMs).toHaveLength(5);
    expect(Math.min(...(stats?.valuesMs ?? []))).toBeGreaterThanOrEqual(24);
  });

  it('a speaker that ignores set_volume fails the round trip, and the restore still runs', async () => {
    const bread = boardPreset('bread-compact-wifi');
    const stuck: BoardPreset = {
      ...bread,
      registerTools: (server, api) =>
        bread.registerTools(server, {
          ...api,
          hardware: new Proxy(api.hardware, {
            set: (target, key, value) => key === 'volume' || Reflect.set(target, key, value),
          }),
        }),
    };
    const rig = await virtualRig({ board: { preset: stuck } });
    const outcome = await SUITES['tools-call'].run(rig.context);
    expect(byId(outcome.checks, 'tools-call.volume-round-trip')).toMatchObject({
      status: 'failed',
      message: 'expected volume 50 after set_volume, read back 70',
      expected: '50',
      actual: '70',
    });
    expect(notPassed(outcome.checks)).toEqual({ 'tools-call.volume-round-trip': 'failed' });
  });
});

describe('faults in the opt-in suites', () => {
  it('a reboot tool that answers fails reply-lost, and what depends on the reboot is skipped', async () => {
    const answering: BoardPreset = {
      ...boardPreset('bread-compact-wifi'),
      name: 'no-reboot',
      registerTools: (server, api) => {
        registerLampTools(server, api);
        server.addUserOnlyTool(
          { name: 'self.reboot', description: 'Pretends to reboot.' },
          () => true,
        );
      },
    };
    const rig = await virtualRig({ board: { preset: answering } });
    const outcome = await SUITES.reboot.run(rig.context);
    expect(byId(outcome.checks, 'reboot.reply-lost')).toMatchObject({
      status: 'failed',
      message: expect.stringMatching(
        /^expected the reply to self\.reboot to be lost \(DEVICE_DISCONNECTED\), got a result \{"content"/,
      ),
      expected: 'DEVICE_DISCONNECTED',
    });
    expect(notPassed(outcome.checks)).toEqual({
      'reboot.reply-lost': 'failed',
      'reboot.back': 'skipped',
      'reboot.initialize': 'skipped',
    });
  });

  it('ota-upgrade: skipped without a candidate; a candidate the board is never offered fails with both versions', async () => {
    const none = await virtualRig();
    const skipped = await SUITES['ota-upgrade'].run(none.context);
    expect(skipped.checks.map((c) => [c.status, c.message])).toEqual([
      ['skipped', 'the run has no candidate image to offer'],
      ['skipped', 'the run has no candidate image to offer'],
      ['skipped', 'nothing was offered (see ota-upgrade.offer)'],
      ['skipped', 'the board did not come back (see ota-upgrade.reboot)'],
    ]);

    const same = await virtualRig({
      candidate: buildAppImage({ chip: 'esp32s3', version: '2.4.2' }),
    });
    const notNewer = await SUITES['ota-upgrade'].run(same.context);
    expect(byId(notNewer.checks, 'ota-upgrade.offer')).toMatchObject({
      status: 'failed',
      message: 'expected a candidate newer than the running 2.4.2, got 2.4.2',
    });

    // Built for another chip: the OTA endpoint never offers it to this esp32s3 board.
    const other = await virtualRig({
      candidate: buildAppImage({ chip: 'esp32c3', version: '2.9.0' }),
    });
    const notTaken = await SUITES['ota-upgrade'].run(other.context);
    expect(byId(notTaken.checks, 'ota-upgrade.version')).toMatchObject({
      status: 'failed',
      message:
        "expected the board to report the candidate's version 2.9.0 after the upgrade, got 2.4.2 (its last OTA check ran 2.4.2 and was offered nothing)",
      expected: '2.9.0',
      actual: '2.4.2',
    });
  });
});

// ---------------------------------------------------------------------------------------------
// A board that pages wrong, served through a fake session (tools-list only calls `request`).

interface FakeTool {
  readonly name: string;
  readonly json: string;
  /** Hidden from the plain listing. */
  readonly userOnly: boolean;
}

interface PagingFault {
  /** The budget the fake pages by (the firmware's is 8000). */
  readonly budget: number;
  /** Put on the last page, as seed-style servers do. */
  readonly lastCursor?: string;
  /** Start each later page one tool past its cursor. */
  readonly skipCursorTool?: boolean;
  /** Name the tool after the one that did not fit as nextCursor: that one is never listed. */
  readonly nextCursorSkips?: boolean;
  /** Answer a cursor naming no tool with the first page instead of the firmware's error. */
  readonly unknownCursorPage?: boolean;
}

function fakeTools(): FakeTool[] {
  const tools: FakeTool[] = [];
  for (let i = 0; i < 30; i++) {
    const tool = defineTool({
      name: `self.fake.tool_${String(i).padStart(2, '0')}`,
      description: `Fake tool ${i}. ${'It pads the page so the list spans several pages. '.repeat(4 + (i % 5))}`,
      properties: [
        Prop.integer('speed', { min: 1, max: 10 + i }),
        Prop.boolean('loud', { default: false }),
      ],
    });
    tools.push({ name: tool.name, json: tool.json, userOnly: false });
  }
  for (const name of ['self.fake.user_a', 'self.fake.user_b']) {
    const tool = defineTool({ name, description: 'A user-only fake tool.', userOnly: true });
    tools.push({ name, json: tool.json, userOnly: true });
  }
  return tools;
}

/** Pages the way the firmware does, but with the fault's budget and quirks (the fault under test). */
function servePage(tools: readonly FakeTool[], params: unknown, fault: PagingFault) {
  const request = (typeof params === 'object' && params !== null ? params : {}) as {
    cursor?: unknown;
    withUserTools?: unknown;
  };
  const visible = tools.filter((tool) => request.withUserTools === true || !tool.userOnly);
  const cursor = typeof request.cursor === 'string' ? request.cursor : '';
  let index = cursor === '' ? 0 : visible.findIndex((tool) => tool.name === cursor);
  if (index === -1 && fault.unknownCursorPage === true) index = 0;
  if (index === -1) throw new WireError('Failed to add tool  because of payload size limit');
  if (cursor !== '' && fault.skipCursorTool === true) index++;
  let bytes = byteLength('{"tools":[');
  const page: unknown[] = [];
  for (; index < visible.length; index++) {
    const tool = visible[index] as FakeTool;
    if (bytes + byteLength(tool.json) + 1 + 30 > fault.budget) break;
    page.push(JSON.parse(tool.json));
    bytes += byteLength(tool.json) + 1;
  }
  const next =
    visible[fault.nextCursorSkips === true ? index + 1 : index]?.name ?? fault.lastCursor;
  return next === undefined ? { tools: page } : { tools: page, nextCursor: next };
}

class FakeSession extends EventEmitter {
  readonly info = { sessionId: 'fake', deviceId: 'fa:ke:00:00:00:01' };

  constructor(
    readonly tools: readonly FakeTool[],
    readonly fault: PagingFault,
  ) {
    super();
  }

  async request(method: string, params?: unknown): Promise<unknown> {
    if (method !== 'tools/list') throw new Error(`the fake answers tools/list only, not ${method}`);
    return servePage(this.tools, params, this.fault);
  }
}

function fakeContext(session: FakeSession, board: Partial<SuiteBoard> = {}): SuiteContext {
  // What the server listed at the session start: the fake's tools.
  const tools = session.tools.map((tool) => ({
    name: tool.name,
    userOnly: tool.userOnly,
    raw: JSON.parse(tool.json) as Record<string, unknown>,
  }));
  const record = { deviceId: session.info.deviceId, tools } as unknown as DeviceRecord;
  return {
    board: { name: 'fake', ...board },
    registry: new DeviceRegistry(),
    deviceId: session.info.deviceId,
    session: () => session as unknown as DeviceSession,
    record: () => record,
    reconnect: () => Promise.reject(new Error('the fake does not reboot')),
    offerFirmware: () => {},
    candidateImage: undefined,
    latency: LATENCY,
    log: () => {},
    signal: new AbortController().signal,
  };
}

async function toolsListOn(
  tools: readonly FakeTool[],
  fault: PagingFault,
  board?: Partial<SuiteBoard>,
) {
  const outcome = await SUITES['tools-list'].run(fakeContext(new FakeSession(tools, fault), board));
  return outcome.checks;
}

describe('tools-list against a fake board that pages wrong', () => {
  it('passes every check when the fake pages by the firmware rule (the fake is sound)', async () => {
    const checks = await toolsListOn(fakeTools(), { budget: 8000 });
    expect(notPassed(checks)).toEqual({ 'tools-list.expected-tools': 'skipped' });
    expect(byId(checks, 'tools-list.walk').message).toMatch(/^[2-9] plain page\(s\)/);
  });

  it('a page over the budget fails page-budget with the bytes counted', async () => {
    const checks = await toolsListOn(fakeTools(), { budget: 9000 });
    expect(notPassed(checks)).toEqual({
      'tools-list.page-budget': 'failed',
      'tools-list.expected-tools': 'skipped',
    });
    expect(byId(checks, 'tools-list.page-budget').message).toMatch(
      /^expected every page within the budget .*, got: plain walk page 1 \(cursor ""\) counts \d{4} bytes \+ 30 > 8000/,
    );
  });

  it('a page that is not full fails page-maximal, naming the tool that would have fitted', async () => {
    const checks = await toolsListOn(fakeTools(), { budget: 6000 });
    expect(notPassed(checks)).toEqual({
      'tools-list.page-maximal': 'failed',
      'tools-list.expected-tools': 'skipped',
    });
    expect(byId(checks, 'tools-list.page-maximal').message).toMatch(
      /plain walk page 1 \(cursor ""\) ends at \d+ bytes, yet the next page's first tool self\.fake\.tool_\d\d \(\d+ bytes with its comma\) would have fitted/,
    );
  });

  it('nextCursor "" on the last page fails last-page; pages that skip their cursor fail cursors', async () => {
    const seed = await toolsListOn(fakeTools(), { budget: 8000, lastCursor: '' });
    expect(byId(seed, 'tools-list.last-page')).toMatchObject({
      status: 'failed',
      message:
        'expected no nextCursor key on the last page, got: plain walk: the last page has "nextCursor":""; user walk: the last page has "nextCursor":""',
    });
    const skipping = await toolsListOn(fakeTools(), { budget: 8000, skipCursorTool: true });
    expect(byId(skipping, 'tools-list.cursors')).toMatchObject({
      status: 'failed',
      message: expect.stringMatching(
        /plain walk page 2 for cursor "self\.fake\.tool_\d\d" starts at "self\.fake\.tool_\d\d"/,
      ),
    });
  });

  it('bad schemas, a leaked user-only tool and a missing expected tool each fail their check', async () => {
    const badSchema =
      '{"name":"self.fake.bad_schema","description":"x","inputSchema":{"type":"object","properties":{"level":{"type":"integer","default":500,"minimum":0,"maximum":100},"ratio":{"type":"number"},"flag":{"default":true,"type":"boolean"},"speed":{"type":"integer","minimum":1}},"required":[]}}';
    const leaked = defineTool({
      name: 'self.fake.leaked',
      description: 'user-only',
      userOnly: true,
    });
    const tools = [
      ...fakeTools(),
      { name: 'self.fake.bad_schema', json: badSchema, userOnly: false },
      { name: leaked.name, json: leaked.json, userOnly: false },
    ];
    const checks = await toolsListOn(
      tools,
      { budget: 8000 },
      { expectedTools: ['self.fake.tool_00', 'self.fake.camera'] },
    );
    expect(notPassed(checks)).toEqual({
      'tools-list.user-only': 'failed',
      'tools-list.schemas': 'failed',
      'tools-list.expected-tools': 'failed',
    });
    const schemas = byId(checks, 'tools-list.schemas').message;
    expect(schemas).toContain(
      'self.fake.bad_schema: property level: default 500 is outside 0..100',
    );
    expect(schemas).toContain(
      'self.fake.bad_schema: property ratio has type "number", not one of boolean, integer, string',
    );
    expect(schemas).toContain(
      "self.fake.bad_schema: property flag's keys come as default, type, not in the order type, default, minimum, maximum",
    );
    expect(schemas).toContain(
      'self.fake.bad_schema: property speed: minimum and maximum come together or not at all',
    );
    expect(schemas).toContain('required is an empty array (the firmware omits the key when empty)');
    expect(byId(checks, 'tools-list.user-only').message).toContain(
      'self.fake.leaked carries audience "user" yet is in the plain listing',
    );
    expect(byId(checks, 'tools-list.expected-tools')).toMatchObject({
      message: expect.stringMatching(/^expected tools self\.fake\.camera to be listed/),
      expected: 'self.fake.tool_00, self.fake.camera',
    });
  });

  it('an unknown cursor answered with a page fails unknown-cursor; a cursor that skips a tool fails cursor-continues', async () => {
    const paged = await toolsListOn(fakeTools(), { budget: 8000, unknownCursorPage: true });
    expect(notPassed(paged)).toEqual({
      'tools-list.unknown-cursor': 'failed',
      'tools-list.expected-tools': 'skipped',
    });
    expect(byId(paged, 'tools-list.unknown-cursor')).toMatchObject({
      message:
        'expected the error "Failed to add tool  because of payload size limit" for cursor "self.hil.no_such_cursor", got a page of 15 tool(s) starting at self.fake.tool_00',
      expected: 'Failed to add tool  because of payload size limit',
    });

    const skipping = await toolsListOn(fakeTools(), { budget: 8000, nextCursorSkips: true });
    expect(byId(skipping, 'tools-list.cursor-continues')).toMatchObject({
      status: 'failed',
      message: expect.stringMatching(
        /^expected each probed page .*plain walk: the page for cursor "self\.fake\.tool_\d\d" has "self\.fake\.tool_\d\d" at position 2, where the walk has "self\.fake\.tool_\d\d" \(the walk never listed self\.fake\.tool_\d\d: a cursor skipped it\)/,
      ),
    });
  });

  it('tools not listed at the session start, or not as many as the inventory expects, fail stable', async () => {
    const tools = fakeTools();
    const session = new FakeSession(tools, { budget: 8000 });
    // The session start saw one tool more than the walks do now.
    const context = fakeContext(
      new FakeSession(
        [
          ...tools,
          {
            ...tools[0],
            name: 'self.fake.gone',
            json: tools[0]?.json.replace('tool_00', 'gone') ?? '',
          } as FakeTool,
        ],
        { budget: 8000 },
      ),
      {
        expectedToolCount: 40,
      },
    );
    const outcome = await SUITES['tools-list'].run({
      ...context,
      session: () => session as unknown as DeviceSession,
    });
    expect(byId(outcome.checks, 'tools-list.stable')).toMatchObject({
      status: 'failed',
      message:
        'expected the same tools on every walk and at the session start, got: the user walk lacks self.fake.gone, which the session start listed; the plain walk lacks self.fake.gone, listed at the session start; the board lists 32 tools with user tools, the inventory expects 40',
    });
  });
});
