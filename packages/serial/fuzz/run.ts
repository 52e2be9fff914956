// `npm run fuzz`: the hostile-input property of src/hostile-input.test.ts with many cases, run
// by @xiaozhi-mcp/fuzz-kit's runner (its README lists the options, printout and exit codes).
//
//   npm run fuzz -- [--cases N] [--seed S] [--target rfc2217] [--threshold-ms 50]
//   node fuzz/dist/run.js [options]                (once `npm run fuzz` has compiled it)
import { runFuzz } from '@xiaozhi-mcp/fuzz-kit';
import { SerialFuzzWorld, serialTargets } from './targets.js';

await runFuzz({
  name: '@xiaozhi-mcp/serial',
  // Each case is a TCP connection and a second client's: far fewer than the server's frames.
  defaultCases: 5_000,
  async start() {
    const world = await SerialFuzzWorld.start();
    return {
      targets: serialTargets(world),
      watch: world.watch,
      heal: () => world.checkReleased().catch(() => {}),
      close: () => world.close(),
    };
  },
});
