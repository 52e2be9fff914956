import { FirmwareError } from '@xiaozhi-mcp/firmware';
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { SerialError } from '../errors.js';
import { BoardLockError } from '../lock.js';
import type { PortInfo } from '../port-info.js';
import type { PortProvider, ProviderRequest, ResolvedPort } from '../port-provider.js';
import {
  failureKind,
  openCommandPort,
  parseBaud,
  runReported,
  type SerialCommandContext,
  SerialCommandError,
  usageError,
  withPortOptions,
} from './context.js';

function capture(extra: Partial<SerialCommandContext> = {}) {
  const out = { stdout: '', stderr: '' };
  const context: SerialCommandContext = {
    program: 'hil',
    out: { stdout: (t) => (out.stdout += t), stderr: (t) => (out.stderr += t) },
    ...extra,
  };
  return { context, out };
}

describe('runReported: failures', () => {
  it('are one line with the program name, and exit 2, 1 or the port code', async () => {
    const { context, out } = capture({ portExitCode: 3 });
    const fail = (error: unknown) =>
      runReported(
        context,
        () => 'flash /dev/ttyUSB0',
        async () => {
          throw error;
        },
      );
    expect(await fail(new SerialError('PORT_BUSY', '/dev/ttyUSB0 is in use'))).toBe(3);
    expect(out.stderr).toBe('hil: flash /dev/ttyUSB0: /dev/ttyUSB0 is in use\n');
    expect(await fail(new SerialError('PORT_NOT_FOUND', 'gone'))).toBe(3);
    expect(await fail(new SerialError('PORT_DENIED', '/dev/ttyUSB0: permission denied'))).toBe(3);
    expect(await fail(new BoardLockError('board on x is in use by hil (pid 1)'))).toBe(3);
    expect(await fail(new SerialCommandError('lost', 'port'))).toBe(3);
    expect(await fail(new Error('two\nlines'))).toBe(1);
    expect(out.stderr.endsWith('hil: flash /dev/ttyUSB0: two lines\n')).toBe(true);
    expect(await fail(new SerialError('FLASH_FAILED', 'MD5 mismatch'))).toBe(1);
    expect(await fail(new SerialError('CHIP_MISMATCH', 'esp32c3 image'))).toBe(1);
    expect(await fail(new FirmwareError('IMAGE_INVALID', 'bad magic'))).toBe(1);
    expect(await fail(new SerialError('OPTION_INVALID', 'bad selector'))).toBe(2);
    expect(await fail(usageError('--baud must be a baud rate'))).toBe(2);
    expect(await fail('a string')).toBe(1);
    expect(out.stderr.endsWith('hil: flash /dev/ttyUSB0: a string\n')).toBe(true);
    expect(out.stdout).toBe('');
    // One line per failure.
    expect(out.stderr.split('\n')).toHaveLength(12 + 1);
  });

  it('exit 1 for a lost port where the CLI has no port code, and no prefix without a what', async () => {
    const { context, out } = capture();
    expect(
      await runReported(
        context,
        () => '',
        async () => {
          throw new SerialError('PORT_NOT_FOUND', 'no board attached');
        },
      ),
    ).toBe(1);
    expect(out.stderr).toBe('hil: no board attached\n');
    expect(
      await runReported(
        context,
        () => 'x',
        async () => 0,
      ),
    ).toBe(0);
  });

  it('sorts errors of every layer into usage, failed and port', () => {
    expect(failureKind(new SerialCommandError('x', 'usage'))).toBe('usage');
    expect(failureKind(new FirmwareError('OPTION_INVALID', 'x'))).toBe('usage');
    expect(failureKind(new FirmwareError('PACKET_INVALID', 'x'))).toBe('failed');
    expect(failureKind(new SerialError('PORT_BUSY', 'x'))).toBe('port');
    expect(failureKind(new SerialError('PORT_DENIED', 'x'))).toBe('port');
    expect(failureKind(new SerialError('PORT_OPEN_FAILED', 'x'))).toBe('port');
    expect(failureKind(new SerialError('EXPECT_TIMEOUT', 'x'))).toBe('failed');
    expect(failureKind(undefined)).toBe('failed');
  });
});

describe('parseBaud', () => {
  it('takes a rate, and refuses anything else as usage', () => {
    expect(parseBaud('115200')).toBe(115_200);
    expect(() => parseBaud('fast')).toThrow(
      /--baud must be a baud rate such as 115200, got "fast"/,
    );
    expect(() => parseBaud('0', '--monitor-baud')).toThrow(/^--monitor-baud must be/);
    expect(() => parseBaud('1.5')).toThrow(
      expect.objectContaining({ name: 'SerialCommandError', kind: 'usage' }),
    );
  });
});

const usbPort: PortInfo = {
  path: '/dev/ttyUSB0',
  vendorId: '10c4',
  productId: 'ea60',
  serialNumber: '0001',
  kind: 'usb-uart',
};

/** One provided board, `fake:desk`, that notifies on both streams when resolved. */
class FakeProvider implements PortProvider {
  readonly prefix = 'fake:';
  readonly requests: ProviderRequest[] = [];

  listing() {
    return {
      boards: [{ port: 'fake:desk', summary: 'fake:desk (test)', line: 'fake:desk' }],
      json: {},
      none: 'no fake board',
      selectorHint: 'fake:<name>',
      createHint: '',
    };
  }

  async resolve(selector: string, request: ProviderRequest): Promise<ResolvedPort> {
    this.requests.push(request);
    request.notify?.('stdout', `created ${selector}\n`);
    request.notify?.('stderr', `${selector} already exists\n`);
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

describe('openCommandPort', () => {
  it('gives a provider --board and --flash-size, and its notes to stdout and stderr', async () => {
    const fake = new FakeProvider();
    const { context, out } = capture({ providers: [fake], lister: async () => [] });
    let chosen = '';
    const port = await openCommandPort(
      context,
      { board: 'otto-robot', flashSize: '8', create: true },
      (s) => {
        chosen = s;
      },
    );
    expect(chosen).toBe('fake:desk');
    expect(port.label).toBe('fake:desk');
    expect(fake.requests).toMatchObject([{ create: { board: 'otto-robot', flashSize: '8' } }]);
    expect(out.stdout).toBe('created fake:desk\n');
    expect(out.stderr).toBe('hil: note: fake:desk already exists\n');
  });

  it('asks a provider to create only with --create (its defaults apply)', async () => {
    const fake = new FakeProvider();
    const { context, out } = capture({ providers: [fake], lister: async () => [] });
    await openCommandPort(context, { port: 'fake:desk', create: true });
    await openCommandPort(context, { port: 'fake:desk' });
    expect(fake.requests).toHaveLength(2);
    expect(fake.requests[0]).toMatchObject({ create: {} });
    // Without --create a provider must not make a board: a mistyped name would become one.
    expect(fake.requests[1]).not.toHaveProperty('create');
    expect(out.stderr).not.toMatch(/ignored/);
  });

  it('notes --board and --flash-size without --create as ignored for an existing board', async () => {
    const fake = new FakeProvider();
    const { context, out } = capture({ providers: [fake], lister: async () => [] });
    await openCommandPort(context, { port: 'fake:desk', flashSize: '4' });
    expect(fake.requests[0]).not.toHaveProperty('create');
    expect(out.stderr).toMatch(
      /^hil: note: --flash-size applies when --create makes a new board; ignored for fake:desk, which exists\n$/m,
    );
  });

  it('has --create on every board command', () => {
    const command = withPortOptions(new Command('monitor').exitOverride());
    command.parse(['--port', 'virtual:x', '--create'], { from: 'user' });
    expect(command.opts()).toMatchObject({ port: 'virtual:x', create: true });
    expect(command.helpInformation()).toMatch(
      /--create +make virtual:<name> when there is no such board/,
    );
  });

  it('notes that --board and --flash-size are ignored for a real port', async () => {
    const { context, out } = capture({
      providers: [new FakeProvider()],
      lister: async () => [usbPort],
    });
    const port = await openCommandPort(context, { port: 'serial:0001', board: 'otto-robot' });
    expect(port.path).toBe('/dev/ttyUSB0');
    expect(port.provider).toBeUndefined();
    expect(out.stderr).toBe('hil: note: --board is for virtual boards; ignored for /dev/ttyUSB0\n');
    const all = capture({ lister: async () => [usbPort] });
    await openCommandPort(all.context, {
      port: 'serial:0001',
      board: 'otto-robot',
      flashSize: '8',
      create: true,
    });
    expect(all.out.stderr).toBe(
      'hil: note: --board, --flash-size and --create are for virtual boards; ignored for /dev/ttyUSB0\n',
    );
    const quiet = capture({ lister: async () => [usbPort] });
    await openCommandPort(quiet.context, {});
    expect(quiet.out.stderr).toBe('');
  });
});
