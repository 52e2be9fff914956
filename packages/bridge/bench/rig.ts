/**
 * The bench's board side, in its own process: a real `XiaozhiServer` on 127.0.0.1 (port 0,
 * an API token) and one virtual board whose session is open. Prints one JSON line
 * `{base, token, deviceId}` on stdout once the board is ready, and stops when stdin ends.
 *
 *   node bench/dist/rig.js [preset]
 */
import { randomBytes } from 'node:crypto';
import { VirtualBoard } from '@xiaozhi-mcp/device';
import { XiaozhiServer } from '@xiaozhi-mcp/server';

const preset = process.argv[2] ?? 'bread-compact-wifi';
const token = randomBytes(12).toString('hex');
const server = await XiaozhiServer.start({ port: 0, logLevel: 'silent', apiTokens: [token] });
const mac = 'f4:12:fa:be:00:01';
const board = new VirtualBoard({
  mac,
  preset,
  wifi: { ssid: 'bench' },
  otaUrl: server.urls.ota,
  timing: { bootMs: 2, wifiConnectMs: 2, otaRetryMs: 20 },
});
board.powerOn();
await board.waitForState('idle', 30_000);
board.click();
await server.registry.waitForReady(mac, 30_000);
process.stdout.write(`${JSON.stringify({ base: server.urls.http, token, deviceId: mac })}\n`);

process.stdin.resume();
process.stdin.once('end', () => {
  board.powerOff();
  void server.stop().then(() => process.exit(0));
});
