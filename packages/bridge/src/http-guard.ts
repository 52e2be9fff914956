/**
 * Who may talk to the bridge over HTTP, as data: DNS-rebinding protection (the Host and
 * Origin a browser sends must name this machine, as the MCP transport spec asks of local
 * servers) and the optional bearer token.
 */
import { createHash, timingSafeEqual } from 'node:crypto';

/** The names of this machine a local client uses (hostnames as `URL.hostname` writes them). */
export const LOOPBACK_HOSTNAMES: readonly string[] = ['localhost', '127.0.0.1', '[::1]'];

const WILDCARDS = new Set(['0.0.0.0', '::', '[::]']);

function hostnameOf(host: string): string | undefined {
  try {
    return new URL(`http://${host}`).hostname.toLowerCase();
  } catch {
    return undefined;
  }
}

/**
 * The hostnames accepted in `Host`: loopback names, the bound address itself (a literal
 * address no attacker's DNS name can stand for), and `allowedHosts`; `*` accepts any.
 */
export function allowedHostnames(
  bindHost: string,
  allowedHosts: readonly string[] = [],
): Set<string> {
  const names = new Set(LOOPBACK_HOSTNAMES);
  const bound = hostnameOf(
    bindHost.includes(':') && !bindHost.startsWith('[') ? `[${bindHost}]` : bindHost,
  );
  if (bound !== undefined && !WILDCARDS.has(bound)) names.add(bound);
  for (const entry of allowedHosts) {
    if (entry === '*') names.add('*');
    const name = hostnameOf(entry);
    if (name !== undefined) names.add(name);
  }
  return names;
}

/** Why a request's Host or Origin is refused (403), or undefined when both may pass. */
export function refuseHostOrOrigin(
  headers: { host?: string | undefined; origin?: string | undefined },
  hostnames: ReadonlySet<string>,
  allowedOrigins: readonly string[] = [],
): string | undefined {
  if (!hostnames.has('*')) {
    if (headers.host === undefined) return 'Missing Host header';
    const host = hostnameOf(headers.host);
    if (host === undefined || !hostnames.has(host)) return `Invalid Host: ${headers.host}`;
  }
  const origin = headers.origin;
  if (origin === undefined || allowedOrigins.includes('*')) return undefined;
  if (allowedOrigins.includes(origin)) return undefined;
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return `Invalid Origin: ${origin}`;
  }
  // A page served from this machine may connect; any other site may not.
  if (
    (url.protocol === 'http:' || url.protocol === 'https:') &&
    LOOPBACK_HOSTNAMES.includes(url.hostname)
  )
    return undefined;
  return `Invalid Origin: ${origin}`;
}

/** Whether `Authorization` carries the token (compared in constant time). */
export function bearerMatches(authorization: string | undefined, token: string): boolean {
  const match = /^Bearer +(.+)$/i.exec(authorization ?? '');
  if (match === null) return false;
  const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();
  return timingSafeEqual(digest((match[1] as string).trim()), digest(token));
}
