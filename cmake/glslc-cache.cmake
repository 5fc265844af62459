# The Vulkan build's shader compiler behind scripts/glslc-cache.sh, which keeps each compiled
# shader outside the build folder, keyed by the shader sources of the llama.cpp tree and glslc's
# version. A fresh clone's Vulkan build then compiles none of the ~1,100 shader variants again
# (ccache covers the C++ around them, not glslc). LLAMAPP_GLSLC_CACHE=OFF compiles them as usual.
set(_default_cache "$ENV{XDG_CACHE_HOME}")
if(NOT _default_cache)
  set(_default_cache "$ENV{HOME}/.cache")
endif()
set(LLAMAPP_GLSLC_CACHE "${_default_cache}/llamapp/glslc" CACHE STRING
    "where compiled Vulkan shaders are kept between builds (OFF: not kept)")
find_program(LLAMAPP_GLSLC glslc)
if(NOT LLAMAPP_GLSLC_CACHE OR NOT LLAMAPP_GLSLC)
  return()
endif()

set(_shader_dir "${LLAMAPP_LLAMA_DIR}/ggml/src/ggml-vulkan/vulkan-shaders")
file(GLOB_RECURSE _shader_sources RELATIVE ${_shader_dir} "${_shader_dir}/*")
list(SORT _shader_sources)
execute_process(COMMAND ${LLAMAPP_GLSLC} --version OUTPUT_VARIABLE _sources_key ERROR_QUIET)
foreach(_source ${_shader_sources})
  file(SHA256 ${_shader_dir}/${_source} _hash)
  string(APPEND _sources_key "${_source} ${_hash}\n")
endforeach()
string(SHA256 _sources_key "${_sources_key}")
string(SUBSTRING ${_sources_key} 0 16 _sources_key)

set(_shim "${CMAKE_BINARY_DIR}/glslc-cached")
file(WRITE ${_shim} "#!/bin/sh\nexec '${CMAKE_CURRENT_LIST_DIR}/../scripts/glslc-cache.sh' "
                    "'${LLAMAPP_GLSLC}' '${_sources_key}' '${LLAMAPP_GLSLC_CACHE}/${_sources_key}' \"$@\"\n")
file(CHMOD ${_shim} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
     WORLD_READ WORLD_EXECUTE)
set(Vulkan_GLSLC_EXECUTABLE ${_shim} CACHE FILEPATH "glslc, through llamapp's shader cache" FORCE)
message(STATUS "llamapp: Vulkan shaders cached in ${LLAMAPP_GLSLC_CACHE}/${_sources_key}")
