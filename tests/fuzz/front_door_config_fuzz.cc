// libFuzzer target for RETAIN_FRONT_DOOR's parser (shim/src/base/config.h:
// ParseFrontDoor), and RETAIN_CONTROL's (ParseControl), which shares its
// loopback-address check.
//
// Input: any bytes, cut at the first NUL (an environment value is a C
// string). The target checks what a caller relies on: a value accepted is
// on loopback on both sides (127.0.0.0/8 or ::1), with ports 1..65535 and
// the two sides different; a value refused leaves the front door off and
// says why; parsing is a function of the text.
//
// config.cc's LoadConfig reports through base/log.cc, which the parsers
// never call: the two log functions below abort if they are ever reached,
// so the target links config.cc alone.
#include <arpa/inet.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/config.h"

namespace retain::shim {
void LogConfigError(const char*, ...) { abort(); }
void SetLogDestination(bool, const char*) { abort(); }
}  // namespace retain::shim

namespace {

using retain::shim::Config;
using retain::shim::LoopbackPort;

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "front_door_config_fuzz: %s\n", what);
    abort();
  }
}

bool Loopback(const LoopbackPort& side) {
  if (side.ipv6) return memcmp(side.addr, &in6addr_loopback, 16) == 0;
  return side.addr[0] == 127;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  std::string text(reinterpret_cast<const char*>(bytes), size);
  text = text.c_str();  // up to the first NUL
  Config first{};
  Config second{};
  const char* why = nullptr;
  const bool accepted = retain::shim::ParseFrontDoor(text.c_str(), &first, &why);
  Check(accepted == first.front_door, "front_door says whether it was accepted");
  if (accepted) {
    Check(Loopback(first.front_door_listen) && Loopback(first.front_door_target),
          "an accepted value is loopback on both sides");
    Check(first.front_door_listen.port != 0 && first.front_door_target.port != 0, "ports 1..65535");
    Check(first.front_door_listen.port != first.front_door_target.port ||
              first.front_door_listen.ipv6 != first.front_door_target.ipv6 ||
              memcmp(first.front_door_listen.addr, first.front_door_target.addr, 16) != 0,
          "it never relays to where it listens");
  } else {
    Check(why != nullptr && why[0] != '\0', "a refusal says why");
  }
  const char* why_again = nullptr;
  Check(retain::shim::ParseFrontDoor(text.c_str(), &second, &why_again) == accepted,
        "the same text, the same answer");
  if (accepted) {
    Check(
        memcmp(&first.front_door_listen, &second.front_door_listen, sizeof(LoopbackPort)) == 0 &&
            memcmp(&first.front_door_target, &second.front_door_target, sizeof(LoopbackPort)) == 0,
        "the same text, the same addresses");
  }
  // RETAIN_CONTROL's parser on the same text, and with its prefix.
  for (const std::string& control : {text, "tcp:" + text, "unix:" + text}) {
    Config config{};
    const char* control_why = nullptr;
    if (retain::shim::ParseControl(control.c_str(), &config, &control_why)) {
      if (config.control == retain::shim::ControlKind::kTcp) {
        LoopbackPort side{};
        side.ipv6 = config.control_ipv6;
        memcpy(side.addr, config.control_addr, 16);
        Check(Loopback(side), "an accepted control address is loopback");
        Check(config.control_port != 0, "a control port 1..65535");
      }
    } else {
      Check(config.control == retain::shim::ControlKind::kOff, "a refused control value is off");
    }
  }
  return 0;
}
