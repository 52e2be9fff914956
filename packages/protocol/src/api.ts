/**
 * The server's HTTP API as it goes over the wire (under the server's `apiPrefix`, `/api` by
 * default; packages/server/README.md, "HTTP API"): each route's request and answer, the error
 * body and its codes, and the paging of `GET /devices`. The server's routes are typed against
 * these, and its one client (`ApiClient` in `@xiaozhi-mcp/bridge`) reads answers with the
 * readers below, which take any JSON value and never throw: an answer is untrusted input.
 *
 * | method and path | request | answer |
 * |---|---|---|
 * | `GET /devices?limit=N&cursor=C` | {@link ApiDevicesQuery} | {@link ApiDevicesResponse} |
 * | `GET /devices/:id` | | {@link ApiDeviceResponse} |
 * | `PUT /devices/:id/transport` | {@link ApiTransportRequest} | {@link ApiTransportResponse} |
 * | `DELETE /devices/:id` | | {@link ApiForgetResponse} |
 * | `GET /devices/:id/tools` | | {@link ApiToolsResponse} |
 * | `POST /devices/:id/call` | {@link ApiCallRequest} | {@link ApiCallResponse} |
 * | `GET /ota-checks?limit=N` | | {@link ApiOtaChecksResponse} |
 *
 * Every error is an {@link ApiErrorBody}. A field the server does not know is `null`, never
 * missing, except where a type says it may be absent.
 */
import type { ToolResult } from './results.js';

/** `GET /devices`: the page a request without `limit` gets. */
export const API_DEVICES_PAGE_DEFAULT = 100;
/** `GET /devices`: the largest `limit`; a larger one is refused with 400. */
export const API_DEVICES_PAGE_MAX = 1000;
/** `POST /devices/:id/call`: the largest `timeoutMs` (10 minutes); a larger one is refused. */
export const API_CALL_TIMEOUT_MAX_MS = 600_000;
/** `GET /ota-checks`: how many a request without a usable `limit` gets. */
export const API_OTA_CHECKS_DEFAULT = 100;

/** How a device is connected (or was, on its last session), and what an OTA reply may offer. */
export type ApiTransport = 'websocket' | 'mqtt';

/**
 * The codes of {@link ApiErrorBody} besides a device's own JSON-RPC code (documented in
 * packages/protocol/README.md, "HTTP API"). A server error of a kind the API does not expect
 * is sent with its own code and status 500.
 */
export const API_ERROR_CODES = [
  'BAD_REQUEST',
  'BODY_TOO_LARGE',
  'UNAUTHORIZED',
  'FORBIDDEN_ORIGIN',
  'NOT_FOUND',
  'DEVICE_NOT_FOUND',
  'DEVICE_DISCONNECTED',
  'DEVICE_NOT_READY',
  'NO_MQTT_BROKER',
  'REQUEST_ABORTED',
  'INVALID_REPLY',
  'REQUEST_TIMEOUT',
  'INTERNAL',
] as const;
export type ApiErrorCode = (typeof API_ERROR_CODES)[number];

/** An error of the server or of the request: `code` is one of {@link API_ERROR_CODES}. */
export interface ApiServerError {
  readonly code: string;
  readonly message: string;
}

/** The device answered the call with a JSON-RPC error (status 502). */
export interface ApiDeviceError {
  /** The device's JSON-RPC code, or -32000 when it sent none (the firmware never does). */
  readonly code: number;
  /** True when the device sent no code. */
  readonly codeless: boolean;
  /** The device's own words, verbatim. */
  readonly message: string;
  readonly source: 'device';
}

/** Every error answer of the API. */
export interface ApiErrorBody {
  readonly error: ApiServerError | ApiDeviceError;
}

/** `GET /devices` query: `limit` 1..{@link API_DEVICES_PAGE_MAX}, `cursor` as last answered. */
export interface ApiDevicesQuery {
  readonly limit?: number;
  /** Opaque to clients: the `nextCursor` of the previous page. */
  readonly cursor?: string;
}

/** An OTA check as the server recorded it. */
export interface ApiOtaCheck {
  /** ISO 8601. */
  readonly at: string;
  readonly deviceId: string;
  readonly clientId: string;
  readonly board?: string | undefined;
  readonly version: string;
  readonly elfSha256?: string | undefined;
  readonly remoteAddress?: string | undefined;
  /** The firmware version the reply offered, if any. */
  readonly offered?: string | undefined;
  /** The request body as received: the board's system info. */
  readonly body: Readonly<Record<string, unknown>>;
}

/** A device in `GET /devices` and `GET /devices/:id`. */
export interface ApiDevice {
  /** Its Device-Id (the board's MAC, lower case with colons): the `:id` of its routes. */
  readonly deviceId: string;
  /** The Client-Id the device is pinned to. */
  readonly clientId: string;
  /** The build variant (`bread-compact-wifi`). */
  readonly board: string | null;
  readonly version: string | null;
  readonly connected: boolean;
  /** Initialised and tools listed on the current session. */
  readonly ready: boolean;
  readonly sessionId: string | null;
  /** How it is connected, or was on its last session. */
  readonly transport: ApiTransport | null;
  readonly toolCount: number;
  readonly sessions: number;
  /** ISO 8601. */
  readonly connectedAt: string | null;
  readonly disconnectedAt: string | null;
  readonly lastOtaCheck: ApiOtaCheck | null;
  /** Why the last session failed to become ready, if it did. */
  readonly lastError: string | null;
  /** Breaches of the firmware's paging rule seen in the last `tools/list` walks. */
  readonly pageViolations: readonly string[];
  readonly activatedSerial: string | null;
  /** What its next OTA reply offers. */
  readonly offeredTransport: ApiTransport | null;
}

/**
 * Counts of a device's latest UDP audio session (boards on MQTT), as the server's audio endpoint
 * keeps them. Sequence numbers are the board's (1, 2, 3, ...).
 */
export interface ApiAudioSession {
  readonly deviceId: string;
  readonly sessionId: string;
  /** The nonce's bytes 4..7, which tell sessions apart on the wire. */
  readonly ssrc: number;
  /** Packets accepted and decrypted, late ones included. */
  readonly packets: number;
  /** Decrypted payload bytes of those packets. */
  readonly bytes: number;
  /** Sequence numbers skipped over (never sent, or lost, or still to come late). */
  readonly gaps: number;
  /** Packets at or below the last sequence seen: late or repeated (the board drops older ones). */
  readonly outOfOrder: number;
  /** Datagrams carrying this session's ssrc that were refused (bad type, size or `payload_len`). */
  readonly rejected: number;
  /** The first in-order sequence number; null before one arrives. */
  readonly firstSequence: number | null;
  /** The highest sequence number seen; null before one arrives. */
  readonly lastSequence: number | null;
  readonly open: boolean;
  /** ISO 8601. */
  readonly openedAt: string;
  readonly closedAt?: string;
}

/** `GET /devices`: devices in id order after the cursor; `nextCursor` absent on the last page. */
export interface ApiDevicesResponse {
  readonly devices: readonly ApiDevice[];
  readonly nextCursor?: string;
}

/** `GET /devices/:id`: the device, with its latest audio session over MQTT (null when none). */
export interface ApiDeviceResponse {
  readonly device: ApiDevice & { readonly audio: ApiAudioSession | null };
}

/** `PUT /devices/:id/transport` body: what the device's next OTA reply offers. */
export interface ApiTransportRequest {
  readonly transport: ApiTransport;
}

export interface ApiTransportResponse {
  readonly deviceId: string;
  readonly transport: ApiTransport;
}

/** `DELETE /devices/:id`: the device forgotten (its record, token and Client-Id pin). */
export interface ApiForgetResponse {
  readonly forgotten: string;
}

/** A tool as the device listed it. */
export interface ApiTool {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: Record<string, unknown>;
  /** Listed only with `withUserTools` (annotations.audience = ["user"]). */
  readonly userOnly: boolean;
}

/** `GET /devices/:id/tools`: user-only tools included, marked. */
export interface ApiToolsResponse {
  readonly tools: readonly ApiTool[];
}

/** `POST /devices/:id/call` body. */
export interface ApiCallRequest {
  readonly name: string;
  /** A JSON object (default `{}`). */
  readonly arguments?: Record<string, unknown>;
  /** Bound on the device's reply, 1..{@link API_CALL_TIMEOUT_MAX_MS} (default: the server's). */
  readonly timeoutMs?: number;
}

/** The device's result as standard MCP content (a firmware image item already unwrapped). */
export interface ApiCallResponse {
  readonly result: ToolResult;
}

/** `GET /ota-checks`: the most recent, newest last. */
export interface ApiOtaChecksResponse {
  readonly otaChecks: readonly ApiOtaCheck[];
}

/** An error answer as read by {@link readApiError}. */
export interface ApiErrorReading {
  /** The API's `code`: one of {@link API_ERROR_CODES}, or the device's JSON-RPC code. */
  readonly code: string | number | undefined;
  /** Its `message`; a bare string `error` (the server's front door, off the API) is one too. */
  readonly message: string | undefined;
  /** True when the device itself answered with the error (`source: "device"`). */
  readonly fromDevice: boolean;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function stringOrNull(value: unknown): string | null {
  return typeof value === 'string' ? value : null;
}

function transportOrNull(value: unknown): ApiTransport | null {
  return value === 'websocket' || value === 'mqtt' ? value : null;
}

/** The error of an error answer's body, whatever JSON it is. */
export function readApiError(body: unknown): ApiErrorReading {
  const error = isRecord(body) ? body.error : undefined;
  if (typeof error === 'string') return { code: undefined, message: error, fromDevice: false };
  const fields = isRecord(error) ? error : {};
  return {
    code:
      typeof fields.code === 'string' || typeof fields.code === 'number' ? fields.code : undefined,
    message: typeof fields.message === 'string' ? fields.message : undefined,
    fromDevice: fields.source === 'device',
  };
}

/** An OTA check of an answer; null without its time. */
function readOtaCheck(value: unknown): ApiOtaCheck | null {
  if (!isRecord(value) || typeof value.at !== 'string') return null;
  const text = (field: unknown) => (typeof field === 'string' ? field : '');
  const { board, elfSha256, remoteAddress, offered } = value;
  return {
    at: value.at,
    deviceId: text(value.deviceId),
    clientId: text(value.clientId),
    version: text(value.version),
    body: isRecord(value.body) ? value.body : {},
    ...(typeof board === 'string' ? { board } : {}),
    ...(typeof elfSha256 === 'string' ? { elfSha256 } : {}),
    ...(typeof remoteAddress === 'string' ? { remoteAddress } : {}),
    ...(typeof offered === 'string' ? { offered } : {}),
  };
}

/**
 * A device of an answer, every field of its type present: one the server left out (an older
 * server) or sent as something else reads as its empty value. Undefined without a `deviceId`.
 */
export function readApiDevice(value: unknown): ApiDevice | undefined {
  if (!isRecord(value) || typeof value.deviceId !== 'string') return undefined;
  const count = (field: unknown) => (typeof field === 'number' ? field : 0);
  return {
    deviceId: value.deviceId,
    clientId: typeof value.clientId === 'string' ? value.clientId : '',
    board: stringOrNull(value.board),
    version: stringOrNull(value.version),
    connected: value.connected === true,
    ready: value.ready === true,
    sessionId: stringOrNull(value.sessionId),
    transport: transportOrNull(value.transport),
    toolCount: count(value.toolCount),
    sessions: count(value.sessions),
    connectedAt: stringOrNull(value.connectedAt),
    disconnectedAt: stringOrNull(value.disconnectedAt),
    lastOtaCheck: readOtaCheck(value.lastOtaCheck),
    lastError: stringOrNull(value.lastError),
    pageViolations: Array.isArray(value.pageViolations)
      ? value.pageViolations.filter((v): v is string => typeof v === 'string')
      : [],
    activatedSerial: stringOrNull(value.activatedSerial),
    offeredTransport: transportOrNull(value.offeredTransport),
  };
}

/**
 * A tool of an answer: a missing description reads as empty, a missing or malformed schema as
 * one without properties. Undefined without a `name`.
 */
export function readApiTool(value: unknown): ApiTool | undefined {
  if (!isRecord(value) || typeof value.name !== 'string') return undefined;
  return {
    name: value.name,
    description: typeof value.description === 'string' ? value.description : '',
    inputSchema: isRecord(value.inputSchema) ? value.inputSchema : { type: 'object' },
    userOnly: value.userOnly === true,
  };
}
