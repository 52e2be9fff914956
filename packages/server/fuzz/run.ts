// `npm run fuzz`: the hostile-input properties of src/hostile-input.test.ts with many cases, run
// by @xiaozhi-mcp/fuzz-kit's runner (its README lists the options, printout and exit codes).
//
//   npm run fuzz -- [--cases N] [--seed S] [--target gateway,session,ota,api,mqtt] [--threshold-ms 50]
//   node fuzz/dist/run.js [options]                (once `npm run fuzz` has compiled it)
import { runFuzz } from '@xiaozhi-mcp/fuzz-kit';
import { MqttFuzzWorld, mqttTargets } from './mqtt.js';
import { FuzzWorld, serverTargets } from './targets.js';

await runFuzz({
  name: '@xiaozhi-mcp/server',
  // The server's share of the 100,000 cases of the root `npm run fuzz`.
  defaultCases: 70_000,
  async start() {
    const world = await FuzzWorld.start({ apiCheckEvery: 25 });
    // The embedded MQTT broker has a server of its own (transport mqtt), on the same watch.
    const mqttWorld = await MqttFuzzWorld.start(world.watch);
    return {
      targets: [...serverTargets(world), ...mqttTargets(mqttWorld)],
      watch: world.watch,
      heal: async () => {
        await world.healControl();
        await mqttWorld.healBoard();
      },
      close: async () => {
        await mqttWorld.close();
        await world.close();
      },
    };
  },
});
