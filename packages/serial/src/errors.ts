/** Local errors of `@xiaozhi-mcp/serial`, each with a string `code`; listed in the README. */
export const SERIAL_ERROR_CODES = [
  'OPTION_INVALID',
  'PORT_NOT_FOUND',
  'PORT_BUSY',
  'PORT_DENIED',
  'PORT_OPEN_FAILED',
  'LOCK_FAILED',
  'CHIP_MISMATCH',
  'WRITE_REFUSED',
  'FLASH_FAILED',
  'EXPECT_TIMEOUT',
  'EXPECT_FORBIDDEN',
  'EXPECT_CLOSED',
  'PROVIDER_FAILED',
] as const;
export type SerialErrorCode = (typeof SERIAL_ERROR_CODES)[number];

export class SerialError extends Error {
  override readonly name: string = 'SerialError';
  constructor(
    readonly code: SerialErrorCode,
    message: string,
    options: { cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
  }
}

/**
 * How a port provider's refusal is to be taken: `usage`, a request to correct (a name that is
 * not a board's, a creation option out of range); `failed`, a board the provider could not make
 * ready (its files damaged or not writable).
 */
export type ProviderFailureKind = 'usage' | 'failed';

/**
 * A port provider could not give the board asked for. A `SerialError` like any other of a
 * resolution (`OPTION_INVALID` for `usage`, `PROVIDER_FAILED` for `failed`), with the provider's
 * own verdict in `kind`, so that whoever reports it (a CLI's exit code) need not know the
 * provider.
 */
export class PortProviderError extends SerialError {
  override readonly name: string = 'PortProviderError';
  constructor(
    readonly kind: ProviderFailureKind,
    message: string,
    options: { cause?: unknown } = {},
  ) {
    super(kind === 'usage' ? 'OPTION_INVALID' : 'PROVIDER_FAILED', message, options);
  }
}
