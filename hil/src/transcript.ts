/**
 * Per-board artefacts: the console log (every byte the port gave, as text) and a JSONL
 * transcript of every protocol frame in both directions, across reconnects.
 */
import { appendFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { DeviceRegistry, DeviceSession } from '@xiaozhi-mcp/server';

export class ConsoleLog {
  constructor(readonly path: string) {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, '');
  }

  append(chunk: string | Uint8Array): void {
    appendFileSync(this.path, chunk);
  }
}

/** Follows a device's sessions in the registry and writes their frames as JSON lines. */
export class Transcript {
  #sessions = new WeakSet<DeviceSession>();
  #followed = 0;
  readonly #detach: () => void;

  constructor(
    readonly path: string,
    registry: DeviceRegistry,
    readonly deviceId: () => string | undefined,
  ) {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, '');
    const onConnected = (record: { deviceId: string; session: DeviceSession | undefined }) => {
      if (record.deviceId !== this.deviceId() || record.session === undefined) return;
      this.#follow(record.session);
    };
    registry.on('connected', onConnected);
    this.#detach = () => registry.off('connected', onConnected);
  }

  /** Also writes a note (rig events) into the transcript. */
  note(event: string, detail: Record<string, unknown> = {}): void {
    appendFileSync(
      this.path,
      `${JSON.stringify({ t: new Date().toISOString(), event, ...detail })}\n`,
    );
  }

  /** How many sessions of the device the transcript followed. */
  get sessions(): number {
    return this.#followed;
  }

  close(): void {
    this.#detach();
  }

  #follow(session: DeviceSession): void {
    if (this.#sessions.has(session)) return;
    this.#sessions.add(session);
    this.#followed += 1;
    const sessionId = session.info.sessionId;
    // The device's hello opened the session: it is not one of the session's frames.
    this.note('session', {
      sessionId,
      deviceId: session.info.deviceId,
      hello: session.info.helloText,
    });
    session.on('frame', (direction, text) => {
      appendFileSync(
        this.path,
        `${JSON.stringify({ t: new Date().toISOString(), session: sessionId, dir: direction, text })}\n`,
      );
    });
    session.on('closed', (reason) => this.note('closed', { sessionId, reason }));
  }
}
