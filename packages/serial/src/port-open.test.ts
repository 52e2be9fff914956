import type { BindingInterface, SetOptions } from '@serialport/bindings-cpp';
import { until } from '@xiaozhi-mcp/test-kit';
import { SerialPortMock } from 'serialport';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SerialError } from './errors.js';
import { lineSetterFor, runLineSteps } from './line-steps.js';
import { portHolders } from './port-holders.js';
import { OPEN_RETRY_MS, openSafely } from './port-open.js';
import { BOOT_CLICK } from './reset/sequences.js';

// Who holds a port is read from /proc (port-holders.test.ts); here it is what the test says.
vi.mock('./port-holders.js', async (importOriginal) => ({
  ...(await importOriginal<typeof import('./port-holders.js')>()),
  portHolders: vi.fn(() => []),
}));

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

// `@serialport/binding-mock`'s MockBinding, reached through `serialport` because the package's
// ESM entry ships no type declarations.
const MockBinding = SerialPortMock.binding;
type MockPort = Awaited<ReturnType<typeof MockBinding.open>>;

/** MockBinding, recording every set() and close() of the ports it opens. */
function recordingBinding(hooks: { set?: (options: SetOptions) => Promise<void> } = {}) {
  const sets: SetOptions[] = [];
  const closes: string[] = [];
  const opened: MockPort[] = [];
  const binding: BindingInterface = {
    list: () => MockBinding.list(),
    async open(options) {
      const port = await MockBinding.open(options);
      const set = port.set.bind(port);
      const close = port.close.bind(port);
      port.set = async (flags) => {
        sets.push({ ...flags });
        return hooks.set ? hooks.set(flags) : set(flags);
      };
      port.close = async () => {
        closes.push(options.path);
        return close();
      };
      opened.push(port);
      return port;
    },
  };
  return { binding, sets, closes, opened };
}

describe('openSafely (binding-mock)', () => {
  beforeEach(() => {
    MockBinding.reset();
  });
  afterEach(() => {
    MockBinding.reset();
  });

  const close = (port: { close(callback: (error: Error | null) => void): void }) =>
    new Promise<void>((resolve, reject) =>
      port.close((error) => (error ? reject(error) : resolve())),
    );

  it('opens with hupcl false and sets both lines released first thing', async () => {
    MockBinding.createPort('/dev/ROBOT', { record: true });
    const { binding, sets, opened } = recordingBinding();
    const port = await openSafely('/dev/ROBOT', { baudRate: 115200, binding });
    expect(port.isOpen).toBe(true);
    expect(port.baudRate).toBe(115200);
    expect(opened[0]?.openOptions.hupcl).toBe(false);
    expect(sets).toHaveLength(1);
    expect(sets[0]).toMatchObject({ dtr: false, rts: false });
    await close(port);
  });

  it('accepts the mock binding itself', async () => {
    MockBinding.createPort('/dev/ROBOT');
    const port = await openSafely('/dev/ROBOT', { baudRate: 921600, binding: MockBinding });
    expect(port.isOpen).toBe(true);
    await close(port);
  });

  it('leaves a usable port: a BOOT click through lineSetterFor reaches the binding', async () => {
    MockBinding.createPort('/dev/ROBOT');
    const { binding, sets } = recordingBinding();
    const port = await openSafely('/dev/ROBOT', { baudRate: 115200, binding });
    await runLineSteps(lineSetterFor(port), BOOT_CLICK, { sleep: async () => {} });
    expect(sets.map((flags) => ({ dtr: flags.dtr, rts: flags.rts }))).toEqual([
      { dtr: false, rts: false },
      { dtr: true, rts: false },
      { dtr: false, rts: false },
    ]);
    await close(port);
  });

  it('rejects PORT_NOT_FOUND for a missing port', async () => {
    const error = await rejection(
      openSafely('/dev/NOPE', { baudRate: 115200, binding: MockBinding }),
    );
    expect(error).toBeInstanceOf(SerialError);
    expect((error as SerialError).code).toBe('PORT_NOT_FOUND');
    expect((error as SerialError).message).toContain('/dev/NOPE');
  });

  it('rejects PORT_BUSY for a port already open (locked)', async () => {
    MockBinding.createPort('/dev/ROBOT');
    const first = await openSafely('/dev/ROBOT', { baudRate: 115200, binding: MockBinding });
    const error = await rejection(
      openSafely('/dev/ROBOT', { baudRate: 115200, binding: MockBinding }),
    );
    expect((error as SerialError).code).toBe('PORT_BUSY');
    await close(first);
  });

  it('closes the port again when the first set() fails', async () => {
    MockBinding.createPort('/dev/ROBOT');
    const { binding, closes } = recordingBinding({
      set: () => Promise.reject(new Error('ioctl failed')),
    });
    await expect(openSafely('/dev/ROBOT', { baudRate: 115200, binding })).rejects.toThrow(
      'ioctl failed',
    );
    await until(() => {
      expect(closes).toEqual(['/dev/ROBOT']);
      return true;
    });
  });

  it('bounds an open() that never completes', async () => {
    const hanging: BindingInterface = {
      list: async () => [],
      open: () => new Promise(() => {}),
    };
    const error = await rejection(
      openSafely('/dev/HANG', { baudRate: 115200, binding: hanging, timeoutMs: 20 }),
    );
    expect((error as SerialError).code).toBe('PORT_BUSY');
    expect((error as SerialError).message).toContain('20 ms');
  });
});
/** MockBinding whose first opens fail with a given error, as a real driver words it. */
function refusingBinding(failures: string[]) {
  const attempts: string[] = [];
  const binding: BindingInterface = {
    list: () => MockBinding.list(),
    async open(options) {
      attempts.push(options.path);
      const failure = failures.shift();
      if (failure !== undefined) throw new Error(failure.replace('<path>', options.path));
      return MockBinding.open(options);
    },
  };
  return { binding, attempts };
}

const EBUSY = 'Error: Device or resource busy, cannot open <path>';
const WINDOWS_IN_USE = 'Opening <path>: Access denied';
const EIO = 'Error: Input/output error, cannot open <path>';
const EACCES = 'Error: Permission denied, cannot open <path>';
const ENOENT = 'Error: No such file or directory, cannot open <path>';

describe('openSafely retries a port that just came back', () => {
  beforeEach(() => {
    MockBinding.reset();
    MockBinding.createPort('/dev/ttyACM1');
  });
  afterEach(() => {
    vi.useRealTimers();
    MockBinding.reset();
  });

  const closePort = (port: { close(callback: (error: Error | null) => void): void }) =>
    new Promise<void>((resolve) => port.close(() => resolve()));

  it('retries EBUSY (ModemManager probing) and EACCES (udev not done yet) until it opens', async () => {
    vi.useFakeTimers();
    const { binding, attempts } = refusingBinding([EBUSY, EBUSY, EACCES]);
    const opening = openSafely('/dev/ttyACM1', { baudRate: 115200, binding });
    await vi.advanceTimersByTimeAsync(1000);
    const port = await opening;
    expect(port.isOpen).toBe(true);
    expect(attempts).toHaveLength(4);
    await closePort(port);
  });

  it('gives up after retryMs (default a few seconds) with a PORT_BUSY that says why', async () => {
    vi.useFakeTimers();
    expect(OPEN_RETRY_MS).toBe(3000);
    const { binding, attempts } = refusingBinding(Array(100).fill(EBUSY));
    const opening = rejection(openSafely('/dev/ttyACM1', { baudRate: 115200, binding }));
    await vi.advanceTimersByTimeAsync(2900);
    expect(attempts.length).toBeGreaterThan(3);
    const before = attempts.length;
    await vi.advanceTimersByTimeAsync(1000);
    const error = await opening;
    expect(attempts.length).toBeGreaterThan(before);
    expect(error).toBeInstanceOf(SerialError);
    expect((error as SerialError).code).toBe('PORT_BUSY');
    expect((error as Error).message).toMatch(
      /^\/dev\/ttyACM1 is busy \(still, after retrying for 3 s\): Error: Device or resource busy.*ModemManager/,
    );
  });

  it('names the permission problem when EACCES persists', async () => {
    vi.useFakeTimers();
    const { binding } = refusingBinding(Array(100).fill(EACCES));
    const opening = rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding, retryMs: 500 }),
    );
    await vi.advanceTimersByTimeAsync(1000);
    const error = (await opening) as SerialError;
    expect(error.code).toBe('PORT_DENIED');
    expect(error.message).toMatch(
      /permission denied \(still, after retrying for 0\.5 s\).*dialout.*udev rule/,
    );
  });

  it('retries a missing node only just after the port was found again', async () => {
    const once = refusingBinding([ENOENT]);
    const error = await rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding: once.binding }),
    );
    expect((error as SerialError).code).toBe('PORT_NOT_FOUND');
    expect(once.attempts).toHaveLength(1);

    vi.useFakeTimers();
    const found = refusingBinding([ENOENT, ENOENT]);
    const opening = openSafely('/dev/ttyACM1', {
      baudRate: 115200,
      binding: found.binding,
      justFound: true,
    });
    await vi.advanceTimersByTimeAsync(500);
    const port = await opening;
    expect(found.attempts).toHaveLength(3);
    await closePort(port);
  });

  it('does not retry a port locked by another serialport user, nor with retryMs 0', async () => {
    const first = await openSafely('/dev/ttyACM1', { baudRate: 115200, binding: MockBinding });
    const locked = await rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding: MockBinding }),
    );
    expect((locked as SerialError).code).toBe('PORT_BUSY');
    expect((locked as Error).message).toContain('in use by another process');
    await closePort(first);
    const once = refusingBinding([EBUSY]);
    const error = await rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding: once.binding, retryMs: 0 }),
    );
    expect((error as SerialError).code).toBe('PORT_BUSY');
    expect((error as Error).message).not.toContain('retrying');
    expect(once.attempts).toHaveLength(1);
  });

  it('stops retrying when aborted', async () => {
    vi.useFakeTimers();
    const { binding, attempts } = refusingBinding(Array(100).fill(EBUSY));
    const controller = new AbortController();
    const opening = rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding, signal: controller.signal }),
    );
    await vi.advanceTimersByTimeAsync(200);
    const reason = new Error('stop');
    controller.abort(reason);
    expect(await opening).toBe(reason);
    const tried = attempts.length;
    await vi.advanceTimersByTimeAsync(5000);
    expect(attempts).toHaveLength(tried);
  });
});

describe('openSafely says why a port did not open', () => {
  beforeEach(() => {
    MockBinding.reset();
    MockBinding.createPort('/dev/ttyACM1');
  });
  afterEach(() => {
    vi.useRealTimers();
    vi.mocked(portHolders).mockReset();
    MockBinding.reset();
  });

  it('names who holds a busy port, where the OS can tell', async () => {
    vi.mocked(portHolders).mockReturnValue([{ pid: 812, command: 'ModemManager' }]);
    const { binding } = refusingBinding([EBUSY]);
    const error = (await rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding, retryMs: 0 }),
    )) as SerialError;
    expect(error.code).toBe('PORT_BUSY');
    expect(error.message).toMatch(
      /^\/dev\/ttyACM1 is busy: .*; it is held by ModemManager \(pid 812\)/,
    );
    expect(vi.mocked(portHolders)).toHaveBeenCalledWith('/dev/ttyACM1');
  });

  it("takes Windows' Access denied for a port in use, as esptool does, not for a permission", async () => {
    const { binding } = refusingBinding([WINDOWS_IN_USE]);
    const error = (await rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding, retryMs: 0 }),
    )) as SerialError;
    expect(error.code).toBe('PORT_BUSY');
    expect(error.message).toMatch(/another program has it open/);
  });

  it('wraps any other refusal of the binding as PORT_OPEN_FAILED naming the port', async () => {
    const { binding } = refusingBinding([EIO]);
    const error = (await rejection(
      openSafely('/dev/ttyACM1', { baudRate: 115200, binding }),
    )) as SerialError;
    expect(error).toBeInstanceOf(SerialError);
    expect(error.code).toBe('PORT_OPEN_FAILED');
    expect(error.message).toMatch(
      /^\/dev\/ttyACM1 could not be opened: Error: Input\/output error/,
    );
  });
});
