// Retention (RETAIN_KEEP, RETAIN_KEEP_BYTES): which snapshots go, and that
// only this process's own files are deleted.
#include "snapshot/retention.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/process_info.h"

namespace retain::shim {
namespace {

std::vector<uint32_t> PopAll(KeptSnapshots& kept, uint64_t keep_count, uint64_t keep_bytes) {
  std::vector<uint32_t> popped;
  uint32_t sequence = 0;
  while (kept.PopExcess(keep_count, keep_bytes, &sequence)) popped.push_back(sequence);
  return popped;
}

TEST(RetentionTest, KeepsTheNewestN) {
  auto kept = std::make_unique<KeptSnapshots>();
  for (uint32_t s = 1; s <= 3; ++s) kept->Add(s, 100);
  EXPECT_TRUE(PopAll(*kept, 3, 0).empty());
  kept->Add(4, 100);
  EXPECT_EQ(PopAll(*kept, 3, 0), std::vector<uint32_t>{1});
  kept->Add(5, 100);
  kept->Add(6, 100);
  EXPECT_EQ(PopAll(*kept, 3, 0), (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(kept->count(), 3u);
  EXPECT_EQ(kept->bytes(), 300u);
  EXPECT_TRUE(PopAll(*kept, 0, 0).empty());  // no limit
}

TEST(RetentionTest, KeepsWithinTheByteBudgetButAlwaysTheNewest) {
  auto kept = std::make_unique<KeptSnapshots>();
  kept->Add(1, 400);
  kept->Add(2, 400);
  EXPECT_TRUE(PopAll(*kept, 0, 1000).empty());
  kept->Add(3, 400);  // 1200 > 1000: the oldest goes
  EXPECT_EQ(PopAll(*kept, 0, 1000), std::vector<uint32_t>{1});
  kept->Add(4, 5000);  // larger than the budget alone: it stays, the rest go
  EXPECT_EQ(PopAll(*kept, 0, 1000), (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(kept->count(), 1u);
  // Both bounds: whichever is tighter.
  kept->Add(5, 10);
  kept->Add(6, 10);
  EXPECT_EQ(PopAll(*kept, 2, 100000), std::vector<uint32_t>{4});
}

TEST(RetentionTest, TheRingBoundsWhatIsKeptWithoutACount) {
  auto kept = std::make_unique<KeptSnapshots>();
  for (uint32_t s = 1; s <= kMaxKeep + 10; ++s) {
    kept->Add(s, 1);
    PopAll(*kept, 0, 0);
  }
  EXPECT_EQ(kept->count(), kMaxKeep);
}

// KeepSnapshot deletes by this process's own names: another pid's snapshot,
// another program's and other files in the directory stay.
TEST(RetentionTest, DeletesOnlyThisProcesssOwnSnapshots) {
  char dir[] = "/tmp/retain_retention_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  Config* config = MutableConfig();
  const Config saved = *config;
  snprintf(config->dir, sizeof(config->dir), "%s", dir);
  config->keep_count = 2;
  config->keep_bytes = 0;
  RetentionResetInChild();
  auto own = [&](uint32_t sequence) {
    return std::string(dir) + "/" + ExeBaseName() + "." + std::to_string(Pid()) + "." +
           std::to_string(sequence) + ".pb";
  };
  auto touch = [](const std::string& path) {
    FILE* f = fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs("x", f);
    fclose(f);
  };
  auto exists = [](const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
  };
  const std::string other_pid =
      std::string(dir) + "/" + ExeBaseName() + "." + std::to_string(Pid() + 1) + ".1.pb";
  const std::string other_program = std::string(dir) + "/other." + std::to_string(Pid()) + ".1.pb";
  const std::string notes = std::string(dir) + "/notes.txt";
  touch(other_pid);
  touch(other_program);
  touch(notes);
  for (uint32_t s = 1; s <= 4; ++s) {
    touch(own(s));
    KeepSnapshot(s, 1);
  }
  EXPECT_FALSE(exists(own(1)));
  EXPECT_FALSE(exists(own(2)));
  EXPECT_TRUE(exists(own(3)));
  EXPECT_TRUE(exists(own(4)));
  EXPECT_TRUE(exists(other_pid));
  EXPECT_TRUE(exists(other_program));
  EXPECT_TRUE(exists(notes));
  // One removed by hand meanwhile: forgotten, nothing else touched.
  unlink(own(3).c_str());
  touch(own(5));
  KeepSnapshot(5, 1);
  EXPECT_TRUE(exists(own(4)));
  EXPECT_TRUE(exists(own(5)));
  for (const std::string& path : {own(4), own(5), other_pid, other_program, notes}) {
    unlink(path.c_str());
  }
  rmdir(dir);
  RetentionResetInChild();
  *config = saved;
}

}  // namespace
}  // namespace retain::shim
