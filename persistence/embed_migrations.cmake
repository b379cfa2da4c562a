# Writes ${OUT}: every ${DIR}/*.sql as a C++ raw string, in file-name order,
# returned by the function ${NAME}(), so the server carries its schema and
# its function bodies and needs no sources.
file(GLOB files "${DIR}/*.sql")
list(SORT files)
set(body "")
foreach(f IN LISTS files)
  get_filename_component(name "${f}" NAME_WE)
  file(READ "${f}" sql)
  string(APPEND body "  {\"${name}\", R\"chargeonce_sql(${sql})chargeonce_sql\"},\n")
endforeach()
file(WRITE "${OUT}.tmp" "// Generated from ${DIR}; do not edit.\n#include \"persistence/migrations.hpp\"\n\nnamespace chargeonce::persistence {\n\nconst std::vector<migration>& ${NAME}() {\n  static const std::vector<migration> all = {\n${body}  };\n  return all;\n}\n\n} // namespace chargeonce::persistence\n")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
