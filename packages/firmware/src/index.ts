export type {
  AppDescription,
  AppImage,
  BuildAppImageOptions,
  BuildSegment,
  ImageHeader,
  ImageSegment,
  VerifiedAppImage,
} from './app-image.js';
export {
  APP_DESC_MAGIC,
  APP_DESC_OFFSET,
  APP_DESC_SIZE,
  buildAppImage,
  IMAGE_HEADER_SIZE,
  IMAGE_MAGIC,
  MAX_SEGMENTS,
  readAppDescription,
  readAppImage,
  readImageHeader,
  SEGMENT_HEADER_SIZE,
  verifyAppImage,
} from './app-image.js';
export type { ChipInfo, ChipName } from './chips.js';
export { CHIPS, chipById, chipByName, INVALID_CHIP_ID, isChipName } from './chips.js';
export type { FirmwareErrorCode } from './errors.js';
export { FIRMWARE_ERROR_CODES, FirmwareError } from './errors.js';
