/** Local errors of `@xiaozhi-mcp/serial`, each with a string `code`; listed in the README. */
export const SERIAL_ERROR_CODES = [
  'OPTION_INVALID',
  'PORT_NOT_FOUND',
  'PORT_BUSY',
  'CHIP_MISMATCH',
  'FLASH_FAILED',
  'EXPECT_TIMEOUT',
  'EXPECT_FORBIDDEN',
  'EXPECT_CLOSED',
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
