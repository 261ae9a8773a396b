// What a routing-table line runs as in each build (csrc/aten/routing/router.h,
// table_line_route): the dcu specification's default build runs its table's `cuda` lines on
// cpu_fallback; every other build runs a line's own route.

#include "aten/routing/router.h"

#include <gtest/gtest.h>

namespace torch_fl::routing {
namespace {

TEST(TableLineRoute, TheDefaultDcuBuildRunsCudaLinesOnCpuFallback) {
  EXPECT_EQ(table_line_route(Route::Cuda, "dcu", /*boxing=*/false), Route::CpuFallback);
  EXPECT_EQ(table_line_route(Route::Cuda, "dcu", /*boxing=*/true), Route::Cuda);
  // FlagGems lines and explicit cpu_fallback lines are what they say in every dcu build.
  EXPECT_EQ(table_line_route(Route::FlagosPython, "dcu", false), Route::FlagosPython);
  EXPECT_EQ(table_line_route(Route::CpuFallback, "dcu", true), Route::CpuFallback);
}

TEST(TableLineRoute, OtherBuildsRunTheLinesOwnRoute) {
  // Where `cuda` is unavailable (the cpu accelerator, a cuda build without boxing) the table
  // load reports it; nothing is silently re-routed.
  EXPECT_EQ(table_line_route(Route::Cuda, "cpu", false), Route::Cuda);
  EXPECT_EQ(table_line_route(Route::Cuda, "cuda", false), Route::Cuda);
  EXPECT_EQ(table_line_route(Route::FlaggemsCpp, "dcu", false), Route::FlaggemsCpp);
}

} // namespace
} // namespace torch_fl::routing
