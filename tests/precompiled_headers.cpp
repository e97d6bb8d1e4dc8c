// The one source of emurdma_test_pch and emurdma_dat_test_pch (tests/CMakeLists.txt): programs
// that exist to compile the tests' precompiled header once; no test runs them.
