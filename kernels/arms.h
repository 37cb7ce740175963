// arms.h: kernel arms (one implementation of an op; every arm of an op is byte-identical to the
// op's reference arm, ARMS.md), the one ArmSelection per engine, and its resolution from the
// command line (`--arm op=arm`), STEPGRAPH_ARMS, the seed's VT_* flags and the defaults.
// Pure C++ (no CUDA): the launchers, the graph keys and the CPU tests all use it. Resolution never
// reads the environment itself; the caller passes an EnvLookup.
#pragma once
#include <array>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sg {

// The ops that have arms, in the stable order of ArmSelection::describe().
enum class Op { conv_fwd, conv_chunks, conv_update, postconv, gdn_prefill, gdn_decode };
inline constexpr size_t kNumOps = 6;

// One enum per op; the enumerator's value is the arm's index in its op's name table.
enum class ConvFwdArm { tiled, reg, k4, k4x2 };                 // conv.fwd: tiled, register, k4, k4x2
enum class ConvChunksArm { exact, whole };                      // conv.chunks
enum class ConvUpdateArm { grid, fast };                        // conv.update
enum class PostconvArm { megablock, fast, split, token_tile };  // postconv
enum class GdnPrefillArm { unfused, fused };                    // gdn.prefill
enum class GdnDecodeArm { unfused, fused, staged, prep };       // gdn.decode

// Which op an arm enum belongs to and how many arms it has (the name tables are checked against
// `count` at compile time; launchers switch over the arm enum with no default, which
// -Werror=switch makes an error for any arm without a case).
template <class Arm>
struct ArmTraits;
template <>
struct ArmTraits<ConvFwdArm> {
  static constexpr Op op = Op::conv_fwd;
  static constexpr size_t count = 4;
};
template <>
struct ArmTraits<ConvChunksArm> {
  static constexpr Op op = Op::conv_chunks;
  static constexpr size_t count = 2;
};
template <>
struct ArmTraits<ConvUpdateArm> {
  static constexpr Op op = Op::conv_update;
  static constexpr size_t count = 2;
};
template <>
struct ArmTraits<PostconvArm> {
  static constexpr Op op = Op::postconv;
  static constexpr size_t count = 4;
};
template <>
struct ArmTraits<GdnPrefillArm> {
  static constexpr Op op = Op::gdn_prefill;
  static constexpr size_t count = 2;
};
template <>
struct ArmTraits<GdnDecodeArm> {
  static constexpr Op op = Op::gdn_decode;
  static constexpr size_t count = 4;
};

// Bad arm names, bad lists, duplicates, a missing launcher: the message says what was wrong and
// lists the valid ops or the valid arms of the op.
class ArmError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One op's row of the arm table (`stepgraph arms`, error messages). Indices are enum values.
struct OpInfo {
  Op op;
  std::string_view name;                   // "conv.fwd"
  std::span<const std::string_view> arms;  // names, index = enum value
  size_t reference;                        // the byte reference arm
  size_t default_arm;                      // what ArmSelection{} holds
};

// Every op in describe() order.
std::span<const OpInfo> all_ops();
const OpInfo& op_info(Op op);
std::string_view op_name(Op op);
std::optional<Op> find_op(std::string_view name);
std::optional<size_t> find_arm(Op op, std::string_view name);
// "conv.fwd, conv.chunks, ..." and "tiled, register, k4, k4x2" (for error messages).
std::string valid_ops_list();
std::string valid_arms_list(Op op);
// The table printed by `stepgraph arms`: one line per op, e.g.
// "conv.fwd     tiled (reference), register (default), k4, k4x2".
std::string format_arm_table();

// Throws ArmError for a value outside the enum's arms.
template <class Arm>
std::string_view arm_name(Arm arm) {
  const auto arms = op_info(ArmTraits<Arm>::op).arms;
  const auto i = static_cast<size_t>(arm);
  if (i >= arms.size()) {
    throw ArmError("arm index " + std::to_string(i) + " out of range for " + std::string(op_name(ArmTraits<Arm>::op)));
  }
  return arms[i];
}
template <class Arm>
std::optional<Arm> arm_from_name(std::string_view name) {
  auto i = find_arm(ArmTraits<Arm>::op, name);
  if (!i) return std::nullopt;
  return static_cast<Arm>(*i);
}

// One arm per op. The defaults are the shipped defaults of ARMS.md.
struct ArmSelection {
  ConvFwdArm conv_fwd = ConvFwdArm::reg;
  ConvChunksArm conv_chunks = ConvChunksArm::exact;
  ConvUpdateArm conv_update = ConvUpdateArm::fast;
  PostconvArm postconv = PostconvArm::token_tile;
  GdnPrefillArm gdn_prefill = GdnPrefillArm::fused;
  GdnDecodeArm gdn_decode = GdnDecodeArm::unfused;

  bool operator==(const ArmSelection&) const = default;

  // Generic access by op: the arm's index (enum value). set_index throws ArmError when out of range.
  size_t index(Op op) const;
  void set_index(Op op, size_t arm);

  // "conv.fwd=register,conv.chunks=exact,conv.update=fast,postconv=token_tile,gdn.prefill=fused,
  // gdn.decode=unfused" (the defaults): every op, in Op order. Recorded in graph manifests; part of graph keys.
  std::string describe() const;
  // Inverse of describe(). Partial lists are allowed (unspecified ops keep their defaults); the
  // empty string gives the defaults. Items are "op=arm" separated by ',', blanks around names
  // are ignored. Throws ArmError on an unknown op or arm, a missing '=', an empty item, or the
  // same op given twice.
  static ArmSelection parse(std::string_view text);
};

// Looks up an environment variable: nullopt = unset, "" = set to the empty string.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

inline constexpr std::string_view kArmsEnvVar = "STEPGRAPH_ARMS";
// The seed's flags that resolve_arms() honours, in ARMS.md's table order.
std::span<const std::string_view> seed_flag_names();

struct ResolvedArms {
  ArmSelection arms;
  // Per op (index = Op): where its arm came from: "default", "--arm", "STEPGRAPH_ARMS", or the
  // set seed flags that decided it, e.g. "VT_CONV_REG=0" or "VT_CONV_REG=1, VT_CONV_CHANNEL_TILE=2"
  // (a non-canonical value is quoted: VT_CONV_CHANNEL_TILE=" 2").
  std::array<std::string, kNumOps> source;
  // Exactly one per seed flag that is set to a non-canonical value (see arms.cpp).
  std::vector<std::string> warnings;
};

// Resolves the selection. Precedence, per op: `--arm` > STEPGRAPH_ARMS > seed flags > defaults.
// cli_arms: the values of each `--arm`, one "op=arm" each. Errors (ArmError): unknown op or arm,
// a missing '=', an empty item, a comma in one --arm value, the same op twice within one source.
// An empty STEPGRAPH_ARMS (or only blanks) means no overrides. An empty `env` means an empty
// environment. Only STEPGRAPH_ARMS and seed_flag_names() are looked up.
ResolvedArms resolve_arms(const std::vector<std::string>& cli_arms, const EnvLookup& env);

}  // namespace sg
