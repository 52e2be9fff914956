/**
 * The inventory's type and JSON Schema name the code's own tables: chips (firmware's chip
 * table), presets (the device SDK's), fault knobs (the virtual board's). These tests fail when
 * either side changes without the other. The type side is checked by the compiler: the
 * records below must name every key of their union or interface, no more.
 */
import { readFileSync } from 'node:fs';
import { BOARD_PRESETS, type VirtualBusBoard } from '@xiaozhi-mcp/device';
import { type FaultKnobs, REGRESSION_NAMES } from '@xiaozhi-mcp/device/testing';
import { XIAOZHI_CHIP_NAMES, type XiaozhiChipName } from '@xiaozhi-mcp/firmware';
import { describe, expect, it } from 'vitest';
import { type BoardConfig, SCHEMA_PATH } from './inventory.js';

type InventoryFaults = NonNullable<NonNullable<BoardConfig['virtual']>['faults']>;

// Every fault knob the virtual board has (but `dropReply`, a function no JSON can hold), and
// the bus's `unplugOnCall`: exactly the inventory's fault keys.
const FAULT_KEYS = {
  replyLatencyMs: true,
  disconnectOnCall: true,
  pageBudgetBytes: true,
  crashOnHello: true,
  panicAtBoot: true,
  helloWithout: true,
  initializeWithout: true,
  cursorLoop: true,
  regressions: true,
  unplugOnCall: true,
} as const satisfies Record<
  Exclude<keyof FaultKnobs, 'dropReply'> | keyof NonNullable<VirtualBusBoard['faults']>,
  true
> &
  Record<keyof InventoryFaults, true>;

// The inventory's chips are the chips xiaozhi builds exist for (the firmware chip table), both ways.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const chipTypesAgree: Same<NonNullable<BoardConfig['chip']>, XiaozhiChipName> = true;

interface SchemaNode {
  readonly enum?: readonly unknown[];
  readonly items?: SchemaNode;
  readonly properties?: Readonly<Record<string, SchemaNode>>;
  readonly definitions?: Readonly<Record<string, SchemaNode>>;
}

const schema = JSON.parse(readFileSync(SCHEMA_PATH, 'utf8')) as SchemaNode;
const board = schema.definitions?.board;

describe('the inventory schema follows the code it configures', () => {
  it('lists every chip a xiaozhi board can have, and no other', () => {
    expect(chipTypesAgree).toBe(true);
    expect([...(board?.properties?.chip?.enum ?? [])].sort()).toEqual(
      [...XIAOZHI_CHIP_NAMES].sort(),
    );
  });

  it('lists every virtual board preset, and no other', () => {
    expect([...(board?.properties?.virtual?.properties?.preset?.enum ?? [])].sort()).toEqual(
      Object.keys(BOARD_PRESETS).sort(),
    );
  });

  it('lists every fault knob a virtual board has, and no other', () => {
    expect(
      Object.keys(board?.properties?.virtual?.properties?.faults?.properties ?? {}).sort(),
    ).toEqual(Object.keys(FAULT_KEYS).sort());
  });

  it('lists every firmware regression a virtual board can be built with, and no other', () => {
    const regressions = board?.properties?.virtual?.properties?.faults?.properties?.regressions;
    expect([...(regressions?.items?.enum ?? [])].sort()).toEqual([...REGRESSION_NAMES].sort());
  });
});
