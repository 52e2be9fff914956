/**
 * Who holds a serial port open, where the OS can tell: on Linux, the processes whose
 * `/proc/<pid>/fd` links point at the port's device node (what `fuser` and `lsof` read), named
 * by `/proc/<pid>/comm`. Best effort and bounded: processes this user may not look into are
 * skipped, and the scan stops after a fixed number of processes, links and holders, so a busy
 * port's error is not held up by a host with many processes.
 */
import { readdirSync, readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { join } from 'node:path';

export interface PortHolder {
  readonly pid: number;
  /** `/proc/<pid>/comm`, when readable (`ModemManager`, `minicom`). */
  readonly command?: string;
}

export interface PortHoldersOptions {
  /** Default `/proc`; a test's fake tree. Given, it is read whatever the platform. */
  readonly procRoot?: string;
  /** Default `process.platform`; only Linux has a `/proc` to read. */
  readonly platform?: NodeJS.Platform;
}

/** Processes looked into, links read in all, and holders named, at most. */
const MAX_PROCESSES = 4096;
const MAX_LINKS = 65_536;
const MAX_HOLDERS = 8;

function tryRead<T>(read: () => T): T | undefined {
  try {
    return read();
  } catch {
    return undefined;
  }
}

/**
 * The processes holding `devicePath` open (a link such as `/dev/serial/by-id/...` counts as
 * its target). Empty where the OS cannot tell (not Linux) or nobody is seen.
 */
export function portHolders(devicePath: string, options: PortHoldersOptions = {}): PortHolder[] {
  const platform = options.platform ?? process.platform;
  if (options.procRoot === undefined && platform !== 'linux') return [];
  if (!devicePath.startsWith('/')) return [];
  const root = options.procRoot ?? '/proc';
  const targets = new Set([devicePath, tryRead(() => realpathSync(devicePath)) ?? devicePath]);
  const pids = (tryRead(() => readdirSync(root)) ?? []).filter((name) => /^\d+$/.test(name));
  const holders: PortHolder[] = [];
  let links = 0;
  for (const pid of pids.slice(0, MAX_PROCESSES)) {
    if (holders.length >= MAX_HOLDERS || links >= MAX_LINKS) break;
    // Another user's process: its fd directory is not ours to read (EACCES), so it is skipped.
    const fds = tryRead(() => readdirSync(join(root, pid, 'fd'))) ?? [];
    for (const fd of fds) {
      if (++links > MAX_LINKS) break;
      const target = tryRead(() => readlinkSync(join(root, pid, 'fd', fd)));
      if (target === undefined || !targets.has(target)) continue;
      const command = tryRead(() => readFileSync(join(root, pid, 'comm'), 'utf8').trim());
      holders.push({ pid: Number(pid), ...(command ? { command } : {}) });
      break;
    }
  }
  return holders;
}

/** `ModemManager (pid 812), minicom (pid 4410)`; this process is named as such. */
export function describeHolders(holders: readonly PortHolder[]): string {
  return holders
    .map((holder) => {
      const self = holder.pid === process.pid ? ', this process' : '';
      return `${holder.command ?? 'a process'} (pid ${holder.pid}${self})`;
    })
    .join(', ');
}
