#pragma once

#include "macros.h"

// Size rules: per-call routes of one operator, from table lines such as
//   mm.default [numel >= 1048576, dtype = float16|bfloat16] = flagos_python
// (grammar in conf_parser.h). No single route wins at every size: a vendor kernel is often
// fastest on small tensors, where a Triton kernel's launch cost dominates, and a Triton kernel
// can win on large ones.
//
// What a call measures, from its arguments only (results do not exist yet):
//   numel: the element count of its largest tensor argument (a list's tensors count one by one);
//   dtype: the dtype of its first floating-point (or complex) tensor argument, else of its first
//          tensor argument (so where(cond, a, b) measures a's dtype, not cond's bool).
// A Python number passed where a tensor is expected (`x * 0.5`: a 0-dim "wrapped number",
// always float64 or int64) counts one element and no dtype: it never sets the computation's
// dtype, which is x's or the default floating type.
// A call without tensor arguments measures numel 0 and meets no dtype condition.

#include "aten/routing/conf_parser.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <bitset>
#include <optional>
#include <string>
#include <vector>

namespace torch_fl::routing {

struct CallSize {
  int64_t numel = 0;
  std::optional<c10::ScalarType> dtype;
  bool dtype_is_floating = false; // dtype is a floating-point or complex one

  void see(const at::Tensor& t) {
    if (!t.defined()) {
      return;
    }
    numel = std::max<int64_t>(numel, t.numel());
    if (!dtype_is_floating && !t.unsafeGetTensorImpl()->is_wrapped_number()) {
      const c10::ScalarType type = t.scalar_type();
      const bool floating = c10::isFloatingType(type) || c10::isComplexType(type);
      if (!dtype || floating) {
        dtype = type;
        dtype_is_floating = floating;
      }
    }
  }
};

struct SizeRule {
  int64_t min_numel = 0;                                                // inclusive
  int64_t max_numel = 0;                                                // inclusive
  std::bitset<static_cast<size_t>(c10::ScalarType::NumOptions)> dtypes; // none set: any dtype
  uint8_t route = 0;
  std::string condition; // as written in the table
  std::string where;     // file:line

  bool meets(const CallSize& size) const;
};

// The rules of one operator, in table order. Immutable once built: the router publishes it
// to calls on other threads and keeps it alive for the process.
class FLAGOS_API SizeRules {
 public:
  SizeRules(size_t num_args, std::vector<SizeRule> rules);

  // The route of a call: the last rule it meets, else `plain`.
  uint8_t choose(const CallSize& size, uint8_t plain) const;
  // Measures the call whose arguments are the top of `stack`.
  CallSize measure(const torch::jit::Stack& stack) const;

  const std::vector<SizeRule>& rules() const {
    return rules_;
  }

 private:
  size_t num_args_;
  std::vector<SizeRule> rules_;
};

// Builds a rule from a parsed table line (its `when` set) and the route it names.
FLAGOS_API SizeRule make_size_rule(const conf::Entry& entry, uint8_t route);

// The dtype names a condition may use, as torch spells them (torch.float16 -> "float16").
FLAGOS_API std::vector<std::string> rule_dtype_names();
FLAGOS_API std::optional<c10::ScalarType> rule_dtype(const std::string& name);
FLAGOS_API std::optional<std::string> rule_dtype_name(c10::ScalarType type);

} // namespace torch_fl::routing
