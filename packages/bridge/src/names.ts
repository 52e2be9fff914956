/**
 * The names the bridge gives board tools, and back.
 *
 * Clients limit tool names: Anthropic's API (and so Claude Desktop) and Cursor accept
 * `^[a-zA-Z0-9_-]{1,64}$`, while board tools look like `self.audio_speaker.set_volume` and may in
 * principle hold any character (docs/protocol.md §3.2 puts no rule on names). The scheme:
 *
 * - `A-Z a-z 0-9 _` stand for themselves.
 * - `.` becomes `-` when the next character stands for itself or the name ends there.
 * - Every other code point (`-` itself, a `.` before another escaped character, anything
 *   else) becomes `--<hex>-`: two dashes, its code point in lowercase hex without leading
 *   zeros, and a closing dash.
 *
 * So `self.audio_speaker.set_volume` is `self-audio_speaker-set_volume`, `a-b` is `a--2d-b`
 * and `a..b` is `a--2e--b`. Read left to right, `--` always opens an escape and a lone `-` is a
 * `.`, so the escape is reversible; {@link parseToolName} also refuses every name the escape
 * would not have written, so each name has exactly one meaning.
 *
 * When the bridge serves more than one board, each name starts with the board's MAC in 12
 * lowercase hex digits and `__`: `f412fa100001__self-audio_speaker-set_volume`.
 *
 * A name longer than 64 characters (or an empty one) is cut to fit and ends with `---h` and
 * 16 hex digits of the SHA-256 of the device id and the tool name. The escape never writes
 * `---h` (three dashes are always an escape's closing dash and the next escape's opening
 * ones, followed by a hex digit), so such a name can be no other tool's plain name; it is not
 * parsed back: the bridge keeps a map from every name it serves to its board and tool anyway.
 */
import { createHash } from 'node:crypto';

/** The longest tool name Anthropic's API and Cursor accept. */
export const TOOL_NAME_MAX_LENGTH = 64;
/** Between a board's MAC and the tool when several boards are served. */
export const DEVICE_SEPARATOR = '__';
/** Marks a name cut to fit, before its hash. */
export const HASH_MARK = '---h';
const HASH_HEX_DIGITS = 16;

const MAC = /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/;
const PREFIX = /^([0-9a-f]{12})__/;

function standsForItself(char: string | undefined): boolean {
  if (char === undefined || char.length !== 1) return false;
  const c = char.charCodeAt(0);
  return (
    (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f
  );
}

/** The escape alone: a board tool name in `[A-Za-z0-9_-]*`, reversibly. */
export function escapeToolName(tool: string): string {
  const chars = Array.from(tool); // by code point: a surrogate pair is one escape
  let out = '';
  for (let i = 0; i < chars.length; i++) {
    const char = chars[i] as string;
    if (standsForItself(char)) out += char;
    else if (char === '.' && (i + 1 === chars.length || standsForItself(chars[i + 1]))) out += '-';
    else out += `--${(char.codePointAt(0) as number).toString(16)}-`;
  }
  return out;
}

/** The inverse of {@link escapeToolName}; undefined for text it would not have written. */
export function unescapeToolName(text: string): string | undefined {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const char = text[i] as string;
    if (standsForItself(char)) {
      out += char;
      i++;
    } else if (char === '-' && text[i + 1] === '-') {
      const end = text.indexOf('-', i + 2);
      const hex = end < 0 ? '' : text.slice(i + 2, end);
      if (!/^[0-9a-f]{1,6}$/.test(hex)) return undefined;
      const codePoint = Number.parseInt(hex, 16);
      if (codePoint > 0x10ffff) return undefined;
      out += String.fromCodePoint(codePoint);
      i = end + 1;
    } else if (char === '-') {
      out += '.';
      i++;
    } else return undefined;
  }
  // Non-canonical spellings (`--41-` for `A`, `--2e-` where `-` would do, leading zeros)
  // would give one tool two names: only the escape's own spelling is a name.
  return escapeToolName(out) === text ? out : undefined;
}

function hashed(head: string, deviceId: string, tool: string): string {
  const digest = createHash('sha256')
    .update(`${deviceId}\n${tool}`, 'utf8')
    .digest('hex')
    .slice(0, HASH_HEX_DIGITS);
  const room = TOOL_NAME_MAX_LENGTH - HASH_MARK.length - HASH_HEX_DIGITS;
  return `${head.slice(0, room)}${HASH_MARK}${digest}`;
}

/**
 * The name a board's tool is served under: the escaped tool name, after the board's MAC and
 * `__` when `many` boards are served; cut and hashed when longer than 64 characters. It always
 * matches `^[a-zA-Z0-9_-]{1,64}$`, what clients accept.
 */
export function toolNameFor(deviceId: string, tool: string, many: boolean): string {
  const escaped = escapeToolName(tool);
  if (many && !MAC.test(deviceId)) {
    // The server only admits MACs as Device-Id; anything else still gets a unique name.
    return hashed(`${escapeToolName(deviceId)}${DEVICE_SEPARATOR}${escaped}`, deviceId, tool);
  }
  const name = many ? `${deviceId.replaceAll(':', '')}${DEVICE_SEPARATOR}${escaped}` : escaped;
  if (escaped.length === 0 || name.length > TOOL_NAME_MAX_LENGTH)
    return hashed(name, many ? deviceId : '', tool);
  return name;
}

/**
 * The board and tool behind a name {@link toolNameFor} wrote (`many` as it was given there;
 * `deviceId` is set exactly when `many`); undefined for a hashed name or one it never writes.
 */
export function parseToolName(
  name: string,
  many: boolean,
): { deviceId?: string; tool: string } | undefined {
  let parsed: { deviceId?: string; tool: string } | undefined;
  if (!many) {
    const tool = unescapeToolName(name);
    parsed = tool === undefined ? undefined : { tool };
  } else {
    const prefix = PREFIX.exec(name);
    const tool = prefix === null ? undefined : unescapeToolName(name.slice(prefix[0].length));
    if (prefix !== null && tool !== undefined)
      parsed = { deviceId: (prefix[1] as string).replace(/(..)(?!$)/g, '$1:'), tool };
  }
  // Only what toolNameFor writes (a hashed or over-long name is not parsed back).
  if (parsed === undefined || toolNameFor(parsed.deviceId ?? '', parsed.tool, many) !== name)
    return undefined;
  return parsed;
}
