# The cuda accelerator: links torch's CUDA libraries and the CUDA runtime headers.
find_package(CUDAToolkit REQUIRED)
find_library(C10_CUDA_LIB c10_cuda PATHS ${FLAGOS_TORCH_LIBRARY_DIR} NO_DEFAULT_PATH REQUIRED)
find_library(TORCH_CUDA_LIB torch_cuda PATHS ${FLAGOS_TORCH_LIBRARY_DIR} NO_DEFAULT_PATH REQUIRED)
target_link_libraries(torch_fl_core PUBLIC ${C10_CUDA_LIB} ${TORCH_CUDA_LIB} CUDA::cudart)
target_compile_definitions(torch_fl_core PUBLIC USE_CUDA=1)
