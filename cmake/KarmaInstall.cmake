# `cmake --install build --prefix DIR`: the programs, the libraries, the public header, the Python package and a
# CMake package (find_package(karma): karma::karma_mpi, the library that implements karma.h, and karma::headers).
include(CMakePackageConfigHelpers)

set(KARMA_INSTALL_PYTHONDIR "${CMAKE_INSTALL_LIBDIR}/python3/dist-packages" CACHE STRING
    "Where the Python package karma goes, relative to the prefix (put it on PYTHONPATH)")
set(KARMA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/karma")

add_library(karma_headers INTERFACE)
target_include_directories(karma_headers INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(karma_headers PROPERTIES EXPORT_NAME headers)

install(TARGETS karma-launcher karma-trace RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS karma LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS karma_mpi karma_headers EXPORT karmaTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES include/karma/karma.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/karma)
install(DIRECTORY python/karma DESTINATION ${KARMA_INSTALL_PYTHONDIR} FILES_MATCHING PATTERN "*.py"
  PATTERN "__pycache__" EXCLUDE)

install(EXPORT karmaTargets NAMESPACE karma:: DESTINATION ${KARMA_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/karmaConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/karmaConfig.cmake
  INSTALL_DESTINATION ${KARMA_INSTALL_CMAKEDIR} PATH_VARS CMAKE_INSTALL_BINDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/karmaConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/karmaConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/karmaConfigVersion.cmake
  DESTINATION ${KARMA_INSTALL_CMAKEDIR})
