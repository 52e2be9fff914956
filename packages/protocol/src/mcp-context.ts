/**
 * What an MCP dispatcher is given, under either profile: the board's tools and identity, where
 * a vision capability goes, and the page budget. The firmware profile (mcp-server.ts) and the
 * strict one (strict.ts) both read it, and the request loop builds it for whichever it runs.
 */

import type { ToolRegistry } from './tools.js';

/** What `initialize` reports as `serverInfo`. */
export interface BoardIdentity {
  /** The build variant, e.g. `bread-compact-wifi`. */
  readonly name: string;
  /** The app version, e.g. `2.4.2`. */
  readonly version: string;
}

/** The vision endpoint a backend offers in `initialize` (used by `self.camera.take_photo`). */
export interface VisionCapability {
  readonly url: string;
  readonly token: string | undefined;
}

/** What a dispatcher reads of the board at each request. */
export interface DispatchContext<H> {
  readonly tools: ToolRegistry<H>;
  readonly board: BoardIdentity;
  /** Called when `initialize` carries a vision capability. */
  readonly onVision?: ((vision: VisionCapability) => void) | undefined;
  /** Page budget; the firmware's 8000 unless a fault knob says otherwise. */
  readonly pageBudgetBytes?: number | undefined;
}
