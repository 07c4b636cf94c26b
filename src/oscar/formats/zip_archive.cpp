// libzip reader and a small stored-entry zip writer (see zip_archive.h).
#include "oscar/formats/zip_archive.h"

#include <zip.h>

#include <algorithm>
#include <array>
#include <limits>

#include "oscar/core/error.h"

namespace oscar::zip {

// Owns the archive, so that a constructor that throws after opening it (a hostile entry
// name) still discards it: the Reader's own destructor does not run then.
struct Reader::Impl {
  zip_t* archive = nullptr;
  ~Impl() {
    if (archive) zip_discard(archive);
  }
};

namespace {

std::string libzip_message(int code) {
  zip_error_t e;
  zip_error_init_with_code(&e, code);
  std::string msg = zip_error_strerror(&e);
  zip_error_fini(&e);
  return msg;
}

}  // namespace

Reader::Reader(std::span<const uint8_t> bytes, std::string name_for_errors)
    : impl_(std::make_unique<Impl>()), name_(std::move(name_for_errors)), archive_bytes_(bytes.size()) {
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* src = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &err);
  if (!src) {
    std::string msg = zip_error_strerror(&err);
    zip_error_fini(&err);
    fail("{}: cannot open zip: {}", name_, msg);
  }
  impl_->archive = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &err);
  if (!impl_->archive) {
    std::string msg = zip_error_strerror(&err);
    zip_error_fini(&err);
    zip_source_free(src);
    fail("{}: not a valid zip archive ({}); legacy (pre-1.6) torch.save files are not supported", name_, msg);
  }
  zip_error_fini(&err);
  const zip_int64_t n = zip_get_num_entries(impl_->archive, 0);
  if (n < 0) fail("{}: cannot count zip entries", name_);
  names_.reserve(static_cast<size_t>(n));
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* nm = zip_get_name(impl_->archive, static_cast<zip_uint64_t>(i), ZIP_FL_ENC_RAW);
    if (!nm) fail("{}: zip entry {} has no name", name_, i);
    // Nothing is ever extracted, but a path that would leave the archive's folder marks a
    // hostile file: refused by name rather than merely not found.
    const std::string_view path(nm);
    if (path.starts_with('/') || path == ".." || path.starts_with("../") || path.find("/../") != std::string_view::npos ||
        path.ends_with("/..") || path.find('\\') != std::string_view::npos)
      fail("{}: zip entry '{}' has a path outside the archive", name_, path);
    names_.emplace_back(nm);
  }
}

Reader::~Reader() = default;

int64_t Reader::index_of(const std::string& name) const {
  const zip_int64_t i = zip_name_locate(impl_->archive, name.c_str(), ZIP_FL_ENC_RAW);
  return i;
}

bool Reader::contains(const std::string& name) const { return index_of(name) >= 0; }

uint64_t Reader::entry_size(const std::string& name) const {
  const int64_t i = index_of(name);
  if (i < 0) fail("{}: zip entry '{}' is missing", name_, name);
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(impl_->archive, static_cast<zip_uint64_t>(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
    fail("{}: cannot stat zip entry '{}'", name_, name);
  return st.size;
}

std::vector<uint8_t> Reader::read(const std::string& name, uint64_t max_bytes) const {
  const int64_t i = index_of(name);
  if (i < 0) fail("{}: zip entry '{}' is missing", name_, name);
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(impl_->archive, static_cast<zip_uint64_t>(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) ||
      !(st.valid & ZIP_STAT_COMP_SIZE) || !(st.valid & ZIP_STAT_COMP_METHOD))
    fail("{}: cannot stat zip entry '{}'", name_, name);
  const uint64_t size = st.size;
  if (size > max_bytes) fail("{}: zip entry '{}' is {} bytes, over the limit of {}", name_, name, size, max_bytes);
  // Sizes come from the file: check them before allocating. A stored entry lies inside
  // the archive; a compressed one may not inflate past deflate's ratio, nor past a
  // total budget (torch never compresses, so this only guards against zip bombs).
  if (st.comp_size > archive_bytes_) fail("{}: zip entry '{}' claims {} bytes, more than the whole archive", name_, name, st.comp_size);
  if (st.comp_method == ZIP_CM_STORE) {
    if (size != st.comp_size) fail("{}: stored zip entry '{}' has size {} but compressed size {}", name_, name, size, st.comp_size);
  } else {
    if (size / 1100 > st.comp_size) fail("{}: zip entry '{}' claims an implausible compression ratio", name_, name);
    inflated_ += size;
    if (inflated_ > max_inflated_bytes)
      fail("{}: compressed zip entries inflate past {} bytes in total", name_, max_inflated_bytes);
  }
  zip_file_t* f = zip_fopen_index(impl_->archive, static_cast<zip_uint64_t>(i), 0);
  if (!f) fail("{}: cannot open zip entry '{}': {}", name_, name, zip_strerror(impl_->archive));
  std::vector<uint8_t> out(static_cast<size_t>(size));
  uint64_t got = 0;
  while (got < size) {
    const zip_int64_t r = zip_fread(f, out.data() + got, size - got);
    if (r < 0) {
      std::string msg = zip_file_strerror(f);
      zip_fclose(f);
      fail("{}: zip entry '{}' is corrupt: {}", name_, name, msg);
    }
    if (r == 0) break;
    got += static_cast<uint64_t>(r);
  }
  const int rc = zip_fclose(f);
  if (got != size) fail("{}: zip entry '{}' is truncated: {} of {} bytes", name_, name, got, size);
  if (rc != 0) fail("{}: zip entry '{}' is corrupt: {}", name_, name, libzip_message(rc));
  return out;
}

// ---- writer ----------------------------------------------------------------------

uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (uint8_t b : bytes) crc = table[(crc ^ b) & 0xffu] ^ (crc >> 8);
  return ~crc;
}

namespace {

void put16(std::vector<uint8_t>& o, uint32_t v) {
  o.push_back(uint8_t(v));
  o.push_back(uint8_t(v >> 8));
}
void put32(std::vector<uint8_t>& o, uint64_t v) {
  if (v > 0xffffffffu) fail("zip writer: a size or offset exceeds 4 GiB (zip64 is not implemented)");
  for (int i = 0; i < 4; ++i) o.push_back(uint8_t(v >> (8 * i)));
}

constexpr uint16_t dos_date_1980_01_01 = (0 << 9) | (1 << 5) | 1;

}  // namespace

std::vector<uint8_t> write_stored(const std::vector<Entry>& entries, uint32_t alignment) {
  OSCAR_CHECK(alignment >= 1 && alignment <= 4096, "alignment {}", alignment);
  std::vector<uint8_t> out;
  struct Central { uint64_t offset; uint32_t crc; uint64_t size; uint16_t extra; };
  std::vector<Central> central;
  for (const Entry& e : entries) {
    if (e.name.size() > 0xffff) fail("zip writer: entry name too long");
    const uint64_t offset = out.size();
    const uint32_t crc = crc32(e.data);
    // Data starts after the 30-byte header, the name and the extra field; the extra
    // field ("FB", length, 'Z' padding) is at least its 4-byte header.
    const uint64_t header_end = offset + 30 + e.name.size() + 4;
    const uint64_t pad = (alignment - header_end % alignment) % alignment;
    const uint16_t extra = uint16_t(4 + pad);
    put32(out, 0x04034b50);
    put16(out, 20);  // version needed: 2.0
    put16(out, 0x0800);  // flags: UTF-8 names
    put16(out, 0);   // stored
    put16(out, 0);   // time
    put16(out, dos_date_1980_01_01);
    put32(out, crc);
    put32(out, e.data.size());
    put32(out, e.data.size());
    put16(out, uint16_t(e.name.size()));
    put16(out, extra);
    out.insert(out.end(), e.name.begin(), e.name.end());
    out.push_back('F');
    out.push_back('B');
    put16(out, uint16_t(pad));
    out.insert(out.end(), pad, uint8_t('Z'));
    out.insert(out.end(), e.data.begin(), e.data.end());
    central.push_back({offset, crc, e.data.size(), extra});
  }
  const uint64_t cd_offset = out.size();
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const Central& c = central[i];
    put32(out, 0x02014b50);
    put16(out, (3 << 8) | 20);  // made by: Unix, 2.0
    put16(out, 20);
    put16(out, 0x0800);
    put16(out, 0);
    put16(out, 0);
    put16(out, dos_date_1980_01_01);
    put32(out, c.crc);
    put32(out, c.size);
    put32(out, c.size);
    put16(out, uint16_t(e.name.size()));
    put16(out, 0);  // no extra field in the central directory
    put16(out, 0);  // comment
    put16(out, 0);  // disk
    put16(out, 0);  // internal attributes
    put32(out, 0100644u << 16);  // external attributes: a regular file, rw-r--r--
    put32(out, c.offset);
    out.insert(out.end(), e.name.begin(), e.name.end());
  }
  const uint64_t cd_size = out.size() - cd_offset;
  if (entries.size() > 0xffff) fail("zip writer: too many entries ({}) without zip64", entries.size());
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, uint16_t(entries.size()));
  put16(out, uint16_t(entries.size()));
  put32(out, cd_size);
  put32(out, cd_offset);
  put16(out, 0);
  return out;
}

}  // namespace oscar::zip
