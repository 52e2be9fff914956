/**
 * Replicas rebuilt from a transcript in hil's line format: recorded here from an otto-robot
 * virtual board's session (every frame both ways, as hil's Transcript writes them), rebuilt,
 * checked by parseReplica, and run: the replica board answers the same requests with the same
 * bytes.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { openSession } from '../board-session.test-helper.js';
import { type DeviceConnection, TestBackend } from '../testing/backend.js';
import { FAST_TIMING } from '../testing/timing.js';
import { VirtualBoard, type VirtualBoardOptions } from '../virtual-board.js';
import { formatReplica, parseReplica, ReplicaError } from './replica-file.js';
import { replicaFromTranscript } from './replica-from-transcript.js';
import { replicaBoardOptions } from './replica-preset.js';

const backends: TestBackend[] = [];
const boards: VirtualBoard[] = [];

afterEach(async () => {
  for (const board of boards.splice(0)) board.powerOff();
  for (const backend of backends.splice(0)) await backend.close();
});

/** A board in a session with a test backend, its frames written as hil's transcript lines. */
async function recordedSession(options: VirtualBoardOptions): Promise<{
  connection: DeviceConnection;
  lines: string[];
  exchange: (request: string) => Promise<string>;
}> {
  const backend = await TestBackend.start();
  backends.push(backend);
  const board = new VirtualBoard({
    ...options,
    wifi: { ssid: 'rig' },
    otaUrl: backend.otaUrl,
    timing: FAST_TIMING,
  });
  boards.push(board);
  board.powerOn();
  const connection = await openSession(board, backend);
  const lines: string[] = [];
  const line = (value: object) =>
    lines.push(JSON.stringify({ t: new Date().toISOString(), ...value }));
  const sessionId = connection.sessionId;
  line({
    event: 'session',
    sessionId,
    deviceId: connection.upgrade.headers['device-id'],
    hello: connection.texts[0],
  });
  let seen = connection.texts.length;
  const exchange = async (request: string): Promise<string> => {
    const id = /"id":(\d+)/.exec(request)?.[1];
    const prefix = `{"jsonrpc":"2.0","id":${id},`;
    const envelope = `{"session_id":"${sessionId}","type":"mcp","payload":${request}}`;
    line({ session: sessionId, dir: 'out', text: envelope });
    connection.sendPayload(request);
    const reply = await connection.until(
      () => connection.mcpPayloads.find((p) => p.startsWith(prefix)),
      5000,
      `reply ${id}`,
    );
    for (const text of connection.texts.slice(seen)) line({ session: sessionId, dir: 'in', text });
    seen = connection.texts.length;
    return reply;
  };
  return { connection, lines, exchange };
}

/** What a backend asks a board: initialize, both tools/list walks, calls good and bad. */
async function drive(exchange: (request: string) => Promise<string>): Promise<Map<number, string>> {
  const replies = new Map<number, string>();
  let id = 1;
  const ask = async (method: string, params: object) => {
    const n = id++;
    replies.set(n, await exchange(JSON.stringify({ jsonrpc: '2.0', id: n, method, params })));
    return replies.get(n) as string;
  };
  await ask('initialize', { protocolVersion: '2024-11-05', capabilities: {} });
  for (const withUserTools of [false, true]) {
    let cursor = '';
    for (;;) {
      const page = JSON.parse(
        await ask('tools/list', withUserTools ? { cursor, withUserTools } : { cursor }),
      );
      if (page.result?.nextCursor === undefined) break;
      cursor = page.result.nextCursor;
    }
  }
  await ask('tools/call', { name: 'self.get_device_status', arguments: {} });
  await ask('tools/call', { name: 'self.audio_speaker.set_volume', arguments: { volume: 35 } });
  await ask('tools/call', { name: 'self.audio_speaker.set_volume', arguments: { volume: 500 } }); // refused
  await ask('tools/call', { name: 'self.no_such_tool', arguments: {} }); // unknown
  await ask('tools/call', { name: 'self.get_system_info', arguments: {} });
  return replies;
}

describe('replicaFromTranscript', () => {
  it('rebuilds an otto-robot board from its session; the replica passes parseReplica and answers with the same bytes', async () => {
    const mac = 'f4:12:fa:0a:0b:0c';
    const recorded = await recordedSession({
      preset: 'otto-robot',
      mac,
      app: { version: '2.4.2' },
    });
    const original = await drive(recorded.exchange);
    recorded.lines.push(
      JSON.stringify({
        t: new Date().toISOString(),
        event: 'closed',
        sessionId: recorded.connection.sessionId,
        reason: 'test',
      }),
    );

    const replica = replicaFromTranscript(`${recorded.lines.join('\n')}\n`);
    expect(replica.board).toMatchObject({
      variant: 'otto-robot',
      firmwareVersion: '2.4.2',
      mac,
      chip: 'esp32s3',
      flashSizeMb: 16,
      transport: 'websocket',
    });
    expect(replica.hello).toBe(recorded.connection.texts[0]);
    expect(replica.initialize).toBe(original.get(1));
    expect(replica.pages?.plain.length).toBe(3); // otto's plain listing spans three pages
    expect(replica.pages?.withUserTools.length).toBeGreaterThan(0);
    expect(replica.tools.some((t) => t.user_only === true)).toBe(true);
    // The refused and the unknown call are left out: the board answers those itself.
    expect(replica.calls?.map((c) => [c.tool, c.arguments])).toEqual([
      ['self.get_device_status', {}],
      ['self.audio_speaker.set_volume', { volume: 35 }],
      ['self.get_system_info', {}],
    ]);
    const text = formatReplica(replica);
    expect(parseReplica(text, 'otto.json')).toEqual(JSON.parse(text));

    // The replica as a board, asked the same things with the same ids.
    const again = await recordedSession(replicaBoardOptions(parseReplica(text)));
    const replayed = await drive(again.exchange);
    expect([...replayed.keys()]).toEqual([...original.keys()]);
    for (const [id, reply] of original)
      expect({ id, reply: replayed.get(id) }).toEqual({ id, reply });
    expect(again.connection.upgrade.headers['device-id']).toBe(mac);
  });

  it("takes the identity from the board note, the name and version from initialize, and the caller's over both", async () => {
    const recorded = await recordedSession({
      preset: 'bread-compact-wifi',
      mac: 'f4:12:fa:00:00:07',
      app: { version: '1.0.0' },
    });
    await drive(recorded.exchange);
    const note = JSON.stringify({
      t: new Date().toISOString(),
      event: 'board',
      variant: 'bread-compact-wifi',
      firmwareVersion: '9.9.9',
      chip: 'esp32c3',
      flashSizeMb: 4,
      mac: 'f4:12:fa:00:00:08',
    });
    const jsonl = [note, ...recorded.lines].join('\n');
    const replica = replicaFromTranscript(jsonl, { name: 'desk-1', mac: 'f4:12:fa:00:00:09' });
    // The variant and version are what the board said in initialize, not what the rig believed.
    expect(replica.board).toMatchObject({
      variant: 'bread-compact-wifi',
      firmwareVersion: '1.0.0',
      chip: 'esp32c3',
      flashSizeMb: 4,
      name: 'desk-1',
      mac: 'f4:12:fa:00:00:09',
    });
    expect(replica.initialize).toContain(
      '"serverInfo":{"name":"bread-compact-wifi","version":"1.0.0"}',
    );
    // Renamed by the caller: the recorded initialize reply no longer applies and is left out.
    const renamed = replicaFromTranscript(jsonl, { firmwareVersion: '3.0.0' });
    expect(renamed.board.firmwareVersion).toBe('3.0.0');
    expect(renamed.initialize).toBeUndefined();
  });

  it('never copies a secret: calls carrying one are left out, a hello carrying one is dropped', () => {
    const tools =
      '{"tools":[{"name":"self.wifi.join","description":"Joins","inputSchema":{"type":"object","properties":{"ssid":{"type":"string"},"password":{"type":"string"}},"required":["ssid","password"]}},{"name":"self.ping","description":"Ping","inputSchema":{"type":"object","properties":{}}}]}';
    const S = 'sess-1';
    const frame = (dir: string, payload: string, t: string) =>
      JSON.stringify({
        t,
        session: S,
        dir,
        text: `{"session_id":"${S}","type":"mcp","payload":${payload}}`,
      });
    const lines = [
      JSON.stringify({
        t: '2026-01-01T00:00:00.000Z',
        event: 'session',
        sessionId: S,
        deviceId: 'F4:12:FA:00:00:01',
        hello: '{"type":"hello","version":1,"transport":"websocket","token":"abc"}',
      }),
      frame(
        'out',
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}',
        '2026-01-01T00:00:00.010Z',
      ),
      frame(
        'in',
        '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2024-11-05","capabilities":{"tools":{}},"serverInfo":{"name":"wifi-board","version":"3.1.0"}}}',
        '2026-01-01T00:00:00.020Z',
      ),
      frame(
        'out',
        '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":""}}',
        '2026-01-01T00:00:00.030Z',
      ),
      frame('in', `{"jsonrpc":"2.0","id":2,"result":${tools}}`, '2026-01-01T00:00:00.040Z'),
      frame(
        'out',
        '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"self.wifi.join","arguments":{"ssid":"home","password":"hunter2"}}}',
        '2026-01-01T00:00:00.050Z',
      ),
      frame(
        'in',
        '{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"true"}],"isError":false}}',
        '2026-01-01T00:00:00.060Z',
      ),
      frame(
        'out',
        '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"self.ping","arguments":{}}}',
        '2026-01-01T00:00:00.100Z',
      ),
      frame(
        'in',
        '{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"pong"}],"isError":false}}',
        '2026-01-01T00:00:00.342Z',
      ),
      JSON.stringify({
        t: '2026-01-01T00:00:01.000Z',
        event: 'closed',
        sessionId: S,
        reason: 'done',
      }),
    ];
    const replica = replicaFromTranscript(lines.join('\n'));
    const text = formatReplica(replica);
    expect(text).not.toContain('hunter2');
    expect(text).not.toContain('abc');
    expect(replica.hello).toBeUndefined();
    expect(replica.calls).toEqual([
      {
        tool: 'self.ping',
        arguments: {},
        reply:
          '{"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"pong"}],"isError":false}}',
        delayMs: 242,
      },
    ]);
    expect(replica.board).toMatchObject({
      variant: 'wifi-board',
      firmwareVersion: '3.1.0',
      mac: 'f4:12:fa:00:00:01',
    });
    expect(replica.pages).toEqual({
      plain: [`{"jsonrpc":"2.0","id":2,"result":${tools}}`],
      withUserTools: [],
    });
    expect(replica.tools[0]?.properties?.map((p) => p.name)).toEqual(['ssid', 'password']);
    expect(() => parseReplica(text)).not.toThrow();
  });

  it('refuses a transcript without a tools/list walk', () => {
    const error = (() => {
      try {
        replicaFromTranscript(
          '{"t":"2026-01-01T00:00:00Z","event":"session","sessionId":"s","deviceId":"x","hello":"{}"}\n',
        );
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(ReplicaError);
    expect((error as ReplicaError).field).toBe('pages');
  });
});
