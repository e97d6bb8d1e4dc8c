// The lines the multi-process tests exchange, shared by the peers (emu_mp_peer) and the driver
// (mp_test, mp_two_host_test). Every line is a verb and space-separated words:
//
//   peer -> driver (stdout)
//     TO <peer|all> <tag> k=v ...   relay to another peer: the out-of-band exchange a verbs
//                                   program does over a socket (QPN, GID, address, rkey)
//     EVENT <name>                  a point in the scenario the driver may act on (kill a peer,
//                                   take a link down)
//     RESULT <key>=<value>          a figure the driver checks across processes
//     FAIL <text>                   a check of the peer's own that failed: expected vs seen
//     anything else                 kept in the transcript shown when a test fails
//   driver -> peer (stdin)
//     FROM <peer> <tag> k=v ...     a relayed line
//
// Values are decimal or 0x-prefixed hexadecimal numbers, or GIDs as 32 hex digits.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace mp {

inline constexpr std::string_view kTo = "TO";
inline constexpr std::string_view kFrom = "FROM";
inline constexpr std::string_view kEvent = "EVENT";
inline constexpr std::string_view kResult = "RESULT";
inline constexpr std::string_view kFail = "FAIL";
inline constexpr std::string_view kEveryone = "all";

inline std::vector<std::string> split_words(std::string_view line) {
  std::vector<std::string> words;
  std::istringstream in{std::string(line)};
  std::string w;
  while (in >> w) words.push_back(w);
  return words;
}

// The k=v words of a line from index `first` on; words without '=' are ignored.
inline std::map<std::string, std::string> parse_fields(const std::vector<std::string>& words,
                                                       size_t first) {
  std::map<std::string, std::string> fields;
  for (size_t i = first; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    if (eq == std::string::npos) continue;
    fields[words[i].substr(0, eq)] = words[i].substr(eq + 1);
  }
  return fields;
}

// Decimal or 0x-hexadecimal; nullopt unless the whole text is a number.
inline std::optional<uint64_t> parse_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  try {
    size_t used = 0;
    const uint64_t v = std::stoull(text, &used, 0);
    if (used != text.size()) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

inline std::string hex16(const uint8_t* raw) {
  std::string out;
  char byte[3];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(byte, sizeof(byte), "%02x", raw[i]);
    out += byte;
  }
  return out;
}

inline bool unhex16(const std::string& text, uint8_t* raw) {
  if (text.size() != 32) return false;
  for (int i = 0; i < 16; ++i) {
    auto v = parse_number("0x" + text.substr(2 * i, 2));
    if (!v) return false;
    raw[i] = static_cast<uint8_t>(*v);
  }
  return true;
}

}  // namespace mp
