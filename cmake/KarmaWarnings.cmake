# Compiler warnings and the sanitizer configuration, applied to every target of the project.
add_compile_options(-Wall -Wextra -Wno-unused-parameter)
if(KARMA_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  add_compile_definitions(KARMA_SANITIZE=1)
endif()
