/**
 * The USB ids that decide how a port resets: Espressif's chips on their own USB-Serial-JTAG
 * (303a:1001) take esptool's USB-JTAG reset, have no auto-reset transistors to click BOOT with,
 * and re-enumerate on reset. One place for the ids, as `PortInfo` writes them (lowercase hex,
 * 4 digits); Web Serial's numbers are compared in that form.
 */

/** Espressif's USB vendor id (esptool `loader.py`, via esp-pylib). */
export const ESPRESSIF_VID = '303a';
/** The USB-Serial-JTAG peripheral's product id under {@link ESPRESSIF_VID}. */
export const USB_SERIAL_JTAG_PID = '1001';

/** A Web Serial id (a number) as `PortInfo` writes it; `PortInfo`'s own text as it is. */
function usbHex(id: number | string | undefined): string | undefined {
  return typeof id === 'number' ? id.toString(16).padStart(4, '0') : id;
}

/**
 * The port is the chip's USB-Serial-JTAG by its USB ids (Espressif 303a:1001), given as Web
 * Serial numbers or as `PortInfo`'s text (lowercase hex, 4 digits).
 */
export function isUsbJtagSerialPort(info: {
  readonly usbVendorId?: number | string | undefined;
  readonly usbProductId?: number | string | undefined;
}): boolean {
  return (
    usbHex(info.usbVendorId) === ESPRESSIF_VID && usbHex(info.usbProductId) === USB_SERIAL_JTAG_PID
  );
}
