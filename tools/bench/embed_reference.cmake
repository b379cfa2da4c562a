# Writes ${OUT}: the reference's SQL files of ${DIR} as C++ raw strings, so
# that chargeonce-bench --reference needs no source tree at run time.
file(GLOB files "${DIR}/*.sql")
list(SORT files)
set(body "")
foreach(f IN LISTS files)
  get_filename_component(name "${f}" NAME)
  file(READ "${f}" sql)
  string(APPEND body "    {\"${name}\", R\"chargeonce_sql(${sql})chargeonce_sql\"},\n")
endforeach()
file(WRITE "${OUT}.tmp" "// Generated from tools/bench/reference; do not edit.\n#include \"tools/bench/reference.hpp\"\n\nnamespace chargeonce::bench {\n\nconst std::vector<reference_file>& reference_files() {\n  static const std::vector<reference_file> all = {\n${body}  };\n  return all;\n}\n\n} // namespace chargeonce::bench\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
