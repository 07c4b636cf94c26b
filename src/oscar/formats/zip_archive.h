// Zip archives for .pt files: a reader over libzip (any archive, stored or deflated,
// every size checked) and a writer of stored entries aligned the way torch aligns them.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace oscar::zip {

// Reads an in-memory zip image; `bytes` must outlive the reader.
class Reader {
 public:
  Reader(std::span<const uint8_t> bytes, std::string name_for_errors);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::vector<std::string>& names() const { return names_; }  // in archive order
  bool contains(const std::string& name) const;
  uint64_t entry_size(const std::string& name) const;  // uncompressed; throws when absent
  // The whole entry; throws oscar::Error when absent, larger than `max_bytes`, or when
  // fewer bytes than announced come out (truncated or corrupt data).
  std::vector<uint8_t> read(const std::string& name, uint64_t max_bytes) const;

 private:
  int64_t index_of(const std::string& name) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string name_;
  std::vector<std::string> names_;
  uint64_t archive_bytes_ = 0;
  mutable uint64_t inflated_ = 0;  // bytes inflated from compressed entries so far
  static constexpr uint64_t max_inflated_bytes = 1ull << 30;
};

struct Entry {
  std::string name;
  std::span<const uint8_t> data;
};

// Stored (uncompressed) entries, each record's data starting at a multiple of
// `alignment` bytes (padding goes into an "FB" extra field, as torch's writer does).
// Throws oscar::Error past 4 GiB (no zip64).
std::vector<uint8_t> write_stored(const std::vector<Entry>& entries, uint32_t alignment = 64);

uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc = 0);

}  // namespace oscar::zip
