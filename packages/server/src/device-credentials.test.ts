import { describe, expect, it } from 'vitest';
import { DeviceCredentials } from './device-credentials.js';
import { ServerError } from './errors.js';

const A = 'f4:12:fa:50:00:01';
const B = 'f4:12:fa:50:00:02';

function credentials(known: string[] = [A, B]): DeviceCredentials {
  return new DeviceCredentials((deviceId) => known.includes(deviceId));
}

describe('DeviceCredentials', () => {
  it('keeps a token and an MQTT password per device, whatever the case of its id', () => {
    const target = credentials();
    target.setToken(A.toUpperCase(), 'token-a');
    target.setMqttPassword(A, 'password-a');
    target.setToken(B, 'token-b');
    expect(target.tokenFor(A)).toBe('token-a');
    expect(target.mqttPasswordFor(A.toUpperCase())).toBe('password-a');
    expect(target.tokenFor(B)).toBe('token-b');
    expect(target.mqttPasswordFor(B)).toBeUndefined();
  });

  it('revokes one secret with undefined and keeps the other', () => {
    const target = credentials();
    target.setToken(A, 't');
    target.setMqttPassword(A, 'p');
    target.setToken(A, undefined);
    expect(target.tokenFor(A)).toBeUndefined();
    expect(target.mqttPasswordFor(A)).toBe('p');
  });

  it('issues nothing to a device without a record', () => {
    const target = credentials([A]);
    expect(() => target.setToken(B, 't')).toThrow(ServerError);
    expect(() => target.setMqttPassword(B, 'p')).toThrow(
      expect.objectContaining({ code: 'DEVICE_NOT_FOUND' }),
    );
    expect(target.tokenFor(B)).toBeUndefined();
  });

  it('drops every secret of a device at once', () => {
    const target = credentials();
    target.setToken(A, 't');
    target.setMqttPassword(A, 'p');
    target.setToken(B, 'u');
    target.drop(A.toUpperCase());
    expect(target.tokenFor(A)).toBeUndefined();
    expect(target.mqttPasswordFor(A)).toBeUndefined();
    expect(target.tokenFor(B)).toBe('u');
  });
});
