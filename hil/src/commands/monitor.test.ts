import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type ResolvedVirtual,
  VirtualBoardStore,
  type VirtualBoardStoreOptions,
} from '@xiaozhi-mcp/device';
import { FAST_TIMING, TestBackend } from '@xiaozhi-mcp/device/testing';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import {
  ConsolePrinter,
  flashCommand,
  monitorCommand,
  provisionCommand,
  type SerialCommandContext,
  useColor,
} from '@xiaozhi-mcp/serial/commands';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../cli.js';

let dir: string;
let backend: TestBackend;
/** What the backend's OTA endpoint answers: our WebSocket URL, or a firmware offer that crashes. */
let otaMode: 'normal' | 'crash' = 'normal';

function capture(
  extra: Partial<SerialCommandContext> & {
    onBoard?: (virtual: ResolvedVirtual) => void;
    /** More options for the store of virtual boards (e.g. `usb: 'native'`). */
    store?: Omit<VirtualBoardStoreOptions, 'dir' | 'timing' | 'onBoard'>;
    /** Sees each note as it is written (an event to act on, rather than a sleep). */
    onStderr?: (text: string) => void;
  } = {},
) {
  const { onBoard, store, onStderr, ...rest } = extra;
  const out = { stdout: '', stderr: '' };
  const context: SerialCommandContext = {
    program: 'xiaozhi-mcp',
    out: {
      stdout: (t) => (out.stdout += t),
      stderr: (t) => {
        out.stderr += t;
        onStderr?.(t);
      },
    },
    env: {},
    lister: async () => [],
    providers: [
      new VirtualBoardStore({
        dir: join(dir, 'virtual'),
        timing: FAST_TIMING,
        ...store,
        ...(onBoard === undefined ? {} : { onBoard }),
      }),
    ],
    ...rest,
  };
  return { context, out };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'hil-monitor-'));
  backend = await TestBackend.start({
    otaReply: (_request, self) =>
      otaMode === 'crash'
        ? // `std::stoi("x")` in the firmware's version comparison: an abort.
          { body: { firmware: { version: 'x.1', url: self.fileUrl('fw.bin') } } }
        : {
            body: {
              websocket: { url: self.wsUrl, token: 'test-token', version: 1 },
              server_time: { timestamp: Date.now(), timezone_offset: 480 },
            },
          },
  });
  const file = join(dir, 'merged.bin');
  writeFileSync(
    file,
    buildVirtualFirmware({ chip: 'esp32s3', version: '2.7.0', board: 'bread-compact-wifi' }).merged,
  );
  const { context, out } = capture();
  expect(await flashCommand(context, file, { create: true, port: 'virtual:desk' })).toBe(0);
  expect(
    await provisionCommand(context, {
      port: 'virtual:desk',
      ssid: 'lab',
      password: 'pw',
      otaUrl: backend.otaUrl,
    }),
  ).toBe(0);
  expect(out.stderr).toBe('');
}, 60_000);

afterAll(async () => {
  await backend?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('ConsolePrinter', () => {
  const dump = [
    'I (1821) Ota: Current version: 2.7.0',
    "Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.",
    '',
    'Core  1 register dump:',
    'Backtrace: 0x4037a1f3:0x3fcb7b90 0x4037f2a1:0x3fcb7bb0',
    'Rebooting...',
    'ESP-ROM:esp32s3-20210327',
    'rst:0xc (RTC_SW_CPU_RST),boot:0x8 (SPI_FAST_FLASH_BOOT)',
  ];

  it('marks a panic dump with !! where there is no colour', () => {
    let text = '';
    const printer = new ConsolePrinter({ color: false, write: (t) => (text += t) });
    const reports = dump.map((line) => printer.line(line).report).filter((r) => r !== undefined);
    expect(text.split('\n')).toEqual([
      'I (1821) Ota: Current version: 2.7.0',
      "!! Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.",
      '!! ',
      '!! Core  1 register dump:',
      '!! Backtrace: 0x4037a1f3:0x3fcb7b90 0x4037f2a1:0x3fcb7bb0',
      '!! Rebooting...',
      'ESP-ROM:esp32s3-20210327',
      'rst:0xc (RTC_SW_CPU_RST),boot:0x8 (SPI_FAST_FLASH_BOOT)',
      '',
    ]);
    expect(reports).toMatchObject([{ panic: 'guru', backtrace: ['0x4037a1f3', '0x4037f2a1'] }]);
  });

  it('paints it red in colour, and passes the firmware colours through', () => {
    let text = '';
    const printer = new ConsolePrinter({ color: true, write: (t) => (text += t) });
    printer.line('\x1b[0;32mI (10) boot: ok\x1b[0m');
    printer.line('abort() was called at PC 0x4037a1f6 on core 1');
    expect(text).toBe(
      '\x1b[0;32mI (10) boot: ok\x1b[0m\n\x1b[31mabort() was called at PC 0x4037a1f6 on core 1\x1b[0m\n',
    );
    let plain = '';
    new ConsolePrinter({ color: false, write: (t) => (plain += t) }).line(
      '\x1b[0;32mI (10) boot: ok\x1b[0m',
    );
    expect(plain).toBe('I (10) boot: ok\n');
  });

  it('uses colour on a terminal or with FORCE_COLOR', () => {
    expect(useColor({ isTTY: true }, {})).toBe(true);
    expect(useColor({ isTTY: false }, {})).toBe(false);
    expect(useColor(undefined, { FORCE_COLOR: '1' })).toBe(true);
    expect(useColor({ isTTY: true }, { FORCE_COLOR: '0' })).toBe(false);
    expect(useColor({ isTTY: true }, { NO_COLOR: '1' })).toBe(false);
  });
});

describe('monitor against a virtual port', () => {
  it('boots the flashed, provisioned board in this process until a line matches', {
    timeout: 30_000,
  }, async () => {
    const before = backend.otaRequests.length;
    const { context, out } = capture();
    const code = await monitorCommand(context, {
      port: 'virtual:desk',
      until: 'StateMachine: State: activating -> idle',
      timeout: '20',
    });
    expect(code).toBe(0);
    expect(out.stdout).toMatch(/^I \(\d+\) app_init: App version: {6}2\.7\.0$/m);
    expect(out.stdout.trimEnd().split('\n').at(-1)).toMatch(
      /StateMachine: State: activating -> idle$/,
    );
    expect(out.stderr).toMatch(
      /^--- monitor virtual:desk at 115200 baud until 20 s or a line matching \/StateMachine: State: activating -> idle\/ or Ctrl-C ---$/m,
    );
    expect(out.stderr).toMatch(/^--- matched .* \(\d+\.\d s, \d+ lines, no panic\) ---$/m);
    expect(backend.otaRequests.length).toBe(before + 1);
    expect(backend.otaRequests.at(-1)?.headers['user-agent']).toBe('bread-compact-wifi/2.7.0');
  });

  it('shows the boot from the ROM on with --reset, and clicks BOOT once idle', {
    timeout: 30_000,
  }, async () => {
    const sessions = backend.connections.length;
    const { context, out } = capture();
    const code = await monitorCommand(context, {
      port: 'virtual:desk',
      reset: true,
      click: true,
      until: 'WS: Session ID',
      timeout: '20',
    });
    expect(out.stderr).not.toMatch(/^xiaozhi-mcp:/m);
    expect(code).toBe(0);
    expect(out.stdout).toMatch(/^ESP-ROM:esp32s3-\d+$/m);
    expect(out.stdout).toMatch(/^rst:0x[0-9a-f]+ \(\w+\),boot:0x8 \(SPI_FAST_FLASH_BOOT\)$/m);
    expect(out.stderr).toMatch(/^--- BOOT click sent \(GPIO0 low for 100 ms through DTR\) ---$/m);
    expect(backend.connections.length).toBe(sessions + 1);
    expect(backend.connections.at(-1)?.upgrade.headers['device-id']).toMatch(/^f4:12:fa:/);
  });

  it('highlights a panic and counts it', { timeout: 30_000 }, async () => {
    otaMode = 'crash';
    try {
      const { context, out } = capture();
      const code = await monitorCommand(context, {
        port: 'virtual:desk',
        until: '^Rebooting\\.\\.\\.$',
        timeout: '20',
      });
      expect(code).toBe(0);
      expect(out.stdout).toMatch(/^!! terminate called after throwing .*std::invalid_argument/m);
      expect(out.stdout).toMatch(/^!! abort\(\) was called at PC 0x[0-9a-f]+ on core 1$/m);
      expect(out.stdout).toMatch(/^!! Backtrace: 0x/m);
      expect(out.stdout).toMatch(/^!! Rebooting\.\.\.$/m);
      expect(out.stdout).not.toMatch(/^!! I \(/m);
      expect(out.stderr).toMatch(/, 1 panic: terminate called after throwing/);
    } finally {
      otaMode = 'normal';
    }
  });

  it('stops at --timeout (exit 0), or fails it with --until (exit 1)', {
    timeout: 30_000,
  }, async () => {
    const plain = capture();
    expect(await monitorCommand(plain.context, { port: 'virtual:desk', timeout: '0.5' })).toBe(0);
    expect(plain.out.stderr).toMatch(/^--- timeout \(0\.\d s, \d+ lines, no panic\) ---$/m);
    const waiting = capture();
    expect(
      await monitorCommand(waiting.context, {
        port: 'virtual:desk',
        timeout: '0.5',
        until: 'never printed',
      }),
    ).toBe(1);
    expect(waiting.out.stderr).toMatch(
      /^xiaozhi-mcp: monitor virtual:desk: no console line matched \/never printed\/ within 0\.5 s \(.*\); check the board's log above, or raise --timeout$/m,
    );
  });

  it('stops when asked (Ctrl-C), exit 0', { timeout: 30_000 }, async () => {
    const abort = new AbortController();
    // Ctrl-C once monitor is following the port, however long opening it took.
    const { context, out } = capture({
      signal: abort.signal,
      onStderr: (text) => {
        if (text.startsWith('--- monitor ')) abort.abort();
      },
    });
    const code = await monitorCommand(context, { port: 'virtual:desk' });
    expect(code).toBe(0);
    expect(out.stderr).toMatch(/^--- stopped \(/m);
  });

  it('follows a board that re-enumerates under a new path', { timeout: 30_000 }, async () => {
    let plug: (() => void) | undefined;
    let reset: (() => void) | undefined;
    const { context, out } = capture({
      refindMs: 5000,
      onBoard: ({ binding, device, board }) => {
        // Once monitor has the port: the board drops off the bus.
        binding.once('open', () => {
          setImmediate(() => binding.unplug(device.path, { powerOff: false }));
        });
        plug = () => binding.plug(device, { powerOn: false });
        reset = () => board.reset();
      },
      onStderr: (text) => {
        // Back once monitor waits for it, and reset once monitor follows it again, so there
        // is something new to read.
        if (text.includes('waiting up to 5 s for it to come back')) plug?.();
        if (text.startsWith('--- reconnected on')) reset?.();
      },
    });
    const code = await monitorCommand(context, {
      port: 'virtual:desk',
      until: '^rst:0x',
      timeout: '20',
    });
    expect(out.stderr).not.toMatch(/^xiaozhi-mcp:/m);
    expect(code).toBe(0);
    expect(out.stderr).toMatch(
      /^--- virtual:desk: .*; waiting up to 5 s for it to come back ---\n--- reconnected on \/dev\/ttyVIRT\d+ ---$/m,
    );
  });

  it('reopens a port that comes back busy (ModemManager probing it) and keeps following', {
    timeout: 30_000,
  }, async () => {
    let board: ResolvedVirtual['board'] | undefined;
    const { context, out } = capture({
      refindMs: 5000,
      onBoard: (virtual) => {
        board = virtual.board;
        const { binding, device } = virtual;
        // Once monitor has the port: the board drops off the bus and comes back elsewhere,
        // refusing its first opens there as a port being probed does.
        binding.once('open', () => {
          setImmediate(() => {
            binding.unplug(device.path, { powerOff: false });
            const path = binding.plug(device, { powerOn: false });
            binding.failOpens(path, 2, 'EBUSY');
          });
        });
      },
      onStderr: (text) => {
        if (text.startsWith('--- reconnected on'))
          board?.console.log('I', 'Test', 'read after the reconnect');
      },
    });
    const code = await monitorCommand(context, {
      port: 'virtual:desk',
      until: 'Test: read after the reconnect',
      timeout: '20',
    });
    expect(out.stderr).not.toMatch(/^xiaozhi-mcp:/m);
    expect(code).toBe(0);
    expect(out.stderr).toMatch(
      /^--- virtual:desk: .*; waiting up to 5 s for it to come back ---\n--- reconnected on \/dev\/ttyVIRT\d+ ---$/m,
    );
  });

  it('follows a native-USB board that re-enumerates on --reset, through an EBUSY first open', {
    timeout: 30_000,
  }, async () => {
    let board: ResolvedVirtual['board'] | undefined;
    const { context, out } = capture({
      refindMs: 5000,
      store: { usb: 'native', reenumerateMs: 100 },
      onBoard: (virtual) => {
        board = virtual.board;
        virtual.binding.on('plug', (_device, path) => virtual.binding.failOpens(path, 1, 'EBUSY'));
      },
      onStderr: (text) => {
        if (text.startsWith('--- reconnected on'))
          board?.console.log('I', 'Test', 'read after the reconnect');
      },
    });
    const code = await monitorCommand(context, {
      port: 'virtual:desk',
      reset: true,
      until: 'Test: read after the reconnect',
      timeout: '20',
    });
    expect(out.stderr).not.toMatch(/^xiaozhi-mcp:/m);
    expect(code).toBe(0);
    expect(out.stderr).toMatch(
      /^--- \/dev\/ttyACM0: .*; waiting up to 5 s for it to come back ---\n--- reconnected on \/dev\/ttyACM1 ---$/m,
    );
    expect(board?.bootCount).toBe(2);
  });

  it('says so when the port comes back but stays busy (exit 3 in hil)', {
    timeout: 30_000,
  }, async () => {
    const { context, out } = capture({
      refindMs: 800,
      portExitCode: 3,
      onBoard: ({ binding, device }) => {
        binding.once('open', () => {
          setImmediate(() => {
            binding.unplug(device.path, { powerOff: false });
            binding.failOpens(binding.plug(device, { powerOn: false }), 10_000, 'EBUSY');
          });
        });
      },
    });
    expect(await monitorCommand(context, { port: 'virtual:desk', timeout: '20' })).toBe(3);
    expect(out.stderr).toMatch(
      /^xiaozhi-mcp: monitor virtual:desk: the port was lost \(.*\); it came back as \/dev\/ttyVIRT\d+ but could not be opened within 0\.8 s: \/dev\/ttyVIRT\d+ is busy \(still, after retrying for 0\.\d+ s\): .*ModemManager/m,
    );
  });

  it('gives up on a port that stays away (exit 1; 3 in hil)', { timeout: 30_000 }, async () => {
    const { context, out } = capture({
      refindMs: 500,
      portExitCode: 3,
      onBoard: ({ binding, device }) => {
        // Once monitor has the port: the board drops off the bus, for good.
        binding.once('open', () => {
          setImmediate(() => binding.unplug(device.path, { powerOff: false }));
        });
      },
    });
    expect(await monitorCommand(context, { port: 'virtual:desk', timeout: '20' })).toBe(3);
    expect(out.stderr).toMatch(
      /^xiaozhi-mcp: monitor virtual:desk: the port was lost \(.*\) and did not come back within 0\.5 s: .*; check the cable, then run `xiaozhi-mcp monitor` again$/m,
    );
  });

  it('refuses bad options with exit 2', async () => {
    for (const [options, message] of [
      [{ until: '(' }, /--until "\(" is not a regular expression/],
      [{ timeout: '-1' }, /--timeout must be seconds/],
      [{ baud: '0' }, /--baud must be a baud rate/],
    ] as const) {
      const { context, out } = capture();
      expect(await monitorCommand(context, { port: 'virtual:desk', ...options })).toBe(2);
      expect(out.stderr).toMatch(message);
    }
  });

  it('is registered in the hil CLI; a busy port exits 3 there', { timeout: 30_000 }, async () => {
    const out = { stdout: '', stderr: '' };
    const io = {
      stdout: (t: string) => (out.stdout += t),
      stderr: (t: string) => (out.stderr += t),
    };
    const previous = process.env.XIAOZHI_VIRTUAL_DIR;
    process.env.XIAOZHI_VIRTUAL_DIR = join(dir, 'virtual');
    try {
      // Held until this test lets it go, not for a time a busy machine could outlast.
      const release = new AbortController();
      const holder = capture({ signal: release.signal });
      const held = monitorCommand(holder.context, { port: 'virtual:desk' });
      await until(() => holder.out.stderr.includes('--- monitor virtual:desk'), {
        what: 'the first monitor to follow virtual:desk',
        seen: () => holder.out.stderr,
      });
      expect(await main(['monitor', '--port', 'virtual:desk', '--timeout', '1'], io)).toBe(3);
      expect(out.stderr).toMatch(
        /^hil: monitor virtual:desk: virtual:desk is in use by another process/m,
      );
      release.abort();
      expect(await held).toBe(0);
      expect(await main(['monitor', '--port', 'virtual:desk', '--timeout', '0.5'], io)).toBe(0);
    } finally {
      if (previous === undefined) delete process.env.XIAOZHI_VIRTUAL_DIR;
      else process.env.XIAOZHI_VIRTUAL_DIR = previous;
    }
  });
});
