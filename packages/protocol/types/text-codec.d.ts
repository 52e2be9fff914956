// TextEncoder and TextDecoder exist in every runtime this package targets (Node, browsers,
// Deno, Bun) but are not in the ES library typings. Declared for the build only, so the
// package compiles with neither DOM nor Node types; the test typecheck uses Node's.
declare class TextEncoder {
  encode(input?: string): Uint8Array;
}
declare class TextDecoder {
  constructor(label?: string, options?: { fatal?: boolean });
  decode(input?: Uint8Array): string;
}
