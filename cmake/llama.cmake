# Brings in ggml, llama and llama.cpp's common library from the pinned tree fetched by
# scripts/fetch-llama.sh, or from an existing checkout named by LLAMAPP_LLAMA_DIR (option or env).
set(LLAMAPP_LLAMA_DIR "$ENV{LLAMAPP_LLAMA_DIR}" CACHE PATH "llama.cpp source tree")
if(NOT LLAMAPP_LLAMA_DIR)
  execute_process(COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/scripts/fetch-llama.sh
                  OUTPUT_VARIABLE _llama_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _fetch_rc)
  if(NOT _fetch_rc EQUAL 0)
    message(FATAL_ERROR "scripts/fetch-llama.sh failed; run scripts/setup.sh or set LLAMAPP_LLAMA_DIR")
  endif()
  set(LLAMAPP_LLAMA_DIR "${_llama_dir}" CACHE PATH "llama.cpp source tree" FORCE)
endif()
if(NOT EXISTS "${LLAMAPP_LLAMA_DIR}/include/llama.h")
  message(FATAL_ERROR "LLAMAPP_LLAMA_DIR=${LLAMAPP_LLAMA_DIR} is not a llama.cpp tree")
endif()
message(STATUS "llamapp: llama.cpp from ${LLAMAPP_LLAMA_DIR}")
set(LLAMAPP_LLAMA_PREBUILT "" CACHE PATH
    "a build folder whose llama.cpp libraries are linked instead of built (the fuzz build only)")
if(LLAMAPP_LLAMA_PREBUILT)
  include(${CMAKE_CURRENT_LIST_DIR}/llama-prebuilt.cmake)
  return()
endif()

set(BUILD_SHARED_LIBS OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_COMMON ON CACHE BOOL "" FORCE)
# Tools are configured so that bench/ can build llama-bench from the same tree, but
# EXCLUDE_FROM_ALL below keeps them out of the default build.
set(LLAMA_BUILD_TOOLS ON CACHE BOOL "" FORCE)
set(LLAMA_BUILD_TESTS OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_EXAMPLES OFF CACHE BOOL "" FORCE)
# The server is configured (still EXCLUDE_FROM_ALL: only `--target llama-server` builds it) so
# bench/llama-server-restart.sh can compare llama.cpp's own prompt cache with ours, from the same
# tree; issue 5 compares against it too. Its web UI is left out: with LLAMA_BUILD_UI (npm) and
# LLAMA_USE_PREBUILT_UI (a download) off, tools/ui embeds an empty asset table, which needs neither
# npm nor the network (the build prints a warning saying so).
set(LLAMA_BUILD_SERVER ON CACHE BOOL "" FORCE)
set(LLAMA_BUILD_APP OFF CACHE BOOL "" FORCE)
set(LLAMA_BUILD_UI OFF CACHE BOOL "" FORCE)
set(LLAMA_USE_PREBUILT_UI OFF CACHE BOOL "" FORCE)
# HTTPS for the hub client (src/hub): cpp-httplib with Debian's OpenSSL.
set(LLAMA_OPENSSL ON CACHE BOOL "" FORCE)
set(LLAMA_BUILD_IS_DEV OFF CACHE BOOL "" FORCE)
set(LLAMA_ALL_WARNINGS OFF CACHE BOOL "" FORCE)
set(GGML_CCACHE ON CACHE BOOL "" FORCE)
# ggml's own thread pool instead of OpenMP: each context gets a persistent pool (see
# src/core/context.cpp). With OpenMP every thread that decodes owns a separate OpenMP team, and an
# engine's decode thread next to another decoding thread (a second model, a Context) slowed both
# threefold on this 2-core machine; with per-context pools they run at full speed.
set(GGML_OPENMP OFF CACHE BOOL "" FORCE)
include(${CMAKE_CURRENT_LIST_DIR}/backend.cmake)

add_subdirectory(${LLAMAPP_LLAMA_DIR} ${CMAKE_BINARY_DIR}/llama.cpp EXCLUDE_FROM_ALL SYSTEM)
foreach(_t ggml ggml-base ${LLAMAPP_GGML_BACKEND_TARGETS} llama llama-common llama-common-base)
  if(TARGET ${_t})
    set_target_properties(${_t} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
endforeach()

# AMX: some of the machines this project runs on advertise AMX tiles that the hypervisor then
# faults on (SIGILL in ggml's AMX q8_0 kernel, seen on 2026-12-01; every quantized model crashed),
# and -march=native switches ggml's AMX path on wherever the flag is advertised. Off unless asked.
option(LLAMAPP_GGML_AMX "Let ggml use AMX tiles where -march=native finds them" OFF)
if(NOT LLAMAPP_GGML_AMX AND TARGET ggml-cpu AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(ggml-cpu PRIVATE -mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
endif()
