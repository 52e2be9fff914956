import { mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { failureKind } from './commands/context.js';
import { flasherFor } from './flash-image.js';
import { type PortInfo, portPathIdentity } from './port-info.js';
import type {
  PortProvider,
  ProvidedBoard,
  ProviderRequest,
  ResolvedPort,
} from './port-provider.js';
import { chooseSelector, isBoardPort, providerFor, resolvePort } from './resolve.js';
import { Rfc2217Binding } from './rfc2217/client.js';

let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'serial-resolve-'));
});

afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

const usbPort: PortInfo = {
  path: '/dev/ttyUSB0',
  vendorId: '10c4',
  productId: 'ea60',
  serialNumber: '0001',
  manufacturer: 'Silicon Labs',
  kind: 'usb-uart',
};
const builtIn: PortInfo = { path: '/dev/ttyS0', kind: 'unknown' };

/** A provider of made-up boards (`fake:<name>`): what the device SDK's store is to serial. */
class FakeProvider implements PortProvider {
  readonly prefix = 'fake:';
  readonly requests: { selector: string; request: ProviderRequest }[] = [];
  constructor(readonly names: string[] = []) {}

  listing() {
    return {
      boards: this.names.map(
        (name): ProvidedBoard => ({
          port: `fake:${name}`,
          summary: `fake:${name} (test)`,
          line: `fake:${name}`,
        }),
      ),
      json: { fake: this.names },
      none: 'no fake board',
      selectorHint: 'fake:<name> for a fake board',
      createHint: 'nothing makes one',
    };
  }

  async resolve(selector: string, request: ProviderRequest): Promise<ResolvedPort> {
    this.requests.push({ selector, request });
    return {
      binding: {} as ResolvedPort['binding'],
      path: selector,
      info: { path: selector, kind: 'usb-uart' },
      label: selector,
      provider: this.prefix,
      present: async () => true,
      refind: async () => ({ path: selector, info: { path: selector, kind: 'usb-uart' } }),
      dispose: () => {},
    };
  }
}

describe('resolvePort: real ports', () => {
  it('finds a port through the lister and names it by path', async () => {
    const port = await resolvePort('serial:0001', { lister: async () => [usbPort] });
    expect(port).toMatchObject({ path: '/dev/ttyUSB0', label: '/dev/ttyUSB0', info: usbPort });
    expect(port.provider).toBeUndefined();
    port.dispose();
    port.dispose(); // nothing to release; twice is fine
  });

  it('uses an existing tty no listing knows (a pty), and fails clearly for a missing one', async () => {
    const pty = join(dir, 'ttyFAKE');
    writeFileSync(pty, '');
    const port = await resolvePort(pty, { lister: async () => [], findTimeoutMs: 0 });
    expect(port.info).toEqual({ path: pty, kind: 'unknown' });
    expect(await port.present(pty)).toBe(true);
    expect(await port.present(join(dir, 'gone'))).toBe(false);
    await expect(port.refind(0)).rejects.toMatchObject({
      code: 'PORT_NOT_FOUND',
      message: `${pty} went away and has no USB serial number or USB location to find it again by`,
    });
    // The program that asks says how its user lists the ports; no program, no command named.
    await expect(
      resolvePort('/dev/ttyUSB9', { lister: async () => [usbPort], findTimeoutMs: 0 }),
    ).rejects.toMatchObject({
      code: 'PORT_NOT_FOUND',
      message: expect.stringMatching(/^no serial port matches \/dev\/ttyUSB9.*; check the cable$/),
    });
    await expect(
      resolvePort('/dev/ttyUSB9', {
        lister: async () => [usbPort],
        findTimeoutMs: 0,
        listCommand: 'hil boards',
      }),
    ).rejects.toMatchObject({
      code: 'PORT_NOT_FOUND',
      message: expect.stringMatching(
        /no serial port matches \/dev\/ttyUSB9.*; check the cable, or run `hil boards` to see what is attached$/,
      ),
    });
    await expect(resolvePort('ttyUSB0', { lister: async () => [] })).rejects.toMatchObject({
      code: 'OPTION_INVALID',
      message: expect.stringMatching(/port selector 'ttyUSB0'/),
    });
  });

  it('finds the same device again by serial number after it re-enumerates', async () => {
    let ports = [usbPort];
    const port = await resolvePort('serial:0001', { lister: async () => ports });
    ports = [{ ...usbPort, path: '/dev/ttyUSB1' }];
    expect(await port.refind(0)).toMatchObject({ path: '/dev/ttyUSB1' });
  });

  it('finds a CH340 board (no serial number) again by its USB location', async () => {
    const ch340: PortInfo = {
      path: '/dev/ttyUSB3',
      byPathPath: `/dev/serial/by-path/${SOCKET_1}`,
      vendorId: '1a86',
      productId: '7523',
      kind: 'usb-uart',
    };
    const twin: PortInfo = {
      ...ch340,
      path: '/dev/ttyUSB4',
      byPathPath: `/dev/serial/by-path/${SOCKET_2}`,
    };
    let ports = [ch340, twin];
    const port = await resolvePort('/dev/ttyUSB3', { lister: async () => ports });
    // It came back under another name, in the same socket; its twin moved too.
    ports = [
      { ...twin, path: '/dev/ttyUSB3' },
      { ...ch340, path: '/dev/ttyUSB5' },
    ];
    expect(await port.refind(0)).toMatchObject({ path: '/dev/ttyUSB5' });
  });
});

const SOCKET_1 = 'pci-0000:00:14.0-usb-0:2.1:1.0-port0';
const SOCKET_2 = 'pci-0000:00:14.0-usb-0:2.2:1.0-port0';

describe('resolvePort: one run per board, whichever selector names it', () => {
  const board: PortInfo = { ...usbPort, serialNumber: 'A1B2C3' };
  const clone = (path: string, socket: string): PortInfo => ({
    ...usbPort,
    path,
    byPathPath: `/dev/serial/by-path/${socket}`,
  });

  it('locks the board itself: serial:, usb: and its path exclude each other until disposed', async () => {
    const lockDir = join(dir, 'locks');
    const options = { lister: async () => [board], lockDir, findTimeoutMs: 0 };
    const held = await resolvePort('serial:a1b2c3', options);
    for (const selector of ['/dev/ttyUSB0', 'usb:10c4:ea60', 'serial:A1B2C3']) {
      const refused = await resolvePort(selector, options).catch((error: unknown) => error);
      expect(refused).toMatchObject({
        code: 'PORT_BUSY',
        message: expect.stringMatching(
          new RegExp(
            `^/dev/ttyUSB0 \\(serial:a1b2c3\\) is in use by another run \\(pid ${process.pid}, this process: .*\\); let it finish or stop it, then try again \\(lock: ${lockDir}/`,
          ),
        ),
      });
      expect(failureKind(refused)).toBe('port');
    }
    held.dispose();
    held.dispose();
    (await resolvePort('/dev/ttyUSB0', options)).dispose();
  });

  it('two CP2102 clones that both report 0001 are two boards; by-path: names one', async () => {
    const a = clone('/dev/ttyUSB0', SOCKET_1);
    const b = clone('/dev/ttyUSB1', SOCKET_2);
    const options = { lister: async () => [a, b], lockDir: join(dir, 'locks'), findTimeoutMs: 0 };
    const first = await resolvePort('/dev/ttyUSB0', options);
    const second = await resolvePort(`by-path:${SOCKET_2}`, options);
    expect(second.path).toBe('/dev/ttyUSB1');
    await expect(resolvePort(`by-path:${SOCKET_1}`, options)).rejects.toMatchObject({
      code: 'PORT_BUSY',
      message: expect.stringContaining(`/dev/ttyUSB0 (by-path:${SOCKET_1}) is in use`),
    });
    first.dispose();
    second.dispose();
  });

  it('a tty no listing knows and a link to it are one board', async () => {
    const pty = join(dir, 'ttyFAKE');
    writeFileSync(pty, '');
    const link = join(dir, 'my-board');
    symlinkSync(pty, link);
    const options = { lister: async () => [], lockDir: join(dir, 'locks') };
    const held = await resolvePort(pty, options);
    await expect(resolvePort(link, options)).rejects.toMatchObject({
      code: 'PORT_BUSY',
      message: expect.stringContaining(`${link} (path:${realpathSync(pty)}) is in use`),
    });
    held.dispose();
    (await resolvePort(link, options)).dispose();
  });

  it('waits lockWaitMs for the board, and stops at the abort', async () => {
    const options = { lister: async () => [board], lockDir: join(dir, 'locks') };
    const held = await resolvePort('serial:A1B2C3', options);
    const waiting = resolvePort('/dev/ttyUSB0', { ...options, lockWaitMs: 60_000 });
    held.dispose();
    (await waiting).dispose();
    const again = await resolvePort('serial:A1B2C3', options);
    const controller = new AbortController();
    const aborted = resolvePort('/dev/ttyUSB0', {
      ...options,
      lockWaitMs: 60_000,
      signal: controller.signal,
    }).catch((error: unknown) => error);
    const reason = new Error('interrupted by Ctrl-C');
    controller.abort(reason);
    expect(await aborted).toBe(reason);
    again.dispose();
  });
});

describe('resolvePort: one port under its several spellings (the host given, not this one)', () => {
  // bindings-cpp on macOS lists the dial-in node (darwin_list.cpp, kIODialinDeviceKey); users,
  // pyserial and esptool name the call-up node.
  const macBoard: PortInfo = {
    path: '/dev/tty.usbmodem1101',
    vendorId: '303a',
    productId: '1001',
    serialNumber: 'F4:12:FA:01:02:03',
    kind: 'usb-serial-jtag',
  };
  const winBoard: PortInfo = {
    path: 'COM10',
    vendorId: '10c4',
    productId: 'ea60',
    serialNumber: 'A1B2C3',
    kind: 'usb-uart',
  };

  it('macOS: /dev/cu.* is the listed /dev/tty.* board: its USB ids, its reset, one lock, found again', async () => {
    let ports = [macBoard];
    const options = {
      lister: async () => ports,
      lockDir: join(dir, 'locks'),
      findTimeoutMs: 0,
      platform: 'darwin' as const,
    };
    const held = await resolvePort('/dev/cu.usbmodem1101', options);
    // The listing's entry, so its kind: a native-USB board gets the USB-JTAG reset, not a click.
    expect(held.info).toMatchObject({ kind: 'usb-serial-jtag', vendorId: '303a' });
    expect(held.path).toBe('/dev/cu.usbmodem1101');
    expect(flasherFor(held, { platform: 'darwin' }).resetPlan.map((step) => step.sequence)).toEqual(
      ['usbJtag'],
    );
    // Every spelling of the board is the same lock.
    for (const selector of ['/dev/tty.usbmodem1101', 'serial:F4:12:FA:01:02:03']) {
      await expect(resolvePort(selector, options)).rejects.toMatchObject({ code: 'PORT_BUSY' });
    }
    // After a reset it re-enumerates; found again, by the path that opens it.
    ports = [{ ...macBoard, path: '/dev/tty.usbmodem1102' }];
    expect(await held.refind(0)).toMatchObject({ path: '/dev/cu.usbmodem1102' });
    held.dispose();
  });

  it('Windows: COM10, com10 and \\\\.\\COM10 are one port, opened as COM10 (bindings-cpp adds \\\\.\\)', async () => {
    const options = {
      lister: async () => [winBoard],
      lockDir: join(dir, 'locks'),
      findTimeoutMs: 0,
      platform: 'win32' as const,
    };
    const held = await resolvePort('\\\\.\\COM10', options);
    expect(held.path).toBe('COM10');
    expect(held.info).toMatchObject({ kind: 'usb-uart', serialNumber: 'A1B2C3' });
    for (const selector of ['com10', 'COM10', 'serial:a1b2c3']) {
      await expect(resolvePort(selector, options)).rejects.toMatchObject({ code: 'PORT_BUSY' });
    }
    held.dispose();
    (await resolvePort('com10', options)).dispose();
  });

  it('the path of a port no listing knows is spelled as it opens, and keyed so', () => {
    expect(portPathIdentity('/dev/tty.usbserial-0001', 'darwin')).toBe('/dev/cu.usbserial-0001');
    expect(portPathIdentity('/dev/cu.usbserial-0001', 'darwin')).toBe('/dev/cu.usbserial-0001');
    expect(portPathIdentity('/dev/ttyUSB0', 'darwin')).toBe('/dev/ttyUSB0');
    expect(portPathIdentity('\\\\.\\com3', 'win32')).toBe('COM3');
    expect(portPathIdentity('COM3', 'win32')).toBe('COM3');
    expect(portPathIdentity('/dev/tty.usbmodem1101', 'linux')).toBe('/dev/tty.usbmodem1101');
    expect(portPathIdentity('com3', 'linux')).toBe('com3');
  });
});

describe('resolvePort: providers', () => {
  it('hands a selector with a provider prefix to that provider, with the request', async () => {
    const fake = new FakeProvider();
    const request: ProviderRequest = { create: { board: 'b', flashSize: '4' } };
    const port = await resolvePort('  FAKE:desk ', {
      providers: [fake],
      request,
      lister: async () => {
        throw new Error('the real ports are not listed for a provided board');
      },
    });
    expect(port).toMatchObject({ path: 'FAKE:desk', provider: 'fake:' });
    expect(fake.requests).toEqual([{ selector: 'FAKE:desk', request }]);
    expect(providerFor('fake:x', [fake])).toBe(fake);
    expect(providerFor('serial:x', [fake])).toBeUndefined();
    expect(providerFor('fake:x')).toBeUndefined();
  });

  it('treats an unregistered prefix as a real selector (an error)', async () => {
    await expect(resolvePort('fake:desk', { lister: async () => [] })).rejects.toMatchObject({
      code: 'OPTION_INVALID',
      message: expect.stringMatching(/unknown prefix 'fake:'/),
    });
  });
});

/**
 * An RFC 2217 server that only negotiates and answers SIGNATURE (RFC 854 / RFC 2217 bytes as
 * literals): IAC DO 44 for IAC WILL 44, IAC WILL 44 for IAC DO 44, and IAC SB 44 100 <text>
 * IAC SE for IAC SB 44 0 IAC SE, and SET-BAUDRATE 0 (a query) with 115200. Enough to learn
 * what it is.
 */
async function signatureServer(signature: string | undefined) {
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
  const { port } = server.address() as { port: number };
  return {
    port,
    connections: () => sockets.size,
    stop: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe('resolvePort: rfc2217:// ports', () => {
  it('probes the server: the kind from its signature, its URL as path and label, lines as on Windows', async () => {
    const server = await signatureServer('xiaozhi-mcp port serve port=virtual:a kind=usb-uart');
    try {
      const port = await resolvePort(` RFC2217://127.0.0.1:${server.port}/ `, {
        lister: async () => {
          throw new Error('no local port is listed for a remote one');
        },
      });
      const url = `rfc2217://127.0.0.1:${server.port}`;
      expect(port).toMatchObject({
        path: url,
        label: url,
        info: { path: url, kind: 'usb-uart' },
        linePlatform: 'win32',
      });
      expect(port.provider).toBeUndefined();
      expect(port.binding).toBeInstanceOf(Rfc2217Binding);
      expect(await port.present(url)).toBe(true);
      expect(await port.refind(1000)).toEqual({ path: url, info: port.info });
      port.dispose();
    } finally {
      await server.stop();
    }
  });

  it('a server without a signature gives a port of unknown kind', async () => {
    const server = await signatureServer(undefined);
    try {
      const url = `rfc2217://127.0.0.1:${server.port}`;
      const port = await resolvePort(url, { rfc2217: { probeTimeoutMs: 300 } });
      expect(port.info).toEqual({ path: url, kind: 'unknown' });
    } finally {
      await server.stop();
    }
  });

  it('refuses a bad URL as OPTION_INVALID (exit 2), before connecting anywhere', async () => {
    for (const bad of [
      'rfc2217://127.0.0.1',
      'rfc2217://h:70000',
      'rfc2217://h:4000/dev/ttyUSB0',
    ]) {
      const error = await resolvePort(bad).catch((e: unknown) => e);
      expect(error, bad).toMatchObject({ code: 'OPTION_INVALID' });
      expect(failureKind(error)).toBe('usage');
    }
  });

  it('a server that is not there is PORT_NOT_FOUND (a port failure), and so is its refind', async () => {
    const server = await signatureServer(undefined);
    const url = `rfc2217://127.0.0.1:${server.port}`;
    const port = await resolvePort(url, { rfc2217: { probeTimeoutMs: 300 } });
    await server.stop();
    expect(await port.present(url)).toBe(false);
    await expect(port.refind(300)).rejects.toMatchObject({
      code: 'PORT_NOT_FOUND',
      message: `${url} did not accept a connection within 0.3 s`,
    });
    // Released, so that the next resolution meets the server, not this run's hold on the board.
    port.dispose();
    const error = await resolvePort(url).catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: 'PORT_NOT_FOUND',
      message: `${url} refused the connection; is \`xiaozhi-mcp port serve\` (or another RFC 2217 server) running there?`,
    });
    expect(failureKind(error)).toBe('port');
  });
});

describe('chooseSelector: --port may be left out when there is one board', () => {
  it('takes --port when given, refusing an empty one', async () => {
    expect(await chooseSelector('fake:x', { providers: [new FakeProvider()] })).toBe('fake:x');
    expect(await chooseSelector('/dev/ttyUSB3', { lister: async () => [] })).toBe('/dev/ttyUSB3');
    const empty = await chooseSelector(' ', {}).catch((error: unknown) => error);
    expect(empty).toMatchObject({ code: 'OPTION_INVALID', message: '--port is empty' });
    expect(failureKind(empty)).toBe('usage');
  });

  it('picks the only board, real or provided; ports without a USB id do not count', async () => {
    expect(await chooseSelector(undefined, { lister: async () => [usbPort, builtIn] })).toBe(
      '/dev/ttyUSB0',
    );
    expect(
      await chooseSelector(undefined, {
        providers: [new FakeProvider(['desk'])],
        lister: async () => [builtIn],
      }),
    ).toBe('fake:desk');
    // A failing listing is no board, not a failure.
    expect(
      await chooseSelector(undefined, {
        providers: [new FakeProvider(['desk'])],
        lister: async () => {
          throw new Error('udevadm: not found');
        },
      }),
    ).toBe('fake:desk');
    expect(isBoardPort(builtIn)).toBe(false);
    expect(isBoardPort({ path: '/dev/ttyACM0', kind: 'unknown', vendorId: '1234' })).toBe(true);
  });

  it('lists the boards when there are several (exit 2)', async () => {
    const several = await chooseSelector(undefined, {
      providers: [new FakeProvider(['a', 'b'])],
      lister: async () => [usbPort],
    }).catch((error: unknown) => error);
    expect(failureKind(several)).toBe('usage');
    expect(several).toMatchObject({
      code: 'OPTION_INVALID',
      message: expect.stringMatching(
        /^3 boards attached: \/dev\/ttyUSB0 \(10c4:ea60.*\); fake:a \(test\); fake:b \(test\); choose one with --port$/,
      ),
    });
  });

  it('says what to do when there is none, naming each provider (a port failure)', async () => {
    const none = await chooseSelector(undefined, {
      providers: [new FakeProvider()],
      lister: async () => [builtIn],
    }).catch((error: unknown) => error);
    expect(failureKind(none)).toBe('port');
    expect(none).toMatchObject({
      code: 'PORT_NOT_FOUND',
      message:
        'no board attached and no fake board; plug a board in, or name one with --port (a path, serial:<sn>, or fake:<name> for a fake board)',
    });
    const bare = await chooseSelector(undefined, { lister: async () => [] }).catch(
      (error: unknown) => error,
    );
    expect(bare).toMatchObject({
      code: 'PORT_NOT_FOUND',
      message: 'no board attached; plug a board in, or name one with --port (a path, serial:<sn>)',
    });
  });
});
