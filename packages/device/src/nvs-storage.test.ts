import { describe, expect, it } from 'vitest';
import { DeviceError } from './errors.js';
import { NvsStorage } from './nvs-storage.js';

describe('NvsStorage', () => {
  it('stores typed entries per namespace; a string read as an int gives the default', () => {
    const storage = new NvsStorage({
      websocket: { url: 'ws://h/', version: '3' },
      audio: { output_volume: 60 },
    });
    const websocket = storage.open('websocket');
    expect(websocket.getString('url')).toBe('ws://h/');
    expect(websocket.getInt('version')).toBe(0);
    expect(websocket.getInt('version', 1)).toBe(1);
    expect(storage.open('audio').getInt('output_volume')).toBe(60);
    expect(storage.open('audio').getString('output_volume', 'x')).toBe('x');
    expect(storage.toJSON()).toEqual({
      websocket: { url: 'ws://h/', version: '3' },
      audio: { output_volume: 60 },
    });
  });

  it('refuses keys over 15 bytes and strings over 3999 bytes, as NVS does', () => {
    const settings = new NvsStorage().open('websocket');
    expect(() => settings.setString('authorization_tok', 'x')).toThrow(
      expect.objectContaining({ code: 'NVS_KEY_TOO_LONG' }),
    );
    expect(() => settings.setString('k', 'é'.repeat(2000))).toThrow(DeviceError);
    expect(() => settings.setString('k', 'x'.repeat(3999))).not.toThrow();
    expect(() => new NvsStorage().open('a_namespace_too_long')).not.toThrow();
    expect(() => new NvsStorage().open('a_namespace_too_long').setInt('k', 1)).toThrow(
      expect.objectContaining({ code: 'NVS_KEY_TOO_LONG' }),
    );
  });

  it('erases keys and everything', () => {
    const storage = new NvsStorage({ wifi: { ssid: 'a', password: 'b' } });
    storage.open('wifi').eraseKey('password');
    expect(storage.toJSON()).toEqual({ wifi: { ssid: 'a' } });
    storage.eraseAll();
    expect(storage.entries()).toEqual([]);
  });
});
