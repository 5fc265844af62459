// libllamapp.so is made of the static libraries' objects; a shared library target needs a source.
