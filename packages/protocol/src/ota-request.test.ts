import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { anyText, catchProtocolError, onlyProtocolErrors } from './ota.test-helper.js';
import { buildOtaRequestHeaders, type OtaRequestBody, parseOtaRequest } from './ota-request.js';

// A request as bread-compact-wifi 2.4.2 on an ESP32-S3 (16 MB, v2 partition table) sends it.
const MAC = 'a0:85:e3:f4:12:7c';
const UUID = 'c3a1e2f0-4d5b-4e6a-9b7c-1d2e3f4a5b6c';
const ELF = '6f1c0d2e9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d';

function realBody(): OtaRequestBody {
  return {
    version: 2,
    language: 'zh-CN',
    flash_size: 16_777_216,
    minimum_free_heap_size: '8191896',
    mac_address: MAC,
    uuid: UUID,
    chip_model_name: 'esp32s3',
    chip_info: { model: 9, cores: 2, revision: 2, features: 18 },
    application: {
      name: 'xiaozhi',
      version: '2.4.2',
      compile_time: 'Aug 20 2026T10:12:03Z',
      idf_version: 'v5.5.1',
      elf_sha256: ELF,
    },
    partition_table: [
      { label: 'nvs', type: 1, subtype: 2, address: 36_864, size: 16_384 },
      { label: 'otadata', type: 1, subtype: 0, address: 53_248, size: 8192 },
      { label: 'phy_init', type: 1, subtype: 1, address: 61_440, size: 4096 },
      { label: 'ota_0', type: 0, subtype: 16, address: 131_072, size: 4_128_768 },
      { label: 'ota_1', type: 0, subtype: 17, address: 4_259_840, size: 4_128_768 },
      { label: 'assets', type: 1, subtype: 130, address: 8_388_608, size: 8_388_608 },
    ],
    ota: { label: 'ota_0' },
    display: { monochrome: false, width: 240, height: 240 },
    board: {
      type: 'bread-compact-wifi',
      name: 'bread-compact-wifi',
      ssid: 'lab-2g',
      rssi: -52,
      channel: 6,
      ip: '192.168.1.57',
      mac: MAC,
    },
  };
}

/** Headers as Node's IncomingHttpHeaders gives them: lowercase names. */
function realHeaders(): Record<string, string | string[] | undefined> {
  return {
    host: '192.168.1.10:8003',
    'activation-version': '1',
    'device-id': MAC,
    'client-id': UUID,
    'user-agent': 'bread-compact-wifi/2.4.2',
    'accept-language': 'zh-CN',
    'content-type': 'application/json',
    'content-length': '1024',
  };
}

function expectInvalid(fn: () => unknown, field: string): void {
  const error = catchProtocolError(fn);
  expect(error.code).toBe('OTA_INVALID');
  expect(error.field).toBe(field);
  expect(error.message).toContain(field);
}

describe('parseOtaRequest', () => {
  it('accepts a realistic request (JSON text body, Node headers)', () => {
    const request = parseOtaRequest({ headers: realHeaders(), body: JSON.stringify(realBody()) });
    expect(request).toEqual({
      deviceId: MAC,
      clientId: UUID,
      activationVersion: '1',
      serialNumber: undefined,
      userAgent: 'bread-compact-wifi/2.4.2',
      language: 'zh-CN',
      board: 'bread-compact-wifi',
      version: '2.4.2',
      elfSha256: ELF,
      body: realBody(),
    });
  });

  it('accepts an object body, a byte body and fetch Headers', () => {
    const fromObject = parseOtaRequest({ headers: realHeaders(), body: realBody() });
    expect(fromObject.version).toBe('2.4.2');
    const bytes = new TextEncoder().encode(JSON.stringify(realBody()));
    const headers = new Headers({
      'Device-Id': MAC,
      'Client-Id': UUID,
      'Activation-Version': '2',
      'Serial-Number': 'SN0123456789ABCDEF0123456789ABCD',
      'User-Agent': 'bread-compact-wifi/2.4.2',
    });
    const request = parseOtaRequest({ headers, body: bytes });
    expect(request.activationVersion).toBe('2');
    expect(request.serialNumber).toBe('SN0123456789ABCDEF0123456789ABCD');
    expect(request.deviceId).toBe(MAC);
  });

  it('looks headers up case-insensitively and takes the first of repeated values', () => {
    const request = parseOtaRequest({
      headers: { 'DEVICE-ID': [MAC, '00:00:00:00:00:00'], 'Client-Id': UUID },
      body: realBody(),
    });
    expect(request.deviceId).toBe(MAC);
    expect(request.clientId).toBe(UUID);
  });

  it('tolerates what real devices vary in', () => {
    const body: Record<string, unknown> = { ...realBody(), psram_size: 8_388_608, extra: { a: 1 } };
    delete body.display;
    delete body.partition_table;
    body.minimum_free_heap_size = 123_456; // older firmware sent a number
    body.board = { type: 'bread-compact-wifi', name: 'bread-compact-wifi', mac: MAC }; // config mode
    const headers = realHeaders();
    delete headers['activation-version']; // older firmware did not send it
    delete headers['user-agent'];
    delete headers['accept-language'];
    const request = parseOtaRequest({ headers, body: JSON.stringify(body) });
    expect(request.activationVersion).toBe('1');
    expect(request.board).toBe('bread-compact-wifi'); // from body.board.name
    expect(request.language).toBe('zh-CN'); // from body.language
    expect(request.userAgent).toBeUndefined();
    expect(request.body.extra).toEqual({ a: 1 });
  });

  it('takes the board from User-Agent first', () => {
    const headers = { ...realHeaders(), 'user-agent': 'esp-box-3/2.4.2' };
    expect(parseOtaRequest({ headers, body: realBody() }).board).toBe('esp-box-3');
  });

  it('rejects a missing or malformed Device-Id', () => {
    const headers = realHeaders();
    delete headers['device-id'];
    expectInvalid(() => parseOtaRequest({ headers, body: realBody() }), 'Device-Id');
    for (const bad of ['A0:85:E3:F4:12:7C', 'a0-85-e3-f4-12-7c', 'a085e3f4127c', '']) {
      expectInvalid(
        () =>
          parseOtaRequest({ headers: { ...realHeaders(), 'device-id': bad }, body: realBody() }),
        'Device-Id',
      );
    }
  });

  it('rejects a missing or malformed Client-Id', () => {
    const headers = realHeaders();
    delete headers['client-id'];
    expectInvalid(() => parseOtaRequest({ headers, body: realBody() }), 'Client-Id');
    expectInvalid(
      () =>
        parseOtaRequest({
          headers: { ...realHeaders(), 'client-id': 'not-a-uuid' },
          body: realBody(),
        }),
      'Client-Id',
    );
  });

  it('rejects an unknown Activation-Version, and version 2 without Serial-Number', () => {
    expectInvalid(
      () =>
        parseOtaRequest({
          headers: { ...realHeaders(), 'activation-version': '3' },
          body: realBody(),
        }),
      'Activation-Version',
    );
    expectInvalid(
      () =>
        parseOtaRequest({
          headers: { ...realHeaders(), 'activation-version': '2' },
          body: realBody(),
        }),
      'Serial-Number',
    );
  });

  it('rejects a body that is not a JSON object', () => {
    for (const body of ['{"version":2', '', '[1,2]', 42, null, undefined]) {
      expectInvalid(() => parseOtaRequest({ headers: realHeaders(), body }), 'body');
    }
  });

  it('rejects a body without application or application.version', () => {
    const noApp: Record<string, unknown> = { ...realBody() };
    delete noApp.application;
    expectInvalid(
      () => parseOtaRequest({ headers: realHeaders(), body: noApp }),
      'body.application',
    );
    for (const version of [undefined, '', 242]) {
      const body = { ...realBody(), application: { ...realBody().application, version } };
      expectInvalid(
        () => parseOtaRequest({ headers: realHeaders(), body }),
        'body.application.version',
      );
    }
  });
});

describe('buildOtaRequestHeaders', () => {
  it('builds the firmware headers, lowercasing the MAC', () => {
    expect(
      buildOtaRequestHeaders({
        macAddress: 'A0:85:E3:F4:12:7C',
        uuid: UUID,
        board: 'bread-compact-wifi',
        version: '2.4.2',
        language: 'zh-CN',
      }),
    ).toEqual({
      'Activation-Version': '1',
      'Device-Id': MAC,
      'Client-Id': UUID,
      'User-Agent': 'bread-compact-wifi/2.4.2',
      'Accept-Language': 'zh-CN',
      'Content-Type': 'application/json',
    });
  });

  it('switches to Activation-Version 2 with a serial number, and round-trips', () => {
    const headers = buildOtaRequestHeaders({
      macAddress: MAC,
      uuid: UUID,
      board: 'bread-compact-wifi',
      version: '2.4.2',
      language: 'en-US',
      serialNumber: 'SN0123456789ABCDEF0123456789ABCD',
    });
    expect(headers['Activation-Version']).toBe('2');
    expect(headers['Serial-Number']).toBe('SN0123456789ABCDEF0123456789ABCD');
    const request = parseOtaRequest({ headers, body: realBody() });
    expect(request).toMatchObject({
      deviceId: MAC,
      clientId: UUID,
      activationVersion: '2',
      board: 'bread-compact-wifi',
      language: 'en-US',
    });
  });

  it('refuses a MAC that is not one', () => {
    expectInvalid(
      () =>
        buildOtaRequestHeaders({
          macAddress: 'nope',
          uuid: UUID,
          board: 'b',
          version: '1',
          language: 'en',
        }),
      'Device-Id',
    );
  });
});

// Hostile requests: OTA_INVALID or nothing, whatever comes in.

const headerValue = fc.oneof(
  anyText,
  fc.constantFrom(MAC, UUID, '1', '2', 'board/2.4.2', '/'.repeat(10_000)),
  fc.array(anyText, { maxLength: 2 }),
  fc.constant(undefined),
);
const headersArb = fc.record(
  {
    'device-id': headerValue,
    'client-id': headerValue,
    'activation-version': headerValue,
    'serial-number': headerValue,
    'user-agent': headerValue,
    'accept-language': headerValue,
  },
  { requiredKeys: [] },
);
const bodyArb = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.record(
    {
      application: fc.oneof(fc.record({ version: fc.jsonValue({ maxDepth: 1 }) }), fc.jsonValue()),
    },
    { requiredKeys: [] },
  ),
  anyText,
  fc.uint8Array({ maxLength: 100 }),
  fc.constant(
    `{"application":{"version":"1"},"board":${'['.repeat(100_000)}${']'.repeat(100_000)}}`,
  ),
);

describe('hostile OTA input', () => {
  it('parses any request into OTA_INVALID or a request, never anything else', () => {
    fc.assert(
      fc.property(headersArb, bodyArb, (headers, body) => {
        onlyProtocolErrors(() => parseOtaRequest({ headers, body }));
        onlyProtocolErrors(() =>
          parseOtaRequest({ headers: { ...realHeaders(), ...headers }, body }),
        );
      }),
      { seed: 42, numRuns: 500 },
    );
  });

  it('reads missing headers as missing, whatever a plain JS caller passes', () => {
    for (const headers of [null, undefined, 7, 'device-id']) {
      const input = { headers, body: '{}' } as unknown as Parameters<typeof parseOtaRequest>[0];
      expectInvalid(() => parseOtaRequest(input), 'Device-Id');
    }
  });
});
