#include "aten/fast/registry.h"

#include <unordered_map>

namespace torch_fl::fast {

const Kernel* find(const std::string& canonical) {
  static const auto* table = [] {
    auto* map = new std::unordered_map<std::string, const Kernel*>();
    for (const auto& list : {pointwise_kernels(), nn_kernels(), foreach_kernels()}) {
      for (size_t i = 0; i < list.size; ++i) {
        const Kernel& k = list.begin[i];
        std::string name = k.name;
        if (k.overload[0] != '\0') {
          name += std::string(".") + k.overload;
        }
        map->emplace(std::move(name), &k);
      }
    }
    return map;
  }();
  auto it = table->find(canonical);
  return it == table->end() ? nullptr : it->second;
}

} // namespace torch_fl::fast
