// libFuzzer harness for the routing-table parser (csrc/aten/routing/conf_parser.cpp).
//
// The input is split at NUL bytes into up to four files, main.conf, a.conf, b.conf and
// sub/c.conf, served from memory, so includes, cycles, missing files and depth limits are all
// reachable. The parser must either return entries or throw ConfError: any other exception,
// a crash, a hang, a leak or undefined behaviour is a finding.

#include "aten/routing/conf_parser.h"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

namespace {

const char* kFiles[] = {"/t/main.conf", "/t/a.conf", "/t/b.conf", "/t/sub/c.conf"};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> files;
  std::string current;
  size_t index = 0;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && index < 3) {
      files[kFiles[index++]] = current;
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  files[kFiles[index]] = current;

  torch_fl::conf::Options options;
  options.routes = {"cpu_fallback", "cuda", "flagos_python", "flaggems_cpp"};
  options.dtypes = {"float16", "bfloat16", "float32", "int64"};
  options.read_file = [&](const std::string& path) -> std::optional<std::string> {
    auto it = files.find(path);
    if (it == files.end()) {
      return std::nullopt;
    }
    return it->second;
  };
  options.check_op = [](const std::string& op) -> std::string {
    static const char* known[] = {"aten::add.Tensor", "aten::relu", "aten::mm", "aten::_conj"};
    for (const char* k : known) {
      if (op == k) {
        return "";
      }
    }
    return "not one of the fuzzer's operators";
  };
  try {
    auto entries = torch_fl::conf::parse_file("/t/main.conf", options);
    for (const auto& e : entries) {
      if (e.op.empty() || e.route.empty() || e.line <= 0) {
        std::abort(); // an accepted line must be complete
      }
      if (e.when && (e.when->min_numel > e.when->max_numel || e.when->min_numel < 0 ||
                     e.when->text.empty())) {
        std::abort(); // an accepted size rule matches some call
      }
    }
  } catch (const torch_fl::conf::ConfError&) {
    // A reported configuration error: the expected outcome for most inputs.
  }
  return 0;
}
