/**
 * Firmware regressions a virtual board can be built with, by name (`faults.regressions`), so
 * that tests can show `hil run` catches each one. Each is a small change to what the
 * firmware does at one interface: its hello, a request on its way in, a reply on its way out,
 * or its page budget. They are data: {@link REGRESSIONS} says what each one does, and
 * {@link RegressionPlant} applies the chosen ones in the session's MCP path.
 */
import {
  type CJsonNode,
  cString,
  type DeviceHello,
  getItem,
  type JsonValue,
  type Tool,
  toCInt,
  toJsonValue,
} from '@xiaozhi-mcp/protocol';

/** Every regression by name, with what it changes (docs for the inventory and reports). */
export const REGRESSIONS = {
  'slow-calls': 'every tools/call reply leaves 300 ms late',
  'error-code': 'error replies carry a JSON-RPC code (-32601, -32602 or -32603)',
  'hello-no-mcp': 'the device hello has no features.mcp',
  'unknown-cursor-page':
    'a cursor that names no tool gets the first page instead of the payload-size error',
  'tool-silent':
    'calls of any tool but self.get_device_status and self.audio_speaker.set_volume are never answered',
  'tool-vanishes':
    'from the third tools/list walk on, the last tool of the plain listing is missing',
  'cursor-skips-tool':
    'nextCursor names the tool after the one that ended the page, which is never listed',
  'page-oversize': 'tools/list pages are filled up to 9000 bytes instead of 8000',
  'page-not-maximal': 'tools/list pages are filled up to 6000 bytes instead of 8000',
  'cursor-last-tool': 'nextCursor names the last tool of its own page, which is listed again',
  'user-tools-never': 'withUserTools is ignored: user-only tools are never listed',
  'user-tools-always': 'user-only tools are listed in plain listings too',
  'protocol-version': 'initialize answers protocolVersion "2025-03-26"',
  'no-server-info': 'initialize answers without serverInfo',
  'no-capabilities': 'initialize answers without capabilities',
  'range-unchecked': 'integer arguments outside their range are accepted (clamped into it)',
  'wrong-id': 'tools/call replies carry the request id plus one',
  'answers-notifications': 'notifications are answered with an empty result',
} as const;

export type RegressionName = keyof typeof REGRESSIONS;

export const REGRESSION_NAMES = Object.keys(REGRESSIONS) as readonly RegressionName[];

/** How late a `slow-calls` reply leaves. */
export const SLOW_CALL_MS = 300;
/** The tools `tool-silent` still answers: the two the suites lean on. */
const STILL_ANSWERED = new Set(['self.get_device_status', 'self.audio_speaker.set_volume']);
/** Page budgets of `page-oversize` and `page-not-maximal`. */
const BUDGETS: Partial<Record<RegressionName, number>> = {
  'page-oversize': 9000,
  'page-not-maximal': 6000,
};

/** The page budget one of the regressions imposes, if any. */
export function regressionPageBudget(regressions: readonly RegressionName[]): number | undefined {
  for (const name of regressions) {
    const budget = BUDGETS[name];
    if (budget !== undefined) return budget;
  }
  return undefined;
}

/** What the plant needs from the board. */
export interface RegressionHost {
  /** The regressions switched on now (read at each use, so a test can change them). */
  regressions(): readonly RegressionName[];
  /** The board's tools in listing order. */
  tools(): readonly Tool[];
}

/** A request on its way in: handle this payload instead, or answer it with `reply` at once. */
export type RequestOutcome = { readonly payload: CJsonNode | string } | { readonly reply: string };

/** A reply on its way out, `delayMs` late; undefined drops it. */
export type ReplyOutcome = { readonly payload: string; readonly delayMs: number } | undefined;

interface SentRequest {
  readonly method: string;
  /** tools/call: the tool's name. */
  readonly tool?: string;
  /** tools/list: which walk (1 for the first request without a cursor) and its options. */
  readonly walk?: number;
  readonly withUserTools?: boolean;
}

function objectValue(value: JsonValue | undefined): { [key: string]: JsonValue } | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? value : undefined;
}

/** The id a device reply starts with (`{"jsonrpc":"2.0","id":N,`); replies can be invalid JSON. */
const REPLY_ID = /^\{"jsonrpc":"2\.0","id":(-?\d+),/;

/** The page's tools and cursor, read from a `tools/list` reply (valid JSON for these). */
function readPage(
  payload: string,
): { tools: string[]; nextCursor: string | undefined } | undefined {
  try {
    const result = objectValue(objectValue(JSON.parse(payload) as JsonValue)?.result);
    const tools = Array.isArray(result?.tools) ? result.tools : undefined;
    if (tools === undefined) return undefined;
    const names = tools.map((tool) => {
      const name = objectValue(tool)?.name;
      return typeof name === 'string' ? name : '';
    });
    const next = result?.nextCursor;
    return { tools: names, nextCursor: typeof next === 'string' ? next : undefined };
  } catch {
    return undefined;
  }
}

/** Replaces the page's `nextCursor` (the firmware writes it last, unescaped). */
function withNextCursor(payload: string, cursor: string | undefined): string {
  const tail = /,"nextCursor":"[^"]*"\}\}$/;
  return cursor === undefined
    ? payload.replace(tail, '}}')
    : payload.replace(tail, `,"nextCursor":"${cursor}"}}`);
}

/** The error code a coded firmware would send for a message (docs/protocol.md §2). */
function errorCode(payload: string): number {
  if (payload.includes('"message":"Method not implemented')) return -32601;
  const argument =
    /"message":"(Missing params|Missing name|Invalid arguments|Unknown tool|Missing valid argument|Value is below|Value exceeds|Failed to add tool)/;
  return argument.test(payload) ? -32602 : -32603;
}

/**
 * The chosen regressions, applied in the MCP path of a board's session. It keeps what it needs
 * to connect a reply to its request (the request's method and tool, by id) and counts walks.
 */
export class RegressionPlant {
  readonly #host: RegressionHost;
  readonly #sent = new Map<number, SentRequest>();
  #walks = 0;

  constructor(host: RegressionHost) {
    this.#host = host;
  }

  #on(name: RegressionName): boolean {
    return this.#host.regressions().includes(name);
  }

  /** True when no regression is switched on: everything passes through untouched. */
  get idle(): boolean {
    return this.#host.regressions().length === 0;
  }

  /** The device hello as the regressed firmware sends it. */
  hello(hello: DeviceHello): DeviceHello {
    if (!this.#on('hello-no-mcp') || hello.features === undefined) return hello;
    const { mcp: _, ...features } = hello.features;
    return { ...hello, features };
  }

  /** A request from the backend, before the MCP server sees it. */
  request(payload: CJsonNode): RequestOutcome {
    if (this.idle || payload.kind !== 'object') return { payload };
    const method = getItem(payload, 'method');
    const idNode = getItem(payload, 'id');
    if (method?.kind !== 'string') return { payload };
    const name = cString(method.value);
    const id = idNode?.kind === 'number' ? toCInt(idNode.value) : undefined;

    if (name.startsWith('notifications') && this.#on('answers-notifications')) {
      return { reply: `{"jsonrpc":"2.0","id":${id ?? 'null'},"result":{}}` };
    }
    const request = toJsonValue(payload) as { [key: string]: JsonValue };
    const params = objectValue(request.params) ?? {};
    let changed = false;

    if (name === 'tools/list') {
      const cursor = typeof params.cursor === 'string' ? params.cursor : '';
      if (cursor === '') this.#walks++;
      if (
        cursor !== '' &&
        this.#on('unknown-cursor-page') &&
        !this.#host.tools().some((tool) => tool.name === cursor)
      ) {
        params.cursor = '';
        changed = true;
      }
      if (this.#on('user-tools-never') && params.withUserTools === true) {
        params.withUserTools = false;
        changed = true;
      }
      if (this.#on('user-tools-always') && params.withUserTools !== true) {
        params.withUserTools = true;
        changed = true;
      }
      if (id !== undefined) {
        this.#remember(id, {
          method: name,
          walk: this.#walks,
          withUserTools: params.withUserTools === true,
        });
      }
    } else if (name === 'tools/call') {
      const tool = typeof params.name === 'string' ? params.name : undefined;
      if (id !== undefined) this.#remember(id, { method: name, ...(tool ? { tool } : {}) });
      const args = objectValue(params.arguments);
      const declared = this.#host.tools().find((t) => t.name === tool);
      if (this.#on('range-unchecked') && args !== undefined && declared !== undefined) {
        for (const property of declared.properties) {
          const value = args[property.name];
          if (property.type !== 'integer' || typeof value !== 'number') continue;
          const { minimum, maximum } = property;
          const clamped = Math.min(maximum ?? value, Math.max(minimum ?? value, value));
          if (clamped !== value) {
            args[property.name] = clamped;
            changed = true;
          }
        }
      }
    } else if (id !== undefined) {
      this.#remember(id, { method: name });
    }
    if (!changed) return { payload };
    return { payload: JSON.stringify({ ...request, params }) };
  }

  /** A reply payload from the MCP server, before it leaves the board. */
  reply(payload: string): ReplyOutcome {
    if (this.idle) return { payload, delayMs: 0 };
    const match = REPLY_ID.exec(payload);
    const id = match === null ? undefined : Number(match[1]);
    const request = id === undefined ? undefined : this.#sent.get(id);
    let text = payload;
    let delayMs = 0;

    if (this.#on('error-code') && text.includes('"error":{"message":')) {
      text = text.replace('"error":{"message":', `"error":{"code":${errorCode(text)},"message":`);
    }
    if (request?.method === 'initialize') {
      if (this.#on('protocol-version'))
        text = text.replace('"protocolVersion":"2024-11-05"', '"protocolVersion":"2025-03-26"');
      if (this.#on('no-capabilities')) text = text.replace('"capabilities":{"tools":{}},', '');
      if (this.#on('no-server-info')) text = text.replace(/,"serverInfo":\{[^}]*\}/, '');
    }
    if (request?.method === 'tools/list') text = this.#page(text, request);
    if (request?.method === 'tools/call') {
      const tool = this.#host.tools().find((t) => t.name === request.tool);
      if (
        this.#on('tool-silent') &&
        tool !== undefined &&
        !STILL_ANSWERED.has(tool.name) &&
        text.includes('"result":')
      ) {
        return undefined;
      }
      if (this.#on('slow-calls')) delayMs = SLOW_CALL_MS;
      if (this.#on('wrong-id') && id !== undefined)
        text = text.replace(REPLY_ID, `{"jsonrpc":"2.0","id":${id + 1},`);
    }
    return { payload: text, delayMs };
  }

  #remember(id: number, request: SentRequest): void {
    this.#sent.set(id, request);
    // Only the latest requests matter: a reply follows its request within a few hops.
    if (this.#sent.size > 256) {
      const oldest = this.#sent.keys().next().value;
      if (oldest !== undefined) this.#sent.delete(oldest);
    }
  }

  /** The paging regressions, on one `tools/list` reply. */
  #page(payload: string, request: SentRequest): string {
    const page = readPage(payload);
    if (page === undefined) return payload;
    let text = payload;
    const visible = this.#host
      .tools()
      .filter((tool) => request.withUserTools === true || !tool.userOnly);
    if (this.#on('tool-vanishes') && (request.walk ?? 0) >= 3) {
      const plain = this.#host.tools().filter((tool) => !tool.userOnly);
      const gone = plain.at(-1);
      if (gone !== undefined && page.tools.length > 1 && page.tools.includes(gone.name)) {
        text = text.includes(`${gone.json},`)
          ? text.replace(`${gone.json},`, '')
          : text.replace(`,${gone.json}`, '');
      }
    }
    if (page.nextCursor !== undefined) {
      if (this.#on('cursor-skips-tool')) {
        const index = visible.findIndex((tool) => tool.name === page.nextCursor);
        text = withNextCursor(text, visible[index + 1]?.name);
      } else if (this.#on('cursor-last-tool')) {
        text = withNextCursor(text, page.tools.at(-1));
      }
    }
    return text;
  }
}
