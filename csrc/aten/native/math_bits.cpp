// Copies of flagos tensors whose conjugate or negative bit is set.
//
// at::native::copy_ hands every copy that involves a flagos tensor to aten::_copy_from. The
// Conjugate and Negative keys have no kernel for _copy_from, so their boxed fallback resolves
// the bit by cloning the source, and that clone copies through _copy_from again: unbounded
// recursion, a stack overflow. Letting both keys fall through sends the copy to flagos's own
// _copy_from, whose native aliases carry the bits to the native copy kernel, which resolves
// them exactly as it does for native tensors (and keeps conj() a lazy view until then).

#include <torch/library.h>

namespace torch_fl {
namespace {

TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

} // namespace
} // namespace torch_fl
