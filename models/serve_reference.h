// serve_reference.h: the CPU reference model (models/reference_model.h) as the executor of a
// serving run (models/scheduler.h): a prefill step is one varlen batch of the step's chunks (a
// chunk that starts a prompt first resets its slot: a freed slot's state never leaks into the
// next request), a decode step one batch of its rows; each returns the greedy token of every
// sequence (argmax, ties to the lowest id). Pure host code.
#pragma once
#include <cstdint>
#include <vector>

#include "models/reference_model.h"
#include "models/scheduler.h"

namespace sg {

// Runs `step` on `model` (which needs at least the scheduler's slots and context); checks that
// every chunk continues its slot exactly where the slot's sequence ended.
std::vector<int32_t> run_reference_step(ReferenceModel& model, const ScheduledStep& step);

}  // namespace sg
