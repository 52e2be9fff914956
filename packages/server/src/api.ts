/**
 * The HTTP JSON API under `{apiPrefix}`:
 *
 * | method and path | answer |
 * |---|---|
 * | `GET /devices` | every device seen: id, board, version, connected, ready, tool count, last OTA check |
 * | `GET /devices/:id` | one device |
 * | `GET /devices/:id/tools` | its tools (`userOnly` marks user-only tools) |
 * | `POST /devices/:id/call` | body `{name, arguments?, timeoutMs?}` → `{result}` (standard MCP content) |
 * | `GET /ota-checks?limit=N` | recent OTA checks, newest last |
 *
 * Errors are `{error: {code, message}}`: 400 bad request, 404 unknown device, 409 not
 * connected or not ready, 502 the device answered with an error (`code` is the JSON-RPC code,
 * `codeless` tells whether the device sent one), 504 no reply in time.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { WireError } from '@xiaozhi-mcp/protocol';
import { ServerError } from './errors.js';
import { HttpError, readBody, sendJson } from './http.js';
import type { DeviceRecord, DeviceRegistry } from './registry.js';

export function deviceSummary(record: DeviceRecord) {
  return {
    deviceId: record.deviceId,
    clientId: record.clientId,
    board: record.board ?? null,
    version: record.version ?? null,
    connected: record.session !== undefined && !record.session.closed,
    ready: record.ready,
    sessionId: record.session?.info.sessionId ?? null,
    toolCount: record.tools.length,
    sessions: record.sessions,
    connectedAt: record.connectedAt ?? null,
    disconnectedAt: record.disconnectedAt ?? null,
    lastOtaCheck: record.lastOtaCheck ?? null,
    lastError: record.lastError ?? null,
    pageViolations: record.pageViolations,
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
    });
  } else if (error instanceof ServerError) {
    sendJson(res, STATUS[error.code] ?? 500, {
      error: { code: error.code, message: error.message },
    });
  } else if (error instanceof HttpError) {
    sendJson(res, error.status, { error: { code: 'BAD_REQUEST', message: error.message } });
  } else {
    sendJson(res, 500, { error: { code: 'INTERNAL', message: (error as Error).message } });
  }
}

export async function handleApi(
  registry: DeviceRegistry,
  path: string,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const url = new URL(path, 'http://localhost');
  const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
  try {
    if (req.method === 'GET' && parts.length === 1 && parts[0] === 'devices') {
      sendJson(res, 200, { devices: registry.list().map(deviceSummary) });
      return;
    }
    if (req.method === 'GET' && parts.length === 1 && parts[0] === 'ota-checks') {
      const limit = Number(url.searchParams.get('limit') ?? 100);
      sendJson(res, 200, {
        otaChecks: registry.otaChecks(Number.isInteger(limit) && limit > 0 ? limit : 100),
      });
      return;
    }
    if (parts[0] === 'devices' && parts[1] !== undefined) {
      const record = registry.get(parts[1]);
      if (record === undefined)
        throw new ServerError('DEVICE_NOT_FOUND', `no device ${parts[1]} has been seen`);
      if (req.method === 'GET' && parts.length === 2) {
        sendJson(res, 200, { device: deviceSummary(record) });
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
        });
        return;
      }
      if (req.method === 'POST' && parts.length === 3 && parts[2] === 'call') {
        const body = JSON.parse((await readBody(req, 1024 * 1024)) || '{}') as {
          name?: unknown;
          arguments?: unknown;
          timeoutMs?: unknown;
        };
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
        const timeoutMs = typeof body.timeoutMs === 'number' ? body.timeoutMs : undefined;
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
        sendJson(res, 200, { result });
        return;
      }
    }
    sendJson(res, 404, {
      error: { code: 'NOT_FOUND', message: `no API route ${req.method} ${url.pathname}` },
    });
  } catch (error) {
    if (error instanceof SyntaxError)
      sendError(res, new HttpError(400, `body is not JSON: ${error.message}`));
    else sendError(res, error);
  }
}
