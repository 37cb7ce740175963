// cmd_generate.cpp: `stepgraph generate`: greedy generation from token ids. For now only the CPU
// reference model (models/reference_model.h) runs it (--cpu); the GPU model step comes later.
// Weights: a Hugging Face checkpoint folder (--weights DIR: config.json + safetensors), or the
// synthetic weights of a preset (--preset; with --cpu and no --weights the default is 'tiny',
// since the CPU reference of the real sizes is very slow).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/error.h"
#include "models/hf_config.h"
#include "models/qwen35_config.h"
#include "models/reference_model.h"
#include "models/safetensors.h"
#include "tools/cli/commands.h"

namespace sg::cli {
namespace {

struct GenerateOptions {
  std::string weights;
  std::string preset;  // empty: the default (see below)
  std::string tokens = "1,2,3";
  int max_new = 12;
  bool json = false;
  bool cpu = false;
  std::string dtype = "f32";
  uint64_t seed = 1;
  bool chunked = false;
};

std::vector<int64_t> parse_tokens(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto b = item.find_first_not_of(" \t");
    const auto e = item.find_last_not_of(" \t");
    if (b == std::string::npos) throw Error(fmt::format("--tokens: empty entry in '{}'", s));
    item = item.substr(b, e - b + 1);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size()) throw Error(fmt::format("--tokens: '{}' is not an integer token id", item));
    out.push_back(v);
  }
  if (out.empty()) throw Error("--tokens: no token ids given");
  return out;
}

int run(const GenerateOptions& o) {
  if (!o.cpu) {
    throw Error("the GPU model step is not implemented yet; use --cpu (the CPU reference model)");
  }
  const std::vector<int64_t> prompt = parse_tokens(o.tokens);
  Qwen35Config cfg;
  HostWeights weights;
  std::string source;
  std::vector<std::string> notes;
  if (!o.weights.empty()) {
    const std::filesystem::path dir(o.weights);
    if (!o.preset.empty()) notes.push_back(fmt::format("--preset {} ignored: --weights gives the config", o.preset));
    cfg = load_hf_config(dir / "config.json");
    const Checkpoint ck = Checkpoint::open(dir);
    weights = load_weights(ck, cfg);
    source = fmt::format("checkpoint {} ({} shard(s), {} tensors ignored)", dir.string(), ck.num_shards(),
                         ck.ignored().size());
  } else {
    std::string name = o.preset;
    if (name.empty()) {
      name = "tiny";
      notes.push_back("no --weights: using the synthetic weights of preset 'tiny' (the CPU reference of the real "
                      "sizes is very slow; pass --preset to choose another)");
    }
    cfg = preset(name);
    double bytes = 0;
    for (const auto& [n, shape] : expected_weights(cfg)) {
      double numel = 1;
      for (int64_t d : shape) numel *= static_cast<double>(d);
      bytes += 4 * numel;
    }
    if (bytes > 2e9) {
      fmt::print(stderr, "note: the f32 synthetic weights of '{}' take {:.1f} GB of host memory, and the CPU "
                         "reference is slow at this size\n", name, bytes / 1e9);
    }
    weights = synthetic_weights(cfg, o.seed);
    source = fmt::format("synthetic weights of preset '{}' (seed {})", name, o.seed);
  }
  ReferenceOptions ro;
  ro.act = o.dtype == "bf16" ? ref::Store::bf16 : ref::Store::f32;
  ro.chunked_prefill = o.chunked;
  const int64_t ctx = static_cast<int64_t>(prompt.size()) + std::max(o.max_new, 1);
  ReferenceModel model(cfg, std::move(weights), 1, ctx, ro);

  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int64_t> out = model.generate(prompt, o.max_new);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (o.json) {
    nlohmann::json j;
    j["implementation"] = "cpu-reference";
    j["model"] = cfg.name;
    j["source"] = source;
    j["dtype"] = o.dtype;
    j["delta_rule_prefill"] = o.chunked ? "chunked" : "recurrent";
    j["prompt"] = prompt;
    j["generated"] = out;
    j["seconds"] = secs;
    j["notes"] = notes;
    fmt::print("{}\n", j.dump(2));
  } else {
    for (const auto& n : notes) fmt::print(stderr, "note: {}\n", n);
    fmt::print("model: {} (hidden {}, {} layers: {} GDN + {} attention, vocab {}), {}\n", cfg.name, cfg.hidden,
               cfg.layers, cfg.num_linear_attention(), cfg.num_full_attention(), cfg.vocab, source);
    fmt::print("implementation: CPU reference, {} activations, {} delta-rule prefill\n", o.dtype,
               o.chunked ? "chunked" : "recurrent");
    fmt::print("prompt ({} tokens): {}\n", prompt.size(), fmt::join(prompt, ","));
    fmt::print("generated ({} tokens, greedy, {:.2f} s): {}\n", out.size(), secs, fmt::join(out, ","));
  }
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("generate", "Greedy generation from token ids (for now on the CPU reference model: "
                                             "--cpu).");
  static GenerateOptions o;
  cmd->add_option("--weights", o.weights, "Hugging Face checkpoint folder (config.json + model.safetensors or "
                                          "shards); without it, a preset's synthetic weights")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--preset", o.preset, "Preset for synthetic weights (default 'tiny' with --cpu; "
                                        "`stepgraph info` lists them)");
  cmd->add_option("--tokens", o.tokens, "Prompt token ids, comma separated")->capture_default_str();
  cmd->add_option("--max-new", o.max_new, "Tokens to generate")->capture_default_str()->check(CLI::Range(0, 1000000));
  cmd->add_flag("--json", o.json, "Print the result as JSON");
  cmd->add_flag("--cpu", o.cpu, "Run the CPU reference model (for now the only implementation)");
  cmd->add_option("--dtype", o.dtype, "Activation dtype: f32 (parity with HF in f32) or bf16 (emulates a bf16 "
                                      "step; weights rounded to bf16)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--seed", o.seed, "Seed of the synthetic weights")->capture_default_str();
  cmd->add_flag("--chunked", o.chunked, "Chunked delta rule in prefill (default: recurrent)");
  cmd->callback([&action] {
    action = [] { return run(o); };
  });
}

}  // namespace sg::cli
