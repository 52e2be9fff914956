/**
 * Local errors of `@xiaozhi-mcp/server`, each with a string `code`, listed in the README.
 * What a device answers with an error reply is not one of these: it is a `WireError` from
 * the protocol package (codeless and recovered replies included).
 */
export const SERVER_ERROR_CODES = [
  'CONFIG_INVALID',
  'CONFIG_HAZARD',
  'LISTEN_FAILED',
  'DEVICE_NOT_FOUND',
  'DEVICE_DISCONNECTED',
  'DEVICE_NOT_READY',
  'REQUEST_TIMEOUT',
  'REQUEST_ABORTED',
  'INVALID_REPLY',
  'SESSION_FAILED',
] as const;
export type ServerErrorCode = (typeof SERVER_ERROR_CODES)[number];

export class ServerError extends Error {
  override readonly name = 'ServerError';
  constructor(
    readonly code: ServerErrorCode,
    message: string,
    options: { cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
  }
}
