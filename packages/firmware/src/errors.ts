/** Local errors of `@xiaozhi-mcp/firmware`, each with a string `code`; listed in the README. */
export const FIRMWARE_ERROR_CODES = [
  'IMAGE_INVALID',
  'IMAGE_TRUNCATED',
  'IMAGE_CHECKSUM',
  'IMAGE_HASH',
  'APP_DESC_MISSING',
  'CHIP_UNKNOWN',
  'OPTION_INVALID',
  'PARTITION_INVALID',
  'NVS_INVALID',
  'NVS_FULL',
  'NVS_CORRUPT',
  'PACKET_INVALID',
] as const;
export type FirmwareErrorCode = (typeof FIRMWARE_ERROR_CODES)[number];

export class FirmwareError extends Error {
  override readonly name: string = 'FirmwareError';
  constructor(
    readonly code: FirmwareErrorCode,
    message: string,
    options: { cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
  }
}
