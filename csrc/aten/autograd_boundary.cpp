#include "aten/autograd_boundary.h"

#include "aten/alias.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace torch_fl::autograd_boundary {
namespace {

using torch::autograd::Edge;
using torch::autograd::Node;
using torch::autograd::variable_list;

// Nodes are held by std::shared_ptr in older torch and c10::intrusive_ptr in newer.
using NodePtr = decltype(Edge::function);

template <class T, class... Args>
NodePtr make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<Node>>) {
    return std::make_shared<T>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

// Backward of handing a kernel the native alias (or host copy) of a flagos argument: the
// alias's gradient is the argument's, re-labelled (or copied back).
struct NativeAliasBackward final : Node {
  NativeAliasBackward(c10::DeviceIndex index, bool copied) : index_(index), copied_(copied) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (grads[0].defined()) {
      out[0] = copied_ ? grads[0].to(c10::Device(c10::DeviceType::PrivateUse1, index_))
                       : flagos_view_of_native(grads[0], index_);
    }
    return out;
  }
  std::string name() const override {
    return "torch_fl::NativeAliasBackward";
  }

 private:
  c10::DeviceIndex index_;
  bool copied_;
};

// Backward of re-labelling (or copying) a kernel's result or update as flagos: the gradient
// goes on into the kernel's history as a native alias (or a host copy).
struct FlagosResultBackward final : Node {
  explicit FlagosResultBackward(bool copied) : copied_(copied) {}
  variable_list apply(variable_list&& grads) override {
    variable_list out(1);
    if (grads[0].defined()) {
      out[0] = copied_ ? grads[0].cpu() : native_alias(grads[0]);
    }
    return out;
  }
  std::string name() const override {
    return "torch_fl::FlagosResultBackward";
  }

 private:
  bool copied_;
};

// Dense tensors of a differentiable dtype. Nested ones report a strided layout too, but their
// gradient edges are made with operators of their own (a leaf's AccumulateGrad asks for
// `_nested_tensor_size`, which would come back here while the leaf's lock is held).
bool joinable(const at::Tensor& t) {
  return t.layout() == c10::kStrided && !t.is_nested() &&
         torch::autograd::isDifferentiableType(t.scalar_type());
}

// Gives `flagos` the history `edge` leads to, through a FlagosResultBackward.
Edge into_history(const at::Tensor& flagos, Edge edge, bool copied) {
  auto node = make_node<FlagosResultBackward>(copied);
  node->add_next_edge(std::move(edge));
  const auto input_nr = node->add_input_metadata(flagos);
  return Edge(std::move(node), input_nr);
}

bool from_boundary(const at::Tensor& alias) {
  const auto& fn = alias.grad_fn();
  return fn != nullptr && dynamic_cast<const NativeAliasBackward*>(fn.get()) != nullptr;
}

} // namespace

bool wanted(const ArgPlan& plan, const torch::jit::Stack& stack, size_t begin) {
  if (c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::AutogradCPU) ||
      !at::GradMode::is_enabled()) {
    return false;
  }
  for (const auto& a : plan.args) {
    const auto& v = stack[begin + a.index];
    if (a.kind == ArgPlan::Kind::Tensor && v.isTensor() && v.toTensor().requires_grad()) {
      return true;
    }
    if (a.kind == ArgPlan::Kind::TensorList) {
      for (const at::Tensor& t : v.toTensorList()) {
        if (t.requires_grad()) {
          return true;
        }
      }
    }
  }
  return false;
}

void join_argument(const at::Tensor& alias, const at::Tensor& flagos, bool written, bool copied) {
  if (!flagos.requires_grad() || !joinable(alias) || flagos.is_nested()) {
    return;
  }
  if (written && flagos.is_leaf()) {
    // A leaf that requires grad: the kernel's in-place update of it is refused before it
    // writes, as on CPU, when the alias is such a leaf too. (What the kernel reads of it under
    // no_grad before writing it there then gets no gradient.)
    alias.unsafeGetTensorImpl()->set_requires_grad(true);
    return;
  }
  auto node = make_node<NativeAliasBackward>(flagos.device().index(), copied);
  node->add_next_edge(torch::autograd::impl::gradient_edge(flagos));
  const auto input_nr = node->add_input_metadata(alias);
  torch::autograd::impl::set_gradient_edge(alias, Edge(std::move(node), input_nr));
}

ResultHistory history_of(const at::Tensor& native) {
  ResultHistory history;
  if (native.defined() && native.requires_grad() && !native.is_leaf()) {
    history.edge_ = std::make_shared<Edge>(torch::autograd::impl::gradient_edge(native));
  }
  return history;
}

void join_result(const at::Tensor& flagos, ResultHistory history, bool copied) {
  if (!history || !joinable(flagos)) {
    return;
  }
  auto edge = std::move(*static_cast<Edge*>(history.edge_.get()));
  torch::autograd::impl::set_gradient_edge(flagos, into_history(flagos, std::move(edge), copied));
}

void join_written(const at::Tensor& flagos, const at::Tensor& alias, bool copied) {
  if (!alias.requires_grad() || alias.is_leaf() || from_boundary(alias) || !joinable(flagos)) {
    return; // the kernel did not update it with history
  }
  TORCH_CHECK_NOT_IMPLEMENTED(
      !flagos.is_view(),
      "an operator without an autograd kernel updated a view of a flagos tensor in place with "
      "autograd recording; flagos cannot record that update on the view's base. Give the "
      "operator an autograd formula (torch.library.register_autograd), or pass it the base");
  torch::autograd::impl::rebase_history(
      flagos, into_history(flagos, torch::autograd::impl::gradient_edge(alias), copied));
}

} // namespace torch_fl::autograd_boundary
