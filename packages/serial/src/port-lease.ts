import type { NodeWebSerialPort, WebSerialOpenOptions, WebSerialSignals } from './web-serial.js';

/**
 * The port as one session sees it. Once revoked it has no readable or writable and refuses
 * lines and rates, so nothing of a cancelled session (an esptool-js call still waiting, a
 * retry inside it) can reach the port after the next session opened it again; closing still
 * goes through, so the session can be shut.
 */
export class PortLease {
  readonly port: NodeWebSerialPort;
  #revoked = false;

  constructor(port: NodeWebSerialPort) {
    this.port = port;
  }

  get revoked(): boolean {
    return this.#revoked;
  }

  revoke(): void {
    this.#revoked = true;
  }

  getInfo() {
    return this.port.getInfo();
  }

  get readable(): ReadableStream<Uint8Array> | null {
    return this.#revoked ? null : this.port.readable;
  }

  get writable(): WritableStream<Uint8Array> | null {
    return this.#revoked ? null : this.port.writable;
  }

  open(options: WebSerialOpenOptions): Promise<void> {
    if (this.#revoked) return Promise.reject(this.#gone('open'));
    return this.port.open(options);
  }

  close(): Promise<void> {
    return this.port.close();
  }

  setSignals(signals: WebSerialSignals): Promise<void> {
    if (this.#revoked) return Promise.reject(this.#gone('setSignals'));
    return this.port.setSignals(signals);
  }

  setBaudRate(baudRate: number): Promise<void> {
    if (this.#revoked) return Promise.reject(this.#gone('setBaudRate'));
    return this.port.setBaudRate(baudRate);
  }

  #gone(what: string): Error {
    return new DOMException(`${what}: this flasher session was cancelled`, 'InvalidStateError');
  }
}
