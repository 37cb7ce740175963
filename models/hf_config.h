// hf_config.h: Hugging Face config.json -> Qwen35Config.
//
// Accepts a text config (Qwen3_5TextConfig, model_type "qwen3_5_text") or a multimodal one
// (Qwen3_5Config) whose text part is the nested `text_config` object; keys are read from the text
// part. Keys:
//   required integers > 0: hidden_size, num_hidden_layers, intermediate_size, vocab_size,
//     num_attention_heads, num_key_value_heads, head_dim, linear_num_key_heads,
//     linear_num_value_heads, linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim
//   required number > 0: rms_norm_eps
//   rope theta (required; HF would default to 10000): rope_parameters.rope_theta (or, as in HF,
//     a non-empty legacy rope_scaling object in place of rope_parameters), else top-level rope_theta;
//     rope_type / type there must be "default"
//   partial_rotary_factor: rope_parameters.partial_rotary_factor, else top-level, else 0.25;
//     head_dim * factor must be an even integer
//   layer_types: optional list of "linear_attention" / "full_attention", one per layer; when
//     absent, derived as HF does from full_attention_interval (default 4)
//   tie_word_embeddings: optional bool (text config, else the top level; both present and
//     different is an error), default false as in HF
// Rejected with a clear error (the engine does not implement them): attn_output_gate false,
// num_experts > 0 (MoE), rope_type other than "default", hidden_act other than "silu".
// Every error is an sg::Error naming the file (origin) and the key, e.g.
//   "/x/config.json: key 'text_config.hidden_size': missing (required)".
#pragma once
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "models/qwen35_config.h"

namespace sg {

// `origin` names the source in errors (a file path). The result's name is `origin`.
Qwen35Config parse_hf_config(const nlohmann::json& config, const std::string& origin);

// Reads and parses a config.json. The file must be a regular file of at most 64 MiB (checked before
// it is opened: a FIFO or /dev/zero is refused, never waited on or read without end), its JSON
// nested at most 64 deep with no key given twice (models/json_read.h). Strings from the file are
// shown escaped in errors (engine/text.h). The result's name is the name of the folder holding the
// file (e.g. "Qwen3.5-4B"), or the path when there is none.
Qwen35Config load_hf_config(const std::filesystem::path& config_json);

}  // namespace sg
