/**
 * Every device the server has seen, with its current session and tools. A device is known
 * from its first OTA check or connection (by Device-Id) and keeps its record across
 * reconnects; each new session is initialised again and its tools refreshed.
 */
import { EventEmitter } from 'node:events';
import type { PageReport, ToolResult } from '@xiaozhi-mcp/protocol';
import type { DeviceSession, InitializeResult, RequestOptions } from './device-session.js';
import { ServerError } from './errors.js';

/** A tool as the device lists it, with where it was found. */
export interface DeviceTool {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: Record<string, unknown>;
  /** Listed only with `withUserTools` (annotations.audience = ["user"]). */
  readonly userOnly: boolean;
  /** The tool object exactly as received. */
  readonly raw: Record<string, unknown>;
}

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
  clientId: string;
  board: string | undefined;
  version: string | undefined;
  session: DeviceSession | undefined;
  /** Initialised and tools listed on the current session. */
  ready: boolean;
  initialize: InitializeResult | undefined;
  tools: readonly DeviceTool[];
  /** Page reports of the last plain and user-tool walks (the firmware's budget rule). */
  pages: { plain: readonly PageReport[]; withUserTools: readonly PageReport[] };
  /** Breaches of the firmware's paging rule seen in the last walks. */
  pageViolations: readonly string[];
  lastOtaCheck: OtaCheckRecord | undefined;
  connectedAt: string | undefined;
  disconnectedAt: string | undefined;
  sessions: number;
  /** Why the last session failed to become ready, if it did. */
  lastError: string | undefined;
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
}

export interface RegistryOptions {
  readonly vision?: { url: string; token?: string };
  /** How many OTA checks to keep. */
  readonly otaHistory?: number;
}

function toDeviceTool(raw: Record<string, unknown>, plainNames: ReadonlySet<string>): DeviceTool {
  const annotations = raw.annotations as { audience?: unknown } | undefined;
  const audience = Array.isArray(annotations?.audience) ? annotations.audience : [];
  const name = typeof raw.name === 'string' ? raw.name : '';
  return {
    name,
    description: typeof raw.description === 'string' ? raw.description : '',
    inputSchema: (typeof raw.inputSchema === 'object' && raw.inputSchema !== null
      ? raw.inputSchema
      : {}) as Record<string, unknown>,
    userOnly: audience.includes('user') || !plainNames.has(name),
    raw,
  };
}

export class DeviceRegistry extends EventEmitter<RegistryEvents> {
  readonly #devices = new Map<string, DeviceRecord>();
  readonly #otaChecks: OtaCheckRecord[] = [];
  readonly #toolLists = new Map<string, readonly DeviceTool[]>();
  readonly #options: RegistryOptions;

  constructor(options: RegistryOptions = {}) {
    super();
    this.#options = options;
  }

  get(deviceId: string): DeviceRecord | undefined {
    return this.#devices.get(deviceId.toLowerCase());
  }

  list(): DeviceRecord[] {
    return [...this.#devices.values()];
  }

  /** Recent OTA checks, newest last. */
  otaChecks(limit = 100): OtaCheckRecord[] {
    return this.#otaChecks.slice(-limit);
  }

  recordOtaCheck(check: OtaCheckRecord): void {
    const record = this.#record(check.deviceId, check.clientId);
    record.board = check.board ?? record.board;
    record.version = check.version;
    record.lastOtaCheck = check;
    this.#otaChecks.push(check);
    if (this.#otaChecks.length > (this.#options.otaHistory ?? 1000)) this.#otaChecks.shift();
    this.emit('ota-check', check);
  }

  /** Takes a new session: the old one (if any) is closed, then the device is initialised and listed. */
  attach(session: DeviceSession): DeviceRecord {
    const { deviceId, clientId } = session.info;
    const record = this.#record(deviceId, clientId);
    const previous = record.session;
    record.session = session;
    record.ready = false;
    record.sessions++;
    record.connectedAt = new Date().toISOString();
    record.disconnectedAt = undefined;
    previous?.close('replaced by a new session');
    session.on('closed', (reason) => {
      if (record.session !== session) return;
      record.session = undefined;
      record.ready = false;
      record.disconnectedAt = new Date().toISOString();
      this.emit('disconnected', record, reason);
    });
    this.emit('connected', record);
    let stage: SessionStage = 'initialize';
    this.#prepare(record, session, (next) => {
      stage = next;
    }).catch((error: unknown) => {
      if (record.session !== session) return;
      const failure = error instanceof Error ? error : new Error(String(error));
      record.lastError = `${stage === 'initialize' ? 'initialize' : 'tools/list'} failed: ${failure.message}`;
      this.emit('session-failed', record, stage, failure);
    });
    return record;
  }

  /** Records a hello the gateway refused: the device is known, and `lastError` says why. */
  refuseHello(refusal: HelloRefusal): void {
    const record = this.#record(refusal.deviceId, refusal.clientId);
    record.lastError = `hello refused: ${refusal.reason}`;
    this.emit('hello-refused', refusal);
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
        if (refusal.deviceId !== id) return;
        done();
        reject(
          new ServerError(
            'SESSION_FAILED',
            `device ${deviceId}: hello refused (${refusal.reason})`,
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
    const record = this.get(deviceId);
    const session = this.session(deviceId);
    if (record === undefined)
      throw new ServerError('DEVICE_NOT_FOUND', `no device ${deviceId} has been seen`);
    await this.#list(record, session);
    return record;
  }

  #record(deviceId: string, clientId: string): DeviceRecord {
    const id = deviceId.toLowerCase();
    let record = this.#devices.get(id);
    if (record === undefined) {
      record = {
        deviceId: id,
        clientId,
        board: undefined,
        version: undefined,
        session: undefined,
        ready: false,
        initialize: undefined,
        tools: [],
        pages: { plain: [], withUserTools: [] },
        pageViolations: [],
        lastOtaCheck: undefined,
        connectedAt: undefined,
        disconnectedAt: undefined,
        sessions: 0,
        lastError: undefined,
      };
      this.#devices.set(id, record);
    }
    record.clientId = clientId;
    return record;
  }

  async #prepare(
    record: DeviceRecord,
    session: DeviceSession,
    stage: (stage: SessionStage) => void,
  ): Promise<void> {
    const init = await session.initialize(this.#options.vision);
    if (record.session !== session) return;
    record.initialize = init;
    record.board = init.serverInfo.name;
    record.version = init.serverInfo.version;
    stage('tools');
    await this.#list(record, session);
    if (record.session !== session) return;
    record.ready = true;
    record.lastError = undefined;
    this.emit('ready', record);
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
    if (record.session !== session) return;
    const plainNames = new Set(plain.tools.map((t) => (typeof t.name === 'string' ? t.name : '')));
    // Boards of one build list the same tools: keep one copy per distinct list.
    const key = `${[...plainNames].join('\n')}\u0000${JSON.stringify(all.tools)}`;
    let tools = this.#toolLists.get(key);
    if (tools === undefined) {
      tools = Object.freeze(all.tools.map((raw) => toDeviceTool(raw, plainNames)));
      this.#toolLists.set(key, tools);
    }
    const changed = tools !== record.tools;
    record.tools = tools;
    record.pages = { plain: plain.pages, withUserTools: all.pages };
    record.pageViolations = [...plain.violations, ...all.violations];
    if (changed) this.emit('tools-changed', record);
  }
}
