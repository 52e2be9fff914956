import { connect, createServer } from 'node:net';
import { until } from '@xiaozhi-mcp/test-kit';
import { SerialPortMock } from 'serialport';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SerialError } from '../errors.js';
import type { PortProvider, ProviderRequest, ResolvedPort } from '../port-provider.js';
import type { SerialBinding } from '../web-serial.js';
import { type SerialCommandContext, SerialCommandError } from './context.js';
import { parseListen, portServeCommand } from './port-serve.js';

const MockBinding = SerialPortMock.binding;

describe('parseListen', () => {
  it('reads HOST:PORT, [IPv6]:PORT, :PORT and PORT; loopback and 2217 by default', () => {
    expect(parseListen(undefined)).toEqual({ host: '127.0.0.1', port: 2217 });
    expect(parseListen('127.0.0.1:4000')).toEqual({ host: '127.0.0.1', port: 4000 });
    expect(parseListen('0.0.0.0:0')).toEqual({ host: '0.0.0.0', port: 0 });
    expect(parseListen('rig-3.lab:2217')).toEqual({ host: 'rig-3.lab', port: 2217 });
    expect(parseListen('[::1]:2217')).toEqual({ host: '::1', port: 2217 });
    expect(parseListen(':4000')).toEqual({ host: '127.0.0.1', port: 4000 });
    expect(parseListen('4000')).toEqual({ host: '127.0.0.1', port: 4000 });
  });

  it('refuses anything else as bad usage', () => {
    for (const bad of [
      '',
      'host',
      'host:',
      'host:port',
      '::1:2217',
      '[::1]',
      '[x]:1',
      'a:70000',
      'a b:1',
    ])
      expect(() => parseListen(bad), bad).toThrow(SerialCommandError);
    expect(() => parseListen('::1:2217')).toThrow(/an IPv6 address goes in brackets/);
    expect(() => parseListen('a:70000')).toThrow(/port 70000 is not 0-65535/);
  });
});

interface Captured {
  context: SerialCommandContext;
  stdout: string[];
  stderr: string[];
  abort: AbortController;
  requests: ProviderRequest[];
  disposed: () => number;
}

/** A context whose `fake:` boards are binding-mock ports; `fail` makes resolve throw. */
function captured(options: { fail?: Error; portExitCode?: number } = {}): Captured {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const abort = new AbortController();
  const requests: ProviderRequest[] = [];
  let disposed = 0;
  const provider: PortProvider = {
    prefix: 'fake:',
    listing: () => ({
      boards: [],
      json: {},
      none: 'no fake board',
      selectorHint: 'fake:<name>',
      createHint: 'make one',
    }),
    async resolve(selector, request) {
      requests.push(request);
      if (options.fail !== undefined) throw options.fail;
      const path = `/dev/${selector.slice('fake:'.length)}`;
      MockBinding.createPort(path, { echo: true });
      const port: ResolvedPort = {
        binding: MockBinding as unknown as SerialBinding,
        path,
        info: { path, kind: 'usb-uart' },
        label: selector,
        provider: 'fake:',
        present: async () => true,
        refind: async () => ({ path, info: { path, kind: 'usb-uart' } }),
        dispose: () => {
          disposed++;
        },
      };
      return port;
    },
  };
  const context: SerialCommandContext = {
    program: 'xiaozhi-mcp',
    out: { stdout: (text) => stdout.push(text), stderr: (text) => stderr.push(text) },
    providers: [provider],
    lister: async () => [],
    signal: abort.signal,
    ...(options.portExitCode === undefined ? {} : { portExitCode: options.portExitCode }),
  };
  return { context, stdout, stderr, abort, requests, disposed: () => disposed };
}

beforeEach(() => MockBinding.reset());
afterEach(() => MockBinding.reset());

describe('port serve', () => {
  it('prints where it serves, logs clients on stderr, and stops with 0 on its signal', async () => {
    const run = captured();
    const done = portServeCommand(run.context, 'fake:desk', { listen: '127.0.0.1:0' });
    await until(() => run.stdout.length > 0, { what: 'where it serves, on stdout' });
    const match = /^serving fake:desk on rfc2217:\/\/127\.0\.0\.1:(\d+)\n$/.exec(
      run.stdout[0] ?? '',
    );
    expect(match, run.stdout[0]).not.toBeNull();
    // An RFC 2217 client (IAC WILL COM-PORT, then a SIGNATURE request) is answered.
    const received: number[] = [];
    const socket = connect({ host: '127.0.0.1', port: Number(match?.[1]) });
    socket.on('data', (chunk: Buffer) => received.push(...chunk));
    socket.write(Buffer.from([255, 251, 44, 255, 250, 44, 0, 255, 240]));
    const signature = Buffer.from('xiaozhi-mcp port serve port=fake:desk kind=usb-uart');
    await until(() => Buffer.from(received).includes(signature), { what: 'the SIGNATURE answer' });
    socket.destroy();
    await until(() => run.stderr.some((line) => /disconnected/.test(line)), {
      what: 'the client logged as disconnected',
    });
    run.abort.abort();
    expect(await done).toBe(0);
    expect(run.stderr.join('')).toMatch(/^--- client 127\.0\.0\.1:\d+ connected ---$/m);
    expect(run.stderr.at(-1)).toBe('--- stopped serving fake:desk ---\n');
    // The board is released when the command ends (its lock, a provided board's power).
    expect(run.disposed()).toBe(1);
    expect(run.requests[0]?.create).toBeUndefined();
  });

  it('passes --create and --board to the provider, as the other commands do', async () => {
    const run = captured();
    run.abort.abort(); // stops as soon as it is serving
    const code = await portServeCommand(run.context, 'fake:new', {
      listen: '127.0.0.1:0',
      create: true,
      board: 'esp32-s3-devkitc',
    });
    expect(code).toBe(0);
    expect(run.requests[0]?.create).toEqual({ board: 'esp32-s3-devkitc' });
  });

  it('exits 2 for a bad --listen or --baud before touching the board', async () => {
    for (const options of [{ listen: 'nowhere' }, { baud: 'fast' }]) {
      const run = captured();
      expect(await portServeCommand(run.context, 'fake:desk', options)).toBe(2);
      expect(run.requests).toEqual([]);
      expect(run.stderr.join('')).toMatch(/^xiaozhi-mcp: port serve fake:desk: --(listen|baud) /);
    }
  });

  it("exits with the context's port code when the board is missing or busy", async () => {
    const busy = captured({
      fail: new SerialError('PORT_BUSY', 'fake:desk is in use by another process (pid 1)'),
      portExitCode: 3,
    });
    expect(await portServeCommand(busy.context, 'fake:desk', { listen: '127.0.0.1:0' })).toBe(3);
    expect(busy.stderr.join('')).toBe(
      'xiaozhi-mcp: port serve fake:desk: fake:desk is in use by another process (pid 1)\n',
    );
    const unknown = captured({
      fail: new SerialCommandError("no fake board 'typo'; add --create to make a new one", 'usage'),
    });
    expect(await portServeCommand(unknown.context, 'fake:typo', {})).toBe(2);
  });

  it('exits 1 when it cannot listen, and releases the board', async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const taken = (blocker.address() as { port: number }).port;
    try {
      const run = captured();
      const code = await portServeCommand(run.context, 'fake:desk', {
        listen: `127.0.0.1:${taken}`,
      });
      expect(code).toBe(1);
      expect(run.stderr.join('')).toContain(
        `xiaozhi-mcp: port serve fake:desk: cannot listen on 127.0.0.1:${taken}: the address is in use`,
      );
      expect(run.stdout).toEqual([]);
      expect(run.disposed()).toBe(1);
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });
});
