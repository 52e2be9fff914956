/**
 * The session suite on frames made by hand: what it judges a session start by (its own
 * literals), and how the watch settles at once on a refused hello, a failed session, a reply
 * under a wrong id, or a reply that does not come.
 */
import { EventEmitter } from 'node:events';
import type { DeviceRegistry } from '@xiaozhi-mcp/server';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  judgeSession,
  type SessionFrame,
  type SessionObservation,
  SessionWatch,
} from './session.js';

const HELLO =
  '{"type":"hello","version":1,"features":{"mcp":true,"glyph_push":false},"transport":"websocket","audio_params":{"format":"opus","sample_rate":16000,"channels":1,"frame_duration":60}}';

const out = (id: number, method: string, params: unknown = {}): SessionFrame => ({
  dir: 'out',
  text: JSON.stringify({
    session_id: 's',
    type: 'mcp',
    payload: { jsonrpc: '2.0', id, method, params },
  }),
});
const reply = (id: number, result: unknown): SessionFrame => ({
  dir: 'in',
  text: JSON.stringify({ session_id: 's', type: 'mcp', payload: { jsonrpc: '2.0', id, result } }),
});
const INIT = {
  protocolVersion: '2024-11-05',
  capabilities: { tools: {} },
  serverInfo: { name: 'bread-compact-wifi', version: '2.4.2' },
};

function observed(partial: Partial<SessionObservation>): SessionObservation {
  return {
    hello: { text: HELLO, protocolVersion: 1 },
    refused: undefined,
    frames: [],
    ready: false,
    failure: undefined,
    ...partial,
  };
}

async function judged(partial: Partial<SessionObservation>): Promise<Record<string, string>> {
  const checks = await judgeSession(observed(partial), { name: 'b' });
  return Object.fromEntries(checks.map((c) => [c.id, `${c.status}: ${c.message}`]));
}

const walk = (...pages: { tools: string[]; next?: string }[]): SessionFrame[] =>
  pages.flatMap((page, i) => [
    out(2 + i, 'tools/list', i === 0 ? {} : { cursor: pages[i - 1]?.next }),
    reply(2 + i, {
      tools: page.tools.map((name) => ({ name })),
      ...(page.next === undefined ? {} : { nextCursor: page.next }),
    }),
  ]);

describe('judgeSession', () => {
  it('passes a session that got ready with a well-formed hello, initialize and walk', async () => {
    const result = await judged({
      ready: true,
      frames: [
        out(1, 'initialize'),
        reply(1, INIT),
        ...walk({ tools: ['a', 'b'], next: 'c' }, { tools: ['c'] }),
      ],
    });
    expect(Object.values(result).every((r) => r.startsWith('passed'))).toBe(true);
    expect(result['session.initialize']).toBe('passed: serverInfo "bread-compact-wifi" "2.4.2"');
  });

  it('names a reply under the wrong id as such', async () => {
    const result = await judged({
      frames: [out(1, 'initialize'), reply(2, INIT)],
      failure: { stage: 'initialize', reason: 'a reply with id 2, expected 1 (initialize)' },
    });
    expect(result['session.initialize']).toMatch(
      /^failed: expected a reply to initialize with id 1, got a reply with id 2/,
    );
  });

  it('says a reply did not come, and why the wait ended', async () => {
    const result = await judged({
      frames: [out(1, 'initialize')],
      failure: {
        stage: 'initialize',
        reason: 'the board closed the session (connection dropped)',
        closed: true,
      },
    });
    expect(result['session.initialize']).toBe(
      'failed: expected a reply to initialize (id 1), got none (the board closed the session (connection dropped))',
    );
    expect(result['session.tools-walk']).toMatch(/^skipped/);
  });

  it('finds a walk that loops on a cursor seen before, and a tool listed twice', async () => {
    const loop = await judged({
      frames: [
        out(1, 'initialize'),
        reply(1, INIT),
        ...walk({ tools: ['a', 'b'], next: 'c' }, { tools: ['c', 'd'], next: 'c' }),
      ],
      failure: { stage: 'tools', reason: 'PAGE_LOOP' },
    });
    expect(loop['session.tools-walk']).toMatch(
      /^failed: page 2 of the plain walk \(cursor "c"\): nextCursor "c" was a cursor before: the walk never ends/,
    );
    const twice = await judged({
      ready: true,
      frames: [
        out(1, 'initialize'),
        reply(1, INIT),
        ...walk({ tools: ['a', 'b'], next: 'c' }, { tools: ['c', 'a'] }),
      ],
    });
    expect(twice['session.tools-walk']).toMatch(/page 2 .* lists a again \(first on page 1\)/);
  });

  it('fails the walk with the backend reason when it sees nothing wrong itself', async () => {
    const result = await judged({
      frames: [out(1, 'initialize'), reply(1, INIT), ...walk({ tools: ['a'] })],
      failure: { stage: 'tools', reason: 'PAGE_LIMIT: more than 64 pages' },
    });
    expect(result['session.tools-walk']).toBe(
      'failed: the backend could not list the tools: PAGE_LIMIT: more than 64 pages',
    );
  });

  it('judges the hello by its own literals: version against the upgrade header, mcp, transport', async () => {
    const hello = (fields: Record<string, unknown>, protocolVersion = 1) =>
      judged({
        hello: { text: JSON.stringify({ type: 'hello', ...fields }), protocolVersion },
        ready: true,
      });
    const wrong = await hello({ version: 2, features: { mcp: false }, transport: 'udp' }, 3);
    expect(wrong['session.hello-version']).toBe(
      'failed: expected version 3 (the Protocol-Version of the upgrade request), got 2',
    );
    expect(wrong['session.hello-mcp']).toBe(
      'failed: expected "features":{"mcp":true}, got "features":{"mcp":false}',
    );
    expect(wrong['session.hello-transport']).toBe(
      'failed: expected "transport":"websocket", got "udp"',
    );
    const none = await hello({});
    expect(none['session.hello-version']).toBe(
      'failed: expected version 1, 2 or 3, got no version',
    );
    expect(none['session.hello-mcp']).toBe(
      'failed: expected "features":{"mcp":true}, got no features',
    );
  });

  it('fails the hello itself for a refusal nothing else explains, or no hello at all', async () => {
    const refused = await judged({
      refused: 'hello.audio_params.sample_rate must be a number',
      failure: { stage: 'hello', reason: 'refused' },
    });
    expect(refused['session.hello']).toBe(
      'failed: the backend refused the hello: hello.audio_params.sample_rate must be a number',
    );
    expect(refused['session.initialize']).toMatch(/^skipped: no session: the backend refused/);
    const none = await judged({
      hello: { text: undefined, protocolVersion: 1 },
      refused: 'no hello within 10000 ms',
      failure: { stage: 'hello', reason: 'refused' },
    });
    expect(none['session.hello']).toBe('failed: expected a hello, got no hello within 10000 ms');
    expect(none['session.hello-transport']).toMatch(/^skipped/);
  });

  it('over MQTT skips the hello checks, saying why, and still judges initialize and the walk', async () => {
    // A session over MQTT: no hello at all (the server records "" for it), MCP from the start.
    const frames = [out(1, 'initialize'), reply(1, INIT), ...walk({ tools: ['a', 'b'] })];
    const mqtt = await judged({
      transport: 'mqtt',
      hello: { text: '', protocolVersion: 3 },
      ready: true,
      frames,
    });
    const why = 'skipped: over MQTT MCP needs no hello (docs/protocol.md §5)';
    expect(mqtt).toEqual({
      'session.hello': why,
      'session.hello-version': why,
      'session.hello-mcp': why,
      'session.hello-transport': why,
      'session.initialize': 'passed: serverInfo "bread-compact-wifi" "2.4.2"',
      'session.tools-walk': 'passed: 1 page(s) in the plain and user-tool walks',
    });
    // Still failed over MQTT: an initialize reply without serverInfo, a reply under another id.
    const broken = await judged({
      transport: 'mqtt',
      hello: { text: '', protocolVersion: 3 },
      frames: [out(1, 'initialize'), reply(1, { protocolVersion: '2024-11-05' })],
      failure: { stage: 'initialize', reason: 'no serverInfo' },
    });
    expect(broken['session.initialize']).toMatch(/^failed: expected serverInfo \{name, version\}/);
    // The same empty hello over WebSocket is a failure.
    const websocket = await judged({ hello: { text: '', protocolVersion: 1 }, frames });
    expect(websocket['session.hello']).toMatch(/^failed: expected a JSON hello/);
  });
});

// ---- The watch -------------------------------------------------------------------------------

class FakeSession extends EventEmitter {
  closed = false;
  readonly info = { helloText: HELLO, protocolVersion: 1 };
  constructor(readonly transport: 'websocket' | 'mqtt' = 'websocket') {
    super();
  }
}

class FakeRegistry extends EventEmitter {
  record: unknown;
  get(): unknown {
    return this.record;
  }
}

function watching(replyMs = 1000) {
  const registry = new FakeRegistry();
  const watch = new SessionWatch(
    registry as unknown as DeviceRegistry,
    'aa:bb:cc:dd:ee:ff',
    replyMs,
  );
  const session = new FakeSession();
  const record = { deviceId: 'aa:bb:cc:dd:ee:ff', session };
  registry.emit('connected', record);
  return { registry, watch, session, record };
}

describe('SessionWatch', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('settles at once on a reply under another id than the one awaited', async () => {
    const { watch, session } = watching();
    session.emit('frame', 'out', out(1, 'initialize').text);
    session.emit('frame', 'in', reply(7, INIT).text);
    const seen = await watch.outcome;
    expect(seen.ready).toBe(false);
    expect(seen.failure).toEqual({
      stage: 'initialize',
      reason: 'a reply with id 7, expected 1 (initialize)',
    });
    expect(seen.hello?.text).toBe(HELLO);
    expect(seen.frames).toHaveLength(2);
  });

  it('settles when a reply does not come within its bound, naming the request', async () => {
    vi.useFakeTimers();
    const { watch, session } = watching(500);
    session.emit('frame', 'out', out(1, 'initialize').text);
    session.emit('frame', 'in', reply(1, INIT).text);
    session.emit('frame', 'out', out(2, 'tools/list').text);
    await vi.advanceTimersByTimeAsync(499);
    session.emit('frame', 'out', out(3, 'tools/list').text);
    await vi.advanceTimersByTimeAsync(1);
    const seen = await watch.outcome;
    expect(seen.failure).toEqual({
      stage: 'tools',
      reason: 'no reply to tools/list (id 2) within 500 ms',
    });
  });

  it('settles on ready, on the backend failing the session, and on a refused hello', async () => {
    const ready = watching();
    ready.registry.emit('ready', ready.record);
    expect((await ready.watch.outcome).ready).toBe(true);

    const failed = watching();
    failed.registry.emit('session-failed', failed.record, 'tools', new Error('PAGE_LOOP: x'));
    expect((await failed.watch.outcome).failure).toEqual({
      stage: 'tools',
      reason: 'PAGE_LOOP: x',
    });

    const registry = new FakeRegistry();
    const watch = new SessionWatch(registry as unknown as DeviceRegistry, 'AA:BB:CC:DD:EE:FF');
    registry.emit('hello-refused', {
      deviceId: 'aa:bb:cc:dd:ee:01',
      text: '{}',
      reason: 'other board',
      protocolVersion: 1,
    });
    registry.emit('hello-refused', {
      deviceId: 'aa:bb:cc:dd:ee:ff',
      text: '{"type":"hello"}',
      reason: 'hello.transport must be a string',
      protocolVersion: 1,
    });
    const seen = await watch.outcome;
    expect(seen.refused).toBe('hello.transport must be a string');
    expect(seen.hello?.text).toBe('{"type":"hello"}');
  });

  it('says how the session ran; fresh, it ignores a session open before it (a board about to reconnect)', async () => {
    const registry = new FakeRegistry();
    const old = new FakeSession('websocket');
    registry.record = { deviceId: 'aa:bb:cc:dd:ee:ff', session: old, ready: true };
    const watch = new SessionWatch(
      registry as unknown as DeviceRegistry,
      'aa:bb:cc:dd:ee:ff',
      1000,
      { fresh: true },
    );
    // The old session's end settles nothing: the watch waits for the next one.
    old.emit('closed', 'reset');
    const session = new FakeSession('mqtt');
    const record = { deviceId: 'aa:bb:cc:dd:ee:ff', session };
    registry.emit('connected', record);
    registry.emit('ready', record);
    const seen = await watch.outcome;
    expect(seen).toMatchObject({ ready: true, transport: 'mqtt' });
    expect(seen.late).toBeUndefined();
    // Not fresh: the open, ready session is taken as it stands.
    const late = new SessionWatch(registry as unknown as DeviceRegistry, 'aa:bb:cc:dd:ee:ff');
    expect(await late.outcome).toMatchObject({ ready: true, late: true, transport: 'websocket' });
  });

  it('settles when the board closes the session, marked closed', async () => {
    const { watch, session } = watching();
    session.emit('frame', 'out', out(1, 'initialize').text);
    session.emit('closed', 'connection dropped');
    expect((await watch.outcome).failure).toEqual({
      stage: 'initialize',
      reason: 'the board closed the session (connection dropped)',
      closed: true,
    });
  });
});
