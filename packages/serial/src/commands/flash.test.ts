import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SerialError } from '../errors.js';
import { flasherFor } from '../flash-image.js';
import type { LinePlatform } from '../line-steps.js';
import type { PortProvider, ResolvedPort } from '../port-provider.js';
import type { SerialCommandContext } from './context.js';
import { flashCommand } from './flash.js';
import { provisionCommand } from './provision.js';

// The flasher is where the port's line platform goes; the test stops there.
vi.mock('../flash-image.js', async (importOriginal) => {
  const actual = await importOriginal<typeof import('../flash-image.js')>();
  return {
    ...actual,
    flasherFor: vi.fn(() => {
      throw new SerialError('FLASH_FAILED', 'stopped by the test');
    }),
  };
});

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'serial-flash-cmd-'));
  vi.mocked(flasherFor).mockClear();
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** A context whose `fake:` board has the given line platform (an rfc2217:// port's is win32). */
function contextWith(linePlatform: LinePlatform | undefined) {
  const stderr: string[] = [];
  const provider: PortProvider = {
    prefix: 'fake:',
    listing: () => ({
      boards: [],
      json: {},
      none: 'none',
      selectorHint: 'fake:<name>',
      createHint: 'none',
    }),
    resolve: async (selector) =>
      ({
        binding: {} as ResolvedPort['binding'],
        path: selector,
        info: { path: selector, kind: 'usb-uart' },
        label: selector,
        ...(linePlatform === undefined ? {} : { linePlatform }),
        present: async () => true,
        refind: async () => ({ path: selector, info: { path: selector, kind: 'usb-uart' } }),
        dispose: () => {},
      }) satisfies ResolvedPort,
  };
  const context: SerialCommandContext = {
    program: 'xiaozhi-mcp',
    out: { stdout: () => {}, stderr: (t) => stderr.push(t) },
    providers: [provider],
    lister: async () => [],
  };
  return { context, stderr };
}

const platformsPassed = () =>
  vi.mocked(flasherFor).mock.calls.map(([, options]) => options?.platform);

describe("flash and provision pass the port's line platform to the flasher", () => {
  it('flash: win32 for a port that writes RTS then DTR, nothing for a local one', async () => {
    const file = join(dir, 'data.bin');
    writeFileSync(file, Uint8Array.of(1, 2, 3, 4));
    const remote = contextWith('win32');
    expect(await flashCommand(remote.context, file, { port: 'fake:a', offset: '0x10000' })).toBe(1);
    expect(remote.stderr.join('')).toMatch(/stopped by the test/);
    const local = contextWith(undefined);
    expect(await flashCommand(local.context, file, { port: 'fake:b', offset: '0x10000' })).toBe(1);
    expect(platformsPassed()).toEqual(['win32', undefined]);
  });

  it('provision: the same', async () => {
    const settings = { ssid: 'lab', password: 'secret12', otaUrl: 'http://10.0.0.2:8080/ota/' };
    expect(
      await provisionCommand(contextWith('win32').context, { port: 'fake:a', ...settings }),
    ).toBe(1);
    expect(
      await provisionCommand(contextWith(undefined).context, { port: 'fake:b', ...settings }),
    ).toBe(1);
    expect(platformsPassed()).toEqual(['win32', undefined]);
  });
});

describe('a missing port', () => {
  it("is suggested the listing command of the program that failed, never another program's", async () => {
    const file = join(dir, 'data.bin');
    writeFileSync(file, Uint8Array.of(1, 2, 3, 4));
    const missing = join(dir, 'ttyNOPE9');
    const run = async (context: Partial<SerialCommandContext> & { program: string }) => {
      const stderr: string[] = [];
      const code = await flashCommand(
        {
          out: { stdout: () => {}, stderr: (t) => stderr.push(t) },
          lister: async () => [],
          ...context,
        },
        file,
        { port: missing, offset: '0x10000' },
      );
      return { code, stderr: stderr.join('') };
    };
    const cli = await run({ program: 'xiaozhi-mcp' });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toMatch(
      /^xiaozhi-mcp: flash .*ttyNOPE9: no serial port matches .*; check the cable, or run `xiaozhi-mcp ports` to see what is attached\n$/,
    );
    const hil = await run({ program: 'hil', listCommand: 'hil boards', portExitCode: 3 });
    expect(hil.code).toBe(3);
    expect(hil.stderr).toMatch(
      /^hil: flash .*ttyNOPE9: no serial port matches .*; check the cable, or run `hil boards` to see what is attached\n$/,
    );
  }, 20_000);
});
