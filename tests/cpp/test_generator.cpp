// flagos generators: per-device defaults, seed and state forwarding to the native generator,
// clone independence, and random draws on flagos tensors matching the native device's.

#include "helpers.h"
#include "runtime/generator.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include <gtest/gtest.h>

namespace torch_fl::testing {
namespace {

at::TensorOptions on_flagos(c10::DeviceIndex index) {
  return at::TensorOptions().device(flagos(index)).dtype(at::kFloat);
}

// Draws from the native generator behind a flagos generator, as a kernel would.
at::Tensor draw(const at::Generator& flagos_gen, int64_t n = 8) {
  return at::randn({n}, native_generator_for(flagos_gen));
}

TEST(Generator, DefaultGeneratorsArePerDeviceAndStable) {
  const auto& g0 = default_generator(0);
  const auto& g1 = default_generator(1);
  EXPECT_EQ(&g0, &default_generator(0));
  EXPECT_NE(g0.unsafeGetGeneratorImpl(), g1.unsafeGetGeneratorImpl());
  EXPECT_EQ(g0.device(), flagos(0));
  EXPECT_EQ(g1.device(), flagos(1));
  EXPECT_EQ(&default_generator(-1), &g0); // -1: the current device
  EXPECT_THROW(default_generator(2), c10::IndexError);
}

TEST(Generator, SeedIsForwardedToTheNativeGenerator) {
  at::Generator gen = new_generator(1);
  EXPECT_EQ(gen.device(), flagos(1));
  gen.set_current_seed(1234);
  EXPECT_EQ(gen.current_seed(), 1234u);
  const at::Generator native = native_generator_for(gen);
  EXPECT_EQ(native.device(), c10::Device(c10::kCPU));
  EXPECT_EQ(native.current_seed(), 1234u);
  // Same seed, same numbers as a plain CPU generator.
  at::Generator cpu = at::detail::createCPUGenerator(1234);
  EXPECT_TRUE(at::equal(draw(gen), at::randn({8}, cpu)));
}

TEST(Generator, StateRoundTripsThroughTheFlagosGenerator) {
  at::Generator gen = new_generator(0);
  gen.set_current_seed(7);
  draw(gen); // advance
  const at::Tensor state = gen.get_state();
  const at::Tensor first = draw(gen);
  const at::Tensor second = draw(gen);
  EXPECT_FALSE(at::equal(first, second));
  gen.set_state(state);
  EXPECT_TRUE(at::equal(draw(gen), first));
  // The state is the native generator's, byte for byte.
  EXPECT_EQ(state.scalar_type(), at::kByte);
  EXPECT_TRUE(at::equal(gen.get_state(), native_generator_for(gen).get_state()));
}

TEST(Generator, SeedDrawsAFreshSeed) {
  at::Generator gen = new_generator(0);
  gen.set_current_seed(5);
  const uint64_t fresh = gen.seed();
  EXPECT_EQ(gen.current_seed(), fresh);
  EXPECT_EQ(native_generator_for(gen).current_seed(), fresh);
}

TEST(Generator, ClonesAreIndependent) {
  at::Generator gen = new_generator(0);
  gen.set_current_seed(99);
  at::Generator copy = gen.clone();
  EXPECT_NE(copy.unsafeGetGeneratorImpl(), gen.unsafeGetGeneratorImpl());
  EXPECT_NE(
      native_generator_for(copy).unsafeGetGeneratorImpl(),
      native_generator_for(gen).unsafeGetGeneratorImpl());
  EXPECT_EQ(copy.device(), flagos(0));
  const at::Tensor from_copy = draw(copy);
  const at::Tensor from_original = draw(gen);
  EXPECT_TRUE(at::equal(from_copy, from_original)); // same starting state
  draw(copy);
  draw(copy);
  copy.set_current_seed(1);
  EXPECT_EQ(gen.current_seed(), 99u); // re-seeding the clone leaves the original alone
  at::Generator reference = at::detail::createCPUGenerator(99);
  at::randn({8}, reference);
  EXPECT_TRUE(at::equal(draw(gen), at::randn({8}, reference)));
}

TEST(Generator, OnlyFlagosGeneratorsMapToNative) {
  at::Generator cpu = at::detail::createCPUGenerator(1);
  EXPECT_THROW(native_generator_for(cpu), c10::Error);
  EXPECT_THROW(new_generator(3), c10::IndexError);
}

TEST(Generator, RandomOpsOnFlagosTensorsUseTheFlagosGenerator) {
  at::Generator gen = new_generator(0);
  gen.set_current_seed(42);
  const at::Tensor on_device = at::randn({16}, gen, on_flagos(0));
  EXPECT_EQ(on_device.device(), flagos(0));
  at::Generator cpu = at::detail::createCPUGenerator(42);
  EXPECT_TRUE(at::equal(on_device.cpu(), at::randn({16}, cpu)));
}

TEST(Generator, DefaultGeneratorDrivesUnseededRandomOps) {
  at::Generator gen = default_generator(1); // a handle on the same generator
  gen.set_current_seed(2024);
  const at::Tensor a = at::rand({16}, on_flagos(1));
  gen.set_current_seed(2024);
  const at::Tensor b = at::rand({16}, on_flagos(1));
  EXPECT_TRUE(at::equal(a.cpu(), b.cpu()));
  at::Generator cpu = at::detail::createCPUGenerator(2024);
  EXPECT_TRUE(at::equal(a.cpu(), at::rand({16}, cpu)));
}

} // namespace
} // namespace torch_fl::testing
