// CRC-32C (Castagnoli), the checksum of checkpoint payloads: the polynomial iSCSI, ext4 and
// Google Cloud Storage use to detect corrupted bytes. SSE4.2's crc32 instruction computes it
// at several GB/s on x86-64 (chosen at run time); elsewhere a table-driven loop does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace linac::trainer::detail {

/// Extends `crc` (0 for the first chunk) over `size` bytes: crc32c(crc32c(0, a), b) equals the
/// CRC of a followed by b, so a file can be checksummed in pieces while it streams.
uint32_t crc32c(uint32_t crc, const void* data, size_t size);
/// The same by the table-driven loop alone (what non-x86 machines run), for tests.
uint32_t crc32cPortable(uint32_t crc, const void* data, size_t size);

/// "e3069283": eight lowercase hex digits, as manifests record it.
std::string crc32cHex(uint32_t crc);

}  // namespace linac::trainer::detail
