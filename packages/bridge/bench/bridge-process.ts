/**
 * The bridge as a client meets it, in its own process (as `xiaozhi-mcp bridge` runs it): over
 * stdio by default, or over Streamable HTTP with `--http` (the URL printed on stdout). The API
 * token comes from XIAOZHI_TOKEN. Default poll interval, page size and call timeout.
 *
 *   node bench/dist/bridge-process.js <server URL> [--http]
 */
import { serveHttp, serveStdio, XiaozhiBridge } from '@xiaozhi-mcp/bridge';

const [server, mode] = process.argv.slice(2);
if (server === undefined) {
  process.stderr.write('usage: bridge-process.js <server URL> [--http]\n');
  process.exit(2);
}
const token = process.env.XIAOZHI_TOKEN;
const bridge = new XiaozhiBridge({ server, ...(token === undefined ? {} : { token }) });
await bridge.start();
if (mode === '--http') {
  const http = await serveHttp(bridge, { host: '127.0.0.1', port: 0 });
  process.stdout.write(`${http.url}\n`);
  process.stdin.resume();
  process.stdin.once('end', () => {
    void Promise.all([http.close(), bridge.close()]).then(() => process.exit(0));
  });
} else {
  const session = await serveStdio(bridge);
  await session.closed;
  await bridge.close();
}
