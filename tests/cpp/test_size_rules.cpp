// Size rules (csrc/aten/routing/size_rules.h): what a call measures on a boxed argument stack,
// and which rule a measured call meets.

#include "aten/routing/size_rules.h"

#include <ATen/ATen.h>
#include <ATen/core/stack.h>

#include <limits>

#include <gtest/gtest.h>

namespace torch_fl::routing {
namespace {

constexpr int64_t kAny = std::numeric_limits<int64_t>::max();

SizeRule rule(
    int64_t lo, int64_t hi, uint8_t route, std::initializer_list<c10::ScalarType> dtypes = {}) {
  SizeRule r;
  r.min_numel = lo;
  r.max_numel = hi;
  r.route = route;
  for (auto d : dtypes) {
    r.dtypes.set(static_cast<size_t>(d));
  }
  return r;
}

TEST(SizeRules, MeasuresTheLargestTensorAndTheFirstDtype) {
  // Only the top `num_args` entries are this call's arguments.
  torch::jit::Stack stack{
      c10::IValue(at::zeros({1000}, at::kDouble)), // below the call: not counted
      c10::IValue(at::zeros({2, 3}, at::kHalf)),
      c10::IValue(2.5),
      c10::IValue(c10::List<at::Tensor>({at::zeros({4, 5}), at::zeros({7})})),
      c10::IValue(c10::List<std::optional<at::Tensor>>({std::nullopt, at::zeros({30})})),
      c10::IValue(at::Tensor()), // an undefined Tensor? argument
  };
  SizeRules rules(5, {});
  const CallSize size = rules.measure(stack);
  EXPECT_EQ(size.numel, 30);
  ASSERT_TRUE(size.dtype.has_value());
  EXPECT_EQ(*size.dtype, at::kHalf);
}

TEST(SizeRules, TheDtypeIsTheFirstFloatingPointOne) {
  // where(cond, a, b): the bool condition comes first.
  torch::jit::Stack stack{
      c10::IValue(at::zeros({4}, at::kBool)),
      c10::IValue(at::zeros({4}, at::kBFloat16)),
      c10::IValue(at::zeros({4}, at::kFloat))};
  EXPECT_EQ(SizeRules(3, {}).measure(stack).dtype, at::kBFloat16);
  // Without a floating-point tensor, the first tensor's dtype.
  torch::jit::Stack ints{
      c10::IValue(at::zeros({4}, at::kInt)), c10::IValue(at::zeros({4}, at::kLong))};
  EXPECT_EQ(SizeRules(2, {}).measure(ints).dtype, at::kInt);
  torch::jit::Stack complex{
      c10::IValue(at::zeros({4}, at::kLong)), c10::IValue(at::zeros({4}, at::kComplexFloat))};
  EXPECT_EQ(SizeRules(2, {}).measure(complex).dtype, at::kComplexFloat);
}

TEST(SizeRules, ACallWithoutTensorsMeasuresNothing) {
  torch::jit::Stack stack{c10::IValue(3), c10::IValue(std::vector<int64_t>{1, 2})};
  const CallSize size = SizeRules(2, {}).measure(stack);
  EXPECT_EQ(size.numel, 0);
  EXPECT_FALSE(size.dtype.has_value());
}

TEST(SizeRules, TheLastRuleMetWinsElseThePlainRoute) {
  SizeRules rules(
      1, {rule(100, kAny, 2), rule(1000, 9999, 0), rule(0, kAny, 1, {at::kBFloat16, at::kHalf})});
  auto route = [&](int64_t numel, std::optional<c10::ScalarType> dtype) {
    return rules.choose(CallSize{numel, dtype}, /*plain=*/3);
  };
  EXPECT_EQ(route(99, at::kFloat), 3);
  EXPECT_EQ(route(100, at::kFloat), 2);
  EXPECT_EQ(route(1000, at::kFloat), 0);
  EXPECT_EQ(route(9999, at::kFloat), 0);
  EXPECT_EQ(route(10000, at::kFloat), 2);
  EXPECT_EQ(route(5, at::kHalf), 1);
  EXPECT_EQ(route(5000, at::kBFloat16), 1);
  EXPECT_EQ(route(5, std::nullopt), 3); // no tensor: meets no dtype condition
}

TEST(SizeRules, DtypeNamesAreTorchs) {
  EXPECT_EQ(rule_dtype("float16"), at::kHalf);
  EXPECT_EQ(rule_dtype("bfloat16"), at::kBFloat16);
  EXPECT_EQ(rule_dtype("int64"), at::kLong);
  EXPECT_FALSE(rule_dtype("half").has_value());
  for (const auto& name : rule_dtype_names()) {
    EXPECT_TRUE(rule_dtype(name).has_value()) << name;
  }
}

} // namespace
} // namespace torch_fl::routing
