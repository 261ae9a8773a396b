#pragma once

// Autograd across the native aliases, for operators without an autograd kernel of their own.
//
// torch calls such an operator (a custom operator registered for "CPU" only) through its autograd
// fallback, which leaves autograd on for the kernel: on CPU the kernel's own torch calls record
// history, so gradients flow through what it computed. On flagos the kernel gets native aliases
// that carry no history, and nothing would be recorded (no gradient, or a wrong one for an
// in-place update). When that fallback is what called (the autograd keys are not excluded), in
// grad mode, with an argument that requires grad, the call joins the aliases to their flagos
// tensors and the kernel's results and updates back to its history, zero-copy both ways.

#include "aten/aliased_call.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>

#include <memory>

namespace torch_fl::autograd_boundary {

// Whether a call needs joining; cheap (one thread-local read) when torch's generated autograd
// kernels called, which exclude the autograd keys below them.
bool wanted(const ArgPlan& plan, const torch::jit::Stack& stack, size_t begin);

// Gives `alias`, the native tensor a kernel gets for `flagos`, history leading to `flagos`
// (`written`: the kernel may update it in place). `copied`, here and below: the native tensors
// are host copies (a device accelerator's cpu_fallback), not aliases.
void join_argument(const at::Tensor& alias, const at::Tensor& flagos, bool written, bool copied);

// A kernel's fresh result: its history is read before it is re-labelled (history_of, given
// the native tensor), then given to the flagos tensor it became (join_result; the same tensor
// when re-labelled in place).
class ResultHistory {
 public:
  explicit operator bool() const {
    return edge_ != nullptr;
  }

 private:
  friend ResultHistory history_of(const at::Tensor& native);
  friend void join_result(const at::Tensor& flagos, ResultHistory history, bool copied);
  std::shared_ptr<void> edge_; // an autograd Edge (kept opaque: its Node is incomplete here)
};
ResultHistory history_of(const at::Tensor& native);
void join_result(const at::Tensor& flagos, ResultHistory history, bool copied);

// A written argument: when the kernel updated `alias` with history (an in-place torch call),
// the caller's `flagos` tensor is rebased onto it, as the update on CPU rebases it.
void join_written(const at::Tensor& flagos, const at::Tensor& alias, bool copied);

} // namespace torch_fl::autograd_boundary
