// The .eh_frame parser (shim/src/unwind/eh_frame.h) on hand-made tables: the CFA
// instructions compilers emit, the cases that must fall back or end the
// stack, and truncated or corrupted tables (never a read out of bounds).
#include "unwind/eh_frame.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace retain::shim {
namespace {

// Builds .eh_frame_hdr, one CIE and FDEs in one buffer. Functions live at
// made-up addresses above the buffer (pc-relative offsets reach them).
class TableBuilder {
 public:
  explicit TableBuilder(std::string augmentation = "zR") : augmentation_(std::move(augmentation)) {
    // CFA = rsp + 8, return address at CFA - 8: every x86-64 CIE.
    const uint8_t initial[] = {0x0c, 0x07, 0x08, 0x90, 0x01};
    cie_instructions_.assign(initial, initial + sizeof(initial));
  }

  // Adds an FDE for [start, start + size) (offsets from FunctionBase())
  // running `instructions`.
  void AddFde(uint32_t start, uint32_t size, std::vector<uint8_t> instructions) {
    fdes_.push_back({start, size, std::move(instructions)});
  }
  void SetCieInstructions(std::vector<uint8_t> instructions) {
    cie_instructions_ = std::move(instructions);
  }

  // Lays the table out; returns the section to search.
  EhFrameSection Build() {
    bytes_.assign(kSize, 0);
    const size_t hdr = 0;
    const size_t table = hdr + 12;
    const size_t eh_frame = table + 8 * fdes_.size();
    // CIE.
    size_t at = eh_frame;
    std::vector<uint8_t> cie = {0, 0, 0, 0, 1};  // id 0, version 1
    for (char c : augmentation_) cie.push_back(static_cast<uint8_t>(c));
    cie.push_back(0);
    cie.push_back(1);     // code alignment 1
    cie.push_back(0x78);  // data alignment -8
    cie.push_back(16);    // return address register
    if (!augmentation_.empty() && augmentation_[0] == 'z') {
      std::vector<uint8_t> data;
      for (char c : augmentation_.substr(1)) {
        if (c == 'R') data.push_back(0x1b);  // pcrel | sdata4
        if (c == 'S') continue;
        if (c == 'P') {
          data.push_back(0x00);  // absptr, 8 bytes
          for (int i = 0; i < 8; ++i) data.push_back(0);
        }
        if (c == 'L') data.push_back(0x1b);
      }
      cie.push_back(static_cast<uint8_t>(data.size()));
      cie.insert(cie.end(), data.begin(), data.end());
    }
    cie.insert(cie.end(), cie_instructions_.begin(), cie_instructions_.end());
    const size_t cie_at = at;
    at = Put32(at, static_cast<uint32_t>(cie.size()));
    memcpy(&bytes_[at], cie.data(), cie.size());
    at += cie.size();
    // FDEs and the search table.
    Put(hdr, {1, 0x1b, 0x03, 0x3b});
    Put32(hdr + 4, static_cast<uint32_t>(eh_frame - (hdr + 4)));
    Put32(hdr + 8, static_cast<uint32_t>(fdes_.size()));
    for (size_t i = 0; i < fdes_.size(); ++i) {
      const Fde& fde = fdes_[i];
      const size_t fde_at = at;
      std::vector<uint8_t> body;
      const size_t length = 4 + 4 + 4 + 1 + fde.instructions.size();
      at = Put32(at, static_cast<uint32_t>(length));
      at = Put32(at, static_cast<uint32_t>(at - cie_at));
      const int64_t start = static_cast<int64_t>(FunctionBase() + fde.start);
      at = Put32(at, static_cast<uint32_t>(start - static_cast<int64_t>(Address(at))));
      at = Put32(at, fde.size);
      bytes_[at++] = 0;  // no augmentation data
      memcpy(&bytes_[at], fde.instructions.data(), fde.instructions.size());
      at += fde.instructions.size();
      Put32(table + 8 * i, static_cast<uint32_t>(static_cast<int64_t>(FunctionBase() + fde.start) -
                                                 static_cast<int64_t>(Address(hdr))));
      Put32(table + 8 * i + 4, static_cast<uint32_t>(fde_at - hdr));
    }
    Put32(at, 0);  // terminator
    used_ = at + 4;
    return {Address(hdr), Address(0), Address(used_)};
  }

  uintptr_t FunctionBase() const { return Address(0) + 0x100000; }
  std::vector<uint8_t>& bytes() { return bytes_; }
  size_t used() const { return used_; }

 private:
  static constexpr size_t kSize = 4096;
  struct Fde {
    uint32_t start;
    uint32_t size;
    std::vector<uint8_t> instructions;
  };

  uintptr_t Address(size_t offset) const {
    return reinterpret_cast<uintptr_t>(bytes_.data()) + offset;
  }
  size_t Put32(size_t at, uint32_t value) {
    memcpy(&bytes_[at], &value, 4);
    return at + 4;
  }
  void Put(size_t at, std::vector<uint8_t> values) {
    memcpy(&bytes_[at], values.data(), values.size());
  }

  std::string augmentation_;
  std::vector<uint8_t> cie_instructions_;
  std::vector<Fde> fdes_;
  std::vector<uint8_t> bytes_;
  size_t used_ = 0;
};

// A function with a frame pointer: push rbp (1 byte), mov rsp,rbp (3),
// body, leave/ret at 40.
const std::vector<uint8_t> kFramePointerFunction = {
    0x41,              // advance 1
    0x0e, 0x10,        // def_cfa_offset 16
    0x86, 0x02,        // rbp at cfa-16
    0x43,              // advance 3
    0x0d, 0x06,        // def_cfa_register rbp
    0x02, 36,          // advance_loc1 36
    0x0c, 0x07, 0x08,  // def_cfa rsp+8
};

TEST(EhFrameTest, FollowsAPrologueAndEpilogue) {
  TableBuilder builder;
  builder.AddFde(0x10, 0x30, kFramePointerFunction);
  const EhFrameSection section = builder.Build();
  const uintptr_t f = builder.FunctionBase() + 0x10;

  FrameRule rule = FindFrameRule(section, f);
  ASSERT_EQ(rule.kind, FrameRuleKind::kStandard);
  EXPECT_EQ(rule.cfa_register, CfaRegister::kRsp);
  EXPECT_EQ(rule.cfa_offset, 8);
  EXPECT_FALSE(rule.rbp_saved);

  rule = FindFrameRule(section, f + 1);
  ASSERT_EQ(rule.kind, FrameRuleKind::kStandard);
  EXPECT_EQ(rule.cfa_offset, 16);
  EXPECT_TRUE(rule.rbp_saved);
  EXPECT_EQ(rule.rbp_offset, -16);

  for (uintptr_t pc : {f + 4, f + 20, f + 39}) {
    rule = FindFrameRule(section, pc);
    ASSERT_EQ(rule.kind, FrameRuleKind::kStandard);
    EXPECT_EQ(rule.cfa_register, CfaRegister::kRbp) << pc - f;
    EXPECT_EQ(rule.cfa_offset, 16);
    EXPECT_TRUE(rule.rbp_saved);
  }
  rule = FindFrameRule(section, f + 40);
  ASSERT_EQ(rule.kind, FrameRuleKind::kStandard);
  EXPECT_EQ(rule.cfa_register, CfaRegister::kRsp);
  EXPECT_EQ(rule.cfa_offset, 8);
  EXPECT_TRUE(rule.rbp_saved);  // the rule set at f+1 still holds

  // Outside every FDE (before the first, in a gap, past the last): no
  // unwind information at all, told apart from an FDE that cannot be used.
  EXPECT_EQ(FindFrameRule(section, f - 1).kind, FrameRuleKind::kNoFde);
  EXPECT_EQ(FindFrameRule(section, f + 0x30).kind, FrameRuleKind::kNoFde);
}

TEST(EhFrameTest, FindsTheRightFdeAmongMany) {
  TableBuilder builder;
  for (uint32_t i = 0; i < 50; ++i) {
    // Function i keeps CFA = rsp + 8 * (i % 15 + 1) after its first byte
    // (one-byte uleb128 values).
    builder.AddFde(i * 0x100, 0x80, {0x41, 0x0e, static_cast<uint8_t>(8 * (i % 15 + 1))});
  }
  const EhFrameSection section = builder.Build();
  for (uint32_t i = 0; i < 50; ++i) {
    const uintptr_t pc = builder.FunctionBase() + i * 0x100 + 0x10;
    const FrameRule rule = FindFrameRule(section, pc);
    ASSERT_EQ(rule.kind, FrameRuleKind::kStandard) << i;
    EXPECT_EQ(rule.cfa_offset, 8 * (i % 15 + 1)) << i;
    EXPECT_EQ(FindFrameRule(section, builder.FunctionBase() + i * 0x100 + 0x90).kind,
              FrameRuleKind::kNoFde);
  }
}

TEST(EhFrameTest, RememberAndRestoreState) {
  TableBuilder builder;
  builder.AddFde(0, 0x40, {0x41, 0x0e, 0x10, 0x86, 0x02,  // push rbp
                           0x41, 0x0e, 0x18,              // push rbx
                           0x0a,                          // remember_state
                           0x41, 0x0e, 0x10,              // pop rbx
                           0x41, 0xc6,                    // restore rbp
                           0x0e, 0x08,                    // cfa rsp+8 (ret)
                           0x41, 0x0b,                    // restore_state: after the early return
                           0x2e, 0x10,                    // GNU_args_size: ignored
                           0x00});                        // nop
  const EhFrameSection section = builder.Build();
  const uintptr_t f = builder.FunctionBase();
  FrameRule rule = FindFrameRule(section, f + 3);
  EXPECT_EQ(rule.cfa_offset, 16);
  EXPECT_TRUE(rule.rbp_saved);
  rule = FindFrameRule(section, f + 4);
  EXPECT_EQ(rule.cfa_offset, 8);
  EXPECT_FALSE(rule.rbp_saved);
  rule = FindFrameRule(section, f + 2);
  EXPECT_EQ(rule.cfa_offset, 24);
  EXPECT_TRUE(rule.rbp_saved);
  rule = FindFrameRule(section, f + 5);
  ASSERT_EQ(rule.kind, FrameRuleKind::kStandard);
  EXPECT_EQ(rule.cfa_offset, 24);
  EXPECT_TRUE(rule.rbp_saved);
  EXPECT_EQ(rule.rbp_offset, -16);
}

TEST(EhFrameTest, UndefinedReturnAddressEndsTheStack) {
  TableBuilder builder;
  builder.AddFde(0, 0x20, {0x07, 0x10});     // DW_CFA_undefined rip, as _start
  builder.AddFde(0x20, 0x20, {0x07, 0x06});  // rbp undefined: libunwind stops too
  const EhFrameSection section = builder.Build();
  EXPECT_EQ(FindFrameRule(section, builder.FunctionBase() + 4).kind, FrameRuleKind::kOutermost);
  EXPECT_EQ(FindFrameRule(section, builder.FunctionBase() + 0x24).kind, FrameRuleKind::kOutermost);
}

TEST(EhFrameTest, UnsupportedRulesFallBack) {
  TableBuilder builder;
  builder.AddFde(0x000, 0x10, {0x0f, 0x02, 0x77, 0x08});                    // def_cfa_expression
  builder.AddFde(0x100, 0x10, {0x09, 0x06, 0x03});                          // rbp in rbx
  builder.AddFde(0x200, 0x10, {0x10, 0x10, 0x01, 0x9c});                    // RA by expression
  builder.AddFde(0x300, 0x10, {0x0c, 0x0a, 0x10});                          // CFA = r10 + 16
  builder.AddFde(0x400, 0x10, {0x41, 0x0e, 0x10, 0x42, 0x0f, 0x01, 0x77});  // expression later
  builder.AddFde(0x500, 0x10, {0x3f});  // an unknown instruction
  builder.AddFde(0x600, 0x10, {0x0b});  // restore_state without remember
  const EhFrameSection section = builder.Build();
  const uintptr_t f = builder.FunctionBase();
  for (uint32_t start : {0x000u, 0x100u, 0x200u, 0x300u, 0x500u, 0x600u}) {
    EXPECT_EQ(FindFrameRule(section, f + start + 4).kind, FrameRuleKind::kFallback) << start;
  }
  // Before its expression the fourth-from-last function is still standard.
  EXPECT_EQ(FindFrameRule(section, f + 0x401).kind, FrameRuleKind::kStandard);
  EXPECT_EQ(FindFrameRule(section, f + 0x404).kind, FrameRuleKind::kFallback);
}

TEST(EhFrameTest, SignalFramesAndOtherAugmentations) {
  TableBuilder signal("zRS");
  signal.AddFde(0, 0x10, {});
  EhFrameSection section = signal.Build();
  EXPECT_EQ(FindFrameRule(section, signal.FunctionBase() + 1).kind, FrameRuleKind::kFallback);

  TableBuilder cxx("zPLR");  // what g++ emits for functions with a personality
  cxx.AddFde(0, 0x10, {0x41, 0x0e, 0x10});
  section = cxx.Build();
  // The FDE then has augmentation data: the builder writes a length of 0,
  // which is what a function without an LSDA gets.
  FrameRule rule = FindFrameRule(section, cxx.FunctionBase() + 2);
  ASSERT_EQ(rule.kind, FrameRuleKind::kStandard);
  EXPECT_EQ(rule.cfa_offset, 16);

  TableBuilder unknown("zRX");
  unknown.AddFde(0, 0x10, {});
  section = unknown.Build();
  EXPECT_EQ(FindFrameRule(section, unknown.FunctionBase() + 1).kind, FrameRuleKind::kFallback);
}

TEST(EhFrameTest, TruncatedTablesNeverReadPastTheEnd) {
  TableBuilder builder;
  for (uint32_t i = 0; i < 8; ++i) builder.AddFde(i * 0x40, 0x30, kFramePointerFunction);
  const EhFrameSection full = builder.Build();
  for (uintptr_t end = full.begin; end < full.end; ++end) {
    const EhFrameSection cut{full.hdr, full.begin, end};
    for (uint32_t i = 0; i < 8; ++i) {
      const FrameRule rule = FindFrameRule(cut, builder.FunctionBase() + i * 0x40 + 8);
      // Only a table holding the whole FDE can give its rule.
      if (rule.kind == FrameRuleKind::kStandard) {
        EXPECT_EQ(rule.cfa_offset, 16);
      }
    }
  }
}

TEST(EhFrameTest, CorruptTablesNeverCrash) {
  std::mt19937 random(7);
  for (int round = 0; round < 3000; ++round) {
    TableBuilder builder;
    for (uint32_t i = 0; i < 4; ++i) builder.AddFde(i * 0x40, 0x30, kFramePointerFunction);
    const EhFrameSection section = builder.Build();
    // Corrupt a few bytes anywhere in the table, the header included.
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int i = 0; i < flips; ++i) {
      builder.bytes()[random() % builder.used()] = static_cast<uint8_t>(random());
    }
    for (uint32_t i = 0; i < 4; ++i) {
      const FrameRule rule = FindFrameRule(section, builder.FunctionBase() + i * 0x40 + 8);
      EXPECT_LE(static_cast<int>(rule.kind), static_cast<int>(FrameRuleKind::kStandard));
    }
  }
}

}  // namespace
}  // namespace retain::shim
