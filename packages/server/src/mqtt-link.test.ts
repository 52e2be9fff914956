import { describe, expect, it } from 'vitest';
import type { DeviceLink } from './device-link.js';
import {
  deliveryTopic,
  isBoardClientId,
  MqttLink,
  macUnderscored,
  mqttClientId,
  parseMqttClientId,
  publishTopic,
} from './mqtt-link.js';

const MAC = 'f4:12:fa:00:00:01';
const UUID = 'c3a1e2f0-4d5b-4e6a-9b7c-1d2e3f4a5b6c';

describe('MQTT names', () => {
  // The cloud's shapes (docs/protocol.md §5): GROUP@@@aa_bb_cc_dd_ee_ff@@@uuid, devices/p2p/<mac_>.
  it('writes the client id, delivery topic and publish topic with the MAC underscored', () => {
    expect(macUnderscored('F4:12:FA:00:00:01')).toBe('f4_12_fa_00_00_01');
    expect(mqttClientId(MAC, UUID)).toBe(
      'GID_xiaozhi@@@f4_12_fa_00_00_01@@@c3a1e2f0-4d5b-4e6a-9b7c-1d2e3f4a5b6c',
    );
    expect(deliveryTopic(MAC)).toBe('devices/p2p/f4_12_fa_00_00_01');
    expect(publishTopic(MAC)).toBe('device-server/f4_12_fa_00_00_01');
  });

  it('reads a board client id back, and nothing else', () => {
    expect(
      parseMqttClientId('GID_xiaozhi@@@f4_12_fa_00_00_01@@@c3a1e2f0-4d5b-4e6a-9b7c-1d2e3f4a5b6c'),
    ).toEqual({ deviceId: MAC, clientId: UUID });
    // An empty Client-Id is what the gateway takes too (at most 64 printable characters).
    expect(parseMqttClientId('GID_xiaozhi@@@f4_12_fa_00_00_01@@@')).toEqual({
      deviceId: MAC,
      clientId: '',
    });
    for (const id of [
      '',
      'mosquitto-sub-123',
      'GID_test@@@f4_12_fa_00_00_01@@@u',
      'GID_xiaozhi@@@F4_12_FA_00_00_01@@@u',
      'GID_xiaozhi@@@f4:12:fa:00:00:01@@@u',
      'GID_xiaozhi@@@f4_12_fa_00_00@@@u',
      `GID_xiaozhi@@@f4_12_fa_00_00_01@@@${'u'.repeat(65)}`,
      'GID_xiaozhi@@@f4_12_fa_00_00_01@@@has space',
      'GID_xiaozhi@@@f4_12_fa_00_00_01@@@line\nbreak',
    ])
      expect(parseMqttClientId(id), JSON.stringify(id)).toBeUndefined();
    expect(isBoardClientId('GID_xiaozhi@@@anything')).toBe(true);
    expect(isBoardClientId('mosquitto-sub-123')).toBe(false);
  });
});

describe('MqttLink', () => {
  function link() {
    const sent: string[] = [];
    let closes = 0;
    const l = new MqttLink(
      (text, done) => {
        sent.push(text);
        done();
      },
      () => {
        closes++;
      },
    );
    const events: string[] = [];
    return {
      l,
      sent,
      events,
      closes: () => closes,
      listen: () =>
        l.listen({
          text: (text) => events.push(`text ${text}`),
          binary: () => events.push('binary'),
          closed: (reason) => events.push(`closed ${reason}`),
        }),
    };
  }

  it('is an MQTT link without a ping', () => {
    const { l } = link();
    expect(l.transport).toBe('mqtt');
    expect((l as DeviceLink).ping).toBeUndefined();
  });

  it('delivers publishes as text frames once listened to, and reports the end once', () => {
    const { l, events, listen } = link();
    l.receive('before');
    listen();
    l.receive('{"type":"mcp"}');
    l.end('connection dropped');
    l.end('again');
    l.receive('after');
    expect(events).toEqual(['text {"type":"mcp"}', 'closed connection dropped']);
    expect(l.ended).toBe(true);
  });

  it('sends until it has ended, then fails the send', () => {
    const { l, sent, listen, closes } = link();
    listen();
    const results: (Error | undefined)[] = [];
    l.send('one', (error) => results.push(error));
    l.terminate();
    expect(closes()).toBe(1);
    l.end('closed by the server');
    l.send('two', (error) => results.push(error));
    expect(sent).toEqual(['one']);
    expect(results[0]).toBeUndefined();
    expect(results[1]?.message).toMatch(/ended/);
  });
});
