// Hostile input never crashes or stalls the server. The properties of fuzz/targets.ts,
// with a fixed seed and a few runs each; `npm run fuzz` runs the same ones with 100,000 cases.

import { fuzzProperty } from '@xiaozhi-mcp/fuzz-kit';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MqttFuzzWorld, mqttTarget } from '../fuzz/mqtt.js';
import {
  apiTarget,
  FuzzWorld,
  gatewayTarget,
  otaTarget,
  sessionTarget,
  takeoverTarget,
} from '../fuzz/targets.js';

let world: FuzzWorld;
let closed = false;

beforeAll(async () => {
  world = await FuzzWorld.start();
});

afterAll(async () => {
  if (!closed) await world?.close();
});

describe('hostile input, fixed seed', () => {
  it('a. gateway: hostile frames over a real WebSocket; the server lives, the control board answers', async () => {
    await fc.assert(fuzzProperty(gatewayTarget(world), world.watch), { seed: 12, numRuns: 200 });
  });

  it("a'. takeover: a second client with a board's Device-Id never gets its tool calls", async () => {
    await fc.assert(fuzzProperty(takeoverTarget(world), world.watch), { seed: 12, numRuns: 30 });
  });

  it('b. DeviceSession: no inbound frame throws out of the handler; the request in flight settles', async () => {
    await fc.assert(fuzzProperty(sessionTarget(), world.watch), { seed: 12, numRuns: 500 });
  });

  it('c. OTA endpoint: a documented status, a bounded body, a safe reply, no token for another Client-Id', async () => {
    await fc.assert(fuzzProperty(otaTarget(world), world.watch), { seed: 12, numRuns: 200 });
  });

  it('d. API: a documented status with a JSON answer, never 500 or a reset; no token or a foreign Origin/Host is refused', async () => {
    await fc.assert(fuzzProperty(apiTarget(world), world.watch), { seed: 12, numRuns: 200 });
  });

  it('e. MQTT broker: hostile packet streams over TCP; it ends the connection, holds nothing, an operator connects, the board keeps its connection', async () => {
    const mqttWorld = await MqttFuzzWorld.start(world.watch);
    try {
      await fc.assert(fuzzProperty(mqttTarget(mqttWorld), world.watch), {
        seed: 12,
        numRuns: 200,
      });
    } finally {
      await mqttWorld.close();
    }
  });

  it('after all that, the server shuts down: no connection is left that it cannot end', async () => {
    // A connection it cannot end would hold this up to the test's own bound, which fails it.
    await expect(world.close()).resolves.toBeUndefined();
    closed = true;
  });
});
