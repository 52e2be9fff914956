import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FirmwareError } from './errors.js';
import type { NvsEntry } from './nvs.js';
import { readNvsPartition, writeNvsPartition } from './nvs.js';
import { formatNvsCsv, parseNvsCsv } from './nvs-csv.js';

const here = dirname(fileURLToPath(import.meta.url));
const nvsDir = resolve(here, '../../../fixtures/corpus/nvs');
const text = (name: string): string => readFileSync(join(nvsDir, name), 'utf8');

function errorOf(run: () => unknown): FirmwareError {
  try {
    run();
  } catch (error) {
    if (error instanceof FirmwareError) return error;
    throw error;
  }
  throw new Error('expected a FirmwareError');
}

const HEADER = 'key,type,encoding,value\n';

describe('parseNvsCsv', () => {
  it('reads the provisioning fixture', () => {
    expect(parseNvsCsv(text('provision.csv'))).toEqual([
      { namespace: 'wifi', key: 'ssid', type: 'string', value: 'rig-lab' },
      { namespace: 'wifi', key: 'password', type: 'string', value: 's3cret-pass-123' },
      {
        namespace: 'wifi',
        key: 'ota_url',
        type: 'string',
        value: 'http://192.168.1.50:8003/xiaozhi/ota/',
      },
      {
        namespace: 'board',
        key: 'uuid',
        type: 'string',
        value: '4b0d6c2e-8a47-4f0e-9a53-2d3f1c9b7e11',
      },
      { namespace: 'audio', key: 'output_volume', type: 'i32', value: 70 },
    ]);
  });

  it('reads every integer type of the multipage fixture, u64/i64 as bigint', () => {
    const entries = parseNvsCsv(text('multipage.csv'));
    expect(entries).toHaveLength(41);
    expect(entries.slice(-6)).toEqual([
      { namespace: 'display', key: 'brightness', type: 'i32', value: -1 },
      { namespace: 'display', key: 'counter', type: 'u32', value: 4000000000 },
      { namespace: 'display', key: 'small', type: 'u16', value: 65535 },
      { namespace: 'display', key: 'neg16', type: 'i16', value: -32768 },
      { namespace: 'display', key: 'big', type: 'i64', value: -9000000000n },
      { namespace: 'display', key: 'ubig', type: 'u64', value: 18000000000000000000n },
    ]);
    const byKey = new Map(entries.map((e) => [`${e.namespace}/${e.key}`, e]));
    expect(byKey.get('wifi/max_tx_power')).toEqual({
      namespace: 'wifi',
      key: 'max_tx_power',
      type: 'i8',
      value: -4,
    });
    expect(byKey.get('wifi/remember_bssid')?.value).toBe(1);
    expect(byKey.get('display/ubig')?.value).toBe(18000000000000000000n);
    expect(byKey.get('display/big')?.value).toBe(-9000000000n);
    expect(String(byKey.get('assets/download_url')?.value)).toHaveLength(1532);
  });

  it('handles quotes, commas, newlines, comments, blank lines, CRLF and a BOM', () => {
    const csv =
      '\ufeffkey,type,encoding,value\r\n' +
      '# a comment, with commas\r\n' +
      '\r\n' +
      'wifi,namespace,,\r\n' +
      'ssid,data,string,"my net, 5 GHz"\r\n' +
      'password,data,string,"say ""hi"""\r\n' +
      'motd,data,string,"line 1\r\nline 2"\r\n' +
      '  \n' +
      'plain,data,string,a "quoted" word\n' +
      '"#hash",data,string,\n' +
      'last,data,u8,7';
    expect(parseNvsCsv(csv)).toEqual([
      { namespace: 'wifi', key: 'ssid', type: 'string', value: 'my net, 5 GHz' },
      { namespace: 'wifi', key: 'password', type: 'string', value: 'say "hi"' },
      { namespace: 'wifi', key: 'motd', type: 'string', value: 'line 1\r\nline 2' },
      { namespace: 'wifi', key: 'plain', type: 'string', value: 'a "quoted" word' },
      { namespace: 'wifi', key: '#hash', type: 'string', value: '' },
      { namespace: 'wifi', key: 'last', type: 'u8', value: 7 },
    ]);
  });

  it('decodes binary, hex2bin and base64 values as blobs', () => {
    const csv = `${HEADER}n,namespace,,\nraw,data,binary,AB\nhex,data,hex2bin, 00ff10 \nb64,data,base64,AAEC/w==\nempty,data,hex2bin,\n`;
    expect(parseNvsCsv(csv)).toEqual([
      { namespace: 'n', key: 'raw', type: 'blob', value: new Uint8Array([0x41, 0x42]) },
      { namespace: 'n', key: 'hex', type: 'blob', value: new Uint8Array([0, 0xff, 0x10]) },
      { namespace: 'n', key: 'b64', type: 'blob', value: new Uint8Array([0, 1, 2, 0xff]) },
      { namespace: 'n', key: 'empty', type: 'blob', value: new Uint8Array() },
    ]);
  });

  it('accepts the header columns in any order and reuses a repeated namespace', () => {
    const csv =
      'value,key,encoding,type\n,a,,namespace\n1,x,u8,data\n,b,,namespace\n2,x,u8,data\n,a,,namespace\n3,y,u8,data\n';
    expect(parseNvsCsv(csv).map((e) => `${e.namespace}/${e.key}=${String(e.value)}`)).toEqual([
      'a/x=1',
      'b/x=2',
      'a/y=3',
    ]);
  });

  it('reads file rows through readFile', () => {
    const files: Record<string, Uint8Array> = {
      'cert.der': new Uint8Array([0x30, 0x82, 0]),
      'motd.txt': new Uint8Array(Buffer.from('hello\n')),
      'num.txt': new Uint8Array(Buffer.from(' 42\n')),
    };
    const readFile = (path: string): Uint8Array => {
      const found = files[path];
      if (found === undefined) throw new Error(`ENOENT ${path}`);
      return found;
    };
    const csv = `${HEADER}n,namespace,,\ncert,file,binary,cert.der\nmotd,file,string,motd.txt\nnum,file,u16,num.txt\n`;
    expect(parseNvsCsv(csv, { readFile })).toEqual([
      { namespace: 'n', key: 'cert', type: 'blob', value: files['cert.der'] },
      { namespace: 'n', key: 'motd', type: 'string', value: 'hello\n' },
      { namespace: 'n', key: 'num', type: 'u16', value: 42 },
    ]);
    expect(errorOf(() => parseNvsCsv(csv)).message).toBe(
      'CSV line 3, column 18: file rows need the readFile option',
    );
    const missing = `${HEADER}n,namespace,,\nx,file,binary,nope.bin\n`;
    const error = errorOf(() => parseNvsCsv(missing, { readFile }));
    expect(error.message).toMatch(/^CSV line 3, column 15: cannot read "nope.bin"/);
    expect(error.cause).toBeInstanceOf(Error);
  });

  it.each([
    ['', 1, 1, /no header row/],
    ['key,type,value\nx,namespace,\n', 1, 1, /no "encoding" column/],
    [
      `${HEADER}n,namespace,,\nk,blob,string,x\n`,
      3,
      3,
      /type "blob" is not namespace, data or file/,
    ],
    [`${HEADER}n,namespace,,\nk,data,float,1\n`, 3, 8, /encoding "float" is not one of/],
    [`${HEADER}k,data,u8,1\n`, 2, 1, /a data row before any namespace row/],
    [
      `${HEADER}n,namespace,,\nsixteen_chars_xx,data,u8,1\n`,
      3,
      1,
      /key "sixteen_chars_xx" is 16 bytes/,
    ],
    [`${HEADER}sixteen_chars_xx,namespace,,\n`, 2, 1, /namespace "sixteen_chars_xx" is 16 bytes/],
    [`${HEADER}n,namespace,,\n,data,u8,1\n`, 3, 1, /empty key/],
    [`${HEADER}n,namespace,,\nk,data,u8,256\n`, 3, 11, /256 is out of range for u8 \(0\.\.255\)/],
    [`${HEADER}n,namespace,,\nk,data,i64,-9223372036854775809\n`, 3, 12, /out of range for i64/],
    [
      `${HEADER}n,namespace,,\nk,data,i32,0x10\n`,
      3,
      12,
      /i32 value "0x10" is not a decimal integer/,
    ],
    [`${HEADER}n,namespace,,\nk,data,u8,\n`, 3, 11, /u8 value "" is not a decimal integer/],
    [`${HEADER}n,namespace,,\nk,data,u8\n`, 3, 11, /u8 value "" is not a decimal integer/],
    [`${HEADER}n,namespace,,\nk,data,hex2bin,abc\n`, 3, 16, /odd number of digits/],
    [`${HEADER}n,namespace,,\nk,data,hex2bin,zz\n`, 3, 16, /not a hex digit/],
    [`${HEADER}n,namespace,,\nk,data,base64,abc\n`, 3, 15, /not valid base64/],
    [
      `${HEADER}n,namespace,,\nk,data,string,a,b\n`,
      3,
      17,
      /row has 5 fields, the header 4; quote values/,
    ],
    [`${HEADER}n,namespace,,\nk,data,string,"abc\n`, 3, 15, /unterminated quoted value/],
    [`${HEADER}n,namespace,,\nk,data,string,"abc"d\n`, 3, 20, /after a closing quote/],
    [
      `${HEADER}n,namespace,,\na,data,u8,1\n\nb,data,u8,1\na,data,u8,2\n`,
      6,
      1,
      /duplicate key "a" in namespace "n" \(first on line 3\)/,
    ],
    [
      `${HEADER}n,namespace,,\nk,data,string,${'x'.repeat(4000)}\n`,
      3,
      15,
      /string is 4001 bytes with its NUL/,
    ],
  ])('names the line and column of a bad row (%#)', (csv, line, column, reason) => {
    const error = errorOf(() => parseNvsCsv(csv));
    expect(error.code).toBe('NVS_INVALID');
    expect(error.message).toMatch(new RegExp(`^CSV line ${line}, column ${column}: `));
    expect(error.message).toMatch(reason);
  });

  it('counts lines inside quoted values', () => {
    const csv = `${HEADER}n,namespace,,\nmotd,data,string,"a\nb\nc"\nk,data,u8,x\n`;
    expect(errorOf(() => parseNvsCsv(csv)).message).toMatch(/^CSV line 6, column 11: /);
  });

  it('rejects a 255th namespace', () => {
    const rows = Array.from({ length: 255 }, (_, i) => `ns${i},namespace,,\nk,data,u8,1\n`).join(
      '',
    );
    expect(errorOf(() => parseNvsCsv(HEADER + rows)).message).toMatch(
      /^CSV line 510, column 1: more than 254 namespaces/,
    );
  });
});

describe('formatNvsCsv', () => {
  it('writes namespace rows where the namespace changes, quoting where needed', () => {
    const entries: NvsEntry[] = [
      { namespace: 'wifi', key: 'ssid', type: 'string', value: 'my net, "5 GHz"' },
      { namespace: 'wifi', key: '#k', type: 'u8', value: 1 },
      { namespace: 'blobs', key: 'b', type: 'blob', value: new Uint8Array([0, 0xab]) },
      { namespace: 'blobs', key: 'big', type: 'u64', value: 18446744073709551615n },
    ];
    expect(formatNvsCsv(entries)).toBe(
      'key,type,encoding,value\n' +
        'wifi,namespace,,\n' +
        'ssid,data,string,"my net, ""5 GHz"""\n' +
        '"#k",data,u8,1\n' +
        'blobs,namespace,,\n' +
        'b,data,hex2bin,00ab\n' +
        'big,data,u64,18446744073709551615\n',
    );
    expect(parseNvsCsv(formatNvsCsv(entries))).toEqual(entries);
  });

  it('rejects an entry the writer would reject', () => {
    expect(
      errorOf(() => formatNvsCsv([{ namespace: 'n', key: 'k', type: 'u8', value: 300 }])).code,
    ).toBe('NVS_INVALID');
  });

  it('regenerates the fixtures through CSV text', () => {
    for (const [csv, bin] of [
      ['provision.csv', 'provision-16k.bin'],
      ['multipage.csv', 'multipage-24k.bin'],
    ] as const) {
      const want = new Uint8Array(readFileSync(join(nvsDir, bin)));
      const again = parseNvsCsv(formatNvsCsv(readNvsPartition(want)));
      expect(again).toEqual(parseNvsCsv(text(csv)));
      expect(Buffer.from(writeNvsPartition(again, want.length)).equals(Buffer.from(want))).toBe(
        true,
      );
    }
  });

  it('parses back what it formats (property)', () => {
    const name = fc
      .string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 15 })
      .filter((s) => !s.includes('\0'));
    const value = fc.oneof(
      fc.record({ type: fc.constant('u8' as const), value: fc.integer({ min: 0, max: 255 }) }),
      fc.record({
        type: fc.constant('i32' as const),
        value: fc.integer({ min: -0x80000000, max: 0x7fffffff }),
      }),
      fc.record({
        type: fc.constant('i64' as const),
        value: fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }),
      }),
      fc.record({
        type: fc.constant('string' as const),
        value: fc.string({ unit: 'grapheme', maxLength: 60 }).filter((s) => !s.includes('\0')),
      }),
      fc.record({ type: fc.constant('blob' as const), value: fc.uint8Array({ maxLength: 40 }) }),
    );
    const entries = fc.uniqueArray(
      fc
        .tuple(name, name, value)
        .map(([namespace, key, typed]): NvsEntry => ({ namespace, key, ...typed })),
      { maxLength: 20, selector: (e) => `${e.namespace}\0${e.key}` },
    );
    fc.assert(
      fc.property(entries, (list) => {
        expect(parseNvsCsv(formatNvsCsv(list))).toEqual(list);
      }),
      { numRuns: 200 },
    );
  });
});
