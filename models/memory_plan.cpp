// memory_plan.cpp: the device memory plan of a model (entries per tensor kind, per category) and
// the up-front "does it fit" check.
#include "models/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "engine/error.h"
#include "engine/tensor.h"
#include "models/step_metadata.h"

namespace sg {
namespace {

constexpr size_t kAlign = 256;  // the arena's alignment (engine/arena.h)
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

MemoryCategory category_of(const std::string& section, const std::string& what) {
  for (int i = 0; i < kMemoryCategories; ++i) {
    const auto c = static_cast<MemoryCategory>(i);
    if (section == category_name(c)) return c;
  }
  throw Error(
      fmt::format("memory plan: '{}' was taken under section '{}', which is not a memory category", what, section));
}

// "layers.12.mlp.gate_up" -> "layers.*.mlp.gate_up"; any other name as it is.
std::string per_layer_name(const std::string& what) {
  constexpr std::string_view kPrefix = "layers.";
  if (what.rfind(kPrefix, 0) != 0) return what;
  size_t i = kPrefix.size();
  while (i < what.size() && what[i] >= '0' && what[i] <= '9') ++i;
  if (i == kPrefix.size() || i >= what.size() || what[i] != '.') return what;
  return std::string(kPrefix) + "*" + what.substr(i);
}

}  // namespace

std::string_view category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::weights: return "weights";
    case MemoryCategory::conv_state: return "conv state";
    case MemoryCategory::ssm_state: return "ssm state";
    case MemoryCategory::kv_cache: return "kv cache";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::step_metadata: return "step metadata";
    case MemoryCategory::workspace: return "workspace";
  }
  return "?";
}

size_t MemoryPlan::bytes_of(MemoryCategory c) const {
  size_t b = 0;
  for (const MemoryEntry& e : entries) b += e.category == c ? e.bytes : 0;
  return b;
}

std::string MemoryPlan::table() const {
  std::string out = fmt::format("{:<14} {:<46} {:<28} {:>6} {:>10}\n", "category", "name", "shape", "count", "bytes");
  for (const MemoryEntry& e : entries) {
    out += fmt::format("{:<14} {:<46} {:<28} {:>6} {:>10}\n", category_name(e.category), e.name, e.shape, e.count,
                       format_bytes(static_cast<double>(e.bytes)));
  }
  for (int i = 0; i < kMemoryCategories; ++i) {
    const auto c = static_cast<MemoryCategory>(i);
    out += fmt::format("{:<14} {:>93}\n", fmt::format("= {}", category_name(c)),
                       format_bytes(static_cast<double>(bytes_of(c))));
  }
  out += fmt::format("{:<14} {:>93}\n", "= total", format_bytes(static_cast<double>(total)));
  return out;
}

MemoryPlan plan_of(const Arena& measured) {
  MemoryPlan plan;
  std::map<std::pair<std::string, std::string>, size_t> index;  // (name, shape) -> entry
  for (const Arena::Entry& e : measured.entries()) {
    const MemoryCategory cat = category_of(e.section, e.what);
    const std::string name = per_layer_name(e.what);
    const size_t bytes = align_up(e.bytes);
    const auto [it, added] = index.try_emplace({name, e.shape}, plan.entries.size());
    if (added) {
      plan.entries.push_back({name, e.shape, 1, bytes, cat});
    } else {
      MemoryEntry& m = plan.entries[it->second];
      require(m.category == cat, "memory plan: '{}' was taken under two sections", e.what);
      ++m.count;
      m.bytes += bytes;
    }
    plan.total += bytes;
  }
  return plan;
}

MemoryPlan plan_memory(const Qwen35Config& c, const StepLayoutParams& p) {
  c.validate(fmt::format("plan_memory: config '{}'", c.name));
  const std::pair<const char*, int> counts[] = {{"num_slots", p.num_slots},
                                                {"max_context", p.max_context},
                                                {"max_decode_batch", p.max_decode_batch},
                                                {"max_prefill_seqs", p.max_prefill_seqs}};
  for (const auto& [key, v] : counts) {
    if (v < 1) throw Error(fmt::format("plan_memory: {} must be >= 1, got {}", key, v));
  }
  if (p.max_prefill_tokens < 0) {
    throw Error(fmt::format("plan_memory: max_prefill_tokens must be >= 0, got {}", p.max_prefill_tokens));
  }
  if (p.head_rows < 0 || p.head_rows > c.vocab) {
    throw Error(
        fmt::format("plan_memory: head_rows must be in [0, {}] (0: the vocabulary), got {}", c.vocab, p.head_rows));
  }
  Arena m = Arena::measure();
  lay_out_step(m, c, p);
  return plan_of(m);
}

void check_fits(const MemoryPlan& plan, size_t device_free_bytes) {
  if (plan.total <= device_free_bytes) return;
  throw PlanDoesNotFit(fmt::format("plan needs {} but the device has {} free\n{}",
                                   format_bytes(static_cast<double>(plan.total)),
                                   format_bytes(static_cast<double>(device_free_bytes)), plan.table()));
}

}  // namespace sg
