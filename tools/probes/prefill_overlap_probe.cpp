// prefill_overlap_probe.cpp: would a prefill step gain from running as P micro-batches side by side?
// The 4B prefill spends two thirds of its time in compute-bound GEMMs and the rest in kernels
// that are memory- or latency-bound (the delta rule, attention, the norms, SwiGLU, conv); one
// step runs them one after another. This probe measures what the GPU makes of two (or P)
// independent prefill graphs replayed at once on their own streams, against the same graphs one
// after another and against one graph of the whole batch:
//   whole:      one ModelStep of SEQS sequences x LEN tokens, its prefill graph replayed;
//   sequential: P ModelSteps of SEQS / P sequences each (own weights, caches, activations, cuBLAS
//               handle and stream), their graphs replayed one after another (each stream waits
//               for the previous one's last replay);
//   concurrent: the same P graphs replayed at once (each stream waits only for the start event).
// Each form is timed REPS times, the three in turn in each repetition (CUDA events around one
// replay of each graph, after two warm-up rounds), and printed as median (min..max). If side by
// side is clearly below one after another and whole, splitting the step into micro-batches on
// parallel graph branches is worth building; if not, the kernels already fill the GPU. The parts
// hold their own weight copies, so side by side their GEMMs cannot share weights in L2 as one
// micro-batched step would (the probe understates a gain by that much). Numbers only: outputs are
// not compared (each ModelStep's own tests cover its bytes); a fault is reported as its step's.
// Synthetic weights as `stepgraph bench` (seed 1), defaults for every setting.
// Usage: prefill_overlap_probe [--preset NAME] [--seqs N] [--len N] [--parts P] [--reps N]
//   (defaults qwen3.5-4b, 32, 1024, 2, 5). Exit 77 without a GPU. Built with the library
//   (target prefill_overlap_probe); run from the build folder: tools/prefill_overlap_probe.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/device.h"
#include "engine/error.h"
#include "graphs/step_graphs.h"
#include "models/model_step.h"
#include "models/qwen35_config.h"
#include "tools/cli/spread.h"

namespace {

using namespace sg;

struct Args {
  std::string preset = "qwen3.5-4b";
  int seqs = 32, len = 1024, parts = 2, reps = 5;
};

int usage(const std::string& why = "") {
  if (!why.empty()) std::fprintf(stderr, "prefill_overlap_probe: %s\n", why.c_str());
  std::fprintf(why.empty() ? stdout : stderr,
               "usage: prefill_overlap_probe [--preset NAME] [--seqs N] [--len N] [--parts P] [--reps N]\n"
               "  SEQS a multiple of P (P >= 2), SEQS x LEN at most 2^30 tokens; defaults qwen3.5-4b, 32,\n"
               "  1024, 2, 5\n");
  return why.empty() ? 0 : 2;
}

// Empty when the arguments are good, else why not.
std::string parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return k + " needs a value";
    const std::string v = argv[++i];
    if (k == "--preset") {
      a.preset = v;
      continue;
    }
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (end == v.c_str() || *end != '\0' || n < 1 || n > (1 << 20)) return k + " needs a whole number in [1, 2^20]";
    if (k == "--seqs") {
      a.seqs = static_cast<int>(n);
    } else if (k == "--len") {
      a.len = static_cast<int>(n);
    } else if (k == "--parts") {
      a.parts = static_cast<int>(n);
    } else if (k == "--reps") {
      a.reps = static_cast<int>(n);
    } else {
      return "unknown option " + k;
    }
  }
  if (a.parts < 2) return "--parts must be at least 2";
  if (a.seqs % a.parts != 0) return "--seqs must be a multiple of --parts";
  if (int64_t{a.seqs} * a.len > (int64_t{1} << 30)) return "SEQS x LEN is more than 2^30 tokens";
  return "";
}

// A prefill-only ModelStep of `seqs` fresh sequences of `len` tokens, captured, its batch staged.
struct Part {
  std::unique_ptr<ModelStep> step;
  int bucket = 0;
};

Part make_part(const Qwen35Config& cfg, int seqs, int len) {
  ModelStepOptions o;
  o.num_slots = seqs;
  o.max_context = len;
  o.max_decode_batch = seqs;
  o.max_prefill_tokens = seqs * len;
  o.max_prefill_seqs = seqs;
  o.seed = 1;
  Part p;
  p.step = std::make_unique<ModelStep>(cfg, o);  // synthetic weights from o.seed
  p.step->capture({GraphKey::prefill(p.step->prefill_keys().back())});
  std::vector<PrefillRequest> batch;
  for (int r = 0; r < seqs; ++r) {
    PrefillRequest q{r, {}, 0};
    for (int t = 0; t < len; ++t) q.tokens.push_back(static_cast<int32_t>((int64_t{r} * 7919 + t * 131) % cfg.vocab));
    batch.push_back(std::move(q));
  }
  p.bucket = p.step->stage_prefill(batch);
  return p;
}

// Milliseconds of one round: every part replayed once, each on its stream after `start`; with
// `chain`, each part's stream also waits for the previous part's replay. The last stream joins all.
double round_ms(std::vector<Part>& parts, bool chain) {
  Event start, stop;
  std::vector<Event> done(parts.size());
  cudaStream_t s0 = parts[0].step->stream();
  start.record(s0);
  for (size_t i = 0; i < parts.size(); ++i) {
    cudaStream_t s = parts[i].step->stream();
    const Event& after = chain && i > 0 ? done[i - 1] : start;
    check(cudaStreamWaitEvent(s, after.get(), 0));
    parts[i].step->replay_prefill(parts[i].bucket);
    done[i].record(s);
  }
  for (size_t i = 1; i < parts.size(); ++i) check(cudaStreamWaitEvent(s0, done[i].get(), 0));
  stop.record(s0);
  for (auto& p : parts) p.step->sync();  // a fault is reported as its step's
  stop.sync();
  return Event::elapsed_ms(start, stop);
}

void print(const char* what, const cli::Spread& s, double whole) {
  std::printf("%-34s %9.2f ms (%.2f..%.2f)  %6.1f%% of whole\n", what, s.median, s.min, s.max,
              100.0 * s.median / whole);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return usage();
  }
  Args a;
  if (const std::string why = parse(argc, argv, a); !why.empty()) return usage(why);
  const DeviceInfo dev = probe_device();
  if (!dev.ok) {
    std::printf("prefill_overlap_probe: needs a GPU (%s)\n", dev.reason.c_str());
    return 77;
  }
  try {
    const Qwen35Config cfg = preset(a.preset);
    std::printf("%s\n%s prefill, %d sequences x %d tokens; whole against %d parts of %d sequences, %d reps\n",
                dev.describe().c_str(), cfg.name.c_str(), a.seqs, a.len, a.parts, a.seqs / a.parts, a.reps);
    // Every step holds its own weights (1 + P copies in device memory at once).
    std::vector<Part> whole, parts;
    whole.push_back(make_part(cfg, a.seqs, a.len));
    for (int i = 0; i < a.parts; ++i) parts.push_back(make_part(cfg, a.seqs / a.parts, a.len));
    // The three forms in turn in every repetition, so that clocks and temperature treat them alike.
    std::vector<double> whole_ms, seq_ms, conc_ms;
    for (int r = -2; r < a.reps; ++r) {  // two warm-up rounds
      const double w = round_ms(whole, true), sq = round_ms(parts, true), cc = round_ms(parts, false);
      if (r < 0) continue;
      whole_ms.push_back(w);
      seq_ms.push_back(sq);
      conc_ms.push_back(cc);
    }
    const cli::Spread w = cli::spread(whole_ms), sq = cli::spread(seq_ms), cc = cli::spread(conc_ms);
    print("whole (one graph)", w, w.median);
    print("parts one after another", sq, w.median);
    print("parts side by side", cc, w.median);
    std::printf("side by side saves %.2f ms against one after another, %.2f ms against the whole step\n",
                sq.median - cc.median, w.median - cc.median);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prefill_overlap_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
