/**
 * Local errors of `@xiaozhi-mcp/bridge`, each with a string `code`, listed in the README. They
 * stop the bridge from starting or describe what the server's API answered; what a board
 * answers to a call is never one of these: it goes back to the MCP client as an `isError`
 * result.
 */
export const BRIDGE_ERROR_CODES = [
  'CONFIG_INVALID',
  'SERVER_UNREACHABLE',
  'SERVER_TIMEOUT',
  'UNAUTHORIZED',
  'DEVICE_NOT_FOUND',
  'API_ERROR',
  'LISTEN_FAILED',
] as const;
export type BridgeErrorCode = (typeof BRIDGE_ERROR_CODES)[number];

export class BridgeError extends Error {
  override readonly name = 'BridgeError';
  /** The API's HTTP status, when the error is an API answer. */
  readonly status: number | undefined;
  /** The API's own `error.code` (`DEVICE_DISCONNECTED`, `REQUEST_TIMEOUT`, -32000, ...). */
  readonly apiCode: string | number | undefined;
  /**
   * What the API said in an error answer: its `error.message` (`HTTP <status>` when it gave
   * none), for callers that word the failure themselves; undefined when no error answer of the
   * API's came (no answer, or one that is not the API's).
   */
  readonly apiMessage: string | undefined;
  /** True when the API says the device itself answered with an error (`source: "device"`). */
  readonly fromDevice: boolean;

  constructor(
    readonly code: BridgeErrorCode,
    message: string,
    options: {
      cause?: unknown;
      status?: number;
      apiCode?: string | number | undefined;
      apiMessage?: string;
      fromDevice?: boolean;
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.status = options.status;
    this.apiCode = options.apiCode;
    this.apiMessage = options.apiMessage;
    this.fromDevice = options.fromDevice ?? false;
  }
}
