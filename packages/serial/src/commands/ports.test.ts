import { createServer, type Socket } from 'node:net';
import { Command } from 'commander';
import { afterEach, describe, expect, it } from 'vitest';
import type { SerialCommandContext } from './context.js';
import { portsCommand, registerPortsCommand } from './ports.js';

function capture(extra: Partial<SerialCommandContext> = {}) {
  const out = { stdout: '', stderr: '' };
  const context: SerialCommandContext = {
    program: 'xiaozhi-mcp',
    out: { stdout: (t) => (out.stdout += t), stderr: (t) => (out.stderr += t) },
    lister: async () => [],
    ...extra,
  };
  return { context, out };
}

const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const stop of stops.splice(0)) await stop();
});

/**
 * An RFC 2217 server that only negotiates (IAC DO 44 for IAC WILL 44, IAC WILL 44 for IAC DO 44)
 * and answers SIGNATURE (IAC SB 44 0 IAC SE) with IAC SB 44 100 <text> IAC SE, and SET-BAUDRATE 0
 * (a query) with 115200.
 */
async function signatureServer(signature: string | undefined): Promise<string> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    let seen = Buffer.alloc(0);
    const done = new Set<string>();
    const answer = (request: number[], reply: number[]) => {
      const key = request.join();
      if (done.has(key) || seen.indexOf(Buffer.from(request)) < 0) return;
      done.add(key);
      socket.write(Uint8Array.from(reply));
    };
    socket.on('data', (chunk: Buffer) => {
      seen = Buffer.concat([seen, chunk]);
      answer([255, 251, 44], [255, 253, 44]);
      answer([255, 253, 44], [255, 251, 44]);
      if (signature !== undefined)
        answer(
          [255, 250, 44, 0, 255, 240],
          [255, 250, 44, 100, ...Buffer.from(signature), 255, 240],
        );
      // SET-BAUDRATE 0 asks for the rate: 115200.
      answer([255, 250, 44, 1, 0, 0, 0, 0, 255, 240], [255, 250, 44, 101, 0, 1, 0xc2, 0, 255, 240]);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  stops.push(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return `rfc2217://127.0.0.1:${(server.address() as { port: number }).port}`;
}

async function deadUrl(): Promise<string> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return `rfc2217://127.0.0.1:${port}`;
}

describe('ports --port rfc2217://', () => {
  it("adds a row per remote port: `port serve`'s label and kind, or another server's signature", async () => {
    const served = await signatureServer('xiaozhi-mcp port serve port=/dev/ttyUSB0 kind=usb-uart');
    const other = await signatureServer('ser2net 4.6');
    const esp = await signatureServer(undefined);
    const { context, out } = capture();
    expect(await portsCommand(context, { port: [`${served},${other}`, esp] })).toBe(0);
    const rows = out.stdout.trimEnd().split('\n');
    expect(rows[0]).toMatch(/^PORT\s+USB ID\s+KIND\s+SERIAL\/MAC\s+DESCRIPTION$/);
    expect(rows[1]).toMatch(
      new RegExp(
        `^${served.replace(/\./g, '\\.')}\\s+-\\s+usb-uart\\s+-\\s+served by xiaozhi-mcp: /dev/ttyUSB0$`,
      ),
    );
    expect(rows[2]).toMatch(/\s+unknown\s+-\s+RFC 2217 server: ser2net 4\.6$/);
    // No SIGNATURE: esp_rfc2217_server, or pyserial's server.
    expect(rows[3]).toMatch(
      /\s+unknown\s+-\s+RFC 2217 server \(no signature\); it plays resets itself, no BOOT click$/,
    );
    expect(out.stderr).toBe('');
  });

  it('an unreachable remote gets its row and a line on stderr, and fails with the port code', async () => {
    const dead = await deadUrl();
    const { context, out } = capture({ portExitCode: 3 });
    expect(await portsCommand(context, { port: [dead] })).toBe(3);
    expect(out.stdout).toMatch(/unreachable: .* refused the connection/);
    expect(out.stderr).toBe(
      `xiaozhi-mcp: ports: ${dead}: ${dead} refused the connection; is \`xiaozhi-mcp port serve\` (or another RFC 2217 server) running there?\n`,
    );
  });

  it('--json has them under rfc2217', async () => {
    const served = await signatureServer(
      'xiaozhi-mcp port serve port=virtual:a kind=usb-serial-jtag',
    );
    const dead = await deadUrl();
    const { context, out } = capture();
    expect(await portsCommand(context, { json: true, port: [served, dead] })).toBe(1);
    const json = JSON.parse(out.stdout) as { ports: unknown[]; rfc2217: unknown[] };
    expect(json.ports).toEqual([]);
    expect(json.rfc2217).toEqual([
      {
        url: served,
        reachable: true,
        signature: 'xiaozhi-mcp port serve port=virtual:a kind=usb-serial-jtag',
        lineControl: 'lines',
        kind: 'usb-serial-jtag',
        label: 'virtual:a',
      },
      { url: dead, reachable: false, error: expect.stringMatching(/refused the connection/) },
    ]);
  });

  it('something other than an rfc2217:// URL is a usage error (exit 2)', async () => {
    const { context, out } = capture();
    expect(await portsCommand(context, { port: ['/dev/ttyUSB0'] })).toBe(2);
    expect(out.stderr).toMatch(
      /^xiaozhi-mcp: ports: --port: "\/dev\/ttyUSB0" is not an RFC 2217 port/,
    );
  });

  it('the option repeats on the command line', async () => {
    const a = await signatureServer('xiaozhi-mcp port serve port=a kind=usb-uart');
    const b = await signatureServer('xiaozhi-mcp port serve port=b kind=usb-uart');
    const { context, out } = capture();
    let code = -1;
    const program = new Command().exitOverride();
    registerPortsCommand(program, context, (c) => {
      code = c;
    });
    await program.parseAsync(['ports', '--port', a, '--port', b], { from: 'user' });
    expect(code).toBe(0);
    expect(out.stdout).toMatch(/served by xiaozhi-mcp: a\n.*served by xiaozhi-mcp: b\n$/);
  });
});
