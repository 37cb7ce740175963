// fuzz_safetensors: SafetensorsFile::from_bytes on arbitrary bytes (the header length, the JSON
// header, the data section). sg::Error is the expected outcome of a bad image. An image that is
// accepted must keep every promise of models/safetensors.h: each tensor's byte range inside the
// image and numel * element size long, no two tensors overlapping, and every float tensor readable
// as f32 and bf16.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/error.h"
#include "models/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  try {
    const sg::SafetensorsFile f = sg::SafetensorsFile::from_bytes(std::move(bytes), "fuzz.safetensors");
    const std::vector<std::string> names = f.names();
    FUZZ_CHECK(names.size() == f.size(), "names %zu, size %zu", names.size(), f.size());
    FUZZ_CHECK(std::is_sorted(names.begin(), names.end()), "names not sorted");
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (const std::string& n : names) {
      FUZZ_CHECK(f.has(n), "listed tensor not found");
      const sg::TensorInfo& t = f.info(n);
      FUZZ_CHECK(t.begin <= t.end && t.end <= size, "range [%llu, %llu) outside %zu bytes", (unsigned long long)t.begin,
                 (unsigned long long)t.end, size);
      FUZZ_CHECK(t.begin >= 8, "tensor data inside the length prefix");
      for (int64_t d : t.shape) FUZZ_CHECK(d >= 0, "negative dimension");
      const auto span = f.bytes(n);
      FUZZ_CHECK(span.size() == t.nbytes(), "bytes() %zu != nbytes %llu", span.size(), (unsigned long long)t.nbytes());
      if (t.dtype) {
        FUZZ_CHECK(static_cast<uint64_t>(t.numel()) * sg::dtype_size(*t.dtype) == t.nbytes(), "size mismatch");
      }
      if (t.nbytes() > 0) ranges.emplace_back(t.begin, t.end);
      if (t.is_float()) {
        std::vector<float> f32 = f.read_f32(n);
        FUZZ_CHECK(f32.size() == static_cast<size_t>(t.numel()), "read_f32 size");
        std::vector<sg::bf16_t> b16(static_cast<size_t>(t.numel()));
        f.read_bf16(n, b16.data());
      } else {
        // Documented: other dtypes throw naming the tensor and the dtype.
        bool threw = false;
        try {
          (void)f.read_f32(n);
        } catch (const sg::Error&) {
          threw = true;
        }
        FUZZ_CHECK(threw, "read_f32 of a non-float tensor did not throw");
      }
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
      FUZZ_CHECK(ranges[i - 1].second <= ranges[i].first, "tensors overlap");
    }
  } catch (const sg::Error& e) {
    FUZZ_CHECK(printable_message(e.what()), "unprintable or oversized message (%zu bytes)",
               std::string(e.what()).size());
  }
  return 0;
}
