#include "aten/routing/size_rules.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

namespace torch_fl::routing {
namespace {

struct NamedDtype {
  const char* name;
  c10::ScalarType type;
};

// The dtypes of torch's public names that every supported torch version has.
constexpr NamedDtype kDtypes[] = {
    {"bool", c10::ScalarType::Bool},
    {"uint8", c10::ScalarType::Byte},
    {"int8", c10::ScalarType::Char},
    {"int16", c10::ScalarType::Short},
    {"int32", c10::ScalarType::Int},
    {"int64", c10::ScalarType::Long},
    {"uint16", c10::ScalarType::UInt16},
    {"uint32", c10::ScalarType::UInt32},
    {"uint64", c10::ScalarType::UInt64},
    {"float16", c10::ScalarType::Half},
    {"bfloat16", c10::ScalarType::BFloat16},
    {"float32", c10::ScalarType::Float},
    {"float64", c10::ScalarType::Double},
    {"complex32", c10::ScalarType::ComplexHalf},
    {"complex64", c10::ScalarType::ComplexFloat},
    {"complex128", c10::ScalarType::ComplexDouble},
    {"float8_e4m3fn", c10::ScalarType::Float8_e4m3fn},
    {"float8_e5m2", c10::ScalarType::Float8_e5m2},
};

} // namespace

bool SizeRule::meets(const CallSize& size) const {
  if (size.numel < min_numel || size.numel > max_numel) {
    return false;
  }
  return dtypes.none() || (size.dtype && dtypes.test(static_cast<size_t>(*size.dtype)));
}

SizeRules::SizeRules(size_t num_args, std::vector<SizeRule> rules)
    : num_args_(num_args), rules_(std::move(rules)) {}

uint8_t SizeRules::choose(const CallSize& size, uint8_t plain) const {
  for (auto it = rules_.rbegin(); it != rules_.rend(); ++it) {
    if (it->meets(size)) {
      return it->route;
    }
  }
  return plain;
}

CallSize SizeRules::measure(const torch::jit::Stack& stack) const {
  CallSize size;
  const size_t n = std::min(num_args_, stack.size());
  for (auto it = stack.end() - static_cast<std::ptrdiff_t>(n); it != stack.end(); ++it) {
    const c10::IValue& v = *it;
    if (v.isTensor()) {
      size.see(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        size.see(t);
      }
    } else if (v.isList()) { // Tensor?[]
      for (const c10::IValue& item : v.toListRef()) {
        if (item.isTensor()) {
          size.see(item.toTensor());
        }
      }
    }
  }
  return size;
}

SizeRule make_size_rule(const conf::Entry& entry, uint8_t route) {
  TORCH_INTERNAL_ASSERT(entry.when.has_value());
  SizeRule rule;
  rule.min_numel = entry.when->min_numel;
  rule.max_numel = entry.when->max_numel;
  for (const auto& name : entry.when->dtypes) {
    const auto type = rule_dtype(name);
    TORCH_INTERNAL_ASSERT(type.has_value(), "the parser accepted an unknown dtype ", name);
    rule.dtypes.set(static_cast<size_t>(*type));
  }
  rule.route = route;
  rule.condition = entry.when->text;
  rule.where = entry.file + ":" + std::to_string(entry.line);
  return rule;
}

std::vector<std::string> rule_dtype_names() {
  std::vector<std::string> out;
  for (const auto& d : kDtypes) {
    out.emplace_back(d.name);
  }
  return out;
}

std::optional<c10::ScalarType> rule_dtype(const std::string& name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) {
      return d.type;
    }
  }
  return std::nullopt;
}

std::optional<std::string> rule_dtype_name(c10::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (type == d.type) {
      return std::string(d.name);
    }
  }
  return std::nullopt;
}

} // namespace torch_fl::routing
