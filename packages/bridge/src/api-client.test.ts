import { describe, expect, it } from 'vitest';
import { ApiClient, apiBase } from './api-client.js';
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
