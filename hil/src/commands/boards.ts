import { isBoardPort, listPorts, type PortInfo } from '@xiaozhi-mcp/serial';
import type { Output } from '@xiaozhi-mcp/serial/commands';
import { boardEntryFor, DEFAULT_VIRTUAL_RIG } from '../inventory.js';

export type { Output };

/** `hil boards`: the attached ports, and inventory entries to paste into hil.config.json. */
export async function boardsCommand(
  out: Output,
  options: { json?: boolean; lister?: () => Promise<PortInfo[]> },
): Promise<number> {
  let ports: PortInfo[];
  try {
    ports = await (options.lister ?? (() => listPorts()))();
  } catch (error) {
    out.stderr(`hil: cannot list serial ports: ${(error as Error).message}\n`);
    ports = [];
  }
  const usb = ports.filter(isBoardPort);
  // Each board's selector is what tells it apart from the others attached with it.
  const entries = usb.map((port, index) => boardEntryFor(port, index, ports));
  if (options.json) {
    out.stdout(`${JSON.stringify({ ports: usb, boards: entries }, null, 2)}\n`);
    return 0;
  }
  if (usb.length === 0) {
    out.stdout(
      'no board attached; `hil run` without an inventory qualifies the default virtual rig:\n',
    );
    for (const board of DEFAULT_VIRTUAL_RIG.boards)
      out.stdout(`  ${board.name.padEnd(20)} ${board.port}\n`);
    return 0;
  }
  out.stdout('attached ports:\n');
  for (const [index, port] of usb.entries()) {
    const id = port.vendorId && port.productId ? `${port.vendorId}:${port.productId}` : '????:????';
    out.stdout(
      `  ${port.path.padEnd(16)} ${id}  ${port.kind.padEnd(15)} ${entries[index]?.port ?? '-'}  ${port.manufacturer ?? ''} ${port.product ?? ''}\n`,
    );
  }
  out.stdout('\ninventory entries (hil.config.json "boards"):\n');
  out.stdout(`${JSON.stringify(entries, null, 2)}\n`);
  return 0;
}
