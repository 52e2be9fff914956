/**
 * The bridge over Streamable HTTP: the SDK's own StreamableHTTPClientTransport with session
 * ids and a bearer token, and the doors: 401 without the token, 403 for a foreign Host or
 * Origin (DNS rebinding), 413 for an oversized body, 404 for an unknown session.
 */
import { request } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { XiaozhiBridge } from './bridge.js';
import { type HttpOptions, serveHttp } from './http.js';
import { Rig, testPreset } from './rig.test.js';

const rig = new Rig();
const closers: (() => Promise<unknown>)[] = [];

afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
  await rig.stop();
});

async function start(options: Partial<HttpOptions> = {}) {
  await rig.start();
  const bridge = new XiaozhiBridge({ server: rig.base, pollMs: 20, log: () => {} });
  closers.push(() => bridge.close());
  await bridge.start();
  const http = await serveHttp(bridge, { host: '127.0.0.1', port: 0, ...options });
  closers.push(() => http.close());
  return { bridge, url: http.url };
}

async function connectClient(url: string, token?: string): Promise<Client> {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    ...(token === undefined
      ? {}
      : { requestInit: { headers: { authorization: `Bearer ${token}` } } }),
  });
  const client = new Client({ name: 'http-test', version: '1.0.0' });
  await client.connect(transport);
  closers.push(() => client.close());
  return client;
}

const INITIALIZE = JSON.stringify({
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: {
    protocolVersion: '2025-06-18',
    capabilities: {},
    clientInfo: { name: 'raw', version: '1' },
  },
});

/** A raw request with headers fetch would not let us set (Host). */
function raw(
  url: string,
  headers: Record<string, string>,
  body = INITIALIZE,
): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          ...headers,
        },
      },
      (res) => {
        let text = '';
        res.on('data', (chunk) => {
          text += chunk;
        });
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }),
        );
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('serveHttp', () => {
  it('serves list, call and list_changed over Streamable HTTP with session ids and a token', async () => {
    const { bridge, url } = await start({ token: 'open-sesame' });
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    const board = rig.board({ preset: testPreset('http') });
    await rig.connect(board);
    await until(() => bridge.tools.length > 0, { what: 'the first board served' });

    const client = await connectClient(url, 'open-sesame');
    const other = await connectClient(url, 'open-sesame');
    const ids = [client, other].map(
      (c) => (c.transport as StreamableHTTPClientTransport).sessionId,
    );
    expect(ids[0]).toMatch(/^[0-9a-f-]{36}$/);
    expect(ids[1]).not.toBe(ids[0]);

    let changes = 0;
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      changes++;
    });
    const name = 'f412fa200001__self-lamp-turn_on';
    expect((await client.listTools()).tools.map((t) => t.name)).toContain(name);
    expect(await client.callTool({ name })).toEqual({
      content: [{ type: 'text', text: 'true' }],
      isError: false,
    });
    expect(board.hardware.lamp).toBe(true);

    // The standalone SSE stream carries list_changed to this session.
    const second = rig.board({ preset: testPreset('http') });
    await rig.connect(second);
    await until(() => changes >= 1, { what: 'list_changed over the SSE stream' });
    expect((await other.listTools()).tools.map((t) => t.name)).toContain(
      'f412fa200002__self-lamp-turn_on',
    );
  });

  it('asks for the bearer token: 401 without it or with a wrong one', async () => {
    const { url } = await start({ token: 'open-sesame' });
    const host = new URL(url).host;
    for (const authorization of [
      undefined,
      'Bearer wrong',
      'open-sesame',
      'Basic b3Blbi1zZXNhbWU=',
    ]) {
      const answer = await raw(url, {
        host,
        ...(authorization === undefined ? {} : { authorization }),
      });
      expect(answer.status, String(authorization)).toBe(401);
      expect(answer.headers['www-authenticate']).toBe('Bearer');
    }
    expect((await raw(url, { host, authorization: 'Bearer open-sesame' })).status).toBe(200);
    await expect(connectClient(url)).rejects.toThrow();
  });

  it('refuses a foreign Host or Origin with 403 (DNS rebinding), before the token', async () => {
    const { url } = await start({ token: 'open-sesame' });
    const port = new URL(url).port;
    const ok = { authorization: 'Bearer open-sesame' };
    const refused = [
      { host: 'evil.example.com' },
      { host: `evil.example.com:${port}` },
      { host: `127.0.0.1.evil.example:${port}` },
      { host: `localhost:${port}`, origin: 'https://evil.example.com' },
      { host: `localhost:${port}`, origin: 'null' },
    ];
    for (const headers of refused) {
      // Without the token too: a rebinding page learns nothing, not even that one is asked.
      expect((await raw(url, headers)).status, JSON.stringify(headers)).toBe(403);
      const answer = await raw(url, { ...headers, ...ok });
      expect(answer.status, JSON.stringify(headers)).toBe(403);
      expect(JSON.parse(answer.body)).toMatchObject({ jsonrpc: '2.0', error: { code: -32000 } });
    }
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, '127.0.0.1', `[::1]:${port}`])
      expect((await raw(url, { host, ...ok })).status, host).toBe(200);
    expect(
      (await raw(url, { host: `localhost:${port}`, origin: 'http://localhost:6274', ...ok }))
        .status,
    ).toBe(200);
  });

  it('accepts the hosts and origins it is told to', async () => {
    const { url } = await start({
      allowedHosts: ['bridge.lab'],
      allowedOrigins: ['https://console.lab'],
    });
    expect((await raw(url, { host: 'bridge.lab:1234' })).status).toBe(200);
    expect((await raw(url, { host: 'bridge.lab', origin: 'https://console.lab' })).status).toBe(
      200,
    );
    expect((await raw(url, { host: 'bridge.lab', origin: 'https://other.lab' })).status).toBe(403);
  });

  it('bounds bodies and sessions: 413, 400 without a session, 404 for an unknown one', async () => {
    const { url } = await start({ maxBodyBytes: 1000 });
    const host = new URL(url).host;
    const big = await raw(url, { host }, JSON.stringify({ pad: 'x'.repeat(2000) }));
    expect(big.status).toBe(413);
    const notInit = await raw(
      url,
      { host },
      JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }),
    );
    expect(notInit.status).toBe(400);
    const unknown = await raw(
      url,
      { host, 'mcp-session-id': 'no-such-session' },
      JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }),
    );
    expect(unknown.status).toBe(404);
    expect((await raw(url, { host }, '{not json')).status).toBe(400);
    expect((await raw(url.replace('/mcp', '/other'), { host })).status).toBe(404);
  });

  it('closes the session used least recently when one more would pass maxSessions', async () => {
    const { url } = await start({ maxSessions: 2 });
    const first = await connectClient(url);
    const second = await connectClient(url);
    await first.listTools(); // now the second is the one used least recently
    const third = await connectClient(url);
    await expect(first.listTools()).resolves.toEqual({ tools: [] });
    await expect(third.listTools()).resolves.toEqual({ tools: [] });
    const gone = await second.listTools().catch((e: unknown) => e);
    expect(gone).toBeInstanceOf(Error);
    expect(String(gone)).toMatch(/404|Session not found/);
  });
});
