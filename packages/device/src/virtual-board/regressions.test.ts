import {
  buildDeviceHello,
  type CJsonNode,
  defineTool,
  Prop,
  parseCJson,
  type Tool,
} from '@xiaozhi-mcp/protocol';
import { describe, expect, it } from 'vitest';
import {
  REGRESSION_NAMES,
  REGRESSIONS,
  type RegressionName,
  RegressionPlant,
  regressionPageBudget,
} from './regressions.js';

const TOOLS: readonly Tool[] = [
  defineTool({ name: 'self.get_device_status', description: 'Status.' }),
  defineTool({
    name: 'self.audio_speaker.set_volume',
    description: 'Volume.',
    properties: [Prop.integer('volume', { min: 0, max: 100 })],
  }),
  defineTool({ name: 'self.lamp.turn_on', description: 'Lamp on.' }),
  defineTool({ name: 'self.lamp.turn_off', description: 'Lamp off.' }),
  defineTool({ name: 'self.reboot', description: 'Reboot.', userOnly: true }),
];

function plant(...regressions: RegressionName[]): RegressionPlant {
  return new RegressionPlant({ regressions: () => regressions, tools: () => TOOLS });
}

function node(text: string): CJsonNode {
  const parsed = parseCJson(text);
  if (parsed === undefined) throw new Error(`not JSON: ${text}`);
  return parsed;
}

/** Sends a request through the plant; returns what the MCP server would get (or the answer). */
function request(p: RegressionPlant, text: string): unknown {
  const outcome = p.request(node(text));
  if ('reply' in outcome) return { reply: outcome.reply };
  return typeof outcome.payload === 'string' ? JSON.parse(outcome.payload) : 'unchanged';
}

const page = (id: number, names: readonly string[], next?: string) =>
  `{"jsonrpc":"2.0","id":${id},"result":{"tools":[${names
    .map((name) => TOOLS.find((t) => t.name === name)?.json)
    .join(',')}]${next === undefined ? '' : `,"nextCursor":"${next}"`}}}`;

describe('firmware regressions of a virtual board', () => {
  it('are named data, each with what it changes', () => {
    expect(REGRESSION_NAMES.length).toBeGreaterThanOrEqual(18);
    for (const name of REGRESSION_NAMES) expect(REGRESSIONS[name]).toMatch(/\w/);
    expect(regressionPageBudget(['wrong-id', 'page-oversize'])).toBe(9000);
    expect(regressionPageBudget(['page-not-maximal'])).toBe(6000);
    expect(regressionPageBudget([])).toBeUndefined();
  });

  it('change nothing when none is switched on', () => {
    const p = plant();
    const payload = node('{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"x"}}');
    expect(p.request(payload)).toEqual({ payload });
    expect(p.reply('{"jsonrpc":"2.0","id":1,"error":{"message":"x"}}')).toEqual({
      payload: '{"jsonrpc":"2.0","id":1,"error":{"message":"x"}}',
      delayMs: 0,
    });
    const hello = buildDeviceHello({ transport: 'websocket', version: 1 });
    expect(p.hello(hello)).toBe(hello);
  });

  it('hello-no-mcp leaves features.mcp out of the hello', () => {
    const hello = plant('hello-no-mcp').hello(buildDeviceHello({ transport: 'websocket' }));
    expect(hello.features).not.toHaveProperty('mcp');
    expect(hello.transport).toBe('websocket');
  });

  it('error-code adds the code a coded firmware would send', () => {
    const p = plant('error-code');
    expect(
      p.reply('{"jsonrpc":"2.0","id":3,"error":{"message":"Method not implemented: ping"}}')
        ?.payload,
    ).toBe(
      '{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"Method not implemented: ping"}}',
    );
    expect(
      p.reply('{"jsonrpc":"2.0","id":4,"error":{"message":"Unknown tool: x"}}')?.payload,
    ).toContain('"code":-32602');
    expect(p.reply('{"jsonrpc":"2.0","id":5,"error":{"message":"boom"}}')?.payload).toContain(
      '"code":-32603',
    );
  });

  it('initialize regressions change its result', () => {
    const result =
      '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"b","version":"1"}}}';
    const p = plant('protocol-version', 'no-capabilities', 'no-server-info');
    request(p, '{"jsonrpc":"2.0","id":1,"method":"initialize"}');
    expect(p.reply(result)?.payload).toBe(
      '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-03-26"}}',
    );
  });

  it('tools/call regressions: slow, silent, wrong id, ranges unchecked', () => {
    const p = plant('slow-calls', 'tool-silent', 'wrong-id', 'range-unchecked');
    expect(
      request(
        p,
        '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"self.audio_speaker.set_volume","arguments":{"volume":101}}}',
      ),
    ).toEqual({
      jsonrpc: '2.0',
      id: 7,
      method: 'tools/call',
      params: { name: 'self.audio_speaker.set_volume', arguments: { volume: 100 } },
    });
    expect(p.reply('{"jsonrpc":"2.0","id":7,"result":{"content":[],"isError":false}}')).toEqual({
      payload: '{"jsonrpc":"2.0","id":8,"result":{"content":[],"isError":false}}',
      delayMs: 300,
    });
    request(
      p,
      '{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"self.lamp.turn_on"}}',
    );
    expect(p.reply('{"jsonrpc":"2.0","id":9,"result":{"content":[],"isError":false}}')).toBe(
      undefined,
    );
    // An unknown tool is no tool: its error still comes.
    request(p, '{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"self.nope"}}');
    expect(
      p.reply('{"jsonrpc":"2.0","id":10,"error":{"message":"Unknown tool: self.nope"}}'),
    ).toEqual({
      payload: '{"jsonrpc":"2.0","id":11,"error":{"message":"Unknown tool: self.nope"}}',
      delayMs: 300,
    });
  });

  it('answers-notifications answers what the firmware drops', () => {
    const p = plant('answers-notifications');
    expect(request(p, '{"jsonrpc":"2.0","method":"notifications/initialized"}')).toEqual({
      reply: '{"jsonrpc":"2.0","id":null,"result":{}}',
    });
    expect(request(p, '{"jsonrpc":"2.0","id":4,"method":"notifications/cancelled"}')).toEqual({
      reply: '{"jsonrpc":"2.0","id":4,"result":{}}',
    });
  });

  it('tools/list request regressions: unknown cursors, withUserTools ignored or forced', () => {
    const list = (params: object) =>
      `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":${JSON.stringify(params)}}`;
    expect(request(plant('unknown-cursor-page'), list({ cursor: 'self.nope' }))).toMatchObject({
      params: { cursor: '' },
    });
    expect(request(plant('unknown-cursor-page'), list({ cursor: 'self.lamp.turn_on' }))).toBe(
      'unchanged',
    );
    expect(request(plant('user-tools-never'), list({ withUserTools: true }))).toMatchObject({
      params: { withUserTools: false },
    });
    expect(request(plant('user-tools-always'), list({}))).toMatchObject({
      params: { withUserTools: true },
    });
  });

  it('tools/list reply regressions: cursors that skip or repeat a tool, a tool gone from the third walk', () => {
    const skips = plant('cursor-skips-tool');
    request(skips, '{"jsonrpc":"2.0","id":1,"method":"tools/list"}');
    expect(
      skips.reply(page(1, ['self.get_device_status'], 'self.audio_speaker.set_volume'))?.payload,
    ).toBe(page(1, ['self.get_device_status'], 'self.lamp.turn_on'));
    const repeats = plant('cursor-last-tool');
    request(repeats, '{"jsonrpc":"2.0","id":1,"method":"tools/list"}');
    expect(
      repeats.reply(
        page(1, ['self.get_device_status', 'self.audio_speaker.set_volume'], 'self.lamp.turn_on'),
      )?.payload,
    ).toBe(
      page(
        1,
        ['self.get_device_status', 'self.audio_speaker.set_volume'],
        'self.audio_speaker.set_volume',
      ),
    );

    const vanishes = plant('tool-vanishes');
    const all = ['self.get_device_status', 'self.lamp.turn_on', 'self.lamp.turn_off'];
    for (let walk = 1; walk <= 3; walk++) {
      request(vanishes, `{"jsonrpc":"2.0","id":${walk},"method":"tools/list"}`);
      const payload = vanishes.reply(page(walk, all))?.payload;
      // The last plain tool (self.lamp.turn_off) is gone from the third walk on.
      expect(payload).toBe(walk < 3 ? page(walk, all) : page(walk, all.slice(0, 2)));
    }
  });
});
