import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { VisionCapability } from './mcp-context.js';
import { dispatchMcpRequest, MainLoop, type McpProfile, McpRequestLoop } from './mcp-server.js';
import { ImageContent, type ToolReturn } from './results.js';
import { encodeStrictToolError, encodeStrictToolResult } from './strict.js';
import { Prop, ToolRegistry } from './tools.js';

type Handler = () => ToolReturn | Promise<ToolReturn>;

function board(handlers: Record<string, Handler> = {}, profile: McpProfile = 'firmware') {
  const tools = new ToolRegistry<Handler>();
  tools.add({ name: 'self.fast', description: '' }, handlers['self.fast'] ?? (() => true));
  tools.add({ name: 'self.slow', description: '' }, handlers['self.slow'] ?? (() => 1));
  tools.add({ name: 'self.photo', description: '', properties: [Prop.string('question')] }, () => {
    throw new Error('Image explain URL or token is not set');
  });
  const sent: string[] = [];
  const logs: string[] = [];
  const visions: VisionCapability[] = [];
  const calls: string[] = [];
  const server = new McpRequestLoop({
    profile,
    tools,
    board: { name: 'bread-compact-wifi', version: '2.4.2' },
    runTool: (handler) => handler(),
    send: (payload) => sent.push(payload),
    log: (line) => logs.push(line),
    onVision: (vision) => visions.push(vision),
    onToolCall: (tool) => calls.push(tool.name),
  });
  return { server, sent, logs, visions, calls };
}

const req = (id: number | string, method: string, params?: object) =>
  JSON.stringify({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) });

afterEach(() => {
  vi.useRealTimers();
});

describe('McpRequestLoop, firmware profile', () => {
  it('runs tools one at a time in arrival order, even when a tool is slow', async () => {
    const order: string[] = [];
    let release: () => void = () => {};
    const { server, sent } = board({
      'self.slow': () =>
        new Promise((resolve) => {
          order.push('slow start');
          release = () => resolve(7);
        }),
      'self.fast': () => {
        order.push('fast');
        return true;
      },
    });
    server.receive(req(1, 'tools/call', { name: 'self.slow' }));
    server.receive(req(2, 'tools/call', { name: 'self.fast' }));
    server.receive(req(3, 'initialize'));
    // Fake time: every hop the loop could take within 5 ms, on any machine.
    vi.useFakeTimers();
    await vi.advanceTimersByTimeAsync(5);
    vi.useRealTimers();
    // The slow tool blocks the loop: nothing after it has run, not even the initialize reply.
    expect(order).toEqual(['slow start']);
    expect(sent).toEqual([]);
    release();
    await server.idle();
    expect(order).toEqual(['slow start', 'fast']);
    expect(sent.map((s) => JSON.parse(s).id)).toEqual([3, 1, 2]);
  });

  it('turns a thrown error into an error reply with its message, after two hops', async () => {
    const { server, sent } = board();
    server.receive(req(5, 'tools/call', { name: 'self.photo', arguments: { question: 'what?' } }));
    server.receive(req(6, 'tools/list'));
    await server.idle();
    expect(sent[0]).toMatch(/^\{"jsonrpc":"2.0","id":6,"result":/);
    expect(sent[1]).toBe(
      '{"jsonrpc":"2.0","id":5,"error":{"message":"Image explain URL or token is not set"}}',
    );
  });

  it('logs the lines the firmware logs for drops and errors', async () => {
    const { server, logs } = board();
    server.receive('{"jsonrpc":"2.0","id":"x","method":"tools/list"}');
    server.receive('{"jsonrpc":"1.0","id":1,"method":"tools/list"}');
    server.receive('{"jsonrpc":"2.0","id":1}');
    server.receive('{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[]}');
    server.receive(req(2, 'ping'));
    server.receive(req(3, 'tools/call', { name: 'nope' }));
    await server.idle();
    expect(logs).toEqual([
      'Invalid id for method: tools/list',
      'Invalid JSONRPC version',
      'Missing method',
      'Invalid params for method: tools/list',
      'Method not implemented: ping',
      'tools/call: Unknown tool: nope',
    ]);
  });

  it('stores the vision capability from initialize', () => {
    const { server, visions } = board();
    server.receive(
      req(1, 'initialize', { capabilities: { vision: { url: 'http://h/v', token: 't' } } }),
    );
    server.receive(req(2, 'initialize', { capabilities: { vision: { url: 5 } } }));
    server.receive(req(3, 'initialize', { capabilities: { vision: { url: 'http://h/w' } } }));
    expect(visions).toEqual([
      { url: 'http://h/v', token: 't' },
      { url: 'http://h/w', token: undefined },
    ]);
  });

  it('sends image results in the firmware nested shape', async () => {
    const { server, sent } = board({
      'self.fast': () => new ImageContent('image/png', new Uint8Array([1, 2, 3])),
    });
    server.receive(req(1, 'tools/call', { name: 'self.fast' }));
    await server.idle();
    expect(sent).toEqual([
      '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"image","image":"{\\"type\\":\\"image\\",\\"mimeType\\":\\"image/png\\",\\"data\\":\\"AQID\\"}"}],"isError":false}}',
    ]);
  });

  it('calls user-only tools without withUserTools', () => {
    const tools = new ToolRegistry();
    tools.add({ name: 'self.reboot', description: '', userOnly: true }, undefined);
    const action = dispatchMcpRequest(req(1, 'tools/call', { name: 'self.reboot' }), {
      tools,
      board: { name: 'b', version: '1' },
    });
    expect(action.kind).toBe('call');
  });
});

describe('McpRequestLoop hooks', () => {
  it('calls onToolCall on the main loop as a valid call starts, before its tool runs', async () => {
    const events: string[] = [];
    const { server, calls } = board({
      'self.fast': () => {
        events.push(`run (onToolCall seen: ${calls.join(',')})`);
        return true;
      },
    });
    server.receive(req(1, 'tools/call', { name: 'self.fast' }));
    server.receive(req(2, 'tools/call', { name: 'nope' }));
    expect(calls).toEqual([]); // not at dispatch: on the loop
    await server.idle();
    expect(calls).toEqual(['self.fast']);
    expect(events).toEqual(['run (onToolCall seen: self.fast)']);
  });

  it('reads tools, board and send at use, so an owner can swap them', async () => {
    const { server, sent } = board();
    server.board = { name: 'bread-compact-wifi', version: '2.5.0' };
    const tools = new ToolRegistry<Handler>();
    tools.add({ name: 'self.new', description: '' }, () => 'new');
    server.tools = tools;
    server.receive(req(1, 'initialize'));
    server.receive(req(2, 'tools/call', { name: 'self.new' }));
    server.receive(req(3, 'tools/call', { name: 'self.fast' }));
    await server.idle();
    expect(sent).toEqual([
      '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"bread-compact-wifi","version":"2.5.0"}}}',
      '{"jsonrpc":"2.0","id":3,"error":{"message":"Unknown tool: self.fast"}}',
      '{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"new"}],"isError":false}}',
    ]);
    // A reply whose channel closed before it left is dropped.
    server.receive(req(4, 'initialize'));
    server.send = undefined;
    await server.idle();
    expect(sent).toHaveLength(3);
  });

  it('pages with the page budget it was given', async () => {
    const tools = new ToolRegistry<Handler>();
    for (const name of ['a', 'b', 'c']) tools.add({ name, description: 'd'.repeat(100) }, () => 1);
    const sent: string[] = [];
    const server = new McpRequestLoop({
      tools,
      board: { name: 'b', version: '1' },
      runTool: (handler) => handler(),
      send: (payload) => sent.push(payload),
      pageBudgetBytes: 400,
    });
    server.receive(req(1, 'tools/list'));
    await server.idle();
    expect(JSON.parse(sent[0] ?? '').result.nextCursor).toBe('c');
  });

  it('shares a main loop with other work, in one queue', async () => {
    const loop = new MainLoop();
    const order: string[] = [];
    const server = new McpRequestLoop({
      tools: new ToolRegistry<Handler>(),
      board: { name: 'b', version: '1' },
      runTool: (handler) => handler(),
      send: () => order.push('reply'),
      loop,
    });
    loop.schedule(() => order.push('board task'));
    server.receive(req(1, 'initialize'));
    await loop.idle();
    expect(server.loop).toBe(loop);
    expect(order).toEqual(['board task', 'reply']);
  });
});

describe('McpRequestLoop, strict profile', () => {
  it('answers spec-style through the same hops, tool failures in the result', async () => {
    const { server, sent, logs, visions, calls } = board(
      { 'self.slow': () => 7, 'self.fast': () => ({}) as unknown as ToolReturn },
      'strict',
    );
    server.receive(req('a', 'tools/call', { name: 'self.slow' }));
    server.receive(req('b', 'tools/call', { name: 'self.photo', arguments: { question: 'q' } }));
    server.receive(req('c', 'tools/call', { name: 'self.fast' }));
    server.receive('{"jsonrpc":"2.0","method":"notifications/initialized"}');
    server.receive(req(1, 'tools/call', { name: 'nope' }));
    server.receive(
      req('d', 'initialize', { capabilities: { vision: { url: 'http://v', token: 't' } } }),
    );
    await server.idle();
    expect(sent).toEqual([
      '{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Unknown tool: nope"}}',
      '{"jsonrpc":"2.0","id":"d","result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"bread-compact-wifi","version":"2.4.2"}}}',
      encodeStrictToolResult('a', 7),
      encodeStrictToolError('b', 'Image explain URL or token is not set'),
      // A value that is no ToolReturn fails its encoding: a tool error, not a lost reply.
      encodeStrictToolError('c', 'Tool returned an unsupported value: [object Object]'),
    ]);
    expect(visions).toEqual([{ url: 'http://v', token: 't' }]);
    expect(calls).toEqual(['self.slow', 'self.photo', 'self.fast']);
    expect(logs).toEqual([]); // the firmware's log lines belong to the firmware profile
  });

  it('reads an envelope payload node as standard JSON text', async () => {
    const { server, sent } = board({}, 'strict');
    server.receive({
      kind: 'object',
      entries: [
        ['jsonrpc', { kind: 'string', value: '2.0' }],
        ['id', { kind: 'number', value: 1.5 }],
        ['method', { kind: 'string', value: 'ping' }],
      ],
    });
    await server.idle();
    expect(sent).toEqual(['{"jsonrpc":"2.0","id":1.5,"result":{}}']);
  });
});

describe('MainLoop', () => {
  it('drops queued and later tasks once stopped, as a reset does', async () => {
    const ran: string[] = [];
    const loop = new MainLoop();
    loop.schedule(() => {
      ran.push('first');
      loop.stop();
      loop.schedule(() => ran.push('scheduled by the running task'));
    });
    loop.schedule(() => ran.push('queued'));
    await loop.idle();
    loop.schedule(() => ran.push('after stop'));
    await loop.idle();
    expect(ran).toEqual(['first']);
    expect(loop.stopped).toBe(true);
    expect(loop.pending).toBe(0);
  });

  it("holds the loop while a task's promise is pending, and idle waits for it", async () => {
    const ran: string[] = [];
    const loop = new MainLoop();
    let finish: () => void = () => {};
    loop.schedule(() => {
      ran.push('async start');
      return new Promise<void>((resolve) => {
        finish = () => {
          ran.push('async end');
          resolve();
        };
      });
    });
    loop.schedule(() => ran.push('next'));
    let idle = false;
    const waiting = loop.idle().then(() => {
      idle = true;
    });
    await vi.waitFor(() => expect(ran).toHaveLength(1));
    expect(ran).toEqual(['async start']);
    expect(loop.pending).toBe(1);
    expect(idle).toBe(false);
    finish();
    await waiting;
    expect(ran).toEqual(['async start', 'async end', 'next']);
  });

  it('keeps going after a task throws, reporting the error', async () => {
    const errors: unknown[] = [];
    const ran: number[] = [];
    const loop = new MainLoop((e) => errors.push(e));
    loop.schedule(() => {
      throw new Error('x');
    });
    loop.schedule(() => ran.push(1));
    await loop.idle();
    expect(ran).toEqual([1]);
    expect(errors).toHaveLength(1);
    expect(loop.pending).toBe(0);
  });
});

describe('McpRequestLoop under hostile payloads', () => {
  const nested = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;
  const deepValue = () => JSON.parse(nested(100_000));

  const requestArb = fc.oneof(
    fc.string({
      unit: fc.oneof(
        fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
        fc.constantFrom('{', '}', '"', ':', ',', '"jsonrpc":"2.0"', '"method"', '"id":1'),
      ),
      maxLength: 60,
    }),
    fc
      .record(
        {
          jsonrpc: fc.oneof(fc.constant('2.0'), fc.jsonValue({ maxDepth: 1 })),
          id: fc.oneof(fc.integer(), fc.string(), fc.double(), fc.jsonValue({ maxDepth: 1 })),
          method: fc.oneof(
            fc.constantFrom('initialize', 'tools/list', 'tools/call', 'ping', 'notifications/x'),
            fc.jsonValue({ maxDepth: 1 }),
          ),
          params: fc.oneof(
            fc.record(
              {
                name: fc.oneof(
                  fc.constantFrom('self.fast', 'self.photo', 'nope'),
                  fc.jsonValue({ maxDepth: 2 }),
                ),
                arguments: fc.jsonValue({ maxDepth: 2 }),
                cursor: fc.oneof(fc.constantFrom('self.slow', ''), fc.jsonValue({ maxDepth: 1 })),
                withUserTools: fc.jsonValue({ maxDepth: 1 }),
                capabilities: fc.jsonValue({ maxDepth: 3 }),
              },
              { requiredKeys: [] },
            ),
            fc.jsonValue({ maxDepth: 2 }),
          ),
          result: fc.jsonValue({ maxDepth: 2 }),
          error: fc.jsonValue({ maxDepth: 2 }),
        },
        { requiredKeys: [] },
      )
      .map((value) => JSON.stringify(value)),
  );

  it.each(['firmware', 'strict'] as const)(
    'answers or drops any payload (%s profile)',
    async (profile) => {
      await fc.assert(
        fc.asyncProperty(fc.array(requestArb, { minLength: 1, maxLength: 5 }), async (payloads) => {
          const { server, sent } = board({}, profile);
          for (const payload of payloads) server.receive(payload);
          await server.idle();
          for (const reply of sent) expect(typeof reply).toBe('string');
        }),
        { seed: 42, numRuns: 150 },
      );
    },
  );

  it.each(['firmware', 'strict'] as const)(
    'answers calls with members nested 100000 deep (%s profile)',
    async (profile) => {
      const { server, sent } = board({}, profile);
      const deep = nested(100_000);
      server.receive(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":${deep}}}`);
      server.receive(
        `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"self.photo","arguments":{"question":${deep}}}}`,
      );
      server.receive(
        `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"self.fast","arguments":${deep}}}`,
      );
      server.receive(
        `{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"capabilities":${deep}}}`,
      );
      await server.idle();
      // A board's cJSON refuses past 1000 levels and drops the request; strict answers each.
      expect(sent).toHaveLength(profile === 'firmware' ? 0 : 4);
    },
  );

  it.each(['firmware', 'strict'] as const)(
    'answers a tool that throws a value String() cannot print (%s profile)',
    async (profile) => {
      const thrown = [deepValue(), Object.create(null)];
      const { server, sent } = board(
        {
          'self.fast': () => {
            throw thrown.shift();
          },
        },
        profile,
      );
      server.receive(req(1, 'tools/call', { name: 'self.fast' }));
      server.receive(req(2, 'tools/call', { name: 'self.fast' }));
      await server.idle();
      expect(sent).toHaveLength(2);
      expect(sent.join('\n')).toContain('unprintable');
    },
  );
});
