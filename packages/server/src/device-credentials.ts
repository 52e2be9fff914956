/**
 * The secrets the OTA endpoint issues to each known device: the token its WebSocket connection
 * brings (`Authorization: Bearer`), and the password of its MQTT connection. A device's secrets
 * live only as long as its record: the registry drops them when it forgets or evicts the
 * device, so a re-flashed board, which comes back with a new Client-Id, never inherits them.
 * Whether a Client-Id may act as a device at all is the registry's pin, checked before these.
 */
import { ServerError } from './errors.js';

/** The kinds of secret issued to a device. */
type SecretKind = 'token' | 'mqttPassword';

export class DeviceCredentials {
  readonly #issued = new Map<string, Partial<Record<SecretKind, string>>>();
  readonly #known: (deviceId: string) => boolean;

  /**
   * `known`: whether a device (by lowercase id) has a record; secrets are kept for those only,
   * which bounds them by the registry's own bound.
   */
  constructor(known: (deviceId: string) => boolean) {
    this.#known = known;
  }

  /** The WebSocket token issued to a device, if any. */
  tokenFor(deviceId: string): string | undefined {
    return this.#get(deviceId, 'token');
  }

  /** Keeps the WebSocket token issued to a known device (undefined revokes it). */
  setToken(deviceId: string, token: string | undefined): void {
    this.#set(deviceId, 'token', token);
  }

  /** The MQTT password issued to a device, if any. */
  mqttPasswordFor(deviceId: string): string | undefined {
    return this.#get(deviceId, 'mqttPassword');
  }

  /** Keeps the MQTT password issued to a known device (undefined revokes it). */
  setMqttPassword(deviceId: string, password: string | undefined): void {
    this.#set(deviceId, 'mqttPassword', password);
  }

  /** Drops every secret issued to the device: its record is gone. */
  drop(deviceId: string): void {
    this.#issued.delete(deviceId.toLowerCase());
  }

  #get(deviceId: string, kind: SecretKind): string | undefined {
    return this.#issued.get(deviceId.toLowerCase())?.[kind];
  }

  #set(deviceId: string, kind: SecretKind, secret: string | undefined): void {
    const id = deviceId.toLowerCase();
    if (!this.#known(id))
      throw new ServerError('DEVICE_NOT_FOUND', `no device ${deviceId} has been seen`);
    const issued = this.#issued.get(id) ?? {};
    if (secret === undefined) delete issued[kind];
    else issued[kind] = secret;
    if (Object.keys(issued).length === 0) this.#issued.delete(id);
    else this.#issued.set(id, issued);
  }
}
