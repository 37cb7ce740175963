// serve_fixture.h: what the serving tests share (tests/cpu/test_scheduler.cpp,
// test_serve_reference.cpp, tests/gpu/test_serve.cpp): a request and the end-to-end trace.
// Header-only.
#pragma once
#include <cstdint>
#include <vector>

#include "models/serve_trace.h"

namespace sg::test {

// A request with its prompt length only (prepare_prompts keys its ids).
inline ServeRequest serve_request(int prompt_len, int max_new, double arrival_ms = 0) {
  ServeRequest q;
  q.prompt_len = prompt_len;
  q.max_new = max_new;
  q.arrival_ms = arrival_ms;
  return q;
}

// Ten requests arriving over 31 ms for 3 slots, a context of 64 and a prefill budget of 16: five
// prompts longer than the budget (chunked), more requests than slots (slots reused), and request
// 6 (60 + 8 - 1 = 67 tokens) too long for the context. Prompt ids from seed 3.
inline std::vector<ServeRequest> serve_e2e_trace(int vocab) {
  std::vector<ServeRequest> t = {serve_request(5, 6, 0),  serve_request(40, 5, 0), serve_request(12, 9, 0),
                                 serve_request(23, 4, 2), serve_request(3, 1, 2),  serve_request(17, 8, 5),
                                 serve_request(60, 8, 6), serve_request(33, 3, 9), serve_request(8, 7, 30),
                                 serve_request(45, 2, 31)};
  prepare_prompts(t, vocab, 3);
  return t;
}
inline constexpr int kServeE2eSlots = 3, kServeE2eContext = 64, kServeE2eBudget = 16, kServeE2eRejected = 6;

}  // namespace sg::test
