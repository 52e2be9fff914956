// Hostile input never crashes or stalls the RFC 2217 server. The property of fuzz/targets.ts,
// with a fixed seed and a few runs; `npm run fuzz` runs the same one with many more cases.

import { fuzzProperty } from '@xiaozhi-mcp/fuzz-kit';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { rfc2217Target, SerialFuzzWorld } from '../fuzz/targets.js';

let world: SerialFuzzWorld;

beforeAll(async () => {
  world = await SerialFuzzWorld.start();
});

afterAll(async () => {
  await world?.close();
});

describe('hostile input, fixed seed', () => {
  it('RFC 2217 server: hostile Telnet/COM-PORT streams; it lives, answers or drops, holds nothing, serves the next client', async () => {
    await fc.assert(fuzzProperty(rfc2217Target(world), world.watch), { seed: 12, numRuns: 150 });
  }, 120_000);
});
