// CPU tests of a step fault's report (graphs/step_fault.h step_fault_message): the wording every
// command prints for a kernel that faulted in a step ("the graph decode 32 failed while it ran:
// ..."), for a graph, an eager step and no step at all, with and without the lost context, and with
// what the marginal costs' replays did (graphs/marginal.h marginal_replay_note). No CUDA device is
// needed: the message only names the CUDA error.
#include <string>

#include "graphs/marginal.h"
#include "graphs/step_fault.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {
const std::string kHint = ". To name the kernel node, run the step again eagerly";
}

TEST_CASE("step fault: a replayed graph's report, as bench, inspect, soak and ab print it", "[faults][step_fault]") {
  const std::string m =
      step_fault_message(RanStep{GraphKey::decode(32), true}, cudaErrorIllegalAddress, true, "", kHint);
  CHECK(m ==
        "the graph decode 32 failed while it ran: cudaErrorIllegalAddress (an illegal memory access was encountered); "
        "the CUDA context is lost, so this process cannot run further steps. To name the kernel node, run the step "
        "again eagerly");
}

TEST_CASE("step fault: an eager step, no step, a context that is not lost, no hint", "[faults][step_fault]") {
  CHECK(step_fault_message(RanStep{GraphKey::prefill(1024), false}, cudaErrorIllegalAddress, false, "", "") ==
        "the eager step prefill 1024 failed while it ran: cudaErrorIllegalAddress (an illegal memory access was "
        "encountered)");
  CHECK(step_fault_message(std::nullopt, cudaErrorLaunchFailure, false, "", "") ==
        "the step failed while it ran: cudaErrorLaunchFailure (unspecified launch failure)");
}

TEST_CASE("step fault: the marginal costs' replays say which group was disabled", "[faults][step_fault][marginal]") {
  CHECK(marginal_replay_note("") == "replayed for its marginal costs, every node enabled");
  CHECK(marginal_replay_note("postconv") ==
        "replayed for its marginal costs, with the nodes of group 'postconv' disabled");
  const std::string m = step_fault_message(RanStep{GraphKey::decode(2), true}, cudaErrorIllegalAddress, true,
                                           marginal_replay_note("conv.update"), kHint);
  CHECK(m.rfind("the graph decode 2 failed while it ran (replayed for its marginal costs, with the nodes of group "
                "'conv.update' disabled): cudaErrorIllegalAddress (",
                0) == 0);
  CHECK(m.find("; the CUDA context is lost") != std::string::npos);
}
