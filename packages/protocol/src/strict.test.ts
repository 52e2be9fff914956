import { describe, expect, it } from 'vitest';
import { JsonRpcErrorCode } from './errors.js';
import type { JsonRpcId } from './jsonrpc.js';
import type { DispatchContext, VisionCapability } from './mcp-context.js';
import { buildToolsPage, walkToolsPages } from './paging.js';
import { ImageContent, type ToolReturn } from './results.js';
import {
  dispatchStrictRequest,
  encodeStrictToolError,
  encodeStrictToolResult,
  type StrictAction,
  StrictErrorCode,
} from './strict.js';
import { defineTool, Prop, type Tool, type ToolDefinition, ToolRegistry } from './tools.js';

type Handler = () => ToolReturn;

const BOARD = { name: 'bread-compact-wifi', version: '2.4.2' };

function registry(definitions: readonly ToolDefinition[] = []): ToolRegistry<Handler> {
  const tools = new ToolRegistry<Handler>();
  for (const definition of definitions) tools.add(defineTool(definition), () => true);
  return tools;
}

const BASIC_TOOLS: readonly ToolDefinition[] = [
  {
    name: 'self.audio_speaker.set_volume',
    description: 'Set the volume',
    properties: [Prop.integer('volume', { min: 0, max: 100 })],
  },
  {
    name: 'self.screen.set_theme',
    description: 'Set the theme',
    properties: [Prop.string('theme'), Prop.boolean('animate', { default: false })],
  },
  { name: 'self.reboot', description: 'Reboot', userOnly: true },
];

function context(
  tools: ToolRegistry<Handler> = registry(BASIC_TOOLS),
  visions: VisionCapability[] = [],
): DispatchContext<Handler> {
  return { tools, board: BOARD, onVision: (vision) => visions.push(vision) };
}

function payloadOf(action: StrictAction<Handler>): string {
  if (action.kind !== 'reply') throw new Error(`expected a reply, got ${action.kind}`);
  return action.payload;
}

function send(text: string, ctx: DispatchContext<Handler> = context()): string {
  return payloadOf(dispatchStrictRequest(text, ctx));
}

const req = (id: JsonRpcId, method: string, params?: unknown) =>
  JSON.stringify({ jsonrpc: '2.0', id, method, ...(params === undefined ? {} : { params }) });

const error = (id: JsonRpcId | null, code: number, message: string) =>
  `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"error":{"code":${code},"message":${JSON.stringify(message)}}}`;

const INVALID_REQUEST = (id: JsonRpcId | null) => error(id, -32600, 'Invalid Request');

describe('StrictErrorCode', () => {
  it('uses the standard JSON-RPC codes', () => {
    expect(StrictErrorCode).toEqual({
      ParseError: JsonRpcErrorCode.ParseError,
      InvalidRequest: JsonRpcErrorCode.InvalidRequest,
      MethodNotFound: JsonRpcErrorCode.MethodNotFound,
      InvalidParams: JsonRpcErrorCode.InvalidParams,
      InternalError: JsonRpcErrorCode.InternalError,
    });
    expect(Object.values(StrictErrorCode)).toEqual([-32700, -32600, -32601, -32602, -32603]);
  });
});

describe('parse errors and invalid requests', () => {
  it('answers text that is not JSON with -32700 and a null id', () => {
    const expected = '{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}';
    expect(send('not json')).toBe(expected);
    expect(send('')).toBe(expected);
    expect(send('{"jsonrpc":"2.0","id":1,"method":"ping"')).toBe(expected);
  });

  it('answers non-objects (batches included) with -32600 and a null id', () => {
    expect(send('[]')).toBe(INVALID_REQUEST(null));
    expect(send(`[${req(1, 'ping')}]`)).toBe(INVALID_REQUEST(null));
    expect(send('null')).toBe(INVALID_REQUEST(null));
    expect(send('42')).toBe(INVALID_REQUEST(null));
    expect(send('"ping"')).toBe(INVALID_REQUEST(null));
  });

  it('answers a wrong or missing jsonrpc with -32600, echoing a valid id', () => {
    expect(send('{"jsonrpc":"1.0","id":5,"method":"ping"}')).toBe(INVALID_REQUEST(5));
    expect(send('{"jsonrpc":2.0,"id":"a","method":"ping"}')).toBe(INVALID_REQUEST('a'));
    expect(send('{"id":7,"method":"ping"}')).toBe(INVALID_REQUEST(7));
    expect(send('{"jsonrpc":"1.0","id":{},"method":"ping"}')).toBe(INVALID_REQUEST(null));
    // Keys are case-sensitive, unlike the firmware's cJSON lookups.
    expect(send('{"JSONRPC":"2.0","id":8,"method":"ping"}')).toBe(INVALID_REQUEST(8));
  });

  it('answers bad id types with -32600 and a null id', () => {
    for (const id of ['null', 'true', '{}', '[1]', '1e400']) {
      expect(send(`{"jsonrpc":"2.0","id":${id},"method":"ping"}`)).toBe(INVALID_REQUEST(null));
    }
  });

  it('answers a missing or non-string method with -32600', () => {
    expect(send('{"jsonrpc":"2.0","id":3}')).toBe(INVALID_REQUEST(3));
    expect(send('{"jsonrpc":"2.0","id":3,"method":42}')).toBe(INVALID_REQUEST(3));
    expect(send('{"jsonrpc":"2.0","id":3,"method":null}')).toBe(INVALID_REQUEST(3));
    expect(send('{"jsonrpc":"2.0","id":3,"Method":"ping"}')).toBe(INVALID_REQUEST(3));
  });

  it('answers params that are not an object with -32602', () => {
    const expected = error(4, -32602, 'Invalid params');
    expect(send('{"jsonrpc":"2.0","id":4,"method":"ping","params":[]}')).toBe(expected);
    expect(send('{"jsonrpc":"2.0","id":4,"method":"ping","params":null}')).toBe(expected);
    expect(send('{"jsonrpc":"2.0","id":4,"method":"tools/list","params":"x"}')).toBe(expected);
    // The id is checked first.
    expect(send('{"jsonrpc":"2.0","id":null,"method":"ping","params":1}')).toBe(
      INVALID_REQUEST(null),
    );
  });
});

describe('notifications and responses', () => {
  const dropped = (text: string) => dispatchStrictRequest(text, context());

  it('drops notifications, whatever the method or params', () => {
    expect(dropped('{"jsonrpc":"2.0","method":"notifications/initialized"}')).toEqual({
      kind: 'drop',
    });
    expect(dropped('{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}')).toEqual({
      kind: 'drop',
    });
    expect(dropped('{"jsonrpc":"2.0","method":"ping","params":[]}')).toEqual({ kind: 'drop' });
    // `ID` is not `id`: a notification under case-sensitive keys.
    expect(dropped('{"jsonrpc":"2.0","ID":1,"method":"ping"}')).toEqual({ kind: 'drop' });
  });

  it('drops responses sent to the device', () => {
    expect(dropped('{"jsonrpc":"2.0","id":1,"result":{}}')).toEqual({ kind: 'drop' });
    expect(dropped('{"jsonrpc":"2.0","id":"x","error":{"code":-1,"message":"m"}}')).toEqual({
      kind: 'drop',
    });
    expect(dropped('{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}')).toEqual({
      kind: 'drop',
    });
  });

  it('answers a notification method sent with an id as an unknown method', () => {
    expect(send(req(2, 'notifications/initialized'))).toBe(
      error(2, -32601, 'Method not found: notifications/initialized'),
    );
  });
});

describe('ids and ping', () => {
  it('answers ping with an empty result', () => {
    expect(send(req(1, 'ping'))).toBe('{"jsonrpc":"2.0","id":1,"result":{}}');
    expect(send(req(1, 'ping', {}))).toBe('{"jsonrpc":"2.0","id":1,"result":{}}');
  });

  it('echoes string ids, escaped', () => {
    expect(send(req('req-1', 'ping'))).toBe('{"jsonrpc":"2.0","id":"req-1","result":{}}');
    expect(send(req('a"b\\c', 'ping'))).toBe('{"jsonrpc":"2.0","id":"a\\"b\\\\c","result":{}}');
    expect(send(req('', 'ping'))).toBe('{"jsonrpc":"2.0","id":"","result":{}}');
  });

  it('echoes numeric ids as given: fractions, negatives and values beyond int32', () => {
    expect(send('{"jsonrpc":"2.0","id":1.5,"method":"ping"}')).toBe(
      '{"jsonrpc":"2.0","id":1.5,"result":{}}',
    );
    expect(send('{"jsonrpc":"2.0","id":-3,"method":"ping"}')).toBe(
      '{"jsonrpc":"2.0","id":-3,"result":{}}',
    );
    expect(send('{"jsonrpc":"2.0","id":4294967296,"method":"ping"}')).toBe(
      '{"jsonrpc":"2.0","id":4294967296,"result":{}}',
    );
    expect(send('{"jsonrpc":"2.0","id":0,"method":"ping"}')).toBe(
      '{"jsonrpc":"2.0","id":0,"result":{}}',
    );
  });

  it('takes the last of duplicate keys, as JSON.parse does', () => {
    expect(send('{"jsonrpc":"2.0","id":16,"id":17,"method":"ping"}')).toBe(
      '{"jsonrpc":"2.0","id":17,"result":{}}',
    );
  });
});

describe('initialize', () => {
  const result = (version: string, name = BOARD.name, boardVersion = BOARD.version) =>
    `{"protocolVersion":"${version}","capabilities":{"tools":{}},"serverInfo":{"name":${JSON.stringify(name)},"version":${JSON.stringify(boardVersion)}}}`;

  it('echoes each supported protocol version', () => {
    for (const version of ['2024-11-05', '2025-03-26', '2025-06-18']) {
      expect(send(req(1, 'initialize', { protocolVersion: version, capabilities: {} }))).toBe(
        `{"jsonrpc":"2.0","id":1,"result":${result(version)}}`,
      );
    }
  });

  it('answers any other version, or none, with 2025-06-18', () => {
    for (const params of [{ protocolVersion: '2099-01-01' }, { protocolVersion: 20250618 }, {}]) {
      expect(send(req(2, 'initialize', params))).toBe(
        `{"jsonrpc":"2.0","id":2,"result":${result('2025-06-18')}}`,
      );
    }
    expect(send(req('i', 'initialize'))).toBe(
      `{"jsonrpc":"2.0","id":"i","result":${result('2025-06-18')}}`,
    );
  });

  it('escapes the board identity', () => {
    const ctx: DispatchContext<Handler> = {
      tools: registry(),
      board: { name: 'my "board"', version: '1.0\\beta' },
    };
    expect(send(req(1, 'initialize'), ctx)).toBe(
      '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"my \\"board\\"","version":"1.0\\\\beta"}}}',
    );
  });

  it('reads the vision capability: an object with a string url and an optional string token', () => {
    const visions: VisionCapability[] = [];
    const ctx = context(registry(), visions);
    const init = (vision: unknown) =>
      send(req(1, 'initialize', { protocolVersion: '2025-06-18', capabilities: { vision } }), ctx);
    init({ url: 'http://host/vision/explain', token: 'secret' });
    init({ url: 'http://host/a' });
    init({ url: 'http://host/b', token: 42 });
    init({ token: 'no url' });
    init({ url: 5 });
    init(['http://host/array']);
    init('http://host/string');
    send(req(1, 'initialize', { capabilities: { Vision: { url: 'http://host/case' } } }), ctx);
    expect(visions).toEqual([
      { url: 'http://host/vision/explain', token: 'secret' },
      { url: 'http://host/a', token: undefined },
      { url: 'http://host/b', token: undefined },
    ]);
  });

  it('works without an onVision callback', () => {
    const ctx: DispatchContext<Handler> = { tools: registry(), board: BOARD };
    expect(
      send(req(1, 'initialize', { capabilities: { vision: { url: 'http://host/v' } } }), ctx),
    ).toBe(`{"jsonrpc":"2.0","id":1,"result":${result('2025-06-18')}}`);
  });
});

describe('tools/list', () => {
  const tools = registry(BASIC_TOOLS);
  const [volume, theme, reboot] = tools.tools as [Tool, Tool, Tool];
  const ctx = context(tools);

  it('lists the tools without user-only ones, with no nextCursor on the last page', () => {
    expect(send(req(1, 'tools/list'), ctx)).toBe(
      `{"jsonrpc":"2.0","id":1,"result":{"tools":[${volume.json},${theme.json}]}}`,
    );
    expect(send(req(1, 'tools/list', { withUserTools: 'true' }), ctx)).toBe(
      `{"jsonrpc":"2.0","id":1,"result":{"tools":[${volume.json},${theme.json}]}}`,
    );
  });

  it('includes user-only tools with withUserTools: true', () => {
    const text = send(req(1, 'tools/list', { withUserTools: true }), ctx);
    expect(text).toBe(
      `{"jsonrpc":"2.0","id":1,"result":{"tools":[${volume.json},${theme.json},${reboot.json}]}}`,
    );
    expect(JSON.parse(text).result.tools[2]).toEqual({
      name: 'self.reboot',
      description: 'Reboot',
      inputSchema: { type: 'object', properties: {} },
      annotations: { audience: ['user'] },
    });
  });

  it('answers an empty page when there is nothing to list', () => {
    const empty = '{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}';
    expect(send(req(1, 'tools/list'), context(registry()))).toBe(empty);
    // The firmware answers this with a payload-size error.
    const onlyUser = context(registry([{ name: 'self.reboot', description: '', userOnly: true }]));
    expect(send(req(1, 'tools/list'), onlyUser)).toBe(empty);
  });

  it('treats an empty or null cursor as the first page', () => {
    const first = send(req(1, 'tools/list'), ctx);
    expect(send(req(1, 'tools/list', { cursor: '' }), ctx)).toBe(first);
    expect(send(req(1, 'tools/list', { cursor: null }), ctx)).toBe(first);
  });

  it('answers an unknown cursor with -32602', () => {
    expect(send(req(9, 'tools/list', { cursor: 'nope' }), ctx)).toBe(
      error(9, -32602, 'Invalid cursor: nope'),
    );
    expect(send(req(9, 'tools/list', { cursor: 'a"b' }), ctx)).toBe(
      '{"jsonrpc":"2.0","id":9,"error":{"code":-32602,"message":"Invalid cursor: a\\"b"}}',
    );
    expect(send(req(9, 'tools/list', { cursor: 'x' }), context(registry()))).toBe(
      error(9, -32602, 'Invalid cursor: x'),
    );
  });

  it('answers a cursor that is not a string with -32602', () => {
    expect(send(req(9, 'tools/list', { cursor: 3 }), ctx)).toBe(
      error(9, -32602, 'Invalid params: cursor must be a string'),
    );
  });

  it('answers a tool too large for a page with -32603 and the firmware message', () => {
    const big = { name: 'self.huge', description: 'x'.repeat(8000) };
    expect(send(req(1, 'tools/list'), context(registry([big])))).toBe(
      error(1, -32603, 'Failed to add tool self.huge because of payload size limit'),
    );
    // Behind a small tool: the first page ends before it, the next request fails.
    const behind = context(registry([{ name: 'self.small', description: '' }, big]));
    const first = JSON.parse(send(req(1, 'tools/list'), behind));
    expect(first.result.nextCursor).toBe('self.huge');
    expect(send(req(2, 'tools/list', { cursor: 'self.huge' }), behind)).toBe(
      error(2, -32603, 'Failed to add tool self.huge because of payload size limit'),
    );
  });

  describe('paging across several pages', () => {
    // About 2.6 KB per tool: three fit on a page, so eight tools make pages of 3, 3 and 2.
    const names = ['t0', 't1', 't2', 'tool"quote', 't4', 't5', 'back\\slash', 't7'];
    const paged = registry(names.map((name) => ({ name, description: 'd'.repeat(2500) })));
    const all = paged.tools;
    const pctx = context(paged);
    const jsons = (from: number, to: number) =>
      all
        .slice(from, to)
        .map((tool) => tool.json)
        .join(',');

    it('pages with the core rule and escapes the cursor', () => {
      const core = buildToolsPage(all);
      expect(core.ok && core.tools.length).toBe(3);
      const first = send(req(1, 'tools/list'), pctx);
      expect(first).toBe(
        `{"jsonrpc":"2.0","id":1,"result":{"tools":[${jsons(0, 3)}],"nextCursor":"tool\\"quote"}}`,
      );
      const cursor = JSON.parse(first).result.nextCursor;
      expect(cursor).toBe('tool"quote');
      const second = send(req(2, 'tools/list', { cursor }), pctx);
      expect(second).toBe(
        `{"jsonrpc":"2.0","id":2,"result":{"tools":[${jsons(3, 6)}],"nextCursor":"back\\\\slash"}}`,
      );
      const third = send(req(3, 'tools/list', { cursor: 'back\\slash' }), pctx);
      expect(third).toBe(`{"jsonrpc":"2.0","id":3,"result":{"tools":[${jsons(6, 8)}]}}`);
    });

    it('passes the client walker with no budget violations', async () => {
      let id = 0;
      const walk = await walkToolsPages(async (params) => {
        id += 1;
        return JSON.parse(send(req(id, 'tools/list', params), pctx)).result;
      });
      expect(walk.violations).toEqual([]);
      expect(walk.pages.map((page) => page.toolCount)).toEqual([3, 3, 2]);
      expect(walk.tools.map((tool) => tool.name)).toEqual(names);
    });

    it('honours a wrong page budget, as the firmware profile does (fault knob)', () => {
      const small = send(req(1, 'tools/list'), { ...pctx, pageBudgetBytes: 6000 });
      expect(small).toBe(
        `{"jsonrpc":"2.0","id":1,"result":{"tools":[${jsons(0, 2)}],"nextCursor":"t2"}}`,
      );
    });
  });
});

describe('tools/call', () => {
  const tools = registry([
    ...BASIC_TOOLS,
    {
      name: 'self.ranged',
      description: '',
      properties: [Prop.integer('a', { min: 1, max: 10 }), Prop.integer('b', { min: 1, max: 10 })],
    },
  ]);
  const ctx = context(tools);
  const call = (params: unknown, id: JsonRpcId = 7) => send(req(id, 'tools/call', params), ctx);
  const invalid = (message: string, id: JsonRpcId = 7) => error(id, -32602, message);

  it('answers missing params with -32602 Missing params', () => {
    expect(send(req(7, 'tools/call'), ctx)).toBe(invalid('Missing params'));
  });

  it('answers a missing or non-string name with -32602 Missing name', () => {
    expect(call({})).toBe(invalid('Missing name'));
    expect(call({ name: 5 })).toBe(invalid('Missing name'));
    expect(call({ Name: 'self.reboot' })).toBe(invalid('Missing name'));
  });

  it('answers arguments that are not an object with -32602 Invalid arguments', () => {
    expect(call({ name: 'self.reboot', arguments: [] })).toBe(invalid('Invalid arguments'));
    expect(call({ name: 'self.reboot', arguments: null })).toBe(invalid('Invalid arguments'));
    // Checked before the tool lookup, as the firmware does.
    expect(call({ name: 'nope', arguments: 'x' })).toBe(invalid('Invalid arguments'));
  });

  it('answers an unknown tool with -32602, the name escaped', () => {
    expect(call({ name: 'self.nope' })).toBe(invalid('Unknown tool: self.nope'));
    expect(call({ name: 'a"b' })).toBe(
      '{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Unknown tool: a\\"b"}}',
    );
    // Names are matched exactly, NUL included (the core alone would cut the name at NUL).
    expect(call({ name: 'self.reboot\0x' })).toBe(invalid('Unknown tool: self.reboot\0x'));
    expect(call({ name: 'SELF.REBOOT' })).toBe(invalid('Unknown tool: SELF.REBOOT'));
  });

  it('answers a missing or mistyped argument with -32602 Missing valid argument', () => {
    const volume = 'self.audio_speaker.set_volume';
    expect(call({ name: volume })).toBe(invalid('Missing valid argument: volume'));
    expect(call({ name: volume, arguments: {} })).toBe(invalid('Missing valid argument: volume'));
    expect(call({ name: volume, arguments: { volume: '5' } })).toBe(
      invalid('Missing valid argument: volume'),
    );
    // Argument keys are case-sensitive.
    expect(call({ name: volume, arguments: { Volume: 5 } })).toBe(
      invalid('Missing valid argument: volume'),
    );
    expect(call({ name: 'self.screen.set_theme', arguments: { theme: true } })).toBe(
      invalid('Missing valid argument: theme'),
    );
  });

  it('answers out-of-range integers with -32602 and the firmware messages', () => {
    const volume = 'self.audio_speaker.set_volume';
    expect(call({ name: volume, arguments: { volume: -1 } })).toBe(
      invalid('Value is below minimum allowed: 0'),
    );
    expect(call({ name: volume, arguments: { volume: 101 } })).toBe(
      invalid('Value exceeds maximum allowed: 100'),
    );
  });

  it('checks properties in declaration order, first failure wins', () => {
    expect(call({ name: 'self.ranged', arguments: { a: 0, b: 11 } })).toBe(
      invalid('Value is below minimum allowed: 1'),
    );
    expect(call({ name: 'self.ranged', arguments: { a: 5, b: 11 } })).toBe(
      invalid('Value exceeds maximum allowed: 10'),
    );
    expect(call({ name: 'self.ranged', arguments: { b: 0 } })).toBe(
      invalid('Missing valid argument: a'),
    );
  });

  it('echoes string ids in validation errors', () => {
    expect(call({}, 'call-1')).toBe(invalid('Missing name', 'call-1'));
  });

  it('returns a call action for a valid call, with defaults applied', () => {
    const action = dispatchStrictRequest(
      req('c1', 'tools/call', { name: 'self.screen.set_theme', arguments: { theme: 'dark' } }),
      ctx,
    );
    expect(action.kind).toBe('call');
    if (action.kind !== 'call') return;
    expect(action.id).toBe('c1');
    expect(action.tool.name).toBe('self.screen.set_theme');
    expect(action.handler).toBe(tools.find('self.screen.set_theme')?.handler);
    expect([...action.values]).toEqual([
      ['theme', 'dark'],
      ['animate', false],
    ]);
  });

  it('calls user-only tools without withUserTools and ignores extra arguments', () => {
    const action = dispatchStrictRequest(
      req(1.5, 'tools/call', { name: 'self.reboot', arguments: { extra: 1 } }),
      ctx,
    );
    expect(action).toMatchObject({ kind: 'call', id: 1.5 });
    if (action.kind === 'call') expect(action.values.size).toBe(0);
  });

  it('passes strings whole, NUL included, and truncates integers like the core', () => {
    const action = dispatchStrictRequest(
      req(2, 'tools/call', { name: 'self.ranged', arguments: { a: 2.9, b: 10 } }),
      ctx,
    );
    expect(action.kind === 'call' && [...action.values]).toEqual([
      ['a', 2],
      ['b', 10],
    ]);
    const theme = dispatchStrictRequest(
      req(3, 'tools/call', { name: 'self.screen.set_theme', arguments: { theme: 'a\0b' } }),
      ctx,
    );
    expect(theme.kind === 'call' && theme.values.get('theme')).toBe('a\0b');
  });
});

describe('unknown methods', () => {
  it('answers -32601 Method not found with the method escaped', () => {
    expect(send(req(1, 'resources/list'))).toBe(
      error(1, -32601, 'Method not found: resources/list'),
    );
    expect(send(req(1, 'a"b'))).toBe(
      '{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found: a\\"b"}}',
    );
    // Method names are case-sensitive.
    expect(send(req(1, 'PING'))).toBe(error(1, -32601, 'Method not found: PING'));
  });
});

describe('encodeStrictToolResult', () => {
  const text = (id: JsonRpcId, value: string) =>
    `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":{"content":[{"type":"text","text":${JSON.stringify(value)}}],"isError":false}}`;

  it('encodes booleans as "true" and "false"', () => {
    expect(encodeStrictToolResult(1, true)).toBe(text(1, 'true'));
    expect(encodeStrictToolResult(1, false)).toBe(text(1, 'false'));
  });

  it('encodes integers in decimal and other numbers as JS prints them', () => {
    expect(encodeStrictToolResult(1, 42)).toBe(text(1, '42'));
    expect(encodeStrictToolResult(1, -7)).toBe(text(1, '-7'));
    expect(encodeStrictToolResult(1, 4294967296)).toBe(text(1, '4294967296'));
    expect(encodeStrictToolResult(1, 1e21)).toBe(text(1, '1000000000000000000000'));
    expect(encodeStrictToolResult(1, 1.5)).toBe(text(1, '1.5'));
    expect(encodeStrictToolResult(1, 0.1 + 0.2)).toBe(text(1, '0.30000000000000004'));
  });

  it('encodes strings as is, escaped in the JSON', () => {
    expect(encodeStrictToolResult('s', 'say "hi"\n\\')).toBe(
      '{"jsonrpc":"2.0","id":"s","result":{"content":[{"type":"text","text":"say \\"hi\\"\\n\\\\"}],"isError":false}}',
    );
  });

  it('encodes a JSON value as its compact text, and a JSON string as is', () => {
    expect(encodeStrictToolResult(2, { json: { a: 1, b: [true, null, 'x'] } })).toBe(
      text(2, '{"a":1,"b":[true,null,"x"]}'),
    );
    expect(encodeStrictToolResult(2, { json: '{"already":"text"}' })).toBe(
      text(2, '{"already":"text"}'),
    );
    expect(encodeStrictToolResult(2, { json: 3 })).toBe(text(2, '3'));
    expect(encodeStrictToolResult(2, { json: null })).toBe(text(2, 'null'));
  });

  it('encodes images as standard MCP image content', () => {
    const image = new ImageContent('image/jpeg', new Uint8Array([0xff, 0xd8, 0xff, 0xe0, 1]));
    expect(encodeStrictToolResult(3, image)).toBe(
      '{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"image","data":"/9j/4AE=","mimeType":"image/jpeg"}],"isError":false}}',
    );
  });

  it('throws for a value that is no ToolReturn (the caller reports it as a tool error)', () => {
    expect(() => encodeStrictToolResult(1, undefined as unknown as ToolReturn)).toThrow(TypeError);
  });
});

describe('encodeStrictToolError', () => {
  it('reports the failure in the result with isError: true', () => {
    expect(encodeStrictToolError(4, 'Failed to capture photo')).toBe(
      '{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"Failed to capture photo"}],"isError":true}}',
    );
    expect(encodeStrictToolError('x', 'bad "url"')).toBe(
      '{"jsonrpc":"2.0","id":"x","result":{"content":[{"type":"text","text":"bad \\"url\\""}],"isError":true}}',
    );
  });
});

describe('dispatchStrictRequest under hostile payloads', () => {
  const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;

  it.each([5_000, 100_000])('answers tools/call with members nested %i deep', (depth) => {
    const ctx = context(registry(BASIC_TOOLS));
    const deep = nested(depth);
    const name = dispatchStrictRequest(
      `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":${deep}}}`,
      ctx,
    );
    expect(name).toMatchObject({ kind: 'reply' });
    const args = dispatchStrictRequest(
      `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"self.audio_speaker.set_volume","arguments":{"volume":${deep}}}}`,
      ctx,
    );
    expect(args).toMatchObject({ kind: 'reply' });
    const extra = dispatchStrictRequest(
      `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"self.audio_speaker.set_volume","arguments":{"volume":5,"x":${deep}}}}`,
      ctx,
    );
    expect(extra).toMatchObject({ kind: 'call', id: 3 });
  });
});
