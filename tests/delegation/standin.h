// What the delegation client can see of the stand-in system library from outside: where it is
// loaded and how many times each of its exported functions ran (standin_call_counter.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace delegation {

// The stand-in's path, as the driver passes it (EMURDMA_TEST_STANDIN).
const std::string& standin_path();

// The link-map namespaces in which the file at `path` is loaded (compared by device and inode).
std::vector<long> namespaces_holding(const std::string& path);

// The link-map namespaces in which the stand-in is loaded (none until our library needs it;
// exactly one, not the base namespace, once it delegates).
std::vector<long> standin_namespaces();

// name@version in the stand-in itself (not through our library), or nullptr when the stand-in
// is not loaded exactly once.
void* standin_symbol(const char* name, const char* version);

// Entries into the stand-in's exported function `name`; 0 when the stand-in is not loaded.
uint64_t standin_calls(const char* name);

// True when code address `fn` lies in the file at `path` (same device and inode).
bool address_in_file(const void* fn, const std::string& path);

}  // namespace delegation
