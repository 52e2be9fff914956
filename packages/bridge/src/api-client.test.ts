import { describe, expect, it, vi } from 'vitest';
import { ApiClient, apiBase, CALL_MARGIN_MS, REQUEST_TIMEOUT_MS } from './api-client.js';
import { BridgeError } from './errors.js';

/** A fetch that answers from a table, recording what was asked. */
function fakeFetch(answers: Record<string, [number, unknown]>, asked: string[] = []): typeof fetch {
  return async (input, init) => {
    const url = String(input);
    asked.push(
      `${init?.method ?? 'GET'} ${url} ${String((init?.headers as Record<string, string>)?.authorization)}`,
    );
    const path = new URL(url).pathname + new URL(url).search;
    const [status, body] = answers[path] ?? [404, { error: { code: 'NOT_FOUND', message: 'no' } }];
    return new Response(typeof body === 'string' ? body : JSON.stringify(body), { status });
  };
}

describe('apiBase', () => {
  it('appends /api unless it is there', () => {
    expect(apiBase('http://127.0.0.1:8080')).toBe('http://127.0.0.1:8080/api');
    expect(apiBase('http://127.0.0.1:8080/')).toBe('http://127.0.0.1:8080/api');
    expect(apiBase('http://127.0.0.1:8080/api/')).toBe('http://127.0.0.1:8080/api');
    expect(apiBase('https://lab.example/xz')).toBe('https://lab.example/xz/api');
    expect(() => apiBase('127.0.0.1:8080')).toThrow(BridgeError);
    expect(() => apiBase('ftp://x')).toThrow(/http/);
  });
});

describe('ApiClient', () => {
  it('walks every page of GET /devices with the token', async () => {
    const asked: string[] = [];
    const client = new ApiClient({
      server: 'http://h',
      token: 't0k',
      fetch: fakeFetch(
        {
          '/api/devices?limit=1000': [
            200,
            { devices: [{ deviceId: 'a', connected: true }], nextCursor: 'a' },
          ],
          '/api/devices?limit=1000&cursor=a': [200, { devices: [{ deviceId: 'b' }, { nope: 1 }] }],
        },
        asked,
      ),
    });
    const devices = await client.devices();
    expect(devices.map((d) => [d.deviceId, d.connected])).toEqual([
      ['a', true],
      ['b', false],
    ]);
    expect(asked).toEqual([
      'GET http://h/api/devices?limit=1000 Bearer t0k',
      'GET http://h/api/devices?limit=1000&cursor=a Bearer t0k',
    ]);
  });

  it('reads error answers into BridgeErrors that keep the status and the device flag', async () => {
    const client = new ApiClient({
      server: 'http://h',
      fetch: fakeFetch({
        '/api/devices?limit=1000': [401, { error: { code: 'UNAUTHORIZED', message: 'no token' } }],
        '/api/devices/x': [404, { error: { code: 'DEVICE_NOT_FOUND', message: 'no device x' } }],
        '/api/devices/y/call': [
          502,
          {
            error: { code: -32000, codeless: true, message: 'Unknown tool: a"b', source: 'device' },
          },
        ],
        '/api/devices/z/call': [409, { error: { code: 'DEVICE_DISCONNECTED', message: 'gone' } }],
        '/api/devices/w': [500, '<html>'],
      }),
    });
    await expect(client.devices()).rejects.toMatchObject({ code: 'UNAUTHORIZED', status: 401 });
    await expect(client.device('x')).rejects.toMatchObject({ code: 'DEVICE_NOT_FOUND' });
    const signal = new AbortController().signal;
    await expect(client.call('y', 't', {}, 1000, signal)).rejects.toMatchObject({
      code: 'API_ERROR',
      status: 502,
      fromDevice: true,
      message: 'Unknown tool: a"b',
    });
    await expect(client.call('z', 't', {}, 1000, signal)).rejects.toMatchObject({
      status: 409,
      apiCode: 'DEVICE_DISCONNECTED',
      fromDevice: false,
      message: 'gone (409 DEVICE_DISCONNECTED)',
    });
    await expect(client.device('w')).rejects.toMatchObject({ code: 'API_ERROR', status: 500 });
  });

  it('says SERVER_UNREACHABLE when the request cannot be made', async () => {
    const client = new ApiClient({
      server: 'http://h',
      fetch: async () => {
        throw new TypeError('fetch failed', {
          cause: Object.assign(new Error('x'), { code: 'ECONNREFUSED' }),
        });
      },
    });
    await expect(client.devices()).rejects.toMatchObject({
      code: 'SERVER_UNREACHABLE',
      message: expect.stringContaining('ECONNREFUSED'),
    });
  });
});

describe('ApiClient, the one client', () => {
  it('leaves the page size to the server when asked, and keeps each device as it was sent', async () => {
    const asked: string[] = [];
    const client = new ApiClient({
      server: 'http://h/api',
      devicesPageSize: 'server',
      fetch: fakeFetch(
        {
          '/api/devices': [200, { devices: [{ deviceId: 'a', extra: 1 }], nextCursor: 'a' }],
          '/api/devices?cursor=a': [200, { devices: [{ nope: 1 }] }],
        },
        asked,
      ),
    });
    expect(await client.devicesAsSent()).toEqual([{ deviceId: 'a', extra: 1 }, { nope: 1 }]);
    expect(asked).toEqual([
      'GET http://h/api/devices undefined',
      'GET http://h/api/devices?cursor=a undefined',
    ]);
    expect(() => new ApiClient({ server: 'http://h', devicesPageSize: 1001 })).toThrow(
      /devicesPageSize/,
    );
  });

  it('refuses device-list cursors that go round, and answers without their list', async () => {
    const client = new ApiClient({
      server: 'http://h',
      fetch: fakeFetch({
        '/api/devices?limit=1000': [200, { devices: [], nextCursor: 'again' }],
        '/api/devices?limit=1000&cursor=again': [200, { devices: [], nextCursor: 'again' }],
        '/api/devices/a/tools': [200, { tool: [] }],
        '/api/devices/a/call': [200, { result: 'true' }],
      }),
    });
    await expect(client.devices()).rejects.toMatchObject({
      code: 'API_ERROR',
      message: 'the server at http://h gave the device list cursor "again" twice',
    });
    await expect(client.tools('a')).rejects.toMatchObject({
      code: 'API_ERROR',
      status: 200,
      message: 'the server at http://h answered without a tool list',
    });
    await expect(client.call('a', 't', {})).rejects.toMatchObject({
      message: 'the server at http://h answered without a tool result',
    });
  });

  it('calls with the timeout it was given, or none, and forgets a device', async () => {
    const bodies: unknown[] = [];
    const asked: string[] = [];
    const answers = fakeFetch(
      {
        '/api/devices/f4%3A12%3Afa%3A00%3A00%3A21/call': [
          200,
          { result: { content: [{ type: 'text', text: 'true' }], isError: false } },
        ],
        '/api/devices/f4%3A12%3Afa%3A00%3A00%3A21': [200, { forgotten: 'f4:12:fa:00:00:21' }],
      },
      asked,
    );
    const client = new ApiClient({
      server: 'http://h',
      fetch: (input, init) => {
        if (init?.body !== undefined) bodies.push(JSON.parse(String(init.body)));
        return answers(input, init);
      },
    });
    const mac = 'f4:12:fa:00:00:21';
    expect(await client.call(mac, 'self.lamp.turn_on', {})).toEqual({
      content: [{ type: 'text', text: 'true' }],
      isError: false,
    });
    await client.call(mac, 'self.lamp.turn_on', { on: true }, 100);
    expect(bodies).toEqual([
      { name: 'self.lamp.turn_on', arguments: {} },
      { name: 'self.lamp.turn_on', arguments: { on: true }, timeoutMs: 100 },
    ]);
    expect(await client.forget(mac)).toEqual({ forgotten: mac });
    expect(asked.at(-1)).toBe('DELETE http://h/api/devices/f4%3A12%3Afa%3A00%3A00%3A21 undefined');
  });

  it("keeps the API's own message, or says HTTP and the status when it gave none", async () => {
    const client = new ApiClient({
      server: 'http://h',
      fetch: fakeFetch({
        '/api/devices/a': [409, { error: { code: 'DEVICE_NOT_READY', message: 'not yet' } }],
        '/api/devices/b': [500, {}],
        '/api/devices/c': [404, { error: 'nothing at /api/devices/c' }],
      }),
    });
    await expect(client.device('a')).rejects.toMatchObject({ apiMessage: 'not yet' });
    await expect(client.device('b')).rejects.toMatchObject({ apiMessage: 'HTTP 500' });
    await expect(client.device('c')).rejects.toMatchObject({
      code: 'API_ERROR',
      apiMessage: 'nothing at /api/devices/c',
    });
  });

  it('says SERVER_TIMEOUT when its own bound runs out, and rethrows the reason of a given signal', async () => {
    vi.useFakeTimers();
    try {
      const hang: typeof fetch = (_input, init) =>
        new Promise((_resolve, reject) =>
          init?.signal?.addEventListener('abort', () => reject(init.signal?.reason)),
        );
      const client = new ApiClient({ server: 'http://h', fetch: hang });
      const pending = client.devices();
      const settled = expect(pending).rejects.toMatchObject({
        code: 'SERVER_TIMEOUT',
        message: `the server at http://h did not answer within ${REQUEST_TIMEOUT_MS} ms`,
      });
      await vi.advanceTimersByTimeAsync(REQUEST_TIMEOUT_MS);
      await settled;
      const call = client.call('a', 't', {}, 100);
      const called = expect(call).rejects.toMatchObject({
        message: `the server at http://h did not answer within ${100 + CALL_MARGIN_MS} ms`,
      });
      await vi.advanceTimersByTimeAsync(100 + CALL_MARGIN_MS);
      await called;
      const stop = new AbortController();
      const given = client.devices(stop.signal);
      stop.abort(new Error('closing'));
      await expect(given).rejects.toThrow('closing');
    } finally {
      vi.useRealTimers();
    }
  });
});
