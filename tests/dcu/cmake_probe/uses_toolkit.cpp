// Compiles with plain g++ against DTK's CUDA compatibility headers (the fixture's copy).
#include <cuda_runtime_api.h>

int main() {
  return sizeof(cudaError_t) == 0;
}
