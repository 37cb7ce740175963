// fuzz_safetensors_index: model.safetensors.index.json through Checkpoint::open. Each input is
// written as the index of a folder that also holds one valid shard (model-00001-of-00001.safetensors,
// tensors model.embed_tokens.weight, model.norm.weight, lm_head.weight), so weight_map entries that
// name it reach the shard checks. sg::Error is the expected outcome; an accepted checkpoint must
// expose only text-model names, each held by a shard inside the folder, with its bytes readable.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/error.h"
#include "models/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

namespace fs = std::filesystem;

namespace {

fs::path g_dir;

void remove_dir() {
  std::error_code ec;
  if (!g_dir.empty()) fs::remove_all(g_dir, ec);
}

const fs::path& folder() {
  if (g_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "sg-fuzz-index-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) std::abort();
    g_dir = tmpl;
    std::atexit(remove_dir);
    std::vector<uint8_t> four(4 * 2, 0), eight(8 * 4, 0);
    sg::write_safetensors(g_dir / "model-00001-of-00001.safetensors",
                          {{"model.embed_tokens.weight", sg::DType::bf16, {2, 2}, four},
                           {"model.norm.weight", sg::DType::f32, {8}, eight},
                           {"lm_head.weight", sg::DType::bf16, {4}, four}});
  }
  return g_dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path& dir = folder();
  {
    std::ofstream out(dir / "model.safetensors.index.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const sg::Checkpoint c = sg::Checkpoint::open(dir);
    const std::vector<std::string> names = c.names();
    FUZZ_CHECK(std::is_sorted(names.begin(), names.end()), "names not sorted");
    FUZZ_CHECK(c.num_shards() <= 1, "%zu shards opened, the folder holds one", c.num_shards());
    for (const std::string& n : names) {
      FUZZ_CHECK(sg::text_model_name(c.stored_name(n)) == n, "name does not map back");
      const sg::TensorInfo t = c.info(n);
      FUZZ_CHECK(t.name == n, "info name");
      FUZZ_CHECK(fs::path(c.file_of(n)).parent_path() == dir, "shard outside the folder");
      FUZZ_CHECK(c.bytes(n).size() == t.nbytes(), "bytes size");
      (void)c.read_f32(n);
    }
  } catch (const sg::Error& e) {
    FUZZ_CHECK(printable_message(e.what()), "unprintable or oversized message (%zu bytes)",
               std::string(e.what()).size());
  }
  return 0;
}
