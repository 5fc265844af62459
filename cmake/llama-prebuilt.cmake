# The fuzz build links llama.cpp's libraries from another build folder (LLAMAPP_LLAMA_PREBUILT,
# normally build/, made by g++) instead of compiling them again with clang, so that the fuzz job
# fits CI's time budget. ggml and llama are C libraries at their interface. The common library is
# compiled here: its headers hold nlohmann's ordered_json, whose layout differs between the two
# compilers (clang's __has_attribute does not know no_unique_address, g++'s does).
set(_pre "${LLAMAPP_LLAMA_PREBUILT}/llama.cpp")
set(_src "${LLAMAPP_LLAMA_DIR}")
foreach(_lib src/libllama.a common/libllama-common-base.a
             ggml/src/libggml.a ggml/src/libggml-cpu.a ggml/src/libggml-base.a
             ggml/src/ggml-rpc/libggml-rpc.a
             vendor/cpp-httplib/libcpp-httplib.a)
  if(NOT EXISTS "${_pre}/${_lib}")
    message(FATAL_ERROR "LLAMAPP_LLAMA_PREBUILT: ${_pre}/${_lib} is missing; build that folder first")
  endif()
endforeach()
find_package(OpenSSL REQUIRED)
find_package(Threads REQUIRED)

function(_llamapp_import name file)
  add_library(${name} STATIC IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES IMPORTED_LOCATION "${_pre}/${file}")
endfunction()
_llamapp_import(ggml-base ggml/src/libggml-base.a)
_llamapp_import(ggml-cpu ggml/src/libggml-cpu.a)
_llamapp_import(ggml-rpc ggml/src/ggml-rpc/libggml-rpc.a)
_llamapp_import(ggml ggml/src/libggml.a)
_llamapp_import(llama src/libllama.a)
_llamapp_import(llama-common-base common/libllama-common-base.a)
file(GLOB _common_sources CONFIGURE_DEPENDS "${_src}/common/*.cpp" "${_src}/common/jinja/*.cpp"
     "${_src}/common/parsers/*.cpp")
add_library(llama-common STATIC ${_common_sources})
set_target_properties(llama-common PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_options(llama-common PRIVATE -w)  # llama.cpp's code, as its own build would warn
_llamapp_import(cpp-httplib vendor/cpp-httplib/libcpp-httplib.a)

add_library(nlohmann INTERFACE IMPORTED GLOBAL)
target_include_directories(nlohmann INTERFACE "${_src}/vendor/nlohmann/..")
add_library(vendor::nlohmann ALIAS nlohmann)

target_include_directories(ggml-base INTERFACE "${_src}/ggml/include")
target_compile_definitions(ggml-base INTERFACE GGML_USE_CPU)
target_link_libraries(ggml-base INTERFACE Threads::Threads m)
target_link_libraries(ggml-cpu INTERFACE ggml-base)
target_link_libraries(ggml-rpc INTERFACE ggml-base)
target_link_libraries(ggml INTERFACE ggml-cpu ggml-rpc ggml-base ${CMAKE_DL_LIBS})
target_include_directories(llama INTERFACE "${_src}/include")
target_link_libraries(llama INTERFACE ggml)
target_include_directories(llama-common-base INTERFACE "${_src}/common" "${_src}/vendor/sheredom/..")
target_compile_definitions(llama-common-base INTERFACE LLAMA_SUBPROCESS)
target_link_libraries(llama-common-base INTERFACE llama nlohmann)
target_link_libraries(llama-common PUBLIC llama-common-base PRIVATE cpp-httplib)
target_include_directories(cpp-httplib INTERFACE "${_src}/vendor/cpp-httplib")
target_compile_definitions(cpp-httplib INTERFACE CPPHTTPLIB_OPENSSL_SUPPORT)
target_link_libraries(cpp-httplib INTERFACE OpenSSL::SSL OpenSSL::Crypto)
