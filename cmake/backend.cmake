# Which ggml backend llama.cpp is built with: one switch, LLAMAPP_BACKEND (the scripts pass the
# environment variable of the same name). ggml's RPC backend is built in every variant, so that
# any build can place layers on `llamapp rpc-server` processes.
#   cpu     the CPU only
#   cuda    NVIDIA GPUs (needs the CUDA toolkit's nvcc)
#   vulkan  any Vulkan 1.2 device (needs libvulkan-dev, glslc and spirv-headers)
#   metal   Apple GPUs (the path exists; untested on this project's machines)
#   auto    metal on macOS; cuda where nvcc is found and nvidia-smi lists a GPU; else cpu.
#           A machine with the toolkit but no GPU (this project's CI machines) builds for the CPU:
#           compiling CUDA kernels it cannot run would take it an hour. LLAMAPP_BACKEND=cuda
#           builds them anyway.
set(LLAMAPP_BACKEND "auto" CACHE STRING "ggml backend: auto, cpu, cuda, vulkan or metal")
set_property(CACHE LLAMAPP_BACKEND PROPERTY STRINGS auto cpu cuda vulkan metal)
if(NOT LLAMAPP_BACKEND MATCHES "^(auto|cpu|cuda|vulkan|metal)$")
  message(FATAL_ERROR "LLAMAPP_BACKEND must be auto, cpu, cuda, vulkan or metal, not '${LLAMAPP_BACKEND}'")
endif()

# nvcc where CUDA installs put it: CUDA_HOME, CUDA_PATH, PATH, then the toolkit's usual prefix.
find_program(LLAMAPP_NVCC nvcc HINTS "$ENV{CUDA_HOME}/bin" "$ENV{CUDA_PATH}/bin"
             PATHS /usr/local/cuda/bin /opt/cuda/bin)
find_program(LLAMAPP_NVIDIA_SMI nvidia-smi)

# The compute capabilities of the GPUs this machine has ("90;89"), empty without one.
function(_llamapp_local_cuda_archs out)
  set(_archs "")
  if(LLAMAPP_NVIDIA_SMI)
    execute_process(COMMAND ${LLAMAPP_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE _caps RESULT_VARIABLE _rc ERROR_QUIET
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_rc EQUAL 0)
      string(REPLACE "\n" ";" _caps "${_caps}")
      foreach(_cap ${_caps})
        string(REPLACE "." "" _cap "${_cap}")
        string(STRIP "${_cap}" _cap)
        if(_cap MATCHES "^[0-9]+$")
          list(APPEND _archs ${_cap})
        endif()
      endforeach()
      list(REMOVE_DUPLICATES _archs)
    endif()
  endif()
  set(${out} "${_archs}" PARENT_SCOPE)
endfunction()

set(LLAMAPP_BACKEND_RESOLVED ${LLAMAPP_BACKEND})
if(LLAMAPP_BACKEND STREQUAL "auto")
  _llamapp_local_cuda_archs(_local_archs)
  if(APPLE)
    set(LLAMAPP_BACKEND_RESOLVED metal)
  elseif(LLAMAPP_NVCC AND _local_archs)
    set(LLAMAPP_BACKEND_RESOLVED cuda)
  else()
    set(LLAMAPP_BACKEND_RESOLVED cpu)
  endif()
endif()

set(GGML_CUDA OFF CACHE BOOL "" FORCE)
set(GGML_VULKAN OFF CACHE BOOL "" FORCE)
set(GGML_METAL OFF CACHE BOOL "" FORCE)
set(GGML_RPC ON CACHE BOOL "" FORCE)
if(LLAMAPP_BACKEND_RESOLVED STREQUAL "cuda")
  if(NOT LLAMAPP_NVCC AND NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "LLAMAPP_BACKEND=cuda: nvcc not found (set CUDA_HOME, or put the CUDA "
                        "toolkit's bin/ on PATH; Debian does not package a current toolkit)")
  endif()
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER ${LLAMAPP_NVCC} CACHE FILEPATH "" FORCE)
  endif()
  # llama.cpp's default, "native", fails where no GPU is. The GPUs this machine has, else the
  # generations CUDA 12 and 13 both build for: Turing (75, as PTX so later GPUs can JIT it),
  # Ampere (80, 86), Ada (89) and Hopper (90).
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    _llamapp_local_cuda_archs(_local_archs)
    if(_local_archs)
      set(CMAKE_CUDA_ARCHITECTURES "${_local_archs}" CACHE STRING "" FORCE)
    else()
      set(CMAKE_CUDA_ARCHITECTURES "75-virtual;80-real;86-real;89-real;90-real" CACHE STRING "" FORCE)
    endif()
  endif()
  set(GGML_CUDA ON CACHE BOOL "" FORCE)
elseif(LLAMAPP_BACKEND_RESOLVED STREQUAL "vulkan")
  set(GGML_VULKAN ON CACHE BOOL "" FORCE)
  include(${CMAKE_CURRENT_LIST_DIR}/glslc-cache.cmake)
elseif(LLAMAPP_BACKEND_RESOLVED STREQUAL "metal")
  set(GGML_METAL ON CACHE BOOL "" FORCE)
  # One binary: the Metal shaders compiled into it instead of loaded from beside it.
  set(GGML_METAL_EMBED_LIBRARY ON CACHE BOOL "" FORCE)
endif()
message(STATUS "llamapp: backend ${LLAMAPP_BACKEND_RESOLVED} (LLAMAPP_BACKEND=${LLAMAPP_BACKEND}), with RPC")

# The ggml libraries of the chosen backend, bottom up: what the installed archive merges and
# what a consumer's link needs beside it.
set(LLAMAPP_GGML_BACKEND_TARGETS ggml-cpu ggml-rpc)
if(LLAMAPP_BACKEND_RESOLVED STREQUAL "cuda")
  list(APPEND LLAMAPP_GGML_BACKEND_TARGETS ggml-cuda)
elseif(LLAMAPP_BACKEND_RESOLVED STREQUAL "vulkan")
  list(APPEND LLAMAPP_GGML_BACKEND_TARGETS ggml-vulkan)
elseif(LLAMAPP_BACKEND_RESOLVED STREQUAL "metal")
  list(APPEND LLAMAPP_GGML_BACKEND_TARGETS ggml-metal ggml-blas)
endif()
