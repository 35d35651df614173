# Every dependency comes from a Debian package; a missing one stops CMake with the
# package to install (scripts/setup installs all of them).
find_package(Threads REQUIRED)

function(hydragen_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR "hydragen needs ${what}: install the Debian package '${package}' "
                        "(scripts/setup installs everything).")
  endif()
endfunction()

find_package(PkgConfig)
hydragen_require(PKG_CONFIG_FOUND "pkg-config" pkg-config)
pkg_check_modules(OPENBLAS IMPORTED_TARGET openblas)
hydragen_require(OPENBLAS_FOUND "OpenBLAS (CPU GEMM)" libopenblas-dev)
add_library(hydragen::blas ALIAS PkgConfig::OPENBLAS)

pkg_check_modules(PCRE2 IMPORTED_TARGET libpcre2-8)
hydragen_require(PCRE2_FOUND "PCRE2 (tokenizer pre-tokenizer regex)" libpcre2-dev)
pkg_check_modules(UTF8PROC IMPORTED_TARGET libutf8proc)
hydragen_require(UTF8PROC_FOUND "utf8proc (tokenizer NFC/NFKC normalizers)" libutf8proc-dev)
pkg_check_modules(SENTENCEPIECE IMPORTED_TARGET sentencepiece)
hydragen_require(SENTENCEPIECE_FOUND "SentencePiece (tokenizer.model)" libsentencepiece-dev)

pkg_check_modules(HTTPLIB IMPORTED_TARGET cpp-httplib)
hydragen_require(HTTPLIB_FOUND "cpp-httplib (hydragen serve)" libcpp-httplib-dev)

find_package(nlohmann_json 3 QUIET)
hydragen_require(nlohmann_json_FOUND "nlohmann-json" nlohmann-json3-dev)
find_package(CLI11 QUIET)
hydragen_require(CLI11_FOUND "CLI11" libcli11-dev)
if(HYDRAGEN_BUILD_TESTS)
  find_package(GTest QUIET)
  hydragen_require(GTest_FOUND "GoogleTest" libgtest-dev)
endif()
