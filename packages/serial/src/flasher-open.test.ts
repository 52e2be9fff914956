/**
 * The flasher's first open goes through the one open of every port (port-open.ts): a refused
 * open is said as what it is, and a busy one is retried, before any reset or sync is tried.
 * The binding here is binding-mock's, whose first opens fail as bindings-cpp words them.
 */
import type { BindingInterface } from '@serialport/bindings-cpp';
import { SerialPortMock } from 'serialport';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { SerialError } from './errors.js';
import { Flasher } from './flasher.js';
import { NodeWebSerialPort } from './web-serial.js';

const MockBinding = SerialPortMock.binding;
const EBUSY = 'Error: Device or resource busy, cannot open <path>';
const EACCES = 'Error: Permission denied, cannot open <path>';

/** binding-mock whose first opens fail with the given driver messages; counts sets. */
function refusingBinding(failures: string[]) {
  const attempts: string[] = [];
  let sets = 0;
  const binding: BindingInterface = {
    list: () => MockBinding.list(),
    async open(options) {
      attempts.push(options.path);
      const failure = failures.shift();
      if (failure !== undefined) throw new Error(failure.replace('<path>', options.path));
      const port = await MockBinding.open(options);
      const set = port.set.bind(port);
      port.set = (flags) => {
        sets += 1;
        return set(flags);
      };
      return port;
    },
  };
  return { binding, attempts, sets: () => sets };
}

/** A flasher on a native-USB board's port (Espressif 303a:1001) at `/dev/ttyACM0`. */
function flasherOn(binding: BindingInterface, connectAttempts = 7) {
  const port = new NodeWebSerialPort({
    binding,
    path: '/dev/ttyACM0',
    usbVendorId: 0x303a,
    usbProductId: 0x1001,
  });
  return new Flasher({ port, platform: 'linux', connectAttempts });
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection');
}

beforeEach(() => {
  MockBinding.reset();
  MockBinding.createPort('/dev/ttyACM0');
});
afterEach(() => {
  vi.useRealTimers();
  MockBinding.reset();
});

describe("the flasher's open", () => {
  it('says permission denied and the fix, not that the ROM did not answer, and offers no classic reset', async () => {
    vi.useFakeTimers();
    const { binding, attempts, sets } = refusingBinding(Array(1000).fill(EACCES));
    const connecting = rejection(flasherOn(binding).connect());
    // The open retries a refused port for a few seconds (udev may not have applied its mode yet).
    for (let i = 0; i < 20 && attempts.length < 1000; i++) await vi.advanceTimersByTimeAsync(1000);
    const error = (await connecting) as SerialError;
    expect(error).toBeInstanceOf(SerialError);
    expect(error.code).toBe('PORT_DENIED');
    expect(error.message).toMatch(/^\/dev\/ttyACM0: permission denied \(still, after retrying/);
    expect(error.message).toMatch(/dialout.*udev rule/);
    expect(error.message).not.toMatch(/no answer from the ROM/);
    expect(error.message).not.toMatch(/--reset (classic|tight)/);
    expect(attempts.length).toBeGreaterThan(1);
    // Nothing reached the lines: no reset was tried on a port that never opened.
    expect(sets()).toBe(0);
  });

  it('retries a busy port, then goes on to reset and sync', async () => {
    const { binding, attempts, sets } = refusingBinding([EBUSY, EBUSY]);
    const error = (await rejection(flasherOn(binding, 1).connect())) as SerialError;
    expect(attempts).toHaveLength(3);
    // The port opened and the USB-JTAG reset ran; binding-mock has no ROM to answer it, so the
    // failure is the sync's, and only that one says so.
    expect(sets()).toBeGreaterThan(1);
    expect(error.code).toBe('FLASH_FAILED');
    expect(error.message).toMatch(
      /no answer from the ROM bootloader on \/dev\/ttyACM0 after 1 attempt/,
    );
    expect(error.message).not.toMatch(/--reset (classic|tight)/);
  });
});
