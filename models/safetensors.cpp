// safetensors.cpp: the safetensors reader (memory-mapped, every offset checked on open), the
// checkpoint folder loader with text-model name normalisation, and the writer.
#include "models/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/files.h"
#include "engine/text.h"
#include "models/half.h"
#include "models/json_read.h"

namespace sg {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so is this reader");

// ---------------------------------------------------------------------------------------------
// The file's bytes.

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 protected:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr int kMaxHeaderDepth = 8;                 // a valid header nests 3 deep
constexpr size_t kPathShown = 4096;                // paths in messages: printable, this long at most

std::string shown_path(const std::string& p) { return printable(p, kPathShown); }

class MappedFile final : public ByteSource {
 public:
  explicit MappedFile(const std::filesystem::path& path) {
    const RegularFile file(path);  // checked to be a regular file before and after opening
    size_ = static_cast<size_t>(file.size());
    if (size_ > 0) {  // mmap of length 0 fails; an empty file is reported by the parser
      void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
      if (m == MAP_FAILED) {
        throw Error(fmt::format("{}: cannot map {} bytes: {}", shown_path(path.string()), size_, std::strerror(errno)));
      }
      data_ = static_cast<const uint8_t*>(m);
    }
  }  // the mapping keeps the file after the descriptor is closed
  ~MappedFile() override {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
};

class OwnedBytes final : public ByteSource {
 public:
  explicit OwnedBytes(std::vector<uint8_t> v) : v_(std::move(v)) {
    data_ = v_.data();
    size_ = v_.size();
  }

 private:
  std::vector<uint8_t> v_;
};

struct DtypeEntry {
  const char* name;
  uint64_t size;
  std::optional<DType> dtype;
};
// Every dtype of the safetensors format with a whole-byte element size.
constexpr DtypeEntry kDtypes[] = {
    {"BOOL", 1, std::nullopt},    {"U8", 1, std::nullopt},      {"I8", 1, DType::i8},     {"F8_E5M2", 1, std::nullopt},
    {"F8_E4M3", 1, std::nullopt}, {"F8_E8M0", 1, std::nullopt}, {"I16", 2, std::nullopt}, {"U16", 2, std::nullopt},
    {"F16", 2, DType::f16},       {"BF16", 2, DType::bf16},     {"I32", 4, DType::i32},   {"U32", 4, std::nullopt},
    {"F32", 4, DType::f32},       {"F64", 8, std::nullopt},     {"I64", 8, std::nullopt}, {"U64", 8, std::nullopt},
    {"C64", 8, std::nullopt},
};

const DtypeEntry* find_dtype(const std::string& s) {
  for (const auto& d : kDtypes) {
    if (s == d.name) return &d;
  }
  return nullptr;
}

const char* stored_dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i32: return "I32";
    case DType::i8: return "I8";
  }
  return "?";
}

// A JSON value for an error message: short and printable, however large the value is.
std::string show(const json& v) { return json_excerpt(v); }

// A non-negative JSON integer (parsed ones are unsigned; built ones may be signed).
bool is_count(const json& v) { return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0); }

// A key given twice in the header: a tensor named twice, or a field given twice in one entry.
std::string header_key_name(const std::vector<std::string>& path) {
  if (path.size() == 1) return fmt::format("tensor '{}'", path[0]);
  std::string rest;
  for (size_t i = 1; i < path.size(); ++i) rest += (i > 1 ? "." : "") + path[i];
  return fmt::format("tensor '{}': key '{}'", path[0], rest);
}

// A key given twice in the index: a tensor listed twice in weight_map, or any other key.
std::string index_key_name(const std::vector<std::string>& path) {
  if (path.size() == 2 && path[0] == "weight_map") return fmt::format("tensor '{}' (in weight_map)", path[1]);
  std::string all;
  for (size_t i = 0; i < path.size(); ++i) all += (i ? "." : "") + path[i];
  return fmt::format("key '{}'", all);
}

// Parses and checks the header of a safetensors image.
std::map<std::string, TensorInfo> parse_header(const uint8_t* data, size_t size, const std::string& origin) {
  if (size < 8) {
    throw Error(fmt::format("{}: file is {} bytes, too short for the 8-byte header length (truncated?)", origin, size));
  }
  uint64_t n = 0;
  std::memcpy(&n, data, 8);  // little-endian (static_assert above)
  if (n > kMaxHeaderBytes) {
    throw Error(fmt::format("{}: header length {} exceeds the {} byte limit (not a safetensors file?)", origin, n,
                            kMaxHeaderBytes));
  }
  if (n > size - 8) {
    throw Error(
        fmt::format("{}: header length {} runs past the end of the file ({} bytes; truncated?)", origin, n, size));
  }
  JsonReadOptions jo;
  jo.max_depth = kMaxHeaderDepth;
  jo.what = "header";
  jo.name_key = header_key_name;  // a tensor named twice is an error, as in the reference implementation
  const json header = parse_json(std::string_view(reinterpret_cast<const char*>(data + 8), n), origin, jo);
  if (!header.is_object()) throw Error(fmt::format("{}: header is not a JSON object: {}", origin, show(header)));

  const uint64_t data_start = 8 + n;
  const uint64_t data_size = size - data_start;
  std::map<std::string, TensorInfo> tensors;
  uint64_t data_end = 0;  // the end of the last tensor's bytes, relative to the data section
  std::string last;       // the tensor that ends there
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    auto fail = [&](const std::string& what) {
      throw Error(fmt::format("{}: tensor '{}': {}", origin, printable(name), what));
    };
    const json& e = it.value();
    if (!e.is_object()) fail(fmt::format("entry is not an object: {}", show(e)));
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end() || sh == e.end() || off == e.end()) fail("entry needs 'dtype', 'shape' and 'data_offsets'");
    if (!dt->is_string()) fail(fmt::format("dtype is not a string: {}", show(*dt)));
    TensorInfo info;
    info.name = name;
    info.dtype_name = dt->get<std::string>();
    const DtypeEntry* d = find_dtype(info.dtype_name);
    if (!d) fail(fmt::format("unknown dtype '{}'", printable(info.dtype_name)));
    info.dtype = d->dtype;
    if (!sh->is_array()) fail(fmt::format("shape is not a list: {}", show(*sh)));
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& dim : *sh) {
      if (!is_count(dim) || dim.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(fmt::format("shape {} has an entry that is not a non-negative integer", show(*sh)));
      }
      const uint64_t v = dim.get<uint64_t>();
      info.shape.push_back(static_cast<int64_t>(v));
      overflow = overflow || __builtin_mul_overflow(numel, v, &numel);
    }
    uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(numel, d->size, &nbytes)) {
      fail(fmt::format("shape {} is too large", show(*sh)));
    }
    if (!off->is_array() || off->size() != 2 || !is_count((*off)[0]) || !is_count((*off)[1])) {
      fail(fmt::format("data_offsets must be two non-negative integers, got {}", show(*off)));
    }
    const uint64_t b = (*off)[0].get<uint64_t>(), en = (*off)[1].get<uint64_t>();
    if (b > en) fail(fmt::format("data_offsets [{}, {}] end before they begin", b, en));
    if (en > data_size) {
      fail(
          fmt::format("data_offsets [{}, {}] run past the data section ({} bytes; truncated file?)", b, en, data_size));
    }
    if (en - b != nbytes) {
      fail(fmt::format("data_offsets [{}, {}] hold {} bytes but {} {} needs {}", b, en, en - b, info.dtype_name,
                       show(*sh), nbytes));
    }
    info.begin = data_start + b;
    info.end = data_start + en;
    if (en >= data_end) {
      data_end = en;
      last = name;
    }
    tensors.emplace(name, std::move(info));
  }
  // No two tensors may share bytes.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [name, t] : tensors) {
    if (t.end > t.begin) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      throw Error(fmt::format("{}: tensor '{}': its data overlaps tensor '{}'", origin, printable(by_offset[i]->name),
                              printable(by_offset[i - 1]->name)));
    }
  }
  // Bytes after the last tensor belong to nothing: the reference implementation refuses them too.
  if (data_end != data_size) {
    if (tensors.empty()) {
      throw Error(fmt::format("{}: the header lists no tensors but {} data bytes follow it", origin, data_size));
    }
    throw Error(
        fmt::format("{}: {} bytes after the end of the tensor data (the last tensor, '{}', ends at byte {} of "
                    "the {}-byte data section): a damaged file, or not a safetensors file",
                    origin, data_size - data_end, printable(last), data_end, data_size));
  }
  return tensors;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TensorInfo

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TensorInfo::is_float() const {
  return dtype && (*dtype == DType::f32 || *dtype == DType::bf16 || *dtype == DType::f16);
}

std::string TensorInfo::describe() const {
  return fmt::format("{} [{}]", printable(dtype_name), fmt::join(shape, ", "));
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

SafetensorsFile::SafetensorsFile(std::shared_ptr<const ByteSource> src, std::string origin)
    : src_(std::move(src)), origin_(std::move(origin)) {
  tensors_ = parse_header(src_->data(), src_->size(), shown_path(origin_));
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  return SafetensorsFile(std::make_shared<MappedFile>(path), path.string());
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<uint8_t> bytes, std::string origin) {
  return SafetensorsFile(std::make_shared<OwnedBytes>(std::move(bytes)), std::move(origin));
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> v;
  v.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) v.push_back(name);
  return v;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw Error(fmt::format("{}: tensor '{}': not in this file ({} tensors)", shown_path(origin_), printable(name),
                            tensors_.size()));
  }
  return it->second;
}

std::span<const uint8_t> SafetensorsFile::bytes(const std::string& name) const {
  const TensorInfo& t = info(name);
  return {src_->data() + t.begin, static_cast<size_t>(t.nbytes())};
}

const TensorInfo& SafetensorsFile::float_info(const std::string& name, const char* what) const {
  const TensorInfo& t = info(name);
  if (!t.is_float()) {
    throw Error(fmt::format("{}: tensor '{}': cannot {} a {} tensor (supported: BF16, F16, F32)", shown_path(origin_),
                            printable(name), what, printable(t.dtype_name)));
  }
  return t;
}

void SafetensorsFile::read_f32(const std::string& name, float* dst) const {
  const TensorInfo& t = float_info(name, "read as f32");
  const uint8_t* src = src_->data() + t.begin;
  const size_t n = static_cast<size_t>(t.numel());
  switch (*t.dtype) {
    case DType::f32:
      if (n) std::memcpy(dst, src, n * 4);
      break;
    case DType::bf16:
      for (size_t i = 0; i < n; ++i) {
        bf16_t v;
        std::memcpy(&v.bits, src + 2 * i, 2);
        dst[i] = bf16_to_f32(v);
      }
      break;
    case DType::f16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      break;
    default: break;  // excluded by float_info
  }
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  std::vector<float> v(static_cast<size_t>(float_info(name, "read as f32").numel()));
  read_f32(name, v.data());
  return v;
}

void SafetensorsFile::read_bf16(const std::string& name, bf16_t* dst) const {
  const TensorInfo& t = float_info(name, "read as bf16");
  const uint8_t* src = src_->data() + t.begin;
  const size_t n = static_cast<size_t>(t.numel());
  switch (*t.dtype) {
    case DType::bf16:
      if (n) std::memcpy(dst, src, n * 2);
      break;
    case DType::f32:
      for (size_t i = 0; i < n; ++i) {
        float f;
        std::memcpy(&f, src + 4 * i, 4);
        dst[i] = f32_to_bf16(f);
      }
      break;
    case DType::f16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f32_to_bf16(f16_to_f32(h));  // f16 -> f32 is exact: one rounding
      }
      break;
    default: break;
  }
}

// ---------------------------------------------------------------------------------------------
// Checkpoint

std::optional<std::string> text_model_name(const std::string& stored) {
  auto starts = [&](std::string_view p) { return stored.size() > p.size() && stored.compare(0, p.size(), p) == 0; };
  if (starts("model.language_model."))
    return "model." + stored.substr(std::string_view("model.language_model.").size());
  if (starts("model.visual.") || starts("model.vision")) return std::nullopt;
  if (starts("model.") || starts("lm_head.")) return stored;
  return std::nullopt;  // visual., mtp., and anything else outside the text model
}

Checkpoint Checkpoint::open(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  Checkpoint c;
  c.path_ = path;
  std::error_code ec;
  auto add = [&c](const std::string& stored, size_t shard, const std::string& file) {
    std::optional<std::string> name = text_model_name(stored);
    if (!name) {
      c.ignored_.push_back(stored);
      return;
    }
    auto [it, fresh] = c.entries_.emplace(*name, Entry{shard, stored});
    if (!fresh) {
      throw Error(fmt::format("{}: tensors '{}' and '{}' are both the text model's '{}'", shown_path(file),
                              printable(it->second.stored), printable(stored), printable(*name)));
    }
  };
  auto add_file = [&](const fs::path& file) {
    c.shards_.push_back(SafetensorsFile::open(file));
    const SafetensorsFile& s = c.shards_.back();
    for (const std::string& stored : s.names()) add(stored, c.shards_.size() - 1, s.origin());
  };

  if (fs::is_directory(path, ec)) {
    const fs::path index = path / "model.safetensors.index.json";
    const fs::path single = path / "model.safetensors";
    if (fs::exists(index, ec)) {
      const std::string idx = shown_path(index.string());
      JsonReadOptions jo;
      jo.name_key = index_key_name;
      const json j = read_json_file(index, jo);  // a regular file, <= 64 MiB, <= 64 deep, no key twice
      if (!j.is_object()) throw Error(fmt::format("{}: not a JSON object", idx));
      auto wm = j.find("weight_map");
      if (wm == j.end() || !wm->is_object()) throw Error(fmt::format("{}: no 'weight_map' object", idx));
      std::map<std::string, size_t> shard_of_file;
      for (auto it = wm->begin(); it != wm->end(); ++it) {
        const std::string& stored = it.key();
        if (!it.value().is_string()) {
          throw Error(
              fmt::format("{}: tensor '{}': shard is not a file name: {}", idx, printable(stored), show(it.value())));
        }
        if (!text_model_name(stored)) {
          c.ignored_.push_back(stored);
          continue;  // vision / MTP shards are never opened
        }
        const std::string file = it.value().get<std::string>();
        const fs::path rel(file);
        if (file.empty() || rel.is_absolute() ||
            std::any_of(rel.begin(), rel.end(), [](const fs::path& part) { return part == ".."; })) {
          throw Error(fmt::format("{}: tensor '{}': shard '{}' is not a file name inside the checkpoint folder", idx,
                                  printable(stored), printable(file)));
        }
        auto [sit, fresh] = shard_of_file.emplace(file, c.shards_.size());
        if (fresh) {
          const fs::path shard = path / rel;
          if (!fs::exists(shard, ec)) {
            throw Error(fmt::format("{}: tensor '{}': its shard {} does not exist", idx, printable(stored),
                                    shown_path(shard.string())));
          }
          c.shards_.push_back(SafetensorsFile::open(shard));  // refuses anything but a regular file
        }
        const SafetensorsFile& s = c.shards_[sit->second];
        if (!s.has(stored)) {
          throw Error(fmt::format("{}: tensor '{}': listed in shard {}, which does not hold it", idx, printable(stored),
                                  shown_path(s.origin())));
        }
        add(stored, sit->second, s.origin());
      }
    } else if (fs::exists(single, ec)) {
      add_file(single);  // refuses anything but a regular file
    } else {
      throw Error(fmt::format("{}: no model.safetensors.index.json or model.safetensors in this folder",
                              shown_path(path.string())));
    }
  } else if (fs::exists(path, ec)) {
    add_file(path);  // a regular file; anything else (a FIFO, a device) is refused with what it is
  } else {
    throw Error(fmt::format("{}: no such checkpoint file or folder", shown_path(path.string())));
  }
  std::sort(c.ignored_.begin(), c.ignored_.end());
  return c;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> v;
  v.reserve(entries_.size());
  for (const auto& [name, e] : entries_) v.push_back(name);
  return v;
}

const Checkpoint::Entry& Checkpoint::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    throw Error(fmt::format("{}: tensor '{}': not in this checkpoint ({} text-model tensors)",
                            shown_path(path_.string()), printable(name), entries_.size()));
  }
  return it->second;
}

TensorInfo Checkpoint::info(const std::string& name) const {
  const Entry& e = entry(name);
  TensorInfo t = shards_[e.shard].info(e.stored);
  t.name = name;
  return t;
}

const std::string& Checkpoint::file_of(const std::string& name) const { return shards_[entry(name).shard].origin(); }

const std::string& Checkpoint::stored_name(const std::string& name) const { return entry(name).stored; }

std::span<const uint8_t> Checkpoint::bytes(const std::string& name) const {
  const Entry& e = entry(name);
  return shards_[e.shard].bytes(e.stored);
}

void Checkpoint::read_f32(const std::string& name, float* dst) const {
  const Entry& e = entry(name);
  shards_[e.shard].read_f32(e.stored, dst);
}

std::vector<float> Checkpoint::read_f32(const std::string& name) const {
  const Entry& e = entry(name);
  return shards_[e.shard].read_f32(e.stored);
}

void Checkpoint::read_bf16(const std::string& name, bf16_t* dst) const {
  const Entry& e = entry(name);
  shards_[e.shard].read_bf16(e.stored, dst);
}

// ---------------------------------------------------------------------------------------------
// Writer

std::vector<uint8_t> safetensors_bytes(const std::vector<SafetensorsTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, dtype, shape, data] : tensors) {
    require(name != "__metadata__" && !header.contains(name),
            "write_safetensors: tensor name '{}' is reserved or repeated", name);
    int64_t numel = 1;
    for (int64_t d : shape) {
      require(d >= 0, "write_safetensors: tensor '{}' has a negative dimension", name);
      numel *= d;
    }
    require(data.size() == static_cast<size_t>(numel) * dtype_size(dtype),
            "write_safetensors: tensor '{}' has {} bytes but its shape and dtype need {}", name, data.size(),
            static_cast<size_t>(numel) * dtype_size(dtype));
    header[name] = {
        {"dtype", stored_dtype_name(dtype)}, {"shape", shape}, {"data_offsets", {offset, offset + data.size()}}};
    offset += data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> out(8 + text.size() + offset);
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  uint8_t* p = out.data() + 8 + text.size();
  for (const auto& t : tensors) {
    const auto& data = std::get<3>(t);
    if (!data.empty()) std::memcpy(p, data.data(), data.size());
    p += data.size();
  }
  return out;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::vector<uint8_t> bytes = safetensors_bytes(tensors, metadata);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(fmt::format("{}: cannot create: {}", path.string(), std::strerror(errno)));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) throw Error(fmt::format("{}: write failed", path.string()));
}

}  // namespace sg
