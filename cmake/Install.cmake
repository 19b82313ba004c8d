# `cmake --install`: the linac executable, the libraries other projects build on (the spec front
# end LinacSpec; the portable CPU kernels linac_kernels_cpu, when the runtime is built) with their
# public headers, and a versioned CMake package:
#   find_package(linac 0.1 CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE linac::spec linac::kernels_cpu)
# Layout: bin/linac, lib/lib*.a, include/linac/Spec/*.h (#include "linac/Spec/Spec.h"),
# include/linac/kernels/{common,cpu}/*.h (#include "kernels/cpu/cpu_kernels.h"),
# lib/cmake/linac/linac{Config,ConfigVersion,Targets}.cmake.
include(CMakePackageConfigHelpers)

set(LINAC_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/linac)

if(TARGET linac)
  # The installed binary finds LibTorch, LLVM and the other shared libraries where it was linked.
  set_target_properties(linac PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS linac RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  # `linac sweep` draws its plots with this script (found beside the binary, ../share/linac).
  install(PROGRAMS ${LINAC_SOURCE_DIR}/tools/sweep_plots.py DESTINATION ${CMAKE_INSTALL_DATADIR}/linac)
endif()

set(LINAC_EXPORTED_TARGETS LinacSpec)
set_target_properties(LinacSpec PROPERTIES EXPORT_NAME spec)
install(DIRECTORY ${LINAC_SOURCE_DIR}/compiler/include/linac/Spec
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/linac FILES_MATCHING PATTERN "*.h")
if(TARGET linac_kernels_cpu)
  list(APPEND LINAC_EXPORTED_TARGETS linac_kernels_cpu)
  set_target_properties(linac_kernels_cpu PROPERTIES EXPORT_NAME kernels_cpu)
  foreach(dir common cpu)
    install(DIRECTORY ${LINAC_SOURCE_DIR}/runtime/kernels/${dir}
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/linac/kernels FILES_MATCHING PATTERN "*.h")
  endforeach()
endif()

install(TARGETS ${LINAC_EXPORTED_TARGETS} EXPORT linacTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT linacTargets NAMESPACE linac:: DESTINATION ${LINAC_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/linacConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/linacConfig.cmake INSTALL_DESTINATION ${LINAC_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/linacConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)  # before 1.0, a minor version may change the interfaces
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/linacConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/linacConfigVersion.cmake
        DESTINATION ${LINAC_INSTALL_CMAKEDIR})
