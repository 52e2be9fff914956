/**
 * What the virtual board's microphone sends once an MQTT + UDP audio session opens: a bounded,
 * deterministic run of fake Opus frames, one per frame duration, while the board listens. A
 * real board sends encoder output for as long as it listens; the virtual board has no audio,
 * so it sends a fixed frame `timing.uplinkFrames` times and then ends its turn.
 */

/** The fake frame's size: about what a 60 ms Opus frame of quiet speech takes at 16 kHz. */
export const UPLINK_FRAME_BYTES = 40;

/**
 * The frame: an Opus TOC byte for SILK-only wideband, 60 ms, mono, one frame (RFC 6716 §3.1:
 * config 11 << 3 = 0x58), then fixed filler bytes.
 */
export function uplinkFrame(): Uint8Array {
  const frame = new Uint8Array(UPLINK_FRAME_BYTES);
  frame[0] = 0x58;
  for (let i = 1; i < frame.length; i++) frame[i] = (i * 29) & 0xff;
  return frame;
}

/**
 * The firmware's uplink packets carry a timestamp only on server-AEC builds (it is the playback
 * position the echo canceller needs); other builds send 0.
 */
export const UPLINK_TIMESTAMP = 0;

/** What the uplink needs from the session. */
export interface UplinkHost {
  readonly frames: number;
  readonly frameMs: number;
  /** The audio channel this uplink belongs to is still open. */
  open(): boolean;
  /** The board listens (frames are sent only then: speaking pauses the microphone). */
  listening(): boolean;
  send(frame: Uint8Array, timestamp: number): boolean;
  /** All frames went out while the channel was open. */
  done(): void;
}

/** Runs the uplink until its frames are sent or its channel closes; returns a cancel. */
export function startUplink(host: UplinkHost): () => void {
  const frame = uplinkFrame();
  let sent = 0;
  let timer: NodeJS.Timeout | undefined;
  const tick = () => {
    if (!host.open()) return;
    if (host.listening() && host.send(frame, UPLINK_TIMESTAMP)) sent++;
    if (sent >= host.frames) {
      host.done();
      return;
    }
    timer = setTimeout(tick, host.frameMs);
  };
  timer = setTimeout(tick, host.frameMs);
  return () => clearTimeout(timer);
}
