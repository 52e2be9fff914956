// Hostile input from a backend never crashes the device SDK. The properties of
// fuzz/targets.ts, with a fixed seed and a few runs each; `npm run fuzz` runs the same ones
// with many more cases.

import { fuzzProperty, ProcessWatch } from '@xiaozhi-mcp/fuzz-kit';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { BoardWorld, boardTarget, mcpTarget } from '../fuzz/targets.js';

const watch = new ProcessWatch();
let world: BoardWorld;

beforeAll(async () => {
  watch.start();
  world = await BoardWorld.start(watch);
});

afterAll(async () => {
  await world?.close();
  watch.stop();
});

describe('hostile input, fixed seed', () => {
  it('e. McpServer, firmware profile: never throws; every reply is readable or the request is dropped', async () => {
    await fc.assert(fuzzProperty(mcpTarget('firmware'), watch), { seed: 12, numRuns: 500 });
  });

  it('e. McpServer, strict profile: never throws; every reply is readable', async () => {
    await fc.assert(fuzzProperty(mcpTarget('strict'), watch), { seed: 12, numRuns: 300 });
  });

  it("e'. virtual board: hostile backend frames never throw; it still answers tools/call", async () => {
    await fc.assert(fuzzProperty(boardTarget(world), watch), { seed: 12, numRuns: 150 });
  });
});
