/**
 * Every device the server has seen, with its current session and tools. A device is known
 * from its first OTA check or connection (by Device-Id) and keeps its record across
 * reconnects; each new session is initialised again and its tools refreshed.
 *
 * Identity: a device is pinned to the first `Client-Id` it came with (the uuid the board keeps
 * in NVS, docs/protocol.md §8); nothing with another Client-Id can act as it until the
 * operator forgets it. Memory is bounded: offline devices are evicted by age and by count (a
 * connected one never), with their pins and the secrets issued to them (device-credentials.ts),
 * and identical tool lists are shared (tool-lists.ts) and released with the last record that
 * holds them.
 */
import { EventEmitter } from 'node:events';
import type { PageReport, ToolResult } from '@xiaozhi-mcp/protocol';
import { clip, MAX_DEVICE_JSON_DEPTH, nestsWithin } from './device-bounds.js';
import { DeviceCredentials } from './device-credentials.js';
import type { DeviceTransport } from './device-link.js';
import type { DeviceSession, InitializeResult, RequestOptions } from './device-session.js';
import { ServerError } from './errors.js';
import { sameSecret } from './secret.js';
import { type DeviceTool, SharedValues, ToolLists, toolListKey } from './tool-lists.js';

export interface OtaCheckRecord {
  readonly at: string;
  readonly deviceId: string;
  readonly clientId: string;
  readonly board: string | undefined;
  readonly version: string;
  readonly elfSha256: string | undefined;
  readonly remoteAddress: string | undefined;
  /** The firmware version offered in the reply, if any. */
  readonly offered: string | undefined;
  /** The request body as received: the board's system info (`minimum_free_heap_size`, ...). */
  readonly body: Readonly<Record<string, unknown>>;
}

export interface DeviceRecord {
  readonly deviceId: string;
  /** The Client-Id the device is pinned to: the first it came with. */
  readonly clientId: string;
  board: string | undefined;
  version: string | undefined;
  session: DeviceSession | undefined;
  /** How the board is connected, or was on its last session; undefined before any session. */
  transport: DeviceTransport | undefined;
  /** Initialised and tools listed on the current session. */
  ready: boolean;
  /** Frozen, and shared by the records whose boards sent the same. */
  initialize: InitializeResult | undefined;
  tools: readonly DeviceTool[];
  /**
   * Page reports of the last plain and user-tool walks (the firmware's budget rule); frozen, and
   * shared by the records that have the same.
   */
  pages: { readonly plain: readonly PageReport[]; readonly withUserTools: readonly PageReport[] };
  /** Breaches of the firmware's paging rule seen in the last walks. */
  pageViolations: readonly string[];
  lastOtaCheck: OtaCheckRecord | undefined;
  connectedAt: string | undefined;
  disconnectedAt: string | undefined;
  sessions: number;
  /** Why the last session failed to become ready, if it did. */
  lastError: string | undefined;
  /** The serial number the device proved it holds the key of (opt-in activation), if any. */
  activatedSerial: string | undefined;
}

/** A device hello the gateway refused (or never got): no session was opened. */
export interface HelloRefusal {
  readonly at: string;
  readonly deviceId: string;
  readonly clientId: string;
  /** `Protocol-Version` of the upgrade request. */
  readonly protocolVersion: number;
  /** The first frame as received (undefined when none came, or it was binary). */
  readonly text: string | undefined;
  readonly reason: string;
}

/** Where preparing a new session failed: its `initialize`, or its `tools/list` walks. */
export type SessionStage = 'initialize' | 'tools';

export interface RegistryEvents {
  connected: [DeviceRecord];
  ready: [DeviceRecord];
  'tools-changed': [DeviceRecord];
  disconnected: [DeviceRecord, reason: string];
  'ota-check': [OtaCheckRecord];
  /** The device's hello was refused: the connection was closed before any session. */
  'hello-refused': [HelloRefusal];
  /** A connected session could not be made ready; `lastError` says why. */
  'session-failed': [DeviceRecord, stage: SessionStage, error: Error];
  /** The device was forgotten (by the operator, or evicted): its record, token and pin are gone. */
  forgotten: [deviceId: string, reason: string];
}

/** Where the registry reports what it must not throw (a listener that failed). */
export interface RegistryLogger {
  error(object: Record<string, unknown>, message: string): void;
}

export interface RegistryOptions {
  readonly vision?: { url: string; token?: string };
  /** How many OTA checks to keep. */
  readonly otaHistory?: number;
  /** Most device records kept; offline devices are evicted longest-offline first. Default 10,000. */
  readonly maxDevices?: number;
  /** An offline device is forgotten after this long without activity; 0: never. Default 24 h. */
  readonly offlineDeviceTtlMs?: number;
  /** Default: one line on stderr. */
  readonly logger?: RegistryLogger;
}

/** Most paging-rule breaches kept from a device's last walks. */
const MAX_PAGE_VIOLATIONS = 32;

/** What the registry keeps of a device besides its public record. */
interface Entry {
  readonly record: DeviceRecord;
  /** Last activity (OTA check, connection, disconnection), `Date.now()`. */
  seenAt: number;
  /** Key of its shared tool list in `#toolLists`. */
  toolsKey: string | undefined;
}

const DEFAULT_MAX_DEVICES = 10_000;
/** Most board names, versions and ELF digests interned, and the longest. */
const MAX_INTERNED = 256;
const MAX_INTERNED_CHARS = 128;
/** A new record's empty page reports and breaches, shared. */
const NO_PAGES = Object.freeze({ plain: Object.freeze([]), withUserTools: Object.freeze([]) });
const NO_VIOLATIONS: readonly string[] = Object.freeze([]);
const DEFAULT_OFFLINE_TTL_MS = 24 * 60 * 60 * 1000;
const STDERR_LOGGER: RegistryLogger = {
  error: (object, message) =>
    process.stderr.write(`xiaozhi-mcp registry: ${message}: ${String(object.err)}\n`),
};

export class DeviceRegistry extends EventEmitter<RegistryEvents> {
  /** In order of last activity, oldest first: eviction walks it from the front. */
  readonly #devices = new Map<string, Entry>();
  readonly #otaChecks: OtaCheckRecord[] = [];
  readonly #toolLists = new ToolLists();
  /** `initialize` results, page reports and breaches as boards of one build send them alike. */
  readonly #shared = new SharedValues();
  /** Board names, versions and ELF digests as boards of one build send them, one flat copy each. */
  readonly #interned = new Map<string, string>();
  /** The entry being dropped while its session closes: no longer in `#devices`. */
  #dropping: Entry | undefined;
  /** Every session's 'closed' listener, called with the session as `this`: no closure per session. */
  readonly #onSessionClosed: (this: DeviceSession, reason: string) => void;
  readonly #options: RegistryOptions;
  readonly #maxDevices: number;
  readonly #ttlMs: number;
  readonly #logger: RegistryLogger;
  readonly #sweeper: NodeJS.Timeout | undefined;
  /** The secrets the OTA endpoint issued to known devices; they go with the record. */
  readonly credentials = new DeviceCredentials((deviceId) => this.#devices.has(deviceId));

  constructor(options: RegistryOptions = {}) {
    super();
    this.#options = options;
    this.#maxDevices = options.maxDevices ?? DEFAULT_MAX_DEVICES;
    this.#ttlMs = options.offlineDeviceTtlMs ?? DEFAULT_OFFLINE_TTL_MS;
    this.#logger = options.logger ?? STDERR_LOGGER;
    const registry = this;
    this.#onSessionClosed = function (this: DeviceSession, reason: string) {
      registry.#sessionClosed(this, reason);
    };
    if (this.#ttlMs > 0) {
      // Unref'd: the sweep never keeps the process alive.
      const sweep = () => {
        try {
          this.#sweep();
        } catch (error) {
          this.#logger.error({ err: error }, 'evicting offline devices failed');
        }
      };
      this.#sweeper = setInterval(sweep, Math.max(10, Math.min(this.#ttlMs, 60_000)));
      this.#sweeper.unref();
    }
  }

  get(deviceId: string): DeviceRecord | undefined {
    return this.#devices.get(deviceId.toLowerCase())?.record;
  }

  list(): DeviceRecord[] {
    return [...this.#devices.values()].map((entry) => entry.record);
  }

  /** How many devices are known. */
  get size(): number {
    return this.#devices.size;
  }

  /** How many distinct tool lists are held (shared by the devices that list the same tools). */
  get toolListCount(): number {
    return this.#toolLists.size;
  }

  /** Recent OTA checks, newest last. */
  otaChecks(limit = 100): OtaCheckRecord[] {
    return this.#otaChecks.slice(-limit);
  }

  /**
   * Whether `clientId` may act as `deviceId`: an unknown device takes any Client-Id (and is
   * pinned to it when recorded), a known one only the Client-Id it is pinned to.
   */
  acceptsClient(deviceId: string, clientId: string): boolean {
    const entry = this.#devices.get(deviceId.toLowerCase());
    return entry === undefined || sameSecret(clientId, entry.record.clientId);
  }

  /** {@link DeviceCredentials.tokenFor}, the secret tools and tests most often ask for. */
  tokenFor(deviceId: string): string | undefined {
    return this.credentials.tokenFor(deviceId);
  }

  /** {@link DeviceCredentials.setToken}. */
  setToken(deviceId: string, token: string | undefined): void {
    this.credentials.setToken(deviceId, token);
  }

  /** Marks a known device as having proved it holds `serial`'s key (opt-in activation). */
  markActivated(deviceId: string, serial: string): void {
    const entry = this.#devices.get(deviceId.toLowerCase());
    if (entry === undefined)
      throw new ServerError('DEVICE_NOT_FOUND', `no device ${deviceId} has been seen`);
    entry.record.activatedSerial = serial;
    this.#touch(entry);
  }

  /**
   * Records an OTA check. False, and nothing recorded, when it came with another Client-Id than
   * the device is pinned to.
   */
  recordOtaCheck(check: OtaCheckRecord): boolean {
    const entry = this.#entry(check.deviceId, check.clientId);
    if (entry === undefined) return false;
    const { record } = entry;
    // Kept with the record: what it already holds, and what boards of one build send alike
    // (a board name sliced from its User-Agent keeps the whole header), are held once.
    const kept: OtaCheckRecord = {
      ...check,
      deviceId: check.deviceId === record.deviceId ? record.deviceId : check.deviceId,
      clientId: record.clientId,
      board: this.#intern(check.board),
      version: this.#intern(check.version),
      elfSha256: this.#intern(check.elfSha256),
    };
    record.board = kept.board ?? record.board;
    record.version = kept.version;
    record.lastOtaCheck = kept;
    this.#otaChecks.push(kept);
    if (this.#otaChecks.length > (this.#options.otaHistory ?? 1000)) this.#otaChecks.shift();
    this.#emit('ota-check', kept);
    return true;
  }

  /**
   * Takes a new session: the old one (if any) is closed, then the device is initialised and
   * listed. A session from another Client-Id than the device's is closed and refused
   * (`SESSION_FAILED`): the device's own session is untouched.
   */
  attach(session: DeviceSession): DeviceRecord {
    const { deviceId, clientId } = session.info;
    const entry = this.#entry(deviceId, clientId);
    if (entry === undefined) {
      session.close('refused: another Client-Id than the device is pinned to');
      throw new ServerError(
        'SESSION_FAILED',
        `device ${deviceId.toLowerCase()} is pinned to another Client-Id: if the board was re-flashed, run \`xiaozhi-mcp devices forget ${deviceId.toLowerCase()}\``,
      );
    }
    const { record } = entry;
    const previous = record.session;
    record.session = session;
    record.transport = session.transport;
    record.ready = false;
    record.sessions++;
    record.connectedAt = new Date().toISOString();
    record.disconnectedAt = undefined;
    previous?.close('replaced by a new session');
    session.on('closed', this.#onSessionClosed);
    this.#emit('connected', record);
    let stage: SessionStage = 'initialize';
    this.#prepare(record, session, (next) => {
      stage = next;
    }).catch((error: unknown) => {
      if (record.session !== session) return;
      const failure = error instanceof Error ? error : new Error(String(error));
      record.lastError = clip(
        `${stage === 'initialize' ? 'initialize' : 'tools/list'} failed: ${failure.message}`,
      );
      this.#emit('session-failed', record, stage, failure);
    });
    return record;
  }

  /** The registry's one copy of `text` (board names, versions, ELF digests: a few per rig). */
  #intern<T extends string | undefined>(text: T): T {
    if (text === undefined || text.length > MAX_INTERNED_CHARS) return text;
    const known = this.#interned.get(text);
    if (known !== undefined) return known as T;
    // A flat copy: `text` may be a slice that keeps the whole string it was cut from.
    const copy = Buffer.from(text).toString();
    this.#interned.set(copy, copy);
    if (this.#interned.size > MAX_INTERNED) {
      for (const oldest of this.#interned.keys()) {
        this.#interned.delete(oldest);
        break;
      }
    }
    return copy as T;
  }

  /** A session closed: its device is offline, if it was still the device's session. */
  #sessionClosed(session: DeviceSession, reason: string): void {
    const entry = this.#devices.get(session.info.deviceId.toLowerCase()) ?? this.#dropping;
    const record = entry?.record;
    if (entry === undefined || record === undefined || record.session !== session) return;
    record.session = undefined;
    record.ready = false;
    record.disconnectedAt = new Date().toISOString();
    if (this.#devices.get(record.deviceId) === entry) this.#touch(entry);
    this.#emit('disconnected', record, reason);
  }

  /** Records a hello the gateway refused: the device is known, and `lastError` says why. */
  refuseHello(refusal: HelloRefusal): void {
    // Another Client-Id than the device's says nothing about the device: only the event.
    const entry = this.#entry(refusal.deviceId, refusal.clientId);
    if (entry !== undefined) entry.record.lastError = clip(`hello refused: ${refusal.reason}`);
    this.#emit('hello-refused', refusal);
  }

  /**
   * Forgets a device: closes its live session, and drops its record, token, pin and tool list.
   * Its next OTA check or connection is a new device (a re-flashed board gets a new Client-Id).
   * False when the device is not known.
   */
  forget(deviceId: string, reason = 'forgotten by the operator'): boolean {
    const entry = this.#devices.get(deviceId.toLowerCase());
    if (entry === undefined) return false;
    this.#drop(entry, reason);
    return true;
  }

  /** Stops the eviction timer (it is unref'd: only needed to stop a long-lived registry cleanly). */
  close(): void {
    clearInterval(this.#sweeper);
  }

  /**
   * Resolves when the device is ready (initialised and listed); bounded by `timeoutMs`. A hello
   * refused or a session that fails to get ready meanwhile rejects at once (`SESSION_FAILED`).
   */
  waitForReady(deviceId: string, timeoutMs = 30_000): Promise<DeviceRecord> {
    const ready = this.get(deviceId);
    if (ready?.ready) return Promise.resolve(ready);
    const id = deviceId.toLowerCase();
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        this.off('ready', onReady);
        this.off('hello-refused', onRefused);
        this.off('session-failed', onFailed);
      };
      const onReady = (record: DeviceRecord) => {
        if (record.deviceId !== id) return;
        done();
        resolve(record);
      };
      const onRefused = (refusal: HelloRefusal) => {
        if (refusal.deviceId !== id || !this.acceptsClient(id, refusal.clientId)) return;
        done();
        reject(
          new ServerError(
            'SESSION_FAILED',
            `device ${deviceId}: hello refused (${clip(refusal.reason)})`,
          ),
        );
      };
      const onFailed = (record: DeviceRecord, _stage: SessionStage, error: Error) => {
        if (record.deviceId !== id) return;
        done();
        reject(
          new ServerError('SESSION_FAILED', `device ${deviceId}: ${record.lastError}`, {
            cause: error,
          }),
        );
      };
      const timer = setTimeout(() => {
        this.off('ready', onReady);
        this.off('hello-refused', onRefused);
        this.off('session-failed', onFailed);
        reject(
          new ServerError(
            'DEVICE_NOT_READY',
            `device ${deviceId} was not ready within ${timeoutMs} ms${this.get(deviceId)?.lastError ? ` (${this.get(deviceId)?.lastError})` : ''}`,
          ),
        );
      }, timeoutMs);
      this.on('ready', onReady);
      this.on('hello-refused', onRefused);
      this.on('session-failed', onFailed);
    });
  }

  /** The device's current session, or a typed error saying why there is none. */
  session(deviceId: string): DeviceSession {
    const record = this.get(deviceId);
    if (record === undefined)
      throw new ServerError('DEVICE_NOT_FOUND', `no device ${deviceId} has been seen`);
    if (record.session === undefined || record.session.closed) {
      throw new ServerError('DEVICE_DISCONNECTED', `device ${deviceId} is not connected`);
    }
    return record.session;
  }

  /** Calls a tool on a connected device. */
  callTool(
    deviceId: string,
    name: string,
    args: Record<string, unknown> = {},
    options?: RequestOptions,
  ): Promise<ToolResult> {
    try {
      return this.session(deviceId).callTool(name, args, options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Re-reads the tool list of a connected device. */
  async refreshTools(deviceId: string): Promise<DeviceRecord> {
    const entry = this.#devices.get(deviceId.toLowerCase());
    const session = this.session(deviceId);
    if (entry === undefined)
      throw new ServerError('DEVICE_NOT_FOUND', `no device ${deviceId} has been seen`);
    await this.#list(entry.record, session);
    return entry.record;
  }

  /**
   * The device's entry, created (and pinned to `clientId`) when new, touched either way;
   * undefined for another Client-Id than the device is pinned to.
   */
  #entry(deviceId: string, clientId: string): Entry | undefined {
    const id = deviceId.toLowerCase();
    let entry = this.#devices.get(id);
    if (entry !== undefined && !sameSecret(clientId, entry.record.clientId)) return undefined;
    if (entry === undefined) {
      entry = {
        record: {
          deviceId: id,
          clientId,
          board: undefined,
          version: undefined,
          session: undefined,
          transport: undefined,
          ready: false,
          initialize: undefined,
          tools: [],
          pages: NO_PAGES,
          pageViolations: NO_VIOLATIONS,
          lastOtaCheck: undefined,
          connectedAt: undefined,
          disconnectedAt: undefined,
          sessions: 0,
          lastError: undefined,
          activatedSerial: undefined,
        },
        seenAt: Date.now(),
        toolsKey: undefined,
      };
      this.#devices.set(id, entry);
      this.#sweep(entry);
    } else this.#touch(entry);
    return entry;
  }

  /** Moves the entry to the back of the eviction order. */
  #touch(entry: Entry): void {
    entry.seenAt = Date.now();
    this.#devices.delete(entry.record.deviceId);
    this.#devices.set(entry.record.deviceId, entry);
  }

  /**
   * Evicts offline devices past their time, then the longest-offline ones over the count;
   * `keep` (the device being added) stays.
   */
  #sweep(keep?: Entry): void {
    const now = Date.now();
    // Deleting the entry being visited is safe while iterating a Map.
    for (const entry of this.#devices.values()) {
      const over = this.#devices.size > this.#maxDevices;
      const expired = this.#ttlMs > 0 && now - entry.seenAt >= this.#ttlMs;
      // Entries are in order of activity: once one is neither expired nor needed, none after is.
      if (!over && !expired) break;
      if (entry === keep || (entry.record.session !== undefined && !entry.record.session.closed))
        continue;
      this.#drop(
        entry,
        expired
          ? `evicted: offline for more than ${this.#ttlMs} ms`
          : `evicted: more than ${this.#maxDevices} devices known`,
      );
    }
  }

  #drop(entry: Entry, reason: string): void {
    const { record } = entry;
    if (this.#devices.get(record.deviceId) !== entry) return;
    this.#devices.delete(record.deviceId);
    this.credentials.drop(record.deviceId);
    this.#releaseTools(entry);
    const dropping = this.#dropping;
    this.#dropping = entry;
    try {
      record.session?.close(reason);
    } finally {
      this.#dropping = dropping;
    }
    this.#emit('forgotten', record.deviceId, reason);
  }

  #releaseTools(entry: Entry): void {
    const key = entry.toolsKey;
    if (key === undefined) return;
    entry.toolsKey = undefined;
    this.#toolLists.release(key);
  }

  /** Emits to every listener; one that throws is logged and neither stops the others nor the caller. */
  #emit<K extends keyof RegistryEvents>(event: K, ...args: RegistryEvents[K]): void {
    for (const listener of this.rawListeners(event as never) as ((...a: unknown[]) => void)[]) {
      try {
        listener.apply(this, args);
      } catch (error) {
        try {
          this.#logger.error({ err: error, event }, 'a registry event listener threw');
        } catch {
          // A logger that throws has nowhere left to report to.
        }
      }
    }
  }

  async #prepare(
    record: DeviceRecord,
    session: DeviceSession,
    stage: (stage: SessionStage) => void,
  ): Promise<void> {
    // The shared copy, names included, when boards of one build sent the same.
    const init = this.#shared.share(await session.initialize(this.#options.vision));
    if (record.session !== session) return;
    record.initialize = init;
    record.board = init.serverInfo.name;
    record.version = init.serverInfo.version;
    stage('tools');
    await this.#list(record, session);
    if (record.session !== session) return;
    record.ready = true;
    record.lastError = undefined;
    this.#emit('ready', record);
  }

  async #list(record: DeviceRecord, session: DeviceSession): Promise<void> {
    // A board whose every tool is user-only answers the plain listing with an error page.
    const plain = await session.listTools(false).catch((error: unknown) => {
      if ((error as { code?: string }).code !== 'PAGE_ERROR') throw error;
      return {
        tools: [],
        pages: [],
        violations: [`plain tools/list failed: ${(error as Error).message}`],
      };
    });
    const all = await session.listTools(true);
    const entry = this.#devices.get(record.deviceId);
    if (entry === undefined || entry.record !== record || record.session !== session) return;
    // Tool by tool (the list adds one level): a shared, frozen tool is walked once.
    if (!all.tools.every((tool) => nestsWithin(tool, MAX_DEVICE_JSON_DEPTH))) {
      throw new ServerError(
        'INVALID_REPLY',
        `tools/list from ${record.deviceId} nests deeper than ${MAX_DEVICE_JSON_DEPTH} levels`,
      );
    }
    const plainNames = new Set(plain.tools.map((t) => (typeof t.name === 'string' ? t.name : '')));
    // Bounded depth (checked above), so the digest's serialisation cannot throw.
    const key = toolListKey(plainNames, all.tools);
    const changed = key !== entry.toolsKey;
    if (changed) {
      const tools = this.#toolLists.hold(key, plainNames, all.tools);
      this.#releaseTools(entry);
      entry.toolsKey = key;
      record.tools = tools;
    }
    record.pages = this.#shared.share({ plain: plain.pages, withUserTools: all.pages });
    const violations = [...plain.violations, ...all.violations];
    record.pageViolations =
      violations.length === 0
        ? NO_VIOLATIONS
        : this.#shared.share(
            violations.slice(0, MAX_PAGE_VIOLATIONS).map((violation) => clip(violation)),
          );
    if (changed) this.#emit('tools-changed', record);
  }
}
