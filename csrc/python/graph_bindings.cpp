// torch_fl._C graph-capture helpers for torch.flagos.FlagOSGraph (torch_fl/flagos/graphs.py).

#include "runtime/graph_capture.h"

#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

namespace torch_fl {

void init_graph_bindings(py::module_& m) {
  m.def("_check_graph_capture_supported", [](const std::string& what) {
    check_graph_capture_supported(what.c_str());
  });
  m.def("_note_capture_begin", &note_capture_begin);
  m.def("_note_capture_end", &note_capture_end);
  m.def("_capturing_on_this_thread", &capturing_on_this_thread);
}

} // namespace torch_fl
