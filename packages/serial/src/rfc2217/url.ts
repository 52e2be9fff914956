/**
 * How a port on another host is named: `rfc2217://host:port`, the URL pyserial, esptool and
 * ESP-IDF's `esp_rfc2217_server` use. Pure text rules, no sockets.
 */
import { SerialError } from '../errors.js';
import type { PortKind } from '../port-info.js';

/** The scheme, lower case; matched without regard to case. */
export const RFC2217_SCHEME = 'rfc2217://';

/** A parsed `rfc2217://` URL. */
export interface Rfc2217Url {
  /** A host name (lower case), an IPv4 address, or an IPv6 address without its brackets. */
  readonly host: string;
  readonly port: number;
  /**
   * pyserial's `?ign_set_control`: do not wait for the server's answer to SET-CONTROL (a line
   * change, flow control). ESP-IDF documents `rfc2217://host:port?ign_set_control` for
   * `esp_rfc2217_server`, which answers none of them (its `EspPortManager` returns without
   * acknowledging DTR/RTS changes it replays itself).
   */
  readonly ignoreSetControl: boolean;
}

/** Whether `text` names an RFC 2217 port (its scheme, whatever the rest). */
export function isRfc2217Url(text: string): boolean {
  return text.trim().toLowerCase().startsWith(RFC2217_SCHEME);
}

function invalid(text: string, why: string): SerialError {
  return new SerialError(
    'OPTION_INVALID',
    `${JSON.stringify(text)} is not an RFC 2217 port: ${why} (expected rfc2217://<host>:<port>, e.g. rfc2217://192.168.1.20:4000, or rfc2217://[::1]:4000)`,
  );
}

const HOST_NAME = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?$/;
const IPV6 = /^[0-9a-f:.]+(%[a-z0-9._-]+)?$/;

/**
 * `rfc2217://host:port[/][?ign_set_control]`: the scheme in any case, a host name, an IPv4
 * address or an IPv6 address in brackets, and a port 1-65535. pyserial's `?ign_set_control`
 * is the one option taken; its others (`logging`, `poll_modem`, `timeout`) and anything else
 * are refused, as are user info, a path and a fragment. Throws `OPTION_INVALID`.
 */
export function parseRfc2217Url(text: string): Rfc2217Url {
  const trimmed = text.trim();
  if (!isRfc2217Url(trimmed)) throw invalid(text, 'it does not start with rfc2217://');
  let rest = trimmed.slice(RFC2217_SCHEME.length);
  if (rest.includes('#')) throw invalid(text, 'a fragment (#...) is not allowed');
  let ignoreSetControl = false;
  const query = rest.indexOf('?');
  if (query >= 0) {
    for (const option of rest.slice(query + 1).split('&')) {
      if (option === '') continue;
      if (option.toLowerCase() === 'ign_set_control') ignoreSetControl = true;
      else throw invalid(text, `unknown option ${JSON.stringify(option)} (only ign_set_control)`);
    }
    rest = rest.slice(0, query);
  }
  if (rest.endsWith('/')) rest = rest.slice(0, -1);
  if (rest.includes('/')) throw invalid(text, 'it has a path after host:port');
  if (rest.includes('@')) throw invalid(text, 'user info (user@) is not allowed');
  let host: string;
  let portText: string | undefined;
  if (rest.startsWith('[')) {
    const close = rest.indexOf(']');
    if (close < 0) throw invalid(text, 'the IPv6 address has no closing ]');
    host = rest.slice(1, close).toLowerCase();
    const after = rest.slice(close + 1);
    if (after !== '' && !after.startsWith(':'))
      throw invalid(text, 'expected :<port> after the IPv6 address');
    portText = after === '' ? undefined : after.slice(1);
    if (!IPV6.test(host) || !host.includes(':'))
      throw invalid(text, `${JSON.stringify(host)} is not an IPv6 address`);
  } else {
    const colon = rest.lastIndexOf(':');
    if (colon >= 0 && rest.indexOf(':') !== colon)
      throw invalid(text, 'an IPv6 address goes in brackets');
    host = (colon < 0 ? rest : rest.slice(0, colon)).toLowerCase();
    portText = colon < 0 ? undefined : rest.slice(colon + 1);
    if (host === '') throw invalid(text, 'the host is missing');
    if (!HOST_NAME.test(host)) throw invalid(text, `${JSON.stringify(host)} is not a host name`);
  }
  if (portText === undefined || portText === '') throw invalid(text, 'the port is missing');
  if (!/^\d{1,5}$/.test(portText))
    throw invalid(text, `port ${JSON.stringify(portText)} is not a number`);
  const port = Number(portText);
  if (port < 1 || port > 65_535) throw invalid(text, `port ${port} is not between 1 and 65535`);
  return { host, port, ignoreSetControl };
}

/** The URL in its one spelling: lower-case scheme and host, IPv6 in brackets, options kept. */
export function formatRfc2217Url(url: Rfc2217Url): string {
  const host = url.host.includes(':') ? `[${url.host}]` : url.host;
  return `${RFC2217_SCHEME}${host}:${url.port}${url.ignoreSetControl ? '?ign_set_control' : ''}`;
}

/** How every refusal line of `xiaozhi-mcp port serve` starts (it then closes the connection). */
export const SERVE_REFUSAL_PREFIX = 'xiaozhi-mcp port serve:';

/**
 * What `xiaozhi-mcp port serve` sends a second client before closing: a line starting so, then
 * who it serves. The client reports it as `PORT_BUSY`.
 */
export const BUSY_REFUSAL_PREFIX = 'xiaozhi-mcp port serve: busy:';

/** The product words that start the signature of `xiaozhi-mcp port serve`. */
export const SERVE_SIGNATURE_PREFIX = 'xiaozhi-mcp port serve';

const KINDS: readonly PortKind[] = ['usb-uart', 'usb-serial-jtag', 'unknown'];

/**
 * What the SIGNATURE text of `xiaozhi-mcp port serve` says about the port it shares:
 * `xiaozhi-mcp port serve port=<label> kind=<usb-uart|usb-serial-jtag|unknown>`, space-separated
 * `key=value` tokens after the product words. Another server's signature (free text, RFC 2217)
 * says nothing we can rely on: `{}`.
 */
export function parseRfc2217Signature(text: string): { kind?: PortKind; label?: string } {
  const trimmed = text.trim();
  if (!trimmed.startsWith(SERVE_SIGNATURE_PREFIX)) return {};
  const result: { kind?: PortKind; label?: string } = {};
  for (const token of trimmed.slice(SERVE_SIGNATURE_PREFIX.length).split(/\s+/)) {
    const eq = token.indexOf('=');
    if (eq <= 0) continue;
    const key = token.slice(0, eq);
    const value = token.slice(eq + 1);
    if (key === 'port' && value !== '') result.label = value;
    if (key === 'kind') {
      const kind = KINDS.find((k) => k === value);
      if (kind !== undefined) result.kind = kind;
    }
  }
  return result;
}
