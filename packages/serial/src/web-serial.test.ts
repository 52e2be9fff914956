import type { SerialPortStream } from '@serialport/stream';
import { until } from '@xiaozhi-mcp/test-kit';
import { SerialPortMock } from 'serialport';
import { afterEach, describe, expect, it } from 'vitest';
import { SerialError } from './errors.js';
import { NodeWebSerialPort } from './web-serial.js';

const MockBinding = SerialPortMock.binding;
type Binding = ConstructorParameters<typeof SerialPortStream>[0]['binding'];
type BindingPort = Awaited<ReturnType<Binding['open']>>;
type SetOptions = Parameters<BindingPort['set']>[0];
type UpdateOptions = Parameters<BindingPort['update']>[0];
type MockPortBinding = Awaited<ReturnType<typeof MockBinding.open>>;

/** MockBinding, recording what reaches the binding: set() flags, update() and opens. */
function recordingBinding() {
  const calls = {
    openOptions: [] as Parameters<Binding['open']>[0][],
    opens: 0,
    closes: 0,
    sets: [] as SetOptions[],
    updates: [] as UpdateOptions[],
    port: undefined as MockPortBinding | undefined,
  };
  const binding: Binding = {
    list: () => MockBinding.list(),
    open: async (options: Parameters<Binding['open']>[0]): Promise<BindingPort> => {
      const port = await MockBinding.open(options);
      calls.openOptions.push({ ...options });
      calls.opens++;
      calls.port = port;
      const set = port.set.bind(port);
      const update = port.update.bind(port);
      const close = port.close.bind(port);
      port.set = (flags: SetOptions) => {
        calls.sets.push({ ...flags });
        return set(flags);
      };
      port.update = (flags: UpdateOptions) => {
        calls.updates.push({ ...flags });
        return update(flags);
      };
      port.close = () => {
        calls.closes++;
        return close();
      };
      return port;
    },
  };
  return { binding, calls };
}

const ports: NodeWebSerialPort[] = [];
afterEach(async () => {
  for (const port of ports.splice(0)) await port.close();
  MockBinding.reset();
});

function makePort(path = '/dev/ttyMOCK0') {
  MockBinding.createPort(path, { record: true, vendorId: '10c4', productId: 'ea60' });
  const { binding, calls } = recordingBinding();
  const port = new NodeWebSerialPort({ binding, path, usbVendorId: 0x10c4, usbProductId: 0xea60 });
  ports.push(port);
  return { port, calls };
}

async function readAll(
  port: NodeWebSerialPort,
  count: number,
  bytes: number[] = [],
): Promise<number[]> {
  // esptool-js's readLoop: a reader per chunk, released after each read.
  while (bytes.length < count) {
    const readable = port.readable;
    if (readable === null) throw new Error('no readable');
    const reader = readable.getReader();
    try {
      const { value, done } = await reader.read();
      if (done) break;
      bytes.push(...value);
    } finally {
      reader.releaseLock();
    }
  }
  return bytes;
}

describe('NodeWebSerialPort', () => {
  it('opens with both lines released and sends DTR and RTS together in one set()', async () => {
    const { port, calls } = makePort();
    await port.open({ baudRate: 115200 });
    expect(calls.sets).toEqual([expect.objectContaining({ dtr: false, rts: false })]);
    await port.setSignals({ dataTerminalReady: false, requestToSend: true });
    // esptool's setRTS/setDTR name one line only: the other keeps its last state.
    await port.setSignals({ dataTerminalReady: true });
    await port.setSignals({ requestToSend: false });
    expect(calls.sets.slice(1).map(({ dtr, rts }) => ({ dtr, rts }))).toEqual([
      { dtr: false, rts: true },
      { dtr: true, rts: true },
      { dtr: true, rts: false },
    ]);
    expect(port.lines).toEqual({ dtr: true, rts: false, brk: false });
  });

  it('opens without hupcl, which on Windows asserts DTR alone (GPIO0 low) as the port opens', async () => {
    const { port, calls } = makePort();
    await port.open({ baudRate: 115200 });
    expect(calls.openOptions).toEqual([expect.objectContaining({ hupcl: false })]);
  });

  it('lets a listener see what the readable delivers', async () => {
    const { port, calls } = makePort();
    await port.open({ baudRate: 115200 });
    const seen: number[] = [];
    const stop = port.addDataListener((bytes) => seen.push(...bytes));
    const reading = readAll(port, 3);
    calls.port?.emitData(Buffer.from([1, 2, 3]));
    expect(await reading).toEqual([1, 2, 3]);
    stop();
    const more = readAll(port, 1);
    calls.port?.emitData(Buffer.from([4]));
    expect(await more).toEqual([4]);
    expect(seen).toEqual([1, 2, 3]);
  });

  it('changes the baud rate in place, without closing or reopening', async () => {
    const { port, calls } = makePort();
    await port.open({ baudRate: 115200 });
    await port.setBaudRate(921600);
    expect(calls.updates).toEqual([{ baudRate: 921600 }]);
    expect(calls.opens).toBe(1);
    expect(calls.closes).toBe(0);
    expect(port.baudRate).toBe(921600);
  });

  it('keeps delivering through a reader taken and released per chunk', async () => {
    const { port, calls } = makePort();
    await port.open({ baudRate: 115200 });
    const got: number[] = [];
    const reading = readAll(port, 6, got);
    // Each chunk read (and its reader released) before the next arrives.
    calls.port?.emitData(Buffer.from([1, 2]));
    await until(() => got.length === 2, { what: 'the first chunk read' });
    calls.port?.emitData(Buffer.from([3]));
    await until(() => got.length === 3, { what: 'the second chunk read' });
    calls.port?.emitData(Buffer.from([4, 5, 6]));
    expect(await reading).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('gives a fresh readable after a cancel while the port stays open', async () => {
    const { port, calls } = makePort();
    await port.open({ baudRate: 115200 });
    const first = port.readable;
    await first?.getReader().cancel();
    const second = port.readable;
    expect(second).not.toBe(first);
    const reading = readAll(port, 2);
    calls.port?.emitData(Buffer.from([7, 8]));
    expect(await reading).toEqual([7, 8]);
  });

  it('writes through the writable and reports USB ids', async () => {
    const { port, calls } = makePort();
    await port.open({ baudRate: 115200 });
    const writer = port.writable?.getWriter();
    await writer?.write(Uint8Array.from([0xc0, 0x00, 0xc0]));
    writer?.releaseLock();
    expect([...(calls.port?.recording ?? [])]).toEqual([0xc0, 0x00, 0xc0]);
    expect(port.getInfo()).toEqual({ usbVendorId: 0x10c4, usbProductId: 0xea60 });
    const listed = await MockBinding.list();
    const info = listed[0];
    if (info === undefined) throw new Error('no port listed');
    expect(NodeWebSerialPort.fromPortInfo(MockBinding, info).getInfo()).toEqual({
      usbVendorId: 0x10c4,
      usbProductId: 0xea60,
    });
  });

  it('ends the readable on close, and can open again', async () => {
    const { port, calls } = makePort();
    await port.open({ baudRate: 115200 });
    const reader = port.readable?.getReader();
    const pending = reader?.read();
    await port.close();
    expect(await pending).toEqual({ value: undefined, done: true });
    expect(port.readable).toBeNull();
    expect(port.isOpen).toBe(false);
    await port.open({ baudRate: 115200 });
    expect(calls.opens).toBe(2);
  });

  it('names a missing port PORT_NOT_FOUND and a held one PORT_BUSY', async () => {
    const { binding } = recordingBinding();
    const missing = new NodeWebSerialPort({ binding, path: '/dev/ttyNOPE' });
    await expect(missing.open({ baudRate: 115200 })).rejects.toMatchObject({
      code: 'PORT_NOT_FOUND',
    });
    const { port } = makePort('/dev/ttyMOCK1');
    await port.open({ baudRate: 115200 });
    const second = new NodeWebSerialPort({ binding, path: '/dev/ttyMOCK1' });
    const error = await second.open({ baudRate: 115200 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SerialError);
    expect(error).toMatchObject({ code: 'PORT_BUSY' });
    await expect(port.open({ baudRate: 115200 })).rejects.toThrow(/already open/);
    await expect(new NodeWebSerialPort({ binding, path: 'x' }).setBaudRate(9600)).rejects.toThrow(
      /not open/,
    );
  });
});
