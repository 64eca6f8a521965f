# CUDA is optional: the CUDA code is built for sm_90a (H100/H200: wgmma and the tensor memory
# accelerator need the arch-specific target) only when nvcc exists.
set(PDSPARK_HAVE_CUDA OFF)
if(PDSPARK_ENABLE_CUDA AND EXISTS /usr/local/cuda/bin/nvcc)
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  set(CMAKE_CUDA_ARCHITECTURES 90a)
  enable_language(CUDA)
  # C++20 as for the host code (ops.h and the kernel headers use std::span). CMake 3.25 knows
  # nvcc's dialect flags only up to C++17; nvcc 12+ takes -std=c++20.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  find_package(CUDAToolkit REQUIRED)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR})
  set(PDSPARK_HAVE_CUDA ON)
  message(STATUS "pdspark: CUDA ${CUDAToolkit_VERSION} found, building CUDA code for sm_90a")
else()
  message(STATUS "pdspark: nvcc not found, CPU-only build")
endif()

# pdspark_cuda_strict(TARGET): every warning of the target's CUDA and host sources is an error
# (device code, and the host code nvcc and g++ compile), as CI requires of the CUDA code.
function(pdspark_cuda_strict target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror>)
endfunction()
