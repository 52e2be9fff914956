/**
 * The `serialport` binding interface's types, as the virtual binding implements them.
 * `@serialport/bindings-interface` types cannot be imported from ESM (its exports map has no
 * types); they are taken from `SerialPortStream`, whose options carry the binding.
 */
import type { SerialPortStream } from '@serialport/stream';

export type BindingInterface = ConstructorParameters<typeof SerialPortStream>[0]['binding'];
export type BindingPortInterface = Awaited<ReturnType<BindingInterface['open']>>;
export type BindingOpenOptions = Parameters<BindingInterface['open']>[0];
export type BindingPortInfo = Awaited<ReturnType<BindingInterface['list']>>[number];
export type PortStatus = Awaited<ReturnType<BindingPortInterface['get']>>;
export type SetOptions = Parameters<BindingPortInterface['set']>[0];
export type UpdateOptions = Parameters<BindingPortInterface['update']>[0];
