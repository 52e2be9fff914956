/**
 * Local errors of `@xiaozhi-mcp/device`, each with a string `code`; listed in the README.
 * A {@link BoardPanic} is not an error a caller handles: it is the firmware aborting, and
 * the virtual board answers it the way a real board does (panic output, then reboot).
 */
export const DEVICE_ERROR_CODES = [
  'NVS_KEY_TOO_LONG',
  'NVS_VALUE_TOO_LONG',
  'OTA_DOWNLOAD_FAILED',
  'WS_CONNECT_FAILED',
  'WS_HELLO_TIMEOUT',
  'WS_CLOSED',
  'WS_FRAME_TOO_LARGE',
  'MQTT_NOT_CONNECTED',
  'MQTT_PUBLISH_FAILED',
  'MQTT_HELLO_TIMEOUT',
  'UDP_CONNECT_FAILED',
  'BOARD_TIMEOUT',
  'BOARD_OPTIONS_INVALID',
  'FLASH_OUT_OF_RANGE',
  'FLASH_INVALID',
] as const;
export type DeviceErrorCode = (typeof DEVICE_ERROR_CODES)[number];

export class DeviceError extends Error {
  override readonly name = 'DeviceError';
  constructor(
    readonly code: DeviceErrorCode,
    message: string,
    options: { cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
  }
}

/** How the firmware dies: an abort (ESP_ERROR_CHECK, uncaught exception) or a CPU fault. */
export type PanicKind = 'abort' | 'load-prohibited';

/** The firmware crashed; the board prints its panic and reboots. */
export class BoardPanic extends Error {
  override readonly name = 'BoardPanic';
  constructor(
    readonly kind: PanicKind,
    /** What the firmware was doing, for the console and the test that provoked it. */
    readonly reason: string,
  ) {
    super(`${kind === 'abort' ? 'abort() was called' : 'LoadProhibited'}: ${reason}`);
  }
}
