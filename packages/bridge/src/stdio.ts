/**
 * The bridge over stdio: one MCP server on the process's stdin and stdout (what Claude
 * Desktop and Cursor start as a command). Logs never go to stdout, which carries the protocol.
 */
import type { Readable, Writable } from 'node:stream';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { XiaozhiBridge } from './bridge.js';

/** Longest message read from stdin (the API takes call bodies up to 1 MiB). */
export const MAX_STDIO_MESSAGE_BYTES = 1024 * 1024;

export async function serveStdio(
  bridge: XiaozhiBridge,
  io: { stdin?: Readable; stdout?: Writable } = {},
): Promise<{ close(): Promise<void>; readonly closed: Promise<void> }> {
  const stdin = io.stdin ?? process.stdin;
  const transport = new StdioServerTransport(stdin, io.stdout ?? process.stdout, {
    maxBufferSize: MAX_STDIO_MESSAGE_BYTES,
  });
  const server = bridge.createServer();
  const closed = new Promise<void>((resolve) => {
    const previous = server.onclose;
    server.onclose = () => {
      previous?.();
      resolve();
    };
  });
  await server.connect(transport);
  // The client closing its end of the pipe is the end of the session.
  const onEnd = () => void server.close();
  stdin.once('end', onEnd);
  return {
    closed,
    close: async () => {
      stdin.off('end', onEnd);
      await server.close();
    },
  };
}
