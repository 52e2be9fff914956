import { describe, expect, it } from 'vitest';
import { appStartLines, chooseTransport, otaRetry, progressPercent } from './application.js';
import { FIRMWARE_TIMING } from './types.js';

describe('otaRetry (CheckNewVersion)', () => {
  it('doubles the delay after each failure and gives up after the tenth', () => {
    let delay = FIRMWARE_TIMING.otaRetryMs;
    const lines: string[] = [];
    for (let failures = 1; ; failures++) {
      const decision = otaRetry(failures, delay, FIRMWARE_TIMING);
      lines.push(decision.line);
      if (decision.kind === 'give-up') break;
      expect(decision.delay).toBe(delay);
      delay = decision.next;
    }
    expect(lines.slice(0, 2)).toEqual([
      'Check new version failed, retry in 10 seconds (1/10)',
      'Check new version failed, retry in 20 seconds (2/10)',
    ]);
    expect(lines).toHaveLength(10);
    expect(lines.at(-1)).toBe('Too many retries, exit version check');
  });
});

describe('progressPercent', () => {
  it('steps in whole tens', () => {
    expect([0, 99, 100, 555, 999, 1000].map((n) => progressPercent(n, 1000))).toEqual([
      0, 0, 10, 50, 90, 100,
    ]);
  });
});

describe('appStartLines', () => {
  it('prints the running app as app_main does', () => {
    const lines = appStartLines({
      projectName: 'xiaozhi',
      version: '2.4.2',
      idfVersion: 'v5.5.2',
      elfSha256: '0123456789abcdef0123',
      compileTime: '',
    });
    expect(lines.map((l) => ('text' in l ? `${l.tag}: ${l.text}` : l.raw))).toEqual([
      'cpu_start: Project name:     xiaozhi',
      'app_init: App version:      2.4.2',
      'app_init: ELF file SHA256:  0123456789abcdef...',
      'app_init: ESP-IDF:          v5.5.2',
    ]);
  });
});

describe('chooseTransport', () => {
  it('takes MQTT whenever an endpoint is stored, WebSocket when only a URL is, else none', () => {
    const ws = 'ws://127.0.0.1:8000/xiaozhi/v1/';
    expect(chooseTransport({ mqttEndpoint: '127.0.0.1:1883', websocketUrl: ws })).toBe('mqtt');
    expect(chooseTransport({ mqttEndpoint: '127.0.0.1:1883', websocketUrl: '' })).toBe('mqtt');
    // A blanked endpoint (`"mqtt":{"endpoint":""}`) hands the board back to WebSocket.
    expect(chooseTransport({ mqttEndpoint: '', websocketUrl: ws })).toBe('websocket');
    expect(chooseTransport({ mqttEndpoint: '', websocketUrl: '' })).toBeUndefined();
  });
});
