// torch.accelerator.Graph on flagos. torch 2.13 added ATen's device-generic graph registry; a
// flagos graph forwards to the native device's registered graph (CUDA's on the cuda
// accelerator), which records the kernels flagos launches on the shared stream. Older torch has
// no registry: there torch.flagos.FlagOSGraph is the way in (torch_fl/flagos/graphs.py).

#if __has_include(<ATen/core/GraphImplInterface.h>)

#include "runtime/accelerator.h"
#include "runtime/graph_capture.h"

#include <ATen/core/GraphImplInterface.h>
#include <c10/util/Exception.h>

#include <memory>
#include <string>

namespace torch_fl {
namespace {

class FlagosGraphImpl final : public at::GraphImplInterface {
 public:
  explicit FlagosGraphImpl(const at::GraphImplArgs& args) {
    check_graph_capture_supported("torch.accelerator.Graph");
    const auto native = accelerator().native_device_type();
    native_ = at::create_graph_impl(native, args);
    TORCH_CHECK(
        native_ != nullptr,
        "torch.accelerator.Graph on flagos needs torch's graph implementation for ",
        c10::DeviceTypeName(native),
        ", which this torch build does not register; use torch.flagos.FlagOSGraph instead.");
  }

  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) override {
    native_->capture_begin(pool, mode);
    note_capture_begin();
  }
  void capture_end() override {
    note_capture_end();
    native_->capture_end();
  }
  void instantiate() override {
    native_->instantiate();
  }
  void replay() override {
    native_->replay();
  }
  void reset() override {
    native_->reset();
  }
  c10::MempoolId_t pool() const override {
    return native_->pool();
  }
  void enable_debug_mode() override {
    native_->enable_debug_mode();
  }
  void debug_dump(const std::string& path) override {
    native_->debug_dump(path);
  }

 private:
  std::unique_ptr<at::GraphImplInterface> native_;
};

} // namespace
} // namespace torch_fl

namespace at {
// The registry's key is c10::DeviceTypeName(PrivateUse1): the renamed backend, upper case.
REGISTER_GRAPH_IMPL(FLAGOS, torch_fl::FlagosGraphImpl);
} // namespace at

#endif
