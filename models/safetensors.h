// safetensors.h: reading (and, for tests and tools, writing) safetensors files, and a Hugging Face
// checkpoint folder (one model.safetensors, or shards listed by model.safetensors.index.json).
//
// Format: an 8-byte little-endian header length N, N bytes of JSON header
//   {"<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {...}}   (ignored)
// then the data section; offsets are relative to its start. Everything is checked on open: the path
// a regular file (checked before opening: a FIFO or a device is refused, never waited on), N within
// the file and below 100 MB, the header a JSON object nested at most 8 deep with no key twice (a
// tensor named twice is an error, as in the reference implementation), every entry's dtype known,
// shape made of non-negative integers, 0 <= begin <= end <= data size, end - begin == numel *
// element size, no two tensors overlapping, and no bytes after the last tensor's data (the
// reference implementation refuses them too). After that no read can leave the file. Files are
// memory-mapped. The index file is read as models/json_read.h reads every JSON file (a regular
// file of at most 64 MiB, nested at most 64 deep, no key twice).
// Every error is an sg::Error naming the file and, where there is one, the tensor; names and
// dtypes taken from the file are shown escaped (engine/text.h).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/numeric.h"

namespace sg {

struct TensorInfo {
  std::string name;
  std::string dtype_name;       // as stored: "BF16", "F16", "F32", "I64", "F8_E4M3", ...
  std::optional<DType> dtype;   // set for F32, BF16, F16, I32, I8 (the dtypes stepgraph has)
  std::vector<int64_t> shape;   // may be empty (a scalar: numel 1)
  uint64_t begin = 0, end = 0;  // byte range in the file (absolute offsets, already checked)

  int64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
  // True for BF16, F16 and F32: the dtypes read_f32 / read_bf16 convert.
  bool is_float() const;
  std::string describe() const;  // "BF16 [8192, 2560]"
};

class ByteSource;  // the file's bytes: a memory map or an owned buffer (safetensors.cpp)

class SafetensorsFile {
 public:
  // Maps and checks the file. Throws sg::Error naming the file (and tensor) on any problem.
  static SafetensorsFile open(const std::filesystem::path& path);
  // The same checks on an in-memory image (tests, fuzzing); `origin` stands for the file name.
  static SafetensorsFile from_bytes(std::vector<uint8_t> bytes, std::string origin);

  const std::string& origin() const { return origin_; }  // the path, as given
  std::vector<std::string> names() const;                // sorted
  size_t size() const { return tensors_.size(); }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // throws naming the file and the tensor
  // The stored bytes (little-endian, row-major), valid while this object (or a copy) lives.
  std::span<const uint8_t> bytes(const std::string& name) const;
  // Converts BF16 / F16 / F32 to f32 (exactly); dst holds info(name).numel() values. Other dtypes
  // throw naming the file, the tensor and the dtype.
  void read_f32(const std::string& name, float* dst) const;
  std::vector<float> read_f32(const std::string& name) const;
  // Converts to bf16: BF16 copied, F32 and F16 rounded to nearest even (one rounding).
  void read_bf16(const std::string& name, bf16_t* dst) const;

 private:
  SafetensorsFile(std::shared_ptr<const ByteSource> src, std::string origin);
  const TensorInfo& float_info(const std::string& name, const char* what) const;

  std::shared_ptr<const ByteSource> src_;
  std::string origin_;
  std::map<std::string, TensorInfo> tensors_;
};

// The name the text model reads for a stored tensor name, or nullopt when the tensor is not part of
// the text model: "model.language_model.X" -> "model.X"; "model.X" and "lm_head.X" stay; vision
// ("model.visual.", "visual.", ...), MTP ("mtp.") and anything else -> nullopt.
std::optional<std::string> text_model_name(const std::string& stored);

class Checkpoint {
 public:
  // `path`: a folder holding model.safetensors.index.json (its weight_map names the shard of every
  // tensor) or model.safetensors; or a single .safetensors file. Every kept tensor's shard is opened
  // and checked to hold it. Tensors are exposed under their text-model names (text_model_name);
  // the others are counted in ignored(). A missing lm_head.weight is the caller's business (tied
  // embeddings): check has().
  static Checkpoint open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  std::vector<std::string> names() const;  // text-model names, sorted
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  // info(name).name is the text-model name; the other fields describe the stored tensor.
  TensorInfo info(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;      // the shard's path
  const std::string& stored_name(const std::string& name) const;  // the name inside the shard
  std::span<const uint8_t> bytes(const std::string& name) const;
  void read_f32(const std::string& name, float* dst) const;
  std::vector<float> read_f32(const std::string& name) const;
  void read_bf16(const std::string& name, bf16_t* dst) const;
  const std::vector<std::string>& ignored() const { return ignored_; }  // stored names, sorted
  size_t num_shards() const { return shards_.size(); }

 private:
  struct Entry {
    size_t shard = 0;
    std::string stored;
  };
  const Entry& entry(const std::string& name) const;

  std::filesystem::path path_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, Entry> entries_;
  std::vector<std::string> ignored_;
};

// Writer (tests and tools): tensors in the given order, data packed back to back; the header is
// padded with spaces to a multiple of 8 bytes (as the reference implementation does) and carries
// `metadata` as "__metadata__" when non-empty. Each tensor's bytes must be numel * dtype size.
using SafetensorsTensor = std::tuple<std::string, DType, std::vector<int64_t>, std::vector<uint8_t>>;
std::vector<uint8_t> safetensors_bytes(const std::vector<SafetensorsTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace sg
