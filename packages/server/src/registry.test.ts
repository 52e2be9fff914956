/**
 * The registry's memory stays bounded and its identities pinned: offline devices are
 * evicted by age and by count (never a connected one), with their tokens; identical tool lists
 * are shared and released with the last record holding them; OTA history is bounded; a device
 * is pinned to its first Client-Id until it is forgotten.
 */
import { EventEmitter, once } from 'node:events';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import type { WebSocket } from 'ws';
import { deviceSummary } from './api.js';
import { DeviceSession } from './device-session.js';
import { ServerError } from './errors.js';
import { type DeviceRecord, DeviceRegistry, type RegistryOptions } from './registry.js';

const UUID = '6c1f8f0e-0000-4000-8000-00000000a001';
const OTHER_UUID = '6c1f8f0e-0000-4000-8000-00000000b002';
const mac = (i: number) =>
  `f4:12:fa:50:${(i >> 8).toString(16).padStart(2, '0')}:${(i & 255).toString(16).padStart(2, '0')}`;

/** A socket whose device answers `initialize` and `tools/list` (one page) at once. */
class FakeDeviceSocket extends EventEmitter {
  constructor(readonly tools: unknown[]) {
    super();
  }
  send(text: string, callback?: (error?: Error) => void): void {
    callback?.();
    const frame = JSON.parse(text) as {
      session_id: string;
      payload: { id: number; method: string };
    };
    const { id, method } = frame.payload;
    const result =
      method === 'initialize'
        ? {
            protocolVersion: '2024-11-05',
            capabilities: {},
            serverInfo: { name: 'b', version: '1' },
          }
        : { tools: this.tools };
    setImmediate(() =>
      this.emit(
        'message',
        Buffer.from(
          `{"session_id":"${frame.session_id}","type":"mcp","payload":${JSON.stringify({ jsonrpc: '2.0', id, result })}}`,
        ),
        false,
      ),
    );
  }
  terminate(): void {
    setImmediate(() => this.emit('close', 1006));
  }
  ping(): void {}
}

function session(deviceId: string, tools: unknown[], clientId = UUID): DeviceSession {
  return new DeviceSession(
    new FakeDeviceSocket(tools) as unknown as WebSocket,
    {
      deviceId,
      clientId,
      sessionId: `s-${Math.random()}`,
      protocolVersion: 1,
      hello: { type: 'hello', version: 1, transport: 'websocket' } as never,
      helloText: '{}',
      remoteAddress: undefined,
    },
    { callTimeoutMs: 2000 },
  );
}

const tool = (name: string) => ({
  name,
  description: `the ${name} tool`,
  inputSchema: { type: 'object', properties: { value: { type: 'integer' } } },
});

const registries: DeviceRegistry[] = [];
afterEach(() => {
  for (const registry of registries.splice(0)) {
    for (const record of registry.list()) record.session?.close();
    registry.close();
  }
});

function registry(options: RegistryOptions = {}): DeviceRegistry {
  const created = new DeviceRegistry({ offlineDeviceTtlMs: 0, ...options });
  registries.push(created);
  return created;
}

function otaCheck(target: DeviceRegistry, deviceId: string, clientId = UUID): boolean {
  return target.recordOtaCheck({
    at: new Date().toISOString(),
    deviceId,
    clientId,
    board: 'bread-compact-wifi',
    version: '2.4.2',
    elfSha256: undefined,
    remoteAddress: undefined,
    offered: undefined,
    body: { application: { version: '2.4.2' } },
  });
}

async function connect(target: DeviceRegistry, s: DeviceSession): Promise<DeviceRecord> {
  target.attach(s);
  return target.waitForReady(s.info.deviceId, 5000);
}

describe('tool lists', () => {
  it('one device reconnecting with a new tool list each time holds one list', async () => {
    const target = registry();
    for (let i = 0; i < 200; i++) {
      const record = await connect(target, session(mac(1), [tool(`tool_${i}`), tool('common')]));
      expect(record.tools.map((t) => t.name)).toEqual([`tool_${i}`, 'common']);
      expect(target.toolListCount).toBe(1);
    }
  });

  it('is shared by devices that list the same tools, and released with the last of them', async () => {
    const target = registry();
    const a = await connect(target, session(mac(1), [tool('x'), tool('y')]));
    const b = await connect(target, session(mac(2), [tool('x'), tool('y')]));
    expect(b.tools).toBe(a.tools);
    expect(target.toolListCount).toBe(1);
    // The record keeps its tools while offline (the CLI lists them, saying so).
    const disconnected = once(target, 'disconnected');
    a.session?.close();
    await disconnected;
    expect(a.tools.length).toBe(2);
    expect(target.forget(mac(1))).toBe(true);
    expect(target.toolListCount).toBe(1);
    expect(target.forget(mac(2))).toBe(true);
    expect(target.toolListCount).toBe(0);
    expect(target.forget(mac(2))).toBe(false);
  });

  it('boards of one build share one frozen initialize result, page reports and breaches', async () => {
    const target = registry();
    const a = await connect(target, session(mac(1), [tool('x')]));
    const b = await connect(target, session(mac(2), [tool('x')]));
    expect(b.initialize).toBe(a.initialize);
    expect(b.initialize?.serverInfo).toEqual({ name: 'b', version: '1' });
    expect(b.pages).toBe(a.pages);
    expect(a.pages.plain).toHaveLength(1);
    expect(Object.isFrozen(a.pages.plain[0])).toBe(true);
    expect(b.pageViolations).toBe(a.pageViolations);
    expect(a.pageViolations).toEqual([]);
    // The API still lists them as before.
    expect(deviceSummary(b)).toMatchObject({ ready: true, pageViolations: [] });
  });

  it('keeps an OTA check as it came, whatever it shares with the record or other boards', () => {
    const target = registry();
    const seen: unknown[] = [];
    target.on('ota-check', (check) => seen.push(check));
    const userAgent = 'bread-compact-wifi/2.4.2';
    const check = {
      at: new Date().toISOString(),
      deviceId: mac(1).toUpperCase(),
      clientId: UUID,
      board: userAgent.slice(0, userAgent.indexOf('/')),
      version: userAgent.slice(userAgent.indexOf('/') + 1),
      elfSha256: 'ab'.repeat(32),
      remoteAddress: '10.0.0.2',
      offered: undefined,
      body: { application: { version: '2.4.2' } },
    };
    expect(target.recordOtaCheck(check)).toBe(true);
    const record = target.get(mac(1));
    expect(record?.lastOtaCheck).toEqual(check);
    expect(target.otaChecks()).toEqual([check]);
    expect(seen).toEqual([check]);
    expect(record).toMatchObject({
      deviceId: mac(1),
      board: 'bread-compact-wifi',
      version: '2.4.2',
    });
    expect(deviceSummary(record as DeviceRecord).lastOtaCheck).toEqual(check);
  });

  it('a forgotten device that was connected is reported disconnected, then forgotten', async () => {
    const target = registry();
    const record = await connect(target, session(mac(1), [tool('x')]));
    const events: string[] = [];
    target.on('disconnected', (r, reason) => events.push(`disconnected ${r.deviceId} ${reason}`));
    target.on('forgotten', (id, reason) => events.push(`forgotten ${id} ${reason}`));
    expect(target.forget(mac(1), 'gone')).toBe(true);
    expect(events).toEqual([`disconnected ${mac(1)} gone`, `forgotten ${mac(1)} gone`]);
    expect(record.session).toBeUndefined();
    expect(record.disconnectedAt).toBeDefined();
  });

  it('a tool list nested too deep fails the session; the device list stays serialisable', async () => {
    const target = registry();
    let deep: unknown = 1;
    for (let i = 0; i < 40; i++) deep = [deep];
    const failed = once(target, 'session-failed');
    target.attach(session(mac(3), [{ ...tool('deep'), inputSchema: { type: 'object', deep } }]));
    await failed;
    expect(target.get(mac(3))?.ready).toBe(false);
    expect(target.get(mac(3))?.tools).toEqual([]);
    expect(() => JSON.stringify(target.list().map(deviceSummary))).not.toThrow();
  });
});

describe('eviction', () => {
  it('by count: the longest-offline devices go first, with their tokens; a connected one stays', async () => {
    const target = registry({ maxDevices: 3 });
    const forgotten: string[] = [];
    target.on('forgotten', (id) => forgotten.push(id));
    await connect(target, session(mac(0), [tool('x')]));
    for (let i = 1; i <= 5; i++) {
      otaCheck(target, mac(i));
      target.setToken(mac(i), `token-${i}`);
    }
    expect(target.size).toBe(3);
    expect(target.list().map((r) => r.deviceId)).toEqual([mac(0), mac(4), mac(5)]);
    expect(forgotten).toEqual([mac(1), mac(2), mac(3)]);
    expect(target.tokenFor(mac(1))).toBeUndefined();
    expect(target.tokenFor(mac(5))).toBe('token-5');
    // A device seen again moves to the back of the line.
    otaCheck(target, mac(4));
    otaCheck(target, mac(6));
    expect(target.list().map((r) => r.deviceId)).toEqual([mac(0), mac(4), mac(6)]);
  });

  it('by count, with every slot connected: a new device is still taken', async () => {
    const target = registry({ maxDevices: 2 });
    await connect(target, session(mac(0), [tool('x')]));
    await connect(target, session(mac(1), [tool('x')]));
    expect(otaCheck(target, mac(2))).toBe(true);
    expect(target.size).toBe(3);
    expect(target.get(mac(2))).toBeDefined();
  });

  it('by age: offline devices past offlineDeviceTtlMs are swept; a connected one never', async () => {
    const target = registry({ offlineDeviceTtlMs: 40 });
    const live = await connect(target, session(mac(0), [tool('x')]));
    otaCheck(target, mac(1));
    target.setToken(mac(1), 't');
    // The sweep that drops mac(1) comes past the connected device's time too: it stays.
    await until(() => target.get(mac(1)) === undefined, {
      what: 'the sweep to drop the offline device',
    });
    expect(target.list().map((r) => r.deviceId)).toEqual([mac(0)]);
    expect(target.tokenFor(mac(1))).toBeUndefined();
    live.session?.close();
    await until(() => target.size === 0, { what: 'the sweep to drop the last device' });
    expect(target.toolListCount).toBe(0);
  });

  it('keeps a bounded OTA history', () => {
    const target = registry({ otaHistory: 10 });
    for (let i = 0; i < 50; i++) otaCheck(target, mac(i));
    expect(target.otaChecks(1000).map((c) => c.deviceId)).toEqual(
      Array.from({ length: 10 }, (_, i) => mac(40 + i)),
    );
  });
});

describe('identity', () => {
  it('pins a device to its first Client-Id until it is forgotten', async () => {
    const target = registry();
    const record = await connect(target, session(mac(1), [tool('x')]));
    target.setToken(mac(1), 'the-token');
    expect(target.acceptsClient(mac(1), UUID)).toBe(true);
    expect(target.acceptsClient(mac(1), OTHER_UUID)).toBe(false);
    expect(target.acceptsClient(mac(2), OTHER_UUID)).toBe(true);

    // Another Client-Id records nothing, and cannot replace the session.
    expect(otaCheck(target, mac(1), OTHER_UUID)).toBe(false);
    expect(record.clientId).toBe(UUID);
    expect(target.otaChecks()).toEqual([]);
    const intruder = session(mac(1), [tool('evil')], OTHER_UUID);
    expect(() => target.attach(intruder)).toThrow(ServerError);
    expect(intruder.closed).toBe(true);
    expect(target.get(mac(1))?.session?.closed).toBe(false);
    expect(target.get(mac(1))?.tools.map((t) => t.name)).toEqual(['x']);

    const live = record.session;
    expect(target.forget(mac(1))).toBe(true);
    expect(live?.closed).toBe(true);
    expect(target.tokenFor(mac(1))).toBeUndefined();
    expect(otaCheck(target, mac(1), OTHER_UUID)).toBe(true);
    expect(target.get(mac(1))?.clientId).toBe(OTHER_UUID);
  });

  it('a listener that throws is logged; the registry goes on', async () => {
    const logged: string[] = [];
    const target = registry({
      logger: { error: (object) => logged.push(String((object as { err: Error }).err.message)) },
    });
    target.on('ota-check', () => {
      throw new Error('listener bug');
    });
    const after: string[] = [];
    target.on('ota-check', (check) => after.push(check.deviceId));
    expect(otaCheck(target, mac(1))).toBe(true);
    expect(logged).toEqual(['listener bug']);
    expect(after).toEqual([mac(1)]);
  });
});
