// serve_reference.cpp: a scheduled step on the CPU reference model (see serve_reference.h).
#include "models/serve_reference.h"

#include "engine/error.h"
#include "kernels/ref/mlp_ref.h"

namespace sg {

std::vector<int32_t> run_reference_step(ReferenceModel& model, const ScheduledStep& step) {
  const int64_t V = model.config().vocab;
  std::vector<float> logits;
  if (step.kind == StepKind::prefill) {
    std::vector<Sequence> batch;
    for (const PrefillRequest& p : step.prefill) {
      if (p.start_position == 0) model.reset(p.slot);
      require(model.length(p.slot) == p.start_position,
              "serve: a prefill chunk for slot {} starts at position {}, but the slot holds {} tokens", p.slot,
              p.start_position, model.length(p.slot));
      batch.push_back(Sequence{p.slot, std::vector<int64_t>(p.tokens.begin(), p.tokens.end())});
    }
    logits = model.prefill(batch);
  } else {
    std::vector<int> slots;
    std::vector<int64_t> tokens;
    for (const DecodeRequest& d : step.decode) {
      require(model.length(d.slot) == d.position,
              "serve: a decode row for slot {} at position {}, but the slot holds {} tokens", d.slot, d.position,
              model.length(d.slot));
      slots.push_back(d.slot);
      tokens.push_back(d.token);
    }
    logits = model.decode(slots, tokens);
  }
  std::vector<int32_t> out;
  for (size_t i = 0; i < step.requests.size(); ++i) {
    out.push_back(static_cast<int32_t>(ref::argmax(logits.data() + i * static_cast<size_t>(V), V)));
  }
  return out;
}

}  // namespace sg
