/**
 * What a port provider gives and is asked: the contract between the serial layer and whatever
 * else offers boards (the device SDK's virtual boards), so that neither imports the other's
 * internals. After resolution a provided board and a real port go through the same code.
 */
import type { LinePlatform } from './line-steps.js';
import type { PortInfo } from './port-info.js';
import type { SerialBinding } from './web-serial.js';

/** A port ready to open: the binding to open it with, and how to find it again. */
export interface ResolvedPort {
  readonly binding: SerialBinding;
  readonly path: string;
  readonly info: PortInfo;
  /** How messages name the port: `virtual:desk`, or the device path. */
  readonly label: string;
  /** The prefix of the provider that made it (`virtual:`); undefined for a real port. */
  readonly provider?: string;
  /**
   * How this port's `set()` reaches the lines, where that is not this host's way: an RFC 2217
   * port sends RTS, then DTR, as two commands, like bindings-cpp on Windows, so it is `win32`.
   * Whatever builds a `Flasher` (`platform`) or plays line steps (`lineSetterFor`,
   * `runLineSteps`: `platform`) passes it, so the reset is esptool's ClassicReset (esptool's own
   * choice on `rfc2217:` ports, `loader.py` `_construct_reset_strategy_sequence`) and a step that
   * changes both lines goes through the safe state between (`line-steps.ts` `planLineChange`).
   * Undefined: the host's own (`process.platform`).
   */
  readonly linePlatform?: LinePlatform;
  /**
   * What DTR and RTS can do on this port. Undefined: every change reaches the board (a local
   * port, a provided board, an RFC 2217 server that passes line changes). `resets`: an RFC 2217
   * server that plays esptool's resets itself (Espressif's `esp_rfc2217_server`, or any server
   * without a SIGNATURE): a reset into download mode and a hard reset reach the board; a BOOT
   * click (DTR alone) cannot, so whatever would click refuses instead.
   */
  readonly lineControl?: 'resets';
  /** Whether the device is still there (an unplug does not always emit `close`). */
  present(path: string): Promise<boolean>;
  /**
   * The same device again, by its identity (USB serial number, else USB location), e.g. after
   * it re-enumerated on reset.
   */
  refind(timeoutMs: number, signal?: AbortSignal): Promise<{ path: string; info: PortInfo }>;
  /** Releases what resolving took (the board's lock, a provided board's power); safe to call twice. */
  dispose(): void;
}

/** One board a provider offers. */
export interface ProvidedBoard {
  /** The selector that reaches it, e.g. `virtual:desk`. */
  readonly port: string;
  /** Short, for lists in messages: `virtual:desk (bread-compact-wifi)`. */
  readonly summary: string;
  /** A row of the `ports` table. */
  readonly line: string;
}

/** What a provider says about its boards, for `ports` and for choosing the only board. */
export interface ProviderListing {
  readonly boards: readonly ProvidedBoard[];
  /** Merged into `ports --json`, e.g. `{virtual: [...], virtualDir}`. */
  readonly json: Readonly<Record<string, unknown>>;
  /** When it has no board: `no virtual board in DIR`. */
  readonly none: string;
  /** How a selector names its boards, for `--port` help in errors. */
  readonly selectorHint: string;
  /** How to make one, when there is none at all. */
  readonly createHint: string;
}

/** What a provider may be asked for besides the selector. */
export interface ProviderRequest {
  /** `--board` / `--flash-size` as given: they apply when the provider creates a board. */
  readonly create?: { readonly board?: string; readonly flashSize?: string };
  /** Lines for the user (`created virtual board ...` on stdout, notes on stderr). */
  readonly notify?: (stream: 'stdout' | 'stderr', text: string) => void;
}

/** A source of boards other than the host's serial ports (virtual boards). */
export interface PortProvider {
  /** The selector prefix it answers, lower case, e.g. `virtual:`. */
  readonly prefix: string;
  listing(): ProviderListing;
  resolve(selector: string, request: ProviderRequest): Promise<ResolvedPort>;
}
