# `cmake --install`: the public headers, the libraries, a CMake package (llamapp::llamapp,
# llamapp::server) and pkg-config files. The static libllamapp.a carries the llama.cpp libraries
# it was built with (merged at install time), so a consumer links one archive and Debian's
# fmt, spdlog, libssl/libcrypto and xxhash; nothing of the llama.cpp tree is needed.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

option(LLAMAPP_SHARED "Install libllamapp as a shared library (llama.cpp linked in) instead of static" OFF)

# Installs one static archive made of the archives of `targets` (ar's MRI script), at install
# time so that the prefix given to `cmake --install --prefix` is the one used.
function(llamapp_install_merged_archive name)
  set(_mri "")
  foreach(_t ${ARGN})
    if(TARGET ${_t})
      string(APPEND _mri "addlib $<TARGET_FILE:${_t}>\\n")
    endif()
  endforeach()
  install(CODE "
    set(_lib \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}\")
    file(MAKE_DIRECTORY \"\${_lib}\")
    file(REMOVE \"\${_lib}/${name}\")
    set(_script \"${PROJECT_BINARY_DIR}/${name}.mri\")
    file(WRITE \"\${_script}\" \"create \${_lib}/${name}\\n${_mri}save\\nend\\n\")
    message(STATUS \"Installing: \${_lib}/${name} (${ARGN})\")
    execute_process(COMMAND \"${CMAKE_AR}\" -M INPUT_FILE \"\${_script}\" RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR \"merging the archives of ${name} failed\")
    endif()
    execute_process(COMMAND \"${CMAKE_RANLIB}\" \"\${_lib}/${name}\")
  ")
endfunction()

if(LLAMAPP_SHARED)
  # Every object of the static libraries, with only llamapp's own C++ symbols exported.
  add_library(llamapp-shared SHARED ${PROJECT_SOURCE_DIR}/cmake/empty.cpp)
  set_target_properties(llamapp-shared PROPERTIES OUTPUT_NAME llamapp
    VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
  # The layers' archives whole, by file: LINK_LIBRARY:WHOLE_ARCHIVE refuses a library that also
  # reaches the link through another layer's interface.
  set(_whole)
  foreach(_layer ${LLAMAPP_LAYERS})
    list(APPEND _whole $<TARGET_FILE:${_layer}>)
  endforeach()
  add_dependencies(llamapp-shared ${LLAMAPP_LAYERS})
  target_link_libraries(llamapp-shared PRIVATE -Wl,--whole-archive ${_whole} -Wl,--no-whole-archive
    llama-common llama ggml fmt::fmt spdlog::spdlog OpenSSL::SSL OpenSSL::Crypto ${XXHASH_LIBRARY} Threads::Threads)
  target_link_options(llamapp-shared PRIVATE
    "-Wl,--version-script=${PROJECT_SOURCE_DIR}/cmake/llamapp.map")
  install(TARGETS llamapp-shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  set(LLAMAPP_LIBRARY_FILE "libllamapp.so")
  # The shared library keeps its HTTP code to itself: the server brings its own.
  llamapp_install_merged_archive(libllamapp-server.a llamapp-server cpp-httplib)
else()
  llamapp_install_merged_archive(libllamapp.a
    ${LLAMAPP_LAYERS} llama-common llama-common-base cpp-httplib llama ggml
    ${LLAMAPP_GGML_BACKEND_TARGETS} ggml-base)
  llamapp_install_merged_archive(libllamapp-server.a llamapp-server)
  set(LLAMAPP_LIBRARY_FILE "libllamapp.a")
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/llamapp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# What a consumer links beside the archive for the backend it was built with.
set(LLAMAPP_BACKEND_LINK "")
set(LLAMAPP_BACKEND_DEPENDENCY "")
if(LLAMAPP_BACKEND_RESOLVED STREQUAL "cuda")
  set(LLAMAPP_BACKEND_DEPENDENCY "CUDAToolkit")
  set(LLAMAPP_BACKEND_LINK "CUDA::cudart;CUDA::cublas;CUDA::cuda_driver")
elseif(LLAMAPP_BACKEND_RESOLVED STREQUAL "vulkan")
  set(LLAMAPP_BACKEND_DEPENDENCY "Vulkan")
  set(LLAMAPP_BACKEND_LINK "Vulkan::Vulkan")
elseif(LLAMAPP_BACKEND_RESOLVED STREQUAL "metal")
  set(LLAMAPP_BACKEND_LINK "-framework Foundation;-framework Metal;-framework MetalKit;-framework Accelerate")
endif()
set(_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/llamapp)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/llamappConfig.cmake.in
  ${PROJECT_BINARY_DIR}/llamappConfig.cmake INSTALL_DESTINATION ${_cmake_dir}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/llamappConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/llamappConfig.cmake
  ${PROJECT_BINARY_DIR}/llamappConfigVersion.cmake DESTINATION ${_cmake_dir})

foreach(_pc llamapp llamapp-server)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${_pc}.pc.in ${PROJECT_BINARY_DIR}/${_pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${_pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
