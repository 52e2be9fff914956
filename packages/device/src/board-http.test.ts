import { describe, expect, it } from 'vitest';
import { requestHeaderLines } from './board-http.js';

/** The lines as `Name: value`, the way they go on the wire. */
const head = (...args: Parameters<typeof requestHeaderLines>): string[] => {
  const lines = requestHeaderLines(...args);
  return lines.flatMap((name, i) => (i % 2 === 0 ? [`${name}: ${lines[i + 1]}`] : []));
};

describe("requestHeaderLines (esp-ml307's HttpClient::BuildHttpRequest)", () => {
  const url = new URL('http://ota.example:8002/xiaozhi/ota/');

  it('writes Host, the headers set in the order of their lowercase names, Content-Length, Connection: close', () => {
    expect(
      head(url, {
        method: 'POST',
        // In the order Ota::SetupHttp sets them.
        headers: {
          'Activation-Version': '2',
          'Device-Id': 'f4:12:fa:00:00:01',
          'Client-Id': 'c',
          'Serial-Number': 'SN0001',
          'User-Agent': 'bread-compact-wifi/2.4.2',
          'Accept-Language': 'zh-CN',
          'Content-Type': 'application/json',
        },
        body: '{"语":1}',
      }),
    ).toEqual([
      'Host: ota.example:8002',
      'Accept-Language: zh-CN',
      'Activation-Version: 2',
      'Client-Id: c',
      'Content-Type: application/json',
      'Device-Id: f4:12:fa:00:00:01',
      'Serial-Number: SN0001',
      'User-Agent: bread-compact-wifi/2.4.2',
      'Content-Length: 9',
      'Connection: close',
    ]);
  });

  it("leaves the port out when it is the scheme's default", () => {
    expect(head(new URL('http://ota.example:80/x'), { method: 'GET' })[0]).toBe(
      'Host: ota.example',
    );
    expect(head(new URL('https://ota.example/x'), { method: 'GET' })[0]).toBe('Host: ota.example');
    expect(head(new URL('https://ota.example:8443/x'), { method: 'GET' })[0]).toBe(
      'Host: ota.example:8443',
    );
  });

  it('writes a GET without a body as Host and Connection only', () => {
    expect(head(url, { method: 'GET' })).toEqual(['Host: ota.example:8002', 'Connection: close']);
  });

  it('writes Content-Length: 0 for a POST with an empty body', () => {
    expect(head(url, { method: 'POST', body: '' })).toEqual([
      'Host: ota.example:8002',
      'Content-Length: 0',
      'Connection: close',
    ]);
  });

  it('keeps one header per lowercase name, the last set, with its casing', () => {
    expect(head(url, { method: 'GET', headers: { 'x-b': '1', 'X-A': '2', 'X-B': '3' } })).toEqual([
      'Host: ota.example:8002',
      'X-A: 2',
      'X-B: 3',
      'Connection: close',
    ]);
  });

  it('adds neither Content-Length nor Connection when they are set', () => {
    expect(
      head(url, {
        method: 'POST',
        headers: { 'content-length': '2', Connection: 'keep-alive' },
        body: '{}',
      }),
    ).toEqual(['Host: ota.example:8002', 'Connection: keep-alive', 'content-length: 2']);
  });
});
