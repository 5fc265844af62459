# Sourced by setup.sh, run.sh and test.sh: the backend llama.cpp is built with (LLAMAPP_BACKEND,
# see cmake/backend.cmake) and the build folder it gets by default, so that a GPU build never
# overwrites the CPU one: build/ for auto and cpu, build-<backend>/ for the others.
backend=${LLAMAPP_BACKEND:-auto}
case "$backend" in
  auto | cpu) backend_suffix="" ;;
  cuda | vulkan | metal) backend_suffix="-$backend" ;;
  *) echo "LLAMAPP_BACKEND must be auto, cpu, cuda, vulkan or metal, not '$backend'" >&2; exit 2 ;;
esac
