// Configuration parsing: sizes, signals, and the defaults bad values fall
// back to.
#include "base/config.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <utility>

namespace retain::shim {
namespace {

TEST(ConfigTest, ParsesByteSizes) {
  uint64_t bytes = 0;
  EXPECT_TRUE(ParseByteSize("4096", &bytes));
  EXPECT_EQ(bytes, 4096u);
  EXPECT_TRUE(ParseByteSize("64K", &bytes));
  EXPECT_EQ(bytes, 64u << 10);
  EXPECT_TRUE(ParseByteSize("64KiB", &bytes));
  EXPECT_EQ(bytes, 64u << 10);
  EXPECT_TRUE(ParseByteSize("3MiB", &bytes));
  EXPECT_EQ(bytes, 3u << 20);
  EXPECT_TRUE(ParseByteSize("2GB", &bytes));
  EXPECT_EQ(bytes, uint64_t{2} << 30);
  EXPECT_TRUE(ParseByteSize("1t", &bytes));
  EXPECT_EQ(bytes, uint64_t{1} << 40);
  EXPECT_TRUE(ParseByteSize("0", &bytes));
  EXPECT_EQ(bytes, 0u);
  for (const char* bad :
       {"", "lots", "-1", "12X", "1.5G", "M", "99999999999999999999", "20000000000G", "64KiBs"}) {
    EXPECT_FALSE(ParseByteSize(bad, &bytes)) << bad;
  }
}

TEST(ConfigTest, ParsesDurations) {
  uint64_t ms = 0;
  const std::pair<const char*, uint64_t> good[] = {
      {"500ms", 500},   {"30s", 30000},  {"30", 30000}, {"5m", 300000},
      {"5min", 300000}, {"2h", 7200000}, {"1ms", 1}};
  for (const auto& [text, expected] : good) {
    EXPECT_TRUE(ParseDuration(text, &ms)) << text;
    EXPECT_EQ(ms, expected) << text;
  }
  for (const char* bad : {"", "0", "0s", "s", "-1s", "1.5s", "10 s", "3d", "1sec", "5M",
                          "99999999999999999999", "9999999999999999h"}) {
    EXPECT_FALSE(ParseDuration(bad, &ms)) << bad;
  }
}

// Continuous mode: the interval and the retention bounds, and what bad
// values fall back to (one line each, naming the variable).
TEST(ConfigTest, ContinuousModeVariables) {
  setenv("RETAIN_SNAPSHOT_INTERVAL", "30s", 1);
  setenv("RETAIN_KEEP", "5", 1);
  setenv("RETAIN_KEEP_BYTES", "64MiB", 1);
  Config config;
  testing::internal::CaptureStderr();
  LoadConfig(&config);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(config.snapshot_interval_ms, 30000u);
  EXPECT_EQ(config.keep_count, 5u);
  EXPECT_EQ(config.keep_bytes, 64u << 20);

  struct Case {
    const char* name;
    const char* value;
    const char* line;
  };
  for (Case c :
       {Case{"RETAIN_SNAPSHOT_INTERVAL", "soon",
             "retain: RETAIN_SNAPSHOT_INTERVAL='soon' is not a duration (e.g. 30s, "
             "500ms, 5m); using off\n"},
        Case{"RETAIN_SNAPSHOT_INTERVAL", "10ms",
             "retain: RETAIN_SNAPSHOT_INTERVAL='10ms' is below 100ms; using 100ms\n"},
        Case{"RETAIN_KEEP", "few",
             "retain: RETAIN_KEEP='few' is not a number of snapshots; keeping all\n"},
        Case{"RETAIN_KEEP", "100000", "retain: RETAIN_KEEP='100000' is above 4096; using 4096\n"},
        Case{"RETAIN_KEEP_BYTES", "big",
             "retain: RETAIN_KEEP_BYTES='big' is not a size (e.g. 1GiB); no byte "
             "budget\n"}}) {
    setenv(c.name, c.value, 1);
    testing::internal::CaptureStderr();
    LoadConfig(&config);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), c.line);
    setenv("RETAIN_SNAPSHOT_INTERVAL", "30s", 1);
    setenv("RETAIN_KEEP", "5", 1);
    setenv("RETAIN_KEEP_BYTES", "64MiB", 1);
  }
  setenv("RETAIN_SNAPSHOT_INTERVAL", "10ms", 1);
  testing::internal::CaptureStderr();
  LoadConfig(&config);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(config.snapshot_interval_ms, kMinSnapshotIntervalMs);
  setenv("RETAIN_SNAPSHOT_INTERVAL", "soon", 1);
  setenv("RETAIN_KEEP", "few", 1);
  setenv("RETAIN_KEEP_BYTES", "big", 1);
  testing::internal::CaptureStderr();
  LoadConfig(&config);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(config.snapshot_interval_ms, 0u);
  EXPECT_EQ(config.keep_count, 0u);
  EXPECT_EQ(config.keep_bytes, 0u);
  for (const char* name : {"RETAIN_SNAPSHOT_INTERVAL", "RETAIN_KEEP", "RETAIN_KEEP_BYTES"}) {
    unsetenv(name);
  }
}

TEST(ConfigTest, ParsesSignals) {
  int signal_number = -1;
  EXPECT_TRUE(ParseSignal("none", &signal_number));
  EXPECT_EQ(signal_number, 0);
  EXPECT_TRUE(ParseSignal("USR1", &signal_number));
  EXPECT_EQ(signal_number, SIGUSR1);
  EXPECT_TRUE(ParseSignal("SIGUSR2", &signal_number));
  EXPECT_EQ(signal_number, SIGUSR2);
  EXPECT_TRUE(ParseSignal("hup", &signal_number));
  EXPECT_EQ(signal_number, SIGHUP);
  EXPECT_TRUE(ParseSignal("40", &signal_number));
  EXPECT_EQ(signal_number, 40);
  for (const char* bad : {"NOPE", "9", "SIGKILL", "11", "0x10", "", "1000"}) {
    EXPECT_FALSE(ParseSignal(bad, &signal_number)) << bad;
  }
}

TEST(ConfigTest, DefaultsWithoutEnvironment) {
  for (const char* name : {"RETAIN_DIR", "RETAIN_SIGNAL", "RETAIN_UNWIND", "RETAIN_DEPTH",
                           "RETAIN_MAX_MEMORY", "RETAIN_LOG"}) {
    unsetenv(name);
  }
  Config config;
  testing::internal::CaptureStderr();
  LoadConfig(&config);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  char cwd[1024];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  EXPECT_STREQ(config.dir, cwd);  // the working directory, made absolute
  EXPECT_EQ(config.snapshot_signal, SIGUSR2);
  EXPECT_EQ(config.unwind, UnwindMode::kCfi);
  EXPECT_EQ(config.depth, kDefaultDepth);
  EXPECT_EQ(config.max_memory, kDefaultMaxMemory);
  EXPECT_FALSE(config.log);
}

TEST(ConfigTest, UnwindMethods) {
  const std::pair<const char*, UnwindMode> cases[] = {{"cfi", UnwindMode::kCfi},
                                                      {"CFI", UnwindMode::kCfi},
                                                      {"libunwind", UnwindMode::kLibunwind},
                                                      {"fp", UnwindMode::kFramePointer},
                                                      {"frame-pointer", UnwindMode::kFramePointer}};
  for (const auto& [text, mode] : cases) {
    setenv("RETAIN_UNWIND", text, 1);
    Config config;
    testing::internal::CaptureStderr();
    LoadConfig(&config);
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << text;
    EXPECT_EQ(config.unwind, mode) << text;
  }
  unsetenv("RETAIN_UNWIND");
}

TEST(ConfigTest, ReadsEveryVariable) {
  setenv("RETAIN_DIR", "/tmp/somewhere", 1);
  setenv("RETAIN_SIGNAL", "USR1", 1);
  setenv("RETAIN_UNWIND", "fp", 1);
  setenv("RETAIN_DEPTH", "7", 1);
  setenv("RETAIN_MAX_MEMORY", "64MiB", 1);
  setenv("RETAIN_LOG", "1", 1);
  Config config;
  LoadConfig(&config);
  EXPECT_STREQ(config.dir, "/tmp/somewhere");
  EXPECT_EQ(config.snapshot_signal, SIGUSR1);
  EXPECT_EQ(config.unwind, UnwindMode::kFramePointer);
  EXPECT_EQ(config.depth, 7);
  EXPECT_EQ(config.max_memory, 64u << 20);
  EXPECT_TRUE(config.log);
  for (const char* name : {"RETAIN_DIR", "RETAIN_SIGNAL", "RETAIN_UNWIND", "RETAIN_DEPTH",
                           "RETAIN_MAX_MEMORY", "RETAIN_LOG"}) {
    unsetenv(name);
  }
}

// Each bad value: exactly one warning line naming the variable, and the default.
TEST(ConfigTest, BadValuesWarnOnceAndUseTheDefault) {
  struct Case {
    const char* name;
    const char* value;
  };
  for (Case c :
       {Case{"RETAIN_DEPTH", "abc"}, Case{"RETAIN_DEPTH", "0"}, Case{"RETAIN_DEPTH", "100000"},
        Case{"RETAIN_UNWIND", "magic"}, Case{"RETAIN_SIGNAL", "NOPE"},
        Case{"RETAIN_MAX_MEMORY", "lots"}, Case{"RETAIN_LOG", "maybe"}}) {
    setenv(c.name, c.value, 1);
    Config config;
    testing::internal::CaptureStderr();
    LoadConfig(&config);
    std::string err = testing::internal::GetCapturedStderr();
    unsetenv(c.name);
    EXPECT_EQ(err.rfind("retain: ", 0), 0u) << err;
    EXPECT_NE(err.find(c.name), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_EQ(config.depth, kDefaultDepth);
    EXPECT_EQ(config.unwind, UnwindMode::kCfi);
    EXPECT_EQ(config.snapshot_signal, SIGUSR2);
    EXPECT_EQ(config.max_memory, kDefaultMaxMemory);
  }
}

// A cap below what the shim's fixed tables take would record nothing at all:
// it is raised to the smallest cap that records, with one line.
TEST(ConfigTest, TooSmallMemoryCapIsRaisedToTheMinimum) {
  for (const char* value : {"10", "1MiB", "4MiB"}) {
    setenv("RETAIN_MAX_MEMORY", value, 1);
    Config config;
    testing::internal::CaptureStderr();
    LoadConfig(&config);
    std::string err = testing::internal::GetCapturedStderr();
    unsetenv("RETAIN_MAX_MEMORY");
    EXPECT_EQ(err, std::string("retain: RETAIN_MAX_MEMORY='") + value +
                       "' is below the smallest cap that records anything; using 8MiB\n");
    EXPECT_EQ(config.max_memory, kMinMaxMemory);
  }
}

// RETAIN_FRONT_DOOR: LISTEN:TARGET, each side a port on 127.0.0.1 or a
// loopback HOST:PORT; anything else refused with the reason.
TEST(ConfigTest, ParsesTheFrontDoor) {
  Config config{};
  const char* why = nullptr;
  ASSERT_TRUE(ParseFrontDoor("8081:8080", &config, &why));
  EXPECT_TRUE(config.front_door);
  EXPECT_FALSE(config.front_door_listen.ipv6);
  EXPECT_EQ(config.front_door_listen.port, 8081);
  EXPECT_EQ(config.front_door_target.port, 8080);
  const unsigned char localhost[4] = {127, 0, 0, 1};
  EXPECT_EQ(memcmp(config.front_door_listen.addr, localhost, 4), 0);
  EXPECT_EQ(memcmp(config.front_door_target.addr, localhost, 4), 0);

  ASSERT_TRUE(ParseFrontDoor("127.0.0.2:8081:[::1]:8080", &config, &why));
  const unsigned char second[4] = {127, 0, 0, 2};
  EXPECT_EQ(memcmp(config.front_door_listen.addr, second, 4), 0);
  EXPECT_TRUE(config.front_door_target.ipv6);
  EXPECT_EQ(config.front_door_target.addr[15], 1);
  EXPECT_EQ(config.front_door_target.port, 8080);

  ASSERT_TRUE(ParseFrontDoor("[::1]:8081:8080", &config, &why));
  EXPECT_TRUE(config.front_door_listen.ipv6);
  EXPECT_FALSE(config.front_door_target.ipv6);
  // The same port on two addresses is no loop.
  EXPECT_TRUE(ParseFrontDoor("127.0.0.2:8080:8080", &config, &why));

  for (const char* refused : {"0.0.0.0:8081:8080", "192.168.1.5:8081:8080", "8081:10.0.0.1:8080",
                              "[::]:8081:8080", "[2001:db8::1]:8081:8080"}) {
    EXPECT_FALSE(ParseFrontDoor(refused, &config, &why)) << refused;
    EXPECT_FALSE(config.front_door) << refused;
    EXPECT_NE(std::string(why).find("not a loopback address"), std::string::npos) << refused;
  }
  EXPECT_FALSE(ParseFrontDoor("8080:8080", &config, &why));
  EXPECT_NE(std::string(why).find("listens where it relays to"), std::string::npos);
  for (const char* malformed :
       {"", "8081", "8081:", ":8080", "8081:8080:", "0:8080", "8081:0", "8081:65536",
        "localhost:8081:8080", "8081:8080:8079", "127.0.0.1:8081", "[::1:8081:8080", "a:b",
        "127.0.0.1:8081:127.0.0.1", "8081 :8080", "8081:+8080",
        "1:2:3:4:5:6:7:8:9:10:11:12:13:14:15:16:17:18:19:20:21:22:23:24:25:26:27:28:29:30"}) {
    EXPECT_FALSE(ParseFrontDoor(malformed, &config, &why)) << malformed;
    EXPECT_FALSE(config.front_door) << malformed;
  }
}

}  // namespace
}  // namespace retain::shim
