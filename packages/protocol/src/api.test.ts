import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  API_CALL_TIMEOUT_MAX_MS,
  API_DEVICES_PAGE_DEFAULT,
  API_DEVICES_PAGE_MAX,
  API_ERROR_CODES,
  type ApiDevice,
  type ApiDevicesResponse,
  type ApiErrorBody,
  readApiDevice,
  readApiError,
  readApiTool,
} from './api.js';

/** A device as the server lists it. */
const listed = {
  deviceId: 'f4:12:fa:00:00:21',
  clientId: '6c1f8f0e-0000-4000-8000-f412fa000021',
  board: 'bread-compact-wifi',
  version: '2.4.2',
  connected: true,
  ready: true,
  sessionId: 's-1',
  transport: 'websocket',
  toolCount: 14,
  sessions: 1,
  connectedAt: '2026-11-26T10:00:00.000Z',
  disconnectedAt: null,
  lastOtaCheck: {
    at: '2026-11-26T09:59:59.000Z',
    deviceId: 'f4:12:fa:00:00:21',
    clientId: '6c1f8f0e-0000-4000-8000-f412fa000021',
    version: '2.4.2',
    body: { application: { version: '2.4.2' } },
  },
  lastError: null,
  pageViolations: [],
  activatedSerial: null,
  offeredTransport: 'websocket',
} satisfies ApiDevice;

describe('the API wire types', () => {
  it('name the limits the server enforces', () => {
    expect(API_DEVICES_PAGE_DEFAULT).toBeLessThanOrEqual(API_DEVICES_PAGE_MAX);
    expect(API_CALL_TIMEOUT_MAX_MS).toBe(600_000);
    expect(new Set(API_ERROR_CODES).size).toBe(API_ERROR_CODES.length);
    const page: ApiDevicesResponse = { devices: [listed], nextCursor: listed.deviceId };
    expect(page.devices).toHaveLength(1);
  });
});

describe('readApiError', () => {
  it("reads the server's errors, a device's, and a bare string", () => {
    const server: ApiErrorBody = { error: { code: 'DEVICE_NOT_FOUND', message: 'no device x' } };
    expect(readApiError(server)).toEqual({
      code: 'DEVICE_NOT_FOUND',
      message: 'no device x',
      fromDevice: false,
    });
    const device: ApiErrorBody = {
      error: { code: -32000, codeless: true, message: 'Unknown tool: a"b', source: 'device' },
    };
    expect(readApiError(device)).toEqual({
      code: -32000,
      message: 'Unknown tool: a"b',
      fromDevice: true,
    });
    expect(readApiError({ error: 'nothing at /x' })).toEqual({
      code: undefined,
      message: 'nothing at /x',
      fromDevice: false,
    });
    expect(readApiError('<html>')).toEqual({
      code: undefined,
      message: undefined,
      fromDevice: false,
    });
  });
});

describe('readApiDevice', () => {
  it('keeps a listed device as it is', () => {
    expect(readApiDevice(listed)).toEqual(listed);
  });

  it('gives the missing fields of an older server their empty values', () => {
    expect(readApiDevice({ deviceId: 'b', transport: 'carrier-pigeon', toolCount: '3' })).toEqual({
      deviceId: 'b',
      clientId: '',
      board: null,
      version: null,
      connected: false,
      ready: false,
      sessionId: null,
      transport: null,
      toolCount: 0,
      sessions: 0,
      connectedAt: null,
      disconnectedAt: null,
      lastOtaCheck: null,
      lastError: null,
      pageViolations: [],
      activatedSerial: null,
      offeredTransport: null,
    });
    expect(readApiDevice({ nope: 1 })).toBeUndefined();
    expect(readApiDevice([listed])).toBeUndefined();
  });
});

describe('readApiTool', () => {
  it('reads a listed tool, and fills what another server leaves out', () => {
    const tool = {
      name: 'self.reboot',
      description: 'Reboot',
      inputSchema: { type: 'object', properties: {} },
      userOnly: true,
    };
    expect(readApiTool(tool)).toEqual(tool);
    expect(readApiTool({ name: 'self.x', inputSchema: [] })).toEqual({
      name: 'self.x',
      description: '',
      inputSchema: { type: 'object' },
      userOnly: false,
    });
    expect(readApiTool({ description: 'no name' })).toBeUndefined();
  });
});

describe('the readers on any JSON', () => {
  it('never throw', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        readApiError(value);
        readApiError({ error: value });
        readApiDevice(value);
        readApiDevice(typeof value === 'object' ? { ...value, deviceId: 'x' } : value);
        readApiTool(value);
      }),
      { seed: 42, numRuns: 500 },
    );
  });
});
