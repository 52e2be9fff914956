/**
 * The HTTP JSON API under `{apiPrefix}`:
 *
 * | method and path | answer |
 * |---|---|
 * | `GET /devices?limit=N&cursor=C` | `{devices, nextCursor?}`: devices by id (id, board, version, connected, ready, transport, tool count, last OTA check), a page of N (default 100, at most 1000) after the cursor |
 * | `GET /devices/:id` | one device, with its latest audio session over MQTT (`audio`) |
 * | `PUT /devices/:id/transport` | body `{transport: "websocket" \| "mqtt"}`: what its next OTA reply offers (the device need not be known yet) → `{deviceId, transport}`; 409 when the server runs no MQTT broker |
 * | `DELETE /devices/:id` | forgets it (closing its session): `{forgotten: id}`; its next check or connection is a new device |
 * | `GET /devices/:id/tools` | its tools (`userOnly` marks user-only tools) |
 * | `POST /devices/:id/call` | body `{name, arguments?, timeoutMs?}` → `{result}` (standard MCP content); `timeoutMs` 1..600000 |
 * | `GET /ota-checks?limit=N` | recent OTA checks, newest last |
 *
 * Errors are `{error: {code, message}}`: 400 bad request, 404 unknown device, 409 not
 * connected or not ready, 502 the device answered with an error (`code` is the JSON-RPC code,
 * `codeless` tells whether the device sent one) or an unusable reply, 504 no reply in time.
 *
 * Every request and answer is one of the protocol's API wire types (module `api` of
 * `@xiaozhi-mcp/protocol`), which the API's client reads with.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  API_CALL_TIMEOUT_MAX_MS,
  API_DEVICES_PAGE_DEFAULT,
  API_DEVICES_PAGE_MAX,
  API_OTA_CHECKS_DEFAULT,
  type ApiCallRequest,
  type ApiCallResponse,
  type ApiDevice,
  type ApiDeviceResponse,
  type ApiDevicesResponse,
  type ApiErrorBody,
  type ApiForgetResponse,
  type ApiOtaChecksResponse,
  type ApiToolsResponse,
  type ApiTransportRequest,
  type ApiTransportResponse,
  WireError,
} from '@xiaozhi-mcp/protocol';
import { MAX_DEVICE_JSON_DEPTH, nestsWithin } from './device-bounds.js';
import type { DeviceTransport } from './device-link.js';
import { ServerError } from './errors.js';
import { HttpError, readBody, sendJson } from './http.js';
import type { DeviceRecord, DeviceRegistry } from './registry.js';
import type { AudioSessionStats } from './udp-audio.js';

/** What the API reaches of the server beyond the registry. */
export interface ApiControls {
  /** The transport the device's OTA reply offers. */
  transportFor(deviceId: string): DeviceTransport;
  /** Offers the device another transport; throws `CONFIG_INVALID` (no broker for mqtt). */
  setTransport(deviceId: string, transport: DeviceTransport): void;
  /** The device's latest audio session over MQTT. */
  audioStatsFor(deviceId: string): AudioSessionStats | undefined;
}

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;

/** A request body as parsed, before its fields are checked against their wire type. */
type Unchecked<T> = { [K in keyof T]?: unknown };

/** A device as the API lists it, but for what the server knows beyond the registry. */
export function deviceSummary(record: DeviceRecord): Omit<ApiDevice, 'offeredTransport'> {
  return {
    deviceId: record.deviceId,
    clientId: record.clientId,
    board: record.board ?? null,
    version: record.version ?? null,
    connected: record.session !== undefined && !record.session.closed,
    ready: record.ready,
    sessionId: record.session?.info.sessionId ?? null,
    /** How it is connected, or was on its last session. */
    transport: record.transport ?? null,
    toolCount: record.tools.length,
    sessions: record.sessions,
    connectedAt: record.connectedAt ?? null,
    disconnectedAt: record.disconnectedAt ?? null,
    lastOtaCheck: record.lastOtaCheck ?? null,
    lastError: record.lastError ?? null,
    pageViolations: record.pageViolations,
    activatedSerial: record.activatedSerial ?? null,
  };
}

const STATUS: Partial<Record<ServerError['code'], number>> = {
  DEVICE_NOT_FOUND: 404,
  DEVICE_DISCONNECTED: 409,
  DEVICE_NOT_READY: 409,
  REQUEST_TIMEOUT: 504,
  REQUEST_ABORTED: 499,
  INVALID_REPLY: 502,
};

function sendError(res: ServerResponse, error: unknown): void {
  if (error instanceof WireError) {
    sendJson(res, 502, {
      error: {
        code: error.code,
        codeless: error.codeless,
        message: error.message,
        source: 'device',
      },
    } satisfies ApiErrorBody);
  } else if (error instanceof ServerError) {
    sendJson(res, STATUS[error.code] ?? 500, {
      error: { code: error.code, message: error.message },
    } satisfies ApiErrorBody);
  } else if (error instanceof HttpError) {
    sendJson(res, error.status, {
      error: { code: error.code, message: error.message },
    } satisfies ApiErrorBody);
  } else {
    sendJson(res, 500, {
      error: { code: 'INTERNAL', message: (error as Error).message },
    } satisfies ApiErrorBody);
  }
}

/** A device's summary with what the server knows of it beyond the registry. */
function summaryWith(record: DeviceRecord, controls: ApiControls | undefined): ApiDevice {
  return {
    ...deviceSummary(record),
    offeredTransport: controls?.transportFor(record.deviceId) ?? null,
  };
}

/** A page of devices in id order, after `cursor` (the last id of the previous page). */
function devicesPage(
  registry: DeviceRegistry,
  query: URLSearchParams,
  controls: ApiControls | undefined,
): ApiDevicesResponse {
  const limitText = query.get('limit');
  const limit = limitText === null ? API_DEVICES_PAGE_DEFAULT : Number(limitText);
  if (
    !/^\d+$/.test(limitText ?? '1') ||
    !Number.isInteger(limit) ||
    limit < 1 ||
    limit > API_DEVICES_PAGE_MAX
  )
    throw new HttpError(
      400,
      `limit must be an integer 1..${API_DEVICES_PAGE_MAX}, got ${JSON.stringify(limitText)}`,
    );
  const cursor = query.get('cursor') ?? '';
  const after = registry
    .list()
    .filter((record) => record.deviceId > cursor)
    .sort((a, b) => (a.deviceId < b.deviceId ? -1 : 1));
  const page = after.slice(0, limit);
  const last = page.at(-1);
  return {
    devices: page.map((record) => summaryWith(record, controls)),
    ...(after.length > limit && last !== undefined ? { nextCursor: last.deviceId } : {}),
  };
}

/** `PUT /devices/:id/transport`. */
async function putTransport(
  deviceInput: string,
  req: IncomingMessage,
  res: ServerResponse,
  controls: ApiControls | undefined,
): Promise<void> {
  const deviceId = deviceInput.toLowerCase();
  if (!MAC.test(deviceId))
    throw new HttpError(
      400,
      `a device id is the board MAC, aa:bb:cc:dd:ee:ff, got ${JSON.stringify(deviceInput.slice(0, 64))}`,
    );
  const body = JSON.parse((await readBody(req, 1024)) || '{}') as Unchecked<ApiTransportRequest>;
  const { transport } = body;
  if (transport !== 'websocket' && transport !== 'mqtt')
    throw new HttpError(400, 'body.transport must be "websocket" or "mqtt"');
  if (controls === undefined)
    throw new HttpError(409, 'this server cannot change transports', 'NO_MQTT_BROKER');
  try {
    controls.setTransport(deviceId, transport);
  } catch (error) {
    if (error instanceof ServerError && error.code === 'CONFIG_INVALID')
      throw new HttpError(409, error.message, 'NO_MQTT_BROKER');
    throw error;
  }
  sendJson(res, 200, { deviceId, transport } satisfies ApiTransportResponse);
}

export async function handleApi(
  registry: DeviceRegistry,
  path: string,
  req: IncomingMessage,
  res: ServerResponse,
  controls?: ApiControls,
): Promise<void> {
  try {
    // Joined, not resolved: a path starting `//` would be read as a host (`new URL('//x', base)`).
    let url: URL;
    try {
      url = new URL(`http://localhost${path.startsWith('/') ? '' : '/'}${path}`);
    } catch {
      throw new HttpError(400, `malformed request path ${JSON.stringify(path.slice(0, 200))}`);
    }
    let parts: string[];
    try {
      parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    } catch {
      throw new HttpError(400, `malformed %-escape in ${url.pathname}`);
    }
    if (req.method === 'GET' && parts.length === 1 && parts[0] === 'devices') {
      sendJson(res, 200, devicesPage(registry, url.searchParams, controls));
      return;
    }
    if (req.method === 'GET' && parts.length === 1 && parts[0] === 'ota-checks') {
      const limit = Number(url.searchParams.get('limit') ?? API_OTA_CHECKS_DEFAULT);
      sendJson(res, 200, {
        otaChecks: registry.otaChecks(
          Number.isInteger(limit) && limit > 0 ? limit : API_OTA_CHECKS_DEFAULT,
        ),
      } satisfies ApiOtaChecksResponse);
      return;
    }
    if (
      req.method === 'PUT' &&
      parts.length === 3 &&
      parts[0] === 'devices' &&
      parts[2] === 'transport'
    )
      return await putTransport(parts[1] ?? '', req, res, controls);
    if (parts[0] === 'devices' && parts[1] !== undefined) {
      const record = registry.get(parts[1]);
      if (record === undefined)
        throw new ServerError('DEVICE_NOT_FOUND', `no device ${parts[1]} has been seen`);
      if (req.method === 'GET' && parts.length === 2) {
        sendJson(res, 200, {
          device: {
            ...summaryWith(record, controls),
            audio: controls?.audioStatsFor(record.deviceId) ?? null,
          },
        } satisfies ApiDeviceResponse);
        return;
      }
      if (req.method === 'DELETE' && parts.length === 2) {
        registry.forget(record.deviceId);
        sendJson(res, 200, { forgotten: record.deviceId } satisfies ApiForgetResponse);
        return;
      }
      if (req.method === 'GET' && parts.length === 3 && parts[2] === 'tools') {
        if (!record.ready && record.tools.length === 0)
          throw new ServerError(
            'DEVICE_NOT_READY',
            `device ${record.deviceId} has not listed its tools yet`,
          );
        sendJson(res, 200, {
          tools: record.tools.map((t) => ({
            name: t.name,
            description: t.description,
            inputSchema: t.inputSchema,
            userOnly: t.userOnly,
          })),
        } satisfies ApiToolsResponse);
        return;
      }
      if (req.method === 'POST' && parts.length === 3 && parts[2] === 'call') {
        const body = JSON.parse(
          (await readBody(req, 1024 * 1024)) || '{}',
        ) as Unchecked<ApiCallRequest>;
        if (typeof body.name !== 'string')
          throw new HttpError(400, 'body.name must be the tool name');
        if (
          body.arguments !== undefined &&
          (typeof body.arguments !== 'object' ||
            body.arguments === null ||
            Array.isArray(body.arguments))
        ) {
          throw new HttpError(400, 'body.arguments must be an object');
        }
        if (
          body.arguments !== undefined &&
          !nestsWithin(body.arguments, MAX_DEVICE_JSON_DEPTH + 1)
        ) {
          throw new HttpError(
            400,
            `body.arguments nests deeper than ${MAX_DEVICE_JSON_DEPTH} levels`,
          );
        }
        const timeoutMs = body.timeoutMs;
        if (
          timeoutMs !== undefined &&
          !(
            typeof timeoutMs === 'number' &&
            Number.isInteger(timeoutMs) &&
            timeoutMs >= 1 &&
            timeoutMs <= API_CALL_TIMEOUT_MAX_MS
          )
        ) {
          throw new HttpError(
            400,
            `body.timeoutMs must be an integer number of milliseconds, 1..${API_CALL_TIMEOUT_MAX_MS}, got ${typeof timeoutMs === 'number' ? timeoutMs : typeof timeoutMs}`,
          );
        }
        const abort = new AbortController();
        // A client that goes away cancels its call.
        res.on('close', () => abort.abort(new Error('the API client went away')));
        const result = await registry.callTool(
          record.deviceId,
          body.name,
          (body.arguments ?? {}) as Record<string, unknown>,
          {
            ...(timeoutMs === undefined ? {} : { timeoutMs }),
            signal: abort.signal,
          },
        );
        // What the device answered is sent on: it must be safe to serialise.
        if (!nestsWithin(result, MAX_DEVICE_JSON_DEPTH + 1))
          throw new ServerError(
            'INVALID_REPLY',
            `the result from ${record.deviceId} nests deeper than ${MAX_DEVICE_JSON_DEPTH} levels`,
          );
        sendJson(res, 200, { result } satisfies ApiCallResponse);
        return;
      }
    }
    sendJson(res, 404, {
      error: { code: 'NOT_FOUND', message: `no API route ${req.method} ${url.pathname}` },
    } satisfies ApiErrorBody);
  } catch (error) {
    if (error instanceof SyntaxError)
      sendError(res, new HttpError(400, `body is not JSON: ${error.message}`));
    else sendError(res, error);
  }
}
