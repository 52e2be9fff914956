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
