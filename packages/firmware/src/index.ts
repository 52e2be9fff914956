// @xiaozhi-mcp/firmware: ESP32 firmware formats, free of I/O. Named exports only, grouped by who
// uses them; README.md lists them and every error code.

// Errors of every reader and writer here (serial, cli, everyone):

export { FIRMWARE_ERROR_CODES, FirmwareError, type FirmwareErrorCode } from './errors.js';

// The one table of ESP32-family chips (serial, device, hil):

export {
  CHIP_DETECT_MAGIC_REG,
  CHIP_NAMES,
  CHIPS,
  type ChipInfo,
  type ChipName,
  type ChipRevision,
  type ChipRomFacts,
  type ChipSecurity,
  chipById,
  chipByName,
  chipRevisionNumber,
  chipRevisionRegisters,
  chipSecurityRegisters,
  decodeChipRevision,
  decodeChipSecurity,
  isChipName,
  uartDevBufNoFor,
  XIAOZHI_CHIP_NAMES,
  type XiaozhiChipName,
} from './chips.js';

// App images, what an OTA partition holds: read, verify, build (serial, server, device, cli, hil):

export {
  APP_DESC_OFFSET,
  APP_DESC_SIZE,
  type AppDescription,
  type AppImage,
  type BuildAppImageOptions,
  type BuildSegment,
  buildAppImage,
  chipRevisionMismatch,
  IMAGE_HEADER_SIZE,
  IMAGE_MAGIC,
  type ImageHeader,
  type ImageSegment,
  readAppDescription,
  readAppImage,
  readImageHeader,
  type VerifiedAppImage,
  verifyAppImage,
} from './app-image.js';

// Merged images and flash dumps, and what any image is (serial, device, cli):

export { type IdentifiedApp, type IdentifiedImage, identifyImage } from './identify.js';
export {
  bootloaderOffset,
  type MergedImageApp,
  type MergedImageParts,
  type MergeImagesOptions,
  type MergePart,
  mergeImages,
  readMergedImage,
} from './merged-image.js';

// The partition table at 0x8000 and xiaozhi's own tables (serial, device):

export {
  findPartition,
  PARTITION_FLAG_ENCRYPTED,
  PARTITION_FLAG_READONLY,
  PARTITION_TABLE_MAX_SIZE,
  PARTITION_TABLE_OFFSET,
  PARTITION_TYPE_APP,
  PARTITION_TYPE_DATA,
  type ParsePartitionCsvOptions,
  type Partition,
  type PartitionInput,
  type PartitionQuery,
  type PartitionTable,
  parsePartitionCsv,
  readPartitionTable,
  type WritePartitionTableOptions,
  writePartitionTable,
  XIAOZHI_PARTITIONS_4M,
  XIAOZHI_PARTITIONS_8M,
  XIAOZHI_PARTITIONS_16M,
} from './partition-table.js';

// NVS partitions and the generator's CSV (serial's provisioning, device, hil):

export {
  inspectNvsPartition,
  NVS_MAX_BLOB_SIZE,
  NVS_MAX_KEY_LENGTH,
  NVS_MAX_NAMESPACES,
  NVS_MAX_STRING_SIZE,
  NVS_MIN_PARTITION_SIZE,
  NVS_PAGE_SIZE,
  type NvsEntry,
  type NvsPageInfo,
  type NvsType,
  readNvsPartition,
  writeNvsPartition,
} from './nvs.js';
export { formatNvsCsv, type NvsCsvOptions, parseNvsCsv } from './nvs-csv.js';

// The ROM/stub serial protocol in SLIP frames, both ends (the virtual board in device, serial):

export {
  type DataBlock,
  decodeDataBlock,
  decodeRequest as decodeRomRequest,
  decodeResponse as decodeRomResponse,
  decodeWords,
  encodeDataBlock,
  encodeRequest as encodeRomRequest,
  encodeResponse as encodeRomResponse,
  encodeStatus as encodeRomStatus,
  encodeWords,
  isSyncPayload,
  type ResponseStatus,
  ROM_COMMANDS,
  ROM_ERRORS,
  ROM_SYNC_VALUE,
  type RomCommandName,
  type RomRequest,
  type RomResponse,
  readStatus,
  romChecksum,
  romCommandName,
  romErrorText,
  STUB_ERRORS,
  STUB_HELLO,
  syncPayload,
} from './rom-protocol.js';
export { SlipDecoder, type SlipDecoderOptions, slipDecode, slipEncode } from './slip.js';

// Virtual xiaozhi releases, what virtual boards boot (device, cli, hil):

export {
  buildVirtualFirmware,
  readVirtualFirmwareBoard,
  type VirtualFirmware,
  type VirtualFirmwareOptions,
} from './virtual-firmware.js';
