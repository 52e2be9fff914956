import { SerialPortMock } from 'serialport';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { LinePlatform } from '../line-steps.js';
import { lineSetterFor } from '../line-steps.js';
import type { PortProvider, ResolvedPort } from '../port-provider.js';
import type { SerialBinding } from '../web-serial.js';
import type { SerialCommandContext } from './context.js';
import { monitorCommand } from './monitor.js';

// Watch which platform the monitor plays its line steps for; the lines still move.
vi.mock('../line-steps.js', async (importOriginal) => {
  const actual = await importOriginal<typeof import('../line-steps.js')>();
  return { ...actual, lineSetterFor: vi.fn(actual.lineSetterFor) };
});

const MockBinding = SerialPortMock.binding;
beforeEach(() => {
  MockBinding.reset();
  vi.mocked(lineSetterFor).mockClear();
});
afterEach(() => MockBinding.reset());

function contextWith(linePlatform: LinePlatform | undefined): SerialCommandContext {
  const provider: PortProvider = {
    prefix: 'fake:',
    listing: () => ({
      boards: [],
      json: {},
      none: 'none',
      selectorHint: 'fake:<name>',
      createHint: 'none',
    }),
    resolve: async (selector) => {
      const path = `/dev/${selector.slice('fake:'.length)}`;
      MockBinding.createPort(path);
      return {
        binding: MockBinding as unknown as SerialBinding,
        path,
        info: { path, kind: 'usb-uart' },
        label: selector,
        ...(linePlatform === undefined ? {} : { linePlatform }),
        present: async () => true,
        refind: async () => ({ path, info: { path, kind: 'usb-uart' } }),
        dispose: () => {},
      } satisfies ResolvedPort;
    },
  };
  return {
    program: 'xiaozhi-mcp',
    out: { stdout: () => {}, stderr: () => {} },
    providers: [provider],
    lister: async () => [],
  };
}

describe("monitor plays its line steps for the port's line platform", () => {
  it('--reset on a port that writes RTS then DTR is planned for win32; a local one for this host', async () => {
    expect(
      await monitorCommand(contextWith('win32'), { port: 'fake:a', reset: true, timeout: '0.2' }),
    ).toBe(0);
    expect(vi.mocked(lineSetterFor).mock.calls.map(([, options]) => options)).toEqual([
      { platform: 'win32' },
    ]);
    vi.mocked(lineSetterFor).mockClear();
    expect(
      await monitorCommand(contextWith(undefined), { port: 'fake:b', reset: true, timeout: '0.2' }),
    ).toBe(0);
    expect(vi.mocked(lineSetterFor).mock.calls.map(([, options]) => options)).toEqual([{}]);
  });
});

describe('monitor --click on a port whose server plays resets itself', () => {
  it('is refused as bad usage (exit 2) before the port is opened', async () => {
    const opened: string[] = [];
    const stderr: string[] = [];
    const path = 'rfc2217://127.0.0.1:2217';
    const context: SerialCommandContext = {
      ...contextWith(undefined),
      out: { stdout: () => {}, stderr: (text) => stderr.push(text) },
      providers: [
        {
          prefix: 'fake:',
          listing: () => ({
            boards: [],
            json: {},
            none: 'none',
            selectorHint: 'fake:<name>',
            createHint: 'none',
          }),
          resolve: async () => ({
            binding: {
              list: async () => [],
              open: async (options: { path: string }) => {
                opened.push(options.path);
                throw new Error('not to be opened');
              },
            } as unknown as SerialBinding,
            path,
            info: { path, kind: 'unknown' },
            label: path,
            linePlatform: 'win32',
            lineControl: 'resets',
            present: async () => true,
            refind: async () => ({ path, info: { path, kind: 'unknown' } }),
            dispose: () => {},
          }),
        },
      ],
    };
    expect(await monitorCommand(context, { port: 'fake:esp', click: true, timeout: '1' })).toBe(2);
    expect(opened).toEqual([]);
    expect(stderr.join('')).toMatch(
      /--click needs DTR to reach GPIO0 alone; rfc2217:\/\/127\.0\.0\.1:2217 is served by an RFC 2217 server that plays esptool's resets itself .*press the BOOT button by hand/,
    );
  });
});
