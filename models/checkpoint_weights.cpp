// checkpoint_weights.cpp: load_weights, the reference model's weights read from a Hugging Face
// checkpoint and checked against the config, and unused_text_tensor (see reference_model.h).
#include <fmt/format.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include "engine/host_memory.h"
#include "engine/text.h"
#include "models/reference_memory.h"
#include "models/reference_model.h"
#include "models/safetensors.h"

namespace sg {

namespace {

// "3 non-finite values (first: nan at index 17)" for a tensor with NaN or Inf, else "".
std::string nonfinite_summary(const std::vector<float>& v) {
  size_t count = 0, first = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      if (count++ == 0) first = i;
    }
  }
  if (count == 0) return {};
  return fmt::format("{} non-finite value{} (first: {} at index {})", count, count == 1 ? "" : "s", v[first], first);
}

}  // namespace

bool unused_text_tensor(const std::string& name, const Qwen35Config& c) {
  auto ends = [&](std::string_view e) {
    return name.size() >= e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0;
  };
  return (name == "lm_head.weight" && c.tie_word_embeddings) || ends("rotary_emb.inv_freq");
}

HostWeights load_weights(const Checkpoint& ckpt, const Qwen35Config& c) {
  check_host_memory(reference_weight_bytes(c),
                    fmt::format("loading checkpoint {} as f32", printable(ckpt.path().string(), 4096)),
                    "every tensor of the config");
  HostWeights w;
  std::vector<std::string> problems;
  // A text-model tensor the config has no use for is a model of another kind (attention with
  // biases, more layers than num_hidden_layers): refused, as running without it would compute
  // something else than the checkpoint's model. Two are dropped as Hugging Face drops them: a stored
  // lm_head under tied embeddings, and rotary inverse frequencies (recomputed from the config).
  std::set<std::string> used;
  for (const auto& [name, shape] : expected_weights(c)) used.insert(name);
  for (const std::string& name : ckpt.names()) {
    if (used.count(name) || unused_text_tensor(name, c)) continue;
    problems.push_back(
        fmt::format("{} ({}) is not a tensor of this model (a bias, or a layer past num_hidden_layers = "
                    "{}?): a checkpoint of another architecture",
                    printable(name), ckpt.info(name).describe(), c.layers));
  }
  for (const auto& [name, shape] : expected_weights(c)) {
    if (!ckpt.has(name)) {
      problems.push_back(fmt::format("missing {} {}", name, shape_str(shape)));
      continue;
    }
    const TensorInfo info = ckpt.info(name);
    bool ok = info.shape == shape;
    // conv1d.weight [C, 1, K] may also be stored squeezed as [C, K].
    if (!ok && shape.size() == 3 && shape[1] == 1 && info.shape == std::vector<int64_t>{shape[0], shape[2]}) ok = true;
    if (!ok) {
      problems.push_back(fmt::format("{} is {}, expected shape {}", name, info.describe(), shape_str(shape)));
      continue;
    }
    if (!info.is_float()) {
      problems.push_back(fmt::format("{} is {}: only BF16, F16 and F32 are read", name, info.describe()));
      continue;
    }
    std::vector<float> values = ckpt.read_f32(name);
    // A NaN or Inf weight can only produce garbage tokens: refuse it here, naming the tensor.
    if (const std::string bad = nonfinite_summary(values); !bad.empty()) {
      problems.push_back(fmt::format("{} (in {}) has {}", name, printable(ckpt.file_of(name), 4096), bad));
      continue;
    }
    w[name] = HostTensor{shape, std::move(values)};
  }
  if (!problems.empty()) {
    std::string msg = fmt::format("checkpoint {} cannot be used with config '{}': {} problem(s):",
                                  printable(ckpt.path().string(), 4096), printable(c.name), problems.size());
    const size_t shown = std::min<size_t>(problems.size(), 20);
    for (size_t i = 0; i < shown; ++i) msg += "\n  " + problems[i];
    if (shown < problems.size()) msg += fmt::format("\n  ... and {} more", problems.size() - shown);
    throw std::invalid_argument(msg);
  }
  return w;
}

}  // namespace sg
