// bench_diff.h: `stepgraph diff`, two `stepgraph bench --json` reports of the whole-model workload
// side by side (two commits, two machines, two settings): which settings differ, then per graph
// (decode batch, prefill shape) the step time old -> new with a verdict, and the op families whose
// node time moved, largest change first. Pure host code on parsed JSON (the command reads the
// files; the CPU tests build the documents).
//
// The step's verdict is `stepgraph ab`'s rule (ab_compare.h) on the reports' step_ms median, min
// and max: noise = the wider of the two spreads (max - min over the repetitions), "faster" or
// "slower" when |new median - old median| exceeds it, else "neutral". A report timed with one
// repetition has no spread, so the verdict rests on the other's spread (with none on either side,
// every change counts): the table says so. Families carry one value a report (node medians summed),
// so they get the change and no verdict. A graph or family only one report has is listed as
// "only old" / "only new"; a report without family times (bench --node-replays 0) is said to have
// none. Times must lie in [0, 1e9] (ms or us). Where both reports hold a graph's manifest, the ops
// whose nodes ran other arms are listed (the set of arms an op's nodes name, old -> new): the
// GEMMs' cuBLASLt algorithms and skinny splits, which no setting records and which each process may
// choose differently (cuBLASLt's are timed per process; `--lt-choices` carries them over). Where both
// reports hold a graph's clocks (bench samples them during its timed replays) and they differ
// (compare_clocks: the SM clock, or a limit such as the power cap), the graph gets a caution: part
// of its change may be the clocks', not the code's (two machines, or one held down by power).
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/cli/ab_compare.h"

namespace sg::cli {

// One setting of the reports ("preset", "arms", "gemm", ...): the values as text made printable,
// "(absent)" for a report that does not have it (older reports lack some settings); `differs`
// compares the values as the files hold them.
struct SettingDiff {
  std::string name, old_value, new_value;
  bool differs = false;
};

struct FamilyDiff {
  std::string family;                    // made printable (families are matched by the names as the files hold them)
  std::optional<double> old_us, new_us;  // us a step (node medians summed over the family's nodes)
  int old_nodes = 0, new_nodes = 0;
  double delta_us() const { return new_us.value_or(0.0) - old_us.value_or(0.0); }
};

// An op whose nodes name other arms in the two reports (each list sorted, made printable).
struct ArmDiff {
  std::string op;
  std::vector<std::string> old_arms, new_arms;
};

struct GraphDiff {
  std::string name;                          // "decode b=32", "prefill 32 x 1024 tokens (bucket 32768)"
  std::optional<Spread> old_step, new_step;  // ms a step (graph replays)
  std::optional<double> old_eager_ms, new_eager_ms, floor_ms;
  Verdict verdict = Verdict::neutral;         // of the step (only_a / only_b: the graph is in one report)
  bool old_timed = false, new_timed = false;  // the report has op family times for the graph
  std::vector<FamilyDiff> families;           // the largest |change| first; empty unless both are timed
  std::vector<ArmDiff> arms;                  // by op name; empty unless both reports hold the manifest
  std::string clocks_caution;                 // compare_clocks of the two reports' clocks; empty when alike or absent
  double delta_ms() const;                    // new median - old median (0 unless both)
  double noise_ms() const;                    // the wider spread (0 unless both)
};

struct BenchDiff {
  std::vector<SettingDiff> settings;
  std::vector<GraphDiff> graphs;  // the old report's order, then graphs only the new one has
  bool old_interrupted = false, new_interrupted = false;
};

// Throws sg::Error naming `old_name` or `new_name` and the field when a document is not a bench
// report of the whole-model workload (an `ab`, `capture` or `soak` report, a gdn-layer or CPU
// reference bench report, a missing or mistyped field, a time outside [0, 1e9], two graphs of one
// name).
BenchDiff diff_bench_reports(const nlohmann::json& old_doc, const nlohmann::json& new_doc, const std::string& old_name,
                             const std::string& new_name);

struct DiffFormat {
  bool all_families = false;  // every family, not only those that moved by at least min_us
  double min_us = 1.0;        // |change| a family must reach to be listed (without all_families)
};
std::string format_bench_diff(const BenchDiff& d, const DiffFormat& f = {});
nlohmann::json bench_diff_json(const BenchDiff& d);

}  // namespace sg::cli
