# The Python extension `hydragen._hydragen` (python/src) over hydragen_lib, which is then built
# position-independent. The interpreter is Python_EXECUTABLE; unset, Debian's /usr/bin/python3
# (where python3-pybind11, numpy and pytest are) is preferred over whatever python3 is on PATH.
set(HYDRAGEN_WITH_PYTHON OFF)
if(NOT HYDRAGEN_PYTHON STREQUAL "OFF" AND NOT HYDRAGEN_BUILD_FUZZ)
  if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python_EXECUTABLE /usr/bin/python3)
  endif()
  find_package(Python 3.8 QUIET COMPONENTS Interpreter Development.Module)
  if(Python_FOUND)
    set(PYBIND11_FINDPYTHON ON)
    find_package(pybind11 2.6 CONFIG QUIET)
  endif()
  if(Python_FOUND AND pybind11_FOUND)
    set(HYDRAGEN_WITH_PYTHON ON)
  elseif(HYDRAGEN_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "HYDRAGEN_PYTHON=ON but pybind11 or the Python headers were not found: install the Debian "
                        "packages 'pybind11-dev python3-dev' (scripts/setup installs them), or pass -DPython_EXECUTABLE.")
  endif()
endif()
message(STATUS "hydragen: Python extension ${HYDRAGEN_WITH_PYTHON} (${Python_EXECUTABLE})")

if(HYDRAGEN_WITH_PYTHON)
  set_target_properties(hydragen_lib PROPERTIES POSITION_INDEPENDENT_CODE ON)
  file(GLOB HYDRAGEN_PY_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/src/*.cpp)
  pybind11_add_module(_hydragen NO_EXTRAS ${HYDRAGEN_PY_SOURCES})  # no LTO: links in seconds
  target_include_directories(_hydragen PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/python/src)
  target_link_libraries(_hydragen PRIVATE hydragen_lib)
  target_compile_options(_hydragen PRIVATE -Wall -Wextra)
  # The package importable from the build tree: build/python/hydragen/{*.py, _hydragen*.so}, the
  # .py files linked to the sources so edits show without a rebuild.
  set(HYDRAGEN_PY_PACKAGE ${PROJECT_BINARY_DIR}/python/hydragen)
  set_target_properties(_hydragen PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${HYDRAGEN_PY_PACKAGE})
  file(GLOB HYDRAGEN_PY_FILES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/hydragen/*.py)
  file(MAKE_DIRECTORY ${HYDRAGEN_PY_PACKAGE})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/presets ${HYDRAGEN_PY_PACKAGE}/presets SYMBOLIC)
  foreach(py ${HYDRAGEN_PY_FILES})
    get_filename_component(name ${py} NAME)
    file(CREATE_LINK ${py} ${HYDRAGEN_PY_PACKAGE}/${name} SYMBOLIC)
  endforeach()
endif()

# The tests: pytest over the build tree's package (python.pytest), and the README's install
# command into a venv of this build, its package then imported by the op tests (python.pip_install).
if(HYDRAGEN_WITH_PYTHON AND HYDRAGEN_BUILD_TESTS)
  add_test(NAME python.pytest
           COMMAND ${Python_EXECUTABLE} -m pytest -q -p no:cacheprovider ${PROJECT_SOURCE_DIR}/python/tests
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(python.pytest PROPERTIES TIMEOUT 600 ENVIRONMENT
    "HYDRAGEN_PYTHON_PATH=${PROJECT_BINARY_DIR}/python;HYDRAGEN_CLI=$<TARGET_FILE:hydragen>")
  set(venv ${PROJECT_BINARY_DIR}/python-venv)
  add_test(NAME python.pip_install
           COMMAND sh -c "rm -rf '${venv}' && ${Python_EXECUTABLE} -m venv --system-site-packages '${venv}' && HYDRAGEN_BUILD_DIR='${PROJECT_BINARY_DIR}' '${venv}/bin/pip' install -q --no-index --no-build-isolation '${PROJECT_SOURCE_DIR}/python' && cd '${PROJECT_BINARY_DIR}' && '${venv}/bin/python' -m pytest -q -p no:cacheprovider '${PROJECT_SOURCE_DIR}/python/tests/test_ops.py' && '${venv}/bin/python' -c 'import hydragen, sys; sys.exit(0 if hydragen.__file__.startswith(\"${venv}\") else 1)'")
  set_tests_properties(python.pip_install PROPERTIES TIMEOUT 600)
endif()
