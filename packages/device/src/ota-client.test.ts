import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { type AddressInfo, createServer as createTcpServer, type Socket } from 'node:net';
import { gzipSync } from 'node:zlib';
import { buildOtaRequestHeaders } from '@xiaozhi-mcp/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { BoardConsole } from './console.js';
import { BoardPanic } from './errors.js';
import { NvsStorage } from './nvs-storage.js';
import { isNewVersionAvailable, OtaClient, type OtaClientOptions } from './ota-client.js';

describe('isNewVersionAvailable (Ota::IsNewVersionAvailable)', () => {
  it.each([
    ['2.4.2', '2.4.3', true],
    ['2.4.2', '2.4.2', false],
    ['2.4.2', '2.4.1', false],
    ['2.4', '2.4.0', true],
    ['2.4.0', '2.4', false],
    ['2.4.2', '2.10.0', true],
    ['2.4.2', '2.04.2', false],
    ['2.4.2', '2.4.2.', false],
    ['1.0.0', '1.0.1rc', true],
  ])('%s → %s: %s', (current, candidate, newer) => {
    expect(isNewVersionAvailable(current, candidate)).toBe(newer);
  });

  it.each(['1.2.beta', 'v2.0', '1..2', '2.99999999999'])(
    'aborts on %s as std::stoi does',
    (candidate) => {
      expect(() => isNewVersionAvailable('2.4.2', candidate)).toThrow(BoardPanic);
    },
  );

  it('panics with the exception the firmware terminates on', () => {
    expect(() => isNewVersionAvailable('2.4.2', '1.2.beta')).toThrow(
      `terminate called after throwing an instance of 'std::invalid_argument' what(): stoi ("beta")`,
    );
    expect(() => isNewVersionAvailable('2.99999999999', '2.4.2')).toThrow(
      `terminate called after throwing an instance of 'std::out_of_range' what(): stoi ("99999999999")`,
    );
  });

  it('reads what std::stoi reads: leading spaces and a sign', () => {
    expect(isNewVersionAvailable('2.4.2', ' 2.4.+3')).toBe(true);
    expect(isNewVersionAvailable('2.4.2', '2.4.-3')).toBe(false);
  });
});

interface Received {
  readonly url: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: string;
}

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve) ?? resolve(undefined));
  server = undefined;
});

/** A local HTTP server answering every request with `reply`; records what it received. */
async function serve(reply: (request: Received, res: ServerResponse) => void) {
  const received: Received[] = [];
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const request = {
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      received.push(request);
      reply(request, res);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/xiaozhi/ota/`;
  return { url, received };
}

function client(options: Partial<OtaClientOptions> & { serialNumber?: string } = {}) {
  const { serialNumber, ...rest } = options;
  const storage = new NvsStorage();
  const console = new BoardConsole();
  const ota = new OtaClient({
    currentVersion: '2.4.2',
    headers: () =>
      buildOtaRequestHeaders({
        macAddress: 'f4:12:fa:00:00:01',
        uuid: '0b6e2b6c-6f0e-4f4e-8a53-5d1f0c9d2f10',
        board: 'bread-compact-wifi',
        version: '2.4.2',
        language: 'zh-CN',
        ...(serialNumber === undefined ? {} : { serialNumber }),
      }),
    body: () => ({}) as never,
    storage,
    console,
    timeoutMs: 3000,
    ...rest,
  });
  return { ota, storage, console };
}

const texts = (console: BoardConsole) =>
  console.history.map((line) => line.text.replace(/^(\w) \(\d+\) /, '$1 '));

const reply = (padding: number) =>
  JSON.stringify({
    websocket: { url: 'ws://127.0.0.1:9/xiaozhi/v1/', token: 't', version: 1 },
    padding: 'p'.repeat(padding),
  });

describe('OtaClient reply bound (the firmware reads the whole reply into memory)', () => {
  it('takes a reply of 60 KiB', async () => {
    const { url } = await serve((_, res) => res.end(reply(60 * 1024)));
    const { ota, storage } = client();
    expect(await ota.check(url)).toMatchObject({ hasWebsocket: true });
    expect(storage.open('websocket').getString('url')).toBe('ws://127.0.0.1:9/xiaozhi/v1/');
  });

  it('refuses a 4 MB reply: the check fails, nothing is stored', async () => {
    const { url } = await serve((_, res) => res.end(reply(4 * 1024 * 1024)));
    const { ota, storage, console } = client();
    expect(await ota.check(url)).toBeUndefined();
    expect(storage.open('websocket').getString('url')).toBe('');
    expect(texts(console)).toContain('E Ota: Failed to read response: over 65536 bytes');
  });

  it('stops reading a chunked 50 MB reply at the bound instead of buffering it', async () => {
    let written = 0;
    let finished = false;
    const { url } = await serve((_, res) => {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.write(`{"websocket":{"url":"ws://127.0.0.1:9/"},"padding":"`);
      const chunk = 'p'.repeat(64 * 1024);
      const pump = () => {
        while (written < 50 * 1024 * 1024) {
          if (res.destroyed) return;
          written += chunk.length;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
        finished = true;
        res.end('"}');
      };
      res.on('error', () => {});
      pump();
    });
    const { ota, storage } = client();
    expect(await ota.check(url)).toBeUndefined();
    expect(storage.open('websocket').getString('url')).toBe('');
    expect(finished).toBe(false);
    expect(written).toBeLessThan(50 * 1024 * 1024);
  });
});

describe("OtaClient on the wire (one request per connection, as esp-ml307's HttpClient)", () => {
  /** A TCP server that hands each connection's bytes to `onRequest` once a whole request is in. */
  async function rawServer(onRequest: (text: string, socket: Socket) => void) {
    const sockets: Socket[] = [];
    const tcp = createTcpServer((socket) => {
      sockets.push(socket);
      let text = '';
      socket.on('data', (chunk) => {
        text += chunk.toString('latin1');
        const head = text.indexOf('\r\n\r\n');
        const length = Number(/content-length: (\d+)/i.exec(text)?.[1] ?? 0);
        if (head >= 0 && text.length >= head + 4 + length) onRequest(text, socket);
      });
      socket.on('error', () => {});
    });
    tcp.listen(0, '127.0.0.1');
    await once(tcp, 'listening');
    const port = (tcp.address() as AddressInfo).port;
    const close = async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => tcp.close(resolve));
    };
    return { url: `http://127.0.0.1:${port}/xiaozhi/ota/`, port, close };
  }

  /** Serves one reply per connection and keeps each request's bytes and the board's hang-up. */
  async function recordingServer(response: string | Buffer) {
    const requests: string[] = [];
    const hangUps: Promise<unknown>[] = [];
    const tcp = await rawServer((text, socket) => {
      requests.push(text);
      hangUps.push(once(socket, 'end'));
      socket.write(response);
    });
    return { ...tcp, requests, hangUps };
  }

  /**
   * A POST as firmware 2.4.2 writes it: Host, its headers by lowercase name, Content-Length,
   * Connection: close, the body. Spelled out line by line: these are the bytes a server reads.
   */
  const firmwarePost = (
    port: number,
    path: string,
    body: string,
    { activation = 1, serial }: { activation?: 1 | 2; serial?: string } = {},
  ) =>
    [
      `POST ${path} HTTP/1.1`,
      `Host: 127.0.0.1:${port}`,
      'Accept-Language: zh-CN',
      `Activation-Version: ${activation}`,
      'Client-Id: 0b6e2b6c-6f0e-4f4e-8a53-5d1f0c9d2f10',
      'Content-Type: application/json',
      'Device-Id: f4:12:fa:00:00:01',
      ...(serial === undefined ? [] : [`Serial-Number: ${serial}`]),
      'User-Agent: bread-compact-wifi/2.4.2',
      `Content-Length: ${Buffer.byteLength(body)}`,
      'Connection: close',
      '',
      body,
    ].join('\r\n');

  // The server offers keep-alive; the board still closes, as esp-ml307's HttpClient does.
  const EMPTY_REPLY =
    'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n{}';

  it('writes an OTA check as firmware 2.4.2 does (Activation-Version 1), and closes after the reply', async () => {
    const tcp = await recordingServer(EMPTY_REPLY);
    try {
      const { ota } = client({ body: () => ({ version: 2 }) as never });
      expect(await ota.check(tcp.url)).toMatchObject({ hasWebsocket: false });
      await Promise.all(tcp.hangUps);
      expect(tcp.requests).toEqual([firmwarePost(tcp.port, '/xiaozhi/ota/', '{"version":2}')]);
    } finally {
      await tcp.close();
    }
  });

  it('writes an OTA check with a serial number (Activation-Version 2) in the same order', async () => {
    const tcp = await recordingServer(EMPTY_REPLY);
    try {
      const { ota } = client({ serialNumber: 'SN0001', body: () => ({ version: 2 }) as never });
      await ota.check(tcp.url);
      await Promise.all(tcp.hangUps);
      expect(tcp.requests).toEqual([
        firmwarePost(tcp.port, '/xiaozhi/ota/', '{"version":2}', {
          activation: 2,
          serial: 'SN0001',
        }),
      ]);
    } finally {
      await tcp.close();
    }
  });

  it("writes an activation with the check's headers and its payload", async () => {
    const tcp = await recordingServer('HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n');
    try {
      const { ota } = client();
      expect(
        await ota.activate(tcp.url, {
          message: undefined,
          code: '123456',
          challenge: 'c',
          timeoutMs: undefined,
        }),
      ).toBe('done');
      await Promise.all(tcp.hangUps);
      expect(tcp.requests).toEqual([firmwarePost(tcp.port, '/xiaozhi/ota/activate', '{}')]);
    } finally {
      await tcp.close();
    }
  });

  it('writes a firmware download as a bare GET: Host and Connection only', async () => {
    const tcp = await recordingServer(
      Buffer.concat([
        Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: keep-alive\r\n\r\n'),
        Buffer.from([1, 2, 3, 4]),
      ]),
    );
    try {
      const { ota } = client();
      const url = `http://127.0.0.1:${tcp.port}/firmware/xiaozhi.bin?v=2.4.3`;
      expect([...(await ota.download(url))]).toEqual([1, 2, 3, 4]);
      await Promise.all(tcp.hangUps);
      expect(tcp.requests).toEqual([
        [
          'GET /firmware/xiaozhi.bin?v=2.4.3 HTTP/1.1',
          `Host: 127.0.0.1:${tcp.port}`,
          'Connection: close',
          '',
          '',
        ].join('\r\n'),
      ]);
    } finally {
      await tcp.close();
    }
  });

  it('does not decode a gzip reply (the board asks for none and has no decoder): the check fails', async () => {
    const body = gzipSync(reply(10));
    const tcp = await recordingServer(
      Buffer.concat([
        Buffer.from(
          `HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: ${body.length}\r\n\r\n`,
        ),
        body,
      ]),
    );
    try {
      const { ota, storage, console } = client();
      expect(await ota.check(tcp.url)).toBeUndefined();
      expect(storage.open('websocket').getString('token')).toBe('');
      expect(texts(console)).toContain('E Ota: Failed to parse JSON response');
      expect(tcp.requests[0]).not.toMatch(/accept-encoding/i);
    } finally {
      await tcp.close();
    }
  });

  it('fails the check when the reply does not come within its bound', async () => {
    const tcp = await rawServer(() => {});
    try {
      const { ota, console } = client({ timeoutMs: 50 });
      expect(await ota.check(tcp.url)).toBeUndefined();
      expect(texts(console)).toContain(
        'E Ota: Failed to open HTTP connection: no complete reply within 50 ms',
      );
    } finally {
      await tcp.close();
    }
  });
});

describe('OtaClient activation payload (Ota::GetActivationPayload)', () => {
  // RFC 4231 test case 1: HMAC-SHA256 with key 0x0b × 20 of "Hi There".
  const KEY = '0b'.repeat(20);
  const HMAC = 'b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7';
  const activation = { message: 'say it', code: '123456', challenge: 'Hi There', timeoutMs: 3000 };

  it('signs the challenge with the eFuse key and sends the serial number in its headers', async () => {
    const statuses = [202, 200];
    const { url, received } = await serve((_, res) => res.writeHead(statuses.shift() ?? 500).end());
    const { ota } = client({
      serialNumber: 'SN0001',
      activation: { serialNumber: 'SN0001', key: KEY, hasHmac: true },
    });
    expect(await ota.activate(url, activation)).toBe('retry');
    expect(await ota.activate(url, activation)).toBe('done');
    expect(received.map((r) => r.url)).toEqual(['/xiaozhi/ota/activate', '/xiaozhi/ota/activate']);
    const [first] = received;
    expect(first?.body).toBe(
      `{"algorithm":"hmac-sha256","serial_number":"SN0001","challenge":"Hi There","hmac":"${HMAC}"}`,
    );
    expect(first?.headers['activation-version']).toBe('2');
    expect(first?.headers['serial-number']).toBe('SN0001');
    expect(first?.headers['content-type']).toBe('application/json');
  });

  it('escapes the challenge as cJSON prints it', async () => {
    const { url, received } = await serve((_, res) => res.writeHead(200).end());
    const { ota } = client({
      serialNumber: 'SN0001',
      activation: { serialNumber: 'SN0001', key: KEY, hasHmac: true },
    });
    await ota.activate(url, { ...activation, challenge: 'a"b\\c\n语' });
    expect(received[0]?.body).toMatch(/"challenge":"a\\"b\\\\c\\n语","hmac":"[0-9a-f]{64}"}$/);
  });

  it('sends {} without a serial number, and an empty hmac on a chip without the HMAC peripheral', async () => {
    const { url, received } = await serve((_, res) => res.writeHead(200).end());
    await client().ota.activate(url, activation);
    expect(received[0]?.body).toBe('{}');
    expect(received[0]?.headers['activation-version']).toBe('1');
    expect(received[0]?.headers['serial-number']).toBeUndefined();
    await client({
      serialNumber: 'SN0002',
      activation: { serialNumber: 'SN0002', key: undefined, hasHmac: false },
    }).ota.activate(url, activation);
    expect(received[1]?.body).toBe(
      '{"algorithm":"hmac-sha256","serial_number":"SN0002","challenge":"Hi There","hmac":""}',
    );
  });

  it('sends {} when no key is burnt: the HMAC fails', async () => {
    const { url, received } = await serve((_, res) => res.writeHead(200).end());
    const { ota, console } = client({
      serialNumber: 'SN0003',
      activation: { serialNumber: 'SN0003', key: undefined, hasHmac: true },
    });
    await ota.activate(url, activation);
    expect(received[0]?.body).toBe('{}');
    expect(texts(console)).toContain('E Ota: HMAC calculation failed: ESP_FAIL');
  });

  it('logs a refused activation with its body, bounded', async () => {
    const { url } = await serve((_, res) => res.writeHead(403).end('x'.repeat(1024 * 1024)));
    const { ota, console } = client();
    expect(await ota.activate(url, activation)).toBe('failed');
    expect(texts(console)).toContain(
      'E Ota: Failed to activate, code: 403, body: (over 65536 bytes)',
    );
  });
});

describe('OtaClient.download', () => {
  it('refuses a Content-Length no app partition can hold, before allocating it', async () => {
    // 3 GiB declared: the firmware streams into its partition and esp_ota_write refuses the
    // overflow; the virtual board holds images in memory, so it must not believe the header.
    const { url } = await serve((_request, res) => {
      res.writeHead(200, { 'Content-Length': String(3 * 1024 * 1024 * 1024) });
      res.write(Buffer.alloc(16));
    });
    const { ota } = client();
    await expect(ota.download(url)).rejects.toThrow(
      'Image of 3221225472 bytes is larger than the 16777216 bytes an app partition can hold',
    );
  });

  it('downloads an image of its declared length', async () => {
    const { url } = await serve((_request, res) => {
      res.writeHead(200, { 'Content-Length': '4' });
      res.end(Buffer.from([1, 2, 3, 4]));
    });
    const { ota } = client();
    expect([...(await ota.download(url))]).toEqual([1, 2, 3, 4]);
  });
});
