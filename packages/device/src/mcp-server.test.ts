import { encodeStrictToolError, encodeStrictToolResult, Prop } from '@xiaozhi-mcp/protocol';
import { describe, expect, it } from 'vitest';
import { BoardConsole } from './console.js';
import { McpServer } from './mcp-server.js';

function server(profile: 'firmware' | 'strict' = 'firmware') {
  const console = new BoardConsole();
  const mcp = new McpServer({ board: { name: 'b', version: '1.0.0' }, profile, console });
  const sent: string[] = [];
  mcp.setSender((payload) => sent.push(payload));
  return { mcp, sent, console };
}

describe('McpServer', () => {
  it('lists common tools first, then board tools, then user-only tools, whatever the call order', () => {
    const { mcp, console } = server();
    mcp.addTool({ name: 'board.a', description: '' }, () => true);
    mcp.addUserOnlyTool({ name: 'user.a', description: '' }, () => true);
    mcp.addCommonTool({ name: 'common.a', description: '' }, () => true);
    mcp.addTool({ name: 'board.b', description: '' }, () => true);
    mcp.addCommonTool({ name: 'common.b', description: '' }, () => true);
    expect(mcp.tools.map((t) => t.name)).toEqual([
      'common.a',
      'common.b',
      'board.a',
      'board.b',
      'user.a',
    ]);
    expect(console.history.map((l) => l.text.replace(/^I \(\d+\) /, ''))).toContain(
      'MCP: Add tool: user.a [user]',
    );
  });

  it('shares one Tool between servers declaring it alike, and gives a different declaration its own', () => {
    const volume = () => ({
      name: 'shared.volume',
      description: 'Sets the volume.',
      properties: [Prop.integer('volume', { min: 0, max: 100 })],
    });
    const a = server().mcp.addTool(volume(), () => true);
    const b = server().mcp.addTool(volume(), () => true);
    expect(b).toBe(a);
    const wider = server().mcp.addTool(
      { ...volume(), properties: [Prop.integer('volume', { min: 0, max: 200 })] },
      () => true,
    );
    expect(wider).not.toBe(a);
    expect(wider.json).toContain('"maximum":200');
    const userOnly = server().mcp.addUserOnlyTool(volume(), () => true);
    expect(userOnly).not.toBe(a);
    expect(userOnly.userOnly).toBe(true);
    const described = server().mcp.addTool({ ...volume(), description: 'Other.' }, () => true);
    expect(described.description).toBe('Other.');
  });

  it('rejects a duplicate name and stays as it was', () => {
    const { mcp } = server();
    mcp.addTool({ name: 'a', description: '' }, () => true);
    expect(() => mcp.addCommonTool({ name: 'a', description: '' }, () => true)).toThrow(
      expect.objectContaining({ code: 'DUPLICATE_TOOL' }),
    );
    expect(mcp.tools.map((t) => t.name)).toEqual(['a']);
  });

  it('sends nothing while no channel is open, and logs what the firmware logs', async () => {
    const { mcp, sent, console } = server();
    mcp.setSender(undefined);
    mcp.handlePayload('{"jsonrpc":"2.0","id":1,"method":"ping"}');
    await mcp.idle();
    expect(sent).toEqual([]);
    expect(console.history.at(-1)?.text).toMatch(/^E \(\d+\) MCP: Method not implemented: ping$/);
  });

  it('answers spec-style in the strict profile', async () => {
    const { mcp, sent } = server('strict');
    mcp.handlePayload('{"jsonrpc":"2.0","id":"a","method":"ping"}');
    await mcp.idle();
    expect(sent).toEqual(['{"jsonrpc":"2.0","id":"a","result":{}}']);
  });

  it('runs strict-profile calls and reports thrown errors in the result', async () => {
    const { mcp, sent } = server('strict');
    mcp.addTool(
      { name: 'self.add', description: '', properties: [Prop.integer('a'), Prop.integer('b')] },
      (args) => args.integer('a') + args.integer('b'),
    );
    mcp.addTool({ name: 'self.fail', description: '' }, () => {
      throw new Error('Image explain URL or token is not set');
    });
    const req = (id: string, method: string, params: object) =>
      JSON.stringify({ jsonrpc: '2.0', id, method, params });
    mcp.handlePayload(req('a', 'tools/call', { name: 'self.add', arguments: { a: 2, b: 3 } }));
    mcp.handlePayload(req('b', 'tools/call', { name: 'self.fail' }));
    mcp.handlePayload('{"jsonrpc":"2.0","method":"notifications/initialized"}');
    mcp.handlePayload(
      req('c', 'initialize', { capabilities: { vision: { url: 'http://v', token: 't' } } }),
    );
    await mcp.idle();
    expect(sent).toEqual([
      '{"jsonrpc":"2.0","id":"c","result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"b","version":"1.0.0"}}}',
      encodeStrictToolResult('a', 5),
      encodeStrictToolError('b', 'Image explain URL or token is not set'),
    ]);
    expect(mcp.vision).toEqual({ url: 'http://v', token: 't' });
  });

  it('reports a new board identity and tools added after the first request', async () => {
    const calls: string[] = [];
    const mcp = new McpServer({
      board: { name: 'b', version: '1.0.0' },
      onToolCall: (tool) => calls.push(tool.name),
    });
    const sent: string[] = [];
    mcp.setSender((payload) => sent.push(payload));
    mcp.addTool({ name: 'board.a', description: '' }, () => true);
    mcp.handlePayload('{"jsonrpc":"2.0","id":1,"method":"tools/list"}');
    mcp.board = { name: 'b', version: '2.0.0' };
    mcp.addCommonTool({ name: 'common.a', description: '' }, () => 'late');
    mcp.handlePayload('{"jsonrpc":"2.0","id":2,"method":"initialize"}');
    mcp.handlePayload('{"jsonrpc":"2.0","id":3,"method":"tools/list"}');
    mcp.handlePayload(
      '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"common.a"}}',
    );
    await mcp.idle();
    const names = (reply: string | undefined) =>
      JSON.parse(reply ?? '').result.tools.map((t: { name: string }) => t.name);
    expect(names(sent[0])).toEqual(['board.a']);
    expect(JSON.parse(sent[1] ?? '').result.serverInfo.version).toBe('2.0.0');
    expect(names(sent[2])).toEqual(['common.a', 'board.a']);
    expect(sent[3]).toBe(
      '{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"late"}],"isError":false}}',
    );
    expect(calls).toEqual(['common.a']);
  });

  it('gives tools typed arguments with defaults applied', async () => {
    const { mcp, sent } = server();
    mcp.addTool(
      {
        name: 't',
        description: '',
        properties: [
          { name: 'n', type: 'integer', default: 4 },
          { name: 's', type: 'string' },
        ],
      },
      (args) => `${args.string('s')}:${args.integer('n')}`,
    );
    mcp.handlePayload(
      '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"t","arguments":{"s":"x"}}}',
    );
    await mcp.idle();
    expect(sent).toEqual([
      '{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"x:4"}],"isError":false}}',
    ]);
  });
});
