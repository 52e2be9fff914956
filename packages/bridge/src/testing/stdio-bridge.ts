/**
 * A bare stdio bridge, for tests that need a real process on the other end of a pipe (the
 * CLI's `xiaozhi-mcp bridge` is the command for people):
 *
 *   node dist/testing/stdio-bridge.js <server URL> [device id]
 *
 * The API token, if any, comes from XIAOZHI_MCP_API_TOKEN. Logs go to stderr.
 */
import { XiaozhiBridge } from '../bridge.js';
import { serveStdio } from '../stdio.js';

const [server, device] = process.argv.slice(2);
if (server === undefined) {
  process.stderr.write('usage: stdio-bridge.js <server URL> [device id]\n');
  process.exit(2);
}
const token = process.env.XIAOZHI_MCP_API_TOKEN;
const bridge = new XiaozhiBridge({
  server,
  pollMs: 50,
  ...(device === undefined ? {} : { device }),
  ...(token === undefined ? {} : { token }),
});
try {
  await bridge.start();
} catch (error) {
  process.stderr.write(`stdio-bridge: ${(error as Error).message}\n`);
  process.exit(1);
}
const session = await serveStdio(bridge);
await session.closed;
await bridge.close();
