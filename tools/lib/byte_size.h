// byte_size: the one way the tools write a byte count for people: binary
// units with one decimal ("126.0 MiB"), signed for growth ("+1.5 MiB").
// Reading a size from the command line is cli.h's ParseByteSize.
//
// Thread-safe: pure functions. Depends on abseil strings only, so the fuzz
// targets that build the reader by hand can compile it too.
#ifndef RETAIN_TOOLS_LIB_BYTE_SIZE_H_
#define RETAIN_TOOLS_LIB_BYTE_SIZE_H_

#include <cstdint>
#include <string>

namespace retain::tool {

// "0 B", "512 B", "1.5 KiB", "126.0 MiB", "8.0 GiB": binary units with one
// decimal, so columns stay narrow. The unit switches before rounding would
// print "1024.0" ((1 MiB - 1) is "1.0 MiB"); UINT64_MAX is "16.0 EiB".
std::string HumanBytes(uint64_t bytes);

// "+1.5 MiB", "-300 B", "0 B": HumanBytes of the magnitude with its sign.
std::string SignedBytes(int64_t bytes);

}  // namespace retain::tool

#endif  // RETAIN_TOOLS_LIB_BYTE_SIZE_H_
