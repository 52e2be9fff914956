// `npm run fuzz`: the hostile-input properties of src/hostile-input.test.ts with many cases, run
// by @xiaozhi-mcp/fuzz-kit's runner (its README lists the options, printout and exit codes).
//
//   npm run fuzz -- [--cases N] [--seed S] [--target mcp-firmware,mcp-strict,board] [--threshold-ms 50]
//   node fuzz/dist/run.js [options]                (once `npm run fuzz` has compiled it)
import { ProcessWatch, runFuzz } from '@xiaozhi-mcp/fuzz-kit';
import { BoardWorld, deviceTargets } from './targets.js';

await runFuzz({
  name: '@xiaozhi-mcp/device',
  // The device's share of the 100,000 cases of the root `npm run fuzz`.
  defaultCases: 30_000,
  async start() {
    const watch = new ProcessWatch().start();
    const world = await BoardWorld.start(watch);
    return {
      targets: deviceTargets(world),
      watch,
      heal: async () => {
        await world.connection();
      },
      close: () => world.close(),
    };
  },
});
