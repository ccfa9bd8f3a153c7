// eh_frame: see unwind/eh_frame.h. The formats are those of the Linux Standard Base
// (.eh_frame_hdr, .eh_frame with its augmentations) over DWARF's call frame
// instructions (DWARF 5, section 6.4).
#include "unwind/eh_frame.h"

#include <string.h>

namespace retain::shim {
namespace {

// Pointer encodings (DW_EH_PE_*): the low nibble says how the value is
// stored, bits 4-6 what it is relative to, bit 7 an indirection.
constexpr uint8_t kPeOmit = 0xff;
constexpr uint8_t kPeFormatMask = 0x0f;
constexpr uint8_t kPeAbsptr = 0x00;
constexpr uint8_t kPeUleb128 = 0x01;
constexpr uint8_t kPeUdata2 = 0x02;
constexpr uint8_t kPeUdata4 = 0x03;
constexpr uint8_t kPeUdata8 = 0x04;
constexpr uint8_t kPeSleb128 = 0x09;
constexpr uint8_t kPeSdata2 = 0x0a;
constexpr uint8_t kPeSdata4 = 0x0b;
constexpr uint8_t kPeSdata8 = 0x0c;
constexpr uint8_t kPeApplicationMask = 0x70;
constexpr uint8_t kPePcrel = 0x10;
constexpr uint8_t kPeDatarel = 0x30;
constexpr uint8_t kPeIndirect = 0x80;

// The only search-table encoding linkers emit (ld, gold, lld, mold): 4-byte
// signed offsets from the start of .eh_frame_hdr.
constexpr uint8_t kHdrTableEncoding = kPeDatarel | kPeSdata4;

// DWARF register numbers on x86-64.
constexpr uint64_t kRegRbp = 6;
constexpr uint64_t kRegRsp = 7;
constexpr uint64_t kRegReturnAddress = 16;

// Call frame instructions.
enum : uint8_t {
  kCfaNop = 0x00,
  kCfaSetLoc = 0x01,
  kCfaAdvanceLoc1 = 0x02,
  kCfaAdvanceLoc2 = 0x03,
  kCfaAdvanceLoc4 = 0x04,
  kCfaOffsetExtended = 0x05,
  kCfaRestoreExtended = 0x06,
  kCfaUndefined = 0x07,
  kCfaSameValue = 0x08,
  kCfaRegister = 0x09,
  kCfaRememberState = 0x0a,
  kCfaRestoreState = 0x0b,
  kCfaDefCfa = 0x0c,
  kCfaDefCfaRegister = 0x0d,
  kCfaDefCfaOffset = 0x0e,
  kCfaDefCfaExpression = 0x0f,
  kCfaExpression = 0x10,
  kCfaOffsetExtendedSf = 0x11,
  kCfaDefCfaSf = 0x12,
  kCfaDefCfaOffsetSf = 0x13,
  kCfaValOffset = 0x14,
  kCfaValOffsetSf = 0x15,
  kCfaValExpression = 0x16,
  kCfaGnuArgsSize = 0x2e,
  kCfaGnuNegativeOffsetExtended = 0x2f,
  // In the top two bits, with an operand in the low six.
  kCfaAdvanceLoc = 0x40,
  kCfaOffset = 0x80,
  kCfaRestore = 0xc0,
};

// Sequential reads from [pos, end). A read past `end` (or any malformed
// value) latches ok() false and returns 0; callers check ok() once after a
// group of reads.
class Reader {
 public:
  Reader(uintptr_t pos, uintptr_t end) : pos_(pos), end_(end), ok_(pos <= end) {}

  bool ok() const { return ok_; }
  uintptr_t pos() const { return pos_; }
  uintptr_t end() const { return end_; }

  // Moves to `pos`, which must not lie behind the current position.
  void SkipTo(uintptr_t pos) {
    if (pos < pos_ || pos > end_) ok_ = false;
    if (ok_) pos_ = pos;
  }

  template <typename T>
  T Fixed() {
    T value = 0;
    if (!ok_ || end_ - pos_ < sizeof(T)) {
      ok_ = false;
      return 0;
    }
    memcpy(&value, reinterpret_cast<const void*>(pos_), sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  void Skip(uint64_t bytes) {
    if (!ok_ || end_ - pos_ < bytes) {
      ok_ = false;
      return;
    }
    pos_ += bytes;
  }

  uint64_t Uleb() {
    uint64_t value = 0;
    for (int shift = 0; ok_; shift += 7) {
      uint8_t byte = Fixed<uint8_t>();
      if (shift >= 64) {  // more than 64 bits: no field here is that wide
        ok_ = false;
        break;
      }
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return 0;
  }

  int64_t Sleb() {
    uint64_t value = 0;
    for (int shift = 0; ok_; shift += 7) {
      uint8_t byte = Fixed<uint8_t>();
      if (shift >= 64) {
        ok_ = false;
        break;
      }
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        if (shift + 7 < 64 && (byte & 0x40) != 0) value |= ~uint64_t{0} << (shift + 7);
        return static_cast<int64_t>(value);
      }
    }
    return 0;
  }

  // The stored value of an encoded pointer, before its application.
  uint64_t RawEncoded(uint8_t encoding) {
    switch (encoding & kPeFormatMask) {
      case kPeAbsptr:
      case kPeUdata8:
      case kPeSdata8:
        return Fixed<uint64_t>();
      case kPeUleb128:
        return Uleb();
      case kPeUdata2:
        return Fixed<uint16_t>();
      case kPeUdata4:
        return Fixed<uint32_t>();
      case kPeSleb128:
        return static_cast<uint64_t>(Sleb());
      case kPeSdata2:
        return static_cast<uint64_t>(static_cast<int64_t>(Fixed<int16_t>()));
      case kPeSdata4:
        return static_cast<uint64_t>(static_cast<int64_t>(Fixed<int32_t>()));
      default:
        ok_ = false;
        return 0;
    }
  }

  // An encoded pointer. `data_base` is what DW_EH_PE_datarel is relative to
  // (.eh_frame_hdr's start there; 0 where it has no meaning). Text- and
  // function-relative, aligned and indirect values never appear in the
  // fields read here: refused.
  uintptr_t Encoded(uint8_t encoding, uintptr_t data_base) {
    const uintptr_t at = pos_;
    uint64_t value = RawEncoded(encoding);
    if ((encoding & kPeIndirect) != 0) ok_ = false;
    switch (encoding & kPeApplicationMask) {
      case 0:
        break;
      case kPePcrel:
        value += at;
        break;
      case kPeDatarel:
        if (data_base == 0) ok_ = false;
        value += data_base;
        break;
      default:
        ok_ = false;
    }
    return ok_ ? value : 0;
  }

 private:
  uintptr_t pos_;
  uintptr_t end_;
  bool ok_;
};

// A reader over the body of the CIE or FDE at `at` (from its CIE id or CIE
// pointer to its end), or a failed one.
Reader OpenEntry(const EhFrameSection& section, uintptr_t at) {
  if (at < section.begin || at >= section.end) return Reader(1, 0);
  Reader reader(at, section.end);
  uint64_t length = reader.Fixed<uint32_t>();
  if (length == 0xffffffff) length = reader.Fixed<uint64_t>();  // 64-bit DWARF
  const uintptr_t body = reader.pos();
  if (!reader.ok() || length == 0 || section.end - body < length) return Reader(1, 0);
  return Reader(body, body + length);
}

struct Cie {
  uint64_t code_alignment;
  int64_t data_alignment;
  uint8_t fde_encoding;
  bool has_augmentation_data;
  uintptr_t instructions;
  uintptr_t end;
};

bool ParseCie(const EhFrameSection& section, uintptr_t at, Cie* cie) {
  Reader reader = OpenEntry(section, at);
  if (reader.Fixed<uint32_t>() != 0 || !reader.ok()) return false;  // .eh_frame CIEs have id 0
  const uint8_t version = reader.Fixed<uint8_t>();
  if (version != 1 && version != 3) return false;  // 4 adds fields no x86-64 linker emits
  char augmentation[8];
  size_t length = 0;
  for (;;) {
    const char c = static_cast<char>(reader.Fixed<uint8_t>());
    if (!reader.ok() || length == sizeof(augmentation)) return false;
    augmentation[length++] = c;
    if (c == '\0') break;
  }
  cie->code_alignment = reader.Uleb();
  cie->data_alignment = reader.Sleb();
  const uint64_t return_register = version == 1 ? reader.Fixed<uint8_t>() : reader.Uleb();
  if (return_register != kRegReturnAddress) return false;
  cie->fde_encoding = kPeAbsptr;
  cie->has_augmentation_data = augmentation[0] == 'z';
  if (cie->has_augmentation_data) {
    const uint64_t data_length = reader.Uleb();
    const uintptr_t data = reader.pos();
    for (const char* p = augmentation + 1; *p != '\0' && reader.ok(); ++p) {
      switch (*p) {
        case 'L':  // the LSDA's encoding: only FDEs hold the pointer itself
          reader.Fixed<uint8_t>();
          break;
        case 'R':
          cie->fde_encoding = reader.Fixed<uint8_t>();
          break;
        case 'P': {  // the personality routine: unused, but its size must be known
          const uint8_t encoding = reader.Fixed<uint8_t>();
          if ((encoding & kPeApplicationMask) > kPeDatarel) return false;  // aligned
          reader.RawEncoded(encoding);
          break;
        }
        default:  // 'S' (a signal frame: registers come from a ucontext) and unknown letters
          return false;
      }
    }
    if (!reader.ok() || data_length > reader.end() - data) return false;
    reader.SkipTo(data + data_length);
  } else if (augmentation[0] != '\0') {
    return false;  // without 'z' an unknown augmentation cannot even be skipped
  }
  if (!reader.ok() || cie->code_alignment == 0) return false;
  cie->instructions = reader.pos();
  cie->end = reader.end();
  return true;
}

// What became of one register in the caller's frame.
enum class Where : uint8_t {
  kSame,       // unchanged (no rule, or DW_CFA_same_value)
  kUndefined,  // DW_CFA_undefined: for the return address, the end of the stack
  kAtCfa,      // saved at CFA + offset
  kOther,      // in another register, an expression, a value rule: not handled here
};

struct RegisterRule {
  Where where;
  int64_t offset;
};

// One row of the CFI table, reduced to what a stack walk needs.
struct Row {
  uint64_t cfa_register;
  int64_t cfa_offset;
  bool cfa_expression;
  bool rsp_rule;  // rsp given any explicit rule: it is then not simply the CFA
  RegisterRule rbp;
  RegisterRule return_address;
};

void SetRule(Row* row, uint64_t reg, RegisterRule rule) {
  if (reg == kRegRbp) {
    row->rbp = rule;
  } else if (reg == kRegReturnAddress) {
    row->return_address = rule;
  } else if (reg == kRegRsp) {
    row->rsp_rule = rule.where != Where::kSame;
  }
}

void RestoreRule(Row* row, const Row& initial, uint64_t reg) {
  if (reg == kRegRbp) {
    row->rbp = initial.rbp;
  } else if (reg == kRegReturnAddress) {
    row->return_address = initial.return_address;
  } else if (reg == kRegRsp) {
    row->rsp_rule = initial.rsp_rule;
  }
}

// Room for nested DW_CFA_remember_state; compilers nest one or two deep.
constexpr int kStateStackDepth = 8;

// Runs the call frame instructions in [reader.pos(), reader.end()) for the
// row in force at `pc`, starting at location `loc`. `initial` is the row the
// CIE's instructions produced (for DW_CFA_restore); nullptr while running
// them, where location advances are not expected. Returns false on an
// instruction it does not know or a malformed one.
bool Execute(Reader reader, const Cie& cie, const Row* initial, uintptr_t loc, uintptr_t pc,
             Row* row) {
  Row stack[kStateStackDepth];
  int depth = 0;
  while (reader.ok() && reader.pos() < reader.end()) {
    const uint8_t op = reader.Fixed<uint8_t>();
    uint64_t advance = 0;
    bool advances = false;
    switch (op & 0xc0) {
      case kCfaAdvanceLoc:
        advance = op & 0x3f;
        advances = true;
        break;
      case kCfaOffset: {
        const uint64_t offset = reader.Uleb();
        SetRule(row, op & 0x3f, {Where::kAtCfa, static_cast<int64_t>(offset) * cie.data_alignment});
        continue;
      }
      case kCfaRestore:
        if (initial == nullptr) return false;
        RestoreRule(row, *initial, op & 0x3f);
        continue;
      default:
        break;
    }
    if (!advances) {
      switch (op) {
        case kCfaNop:
          break;
        case kCfaSetLoc: {
          const uintptr_t target = reader.Encoded(cie.fde_encoding, 0);
          if (initial == nullptr || target < loc) return false;
          if (target > pc) return reader.ok();
          loc = target;
          break;
        }
        case kCfaAdvanceLoc1:
          advance = reader.Fixed<uint8_t>();
          advances = true;
          break;
        case kCfaAdvanceLoc2:
          advance = reader.Fixed<uint16_t>();
          advances = true;
          break;
        case kCfaAdvanceLoc4:
          advance = reader.Fixed<uint32_t>();
          advances = true;
          break;
        case kCfaOffsetExtended: {
          const uint64_t reg = reader.Uleb();
          const uint64_t offset = reader.Uleb();
          SetRule(row, reg, {Where::kAtCfa, static_cast<int64_t>(offset) * cie.data_alignment});
          break;
        }
        case kCfaOffsetExtendedSf: {
          const uint64_t reg = reader.Uleb();
          const int64_t offset = reader.Sleb();
          SetRule(row, reg, {Where::kAtCfa, offset * cie.data_alignment});
          break;
        }
        case kCfaGnuNegativeOffsetExtended: {
          const uint64_t reg = reader.Uleb();
          const uint64_t offset = reader.Uleb();
          SetRule(row, reg, {Where::kAtCfa, -static_cast<int64_t>(offset) * cie.data_alignment});
          break;
        }
        case kCfaRestoreExtended:
          if (initial == nullptr) return false;
          RestoreRule(row, *initial, reader.Uleb());
          break;
        case kCfaUndefined:
          SetRule(row, reader.Uleb(), {Where::kUndefined, 0});
          break;
        case kCfaSameValue:
          SetRule(row, reader.Uleb(), {Where::kSame, 0});
          break;
        case kCfaRegister: {
          const uint64_t reg = reader.Uleb();
          reader.Uleb();
          SetRule(row, reg, {Where::kOther, 0});
          break;
        }
        case kCfaValOffset:
        case kCfaValOffsetSf: {
          const uint64_t reg = reader.Uleb();
          reader.Uleb();  // the same length as an sleb128: only skipped
          SetRule(row, reg, {Where::kOther, 0});
          break;
        }
        case kCfaExpression:
        case kCfaValExpression: {
          const uint64_t reg = reader.Uleb();
          reader.Skip(reader.Uleb());
          SetRule(row, reg, {Where::kOther, 0});
          break;
        }
        case kCfaRememberState:
          if (depth == kStateStackDepth) return false;
          stack[depth++] = *row;
          break;
        case kCfaRestoreState:
          if (depth == 0) return false;
          *row = stack[--depth];
          break;
        case kCfaDefCfa:
          row->cfa_register = reader.Uleb();
          row->cfa_offset = static_cast<int64_t>(reader.Uleb());
          row->cfa_expression = false;
          break;
        case kCfaDefCfaSf:
          row->cfa_register = reader.Uleb();
          row->cfa_offset = reader.Sleb() * cie.data_alignment;
          row->cfa_expression = false;
          break;
        case kCfaDefCfaRegister:
          if (row->cfa_expression) return false;  // only valid after a register rule
          row->cfa_register = reader.Uleb();
          break;
        case kCfaDefCfaOffset:
          if (row->cfa_expression) return false;
          row->cfa_offset = static_cast<int64_t>(reader.Uleb());
          break;
        case kCfaDefCfaOffsetSf:
          if (row->cfa_expression) return false;
          row->cfa_offset = reader.Sleb() * cie.data_alignment;
          break;
        case kCfaDefCfaExpression:
          reader.Skip(reader.Uleb());
          row->cfa_expression = true;
          break;
        case kCfaGnuArgsSize:
          reader.Uleb();  // pushed arguments: the CFA rule already accounts for them
          break;
        default:
          return false;
      }
    }
    if (advances) {
      // The CIE's instructions describe the function's first instruction.
      if (initial == nullptr) return false;
      const uint64_t delta = advance * cie.code_alignment;
      if (delta > pc - loc) return reader.ok();  // the next row starts after pc
      loc += delta;
    }
  }
  return reader.ok();
}

// The FDE that covers `pc`, from .eh_frame_hdr's sorted table; 0 if none.
uintptr_t FindFde(const EhFrameSection& section, uintptr_t pc) {
  if (section.hdr < section.begin || section.hdr >= section.end) return 0;
  Reader reader(section.hdr, section.end);
  const uint8_t version = reader.Fixed<uint8_t>();
  const uint8_t frame_pointer_encoding = reader.Fixed<uint8_t>();
  const uint8_t count_encoding = reader.Fixed<uint8_t>();
  const uint8_t table_encoding = reader.Fixed<uint8_t>();
  if (!reader.ok() || version != 1 || count_encoding == kPeOmit ||
      table_encoding != kHdrTableEncoding || frame_pointer_encoding == kPeOmit) {
    return 0;
  }
  reader.Encoded(frame_pointer_encoding, section.hdr);  // .eh_frame itself: not needed
  const uint64_t count = reader.Encoded(count_encoding, section.hdr);
  const uintptr_t table = reader.pos();
  if (!reader.ok() || count == 0 || count > (section.end - table) / 8) return 0;
  auto entry = [&](uint64_t index, int field) {
    int32_t value;
    memcpy(&value, reinterpret_cast<const void*>(table + index * 8 + field * 4), 4);
    return section.hdr + static_cast<intptr_t>(value);
  };
  uint64_t low = 0;
  uint64_t high = count;
  while (low < high) {  // the first entry starting after pc
    const uint64_t mid = low + (high - low) / 2;
    if (entry(mid, 0) <= pc) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low == 0 ? 0 : entry(low - 1, 1);
}

FrameRule Fallback() { return {FrameRuleKind::kFallback, CfaRegister::kRsp, false, 0, 0}; }
FrameRule NoFde() { return {FrameRuleKind::kNoFde, CfaRegister::kRsp, false, 0, 0}; }

}  // namespace

FrameRule FindFrameRule(const EhFrameSection& section, uintptr_t pc) {
  const uintptr_t fde = FindFde(section, pc);
  if (fde == 0) return NoFde();
  Reader reader = OpenEntry(section, fde);
  const uintptr_t cie_pointer_at = reader.pos();
  const uint32_t cie_pointer = reader.Fixed<uint32_t>();
  if (!reader.ok() || cie_pointer == 0 || cie_pointer > cie_pointer_at) return Fallback();
  Cie cie;
  if (!ParseCie(section, cie_pointer_at - cie_pointer, &cie)) return Fallback();
  const uintptr_t pc_begin = reader.Encoded(cie.fde_encoding, 0);
  const uint64_t pc_range = reader.RawEncoded(cie.fde_encoding);
  if (!reader.ok()) return Fallback();
  if (pc < pc_begin || pc - pc_begin >= pc_range) return NoFde();
  if (cie.has_augmentation_data) reader.Skip(reader.Uleb());
  if (!reader.ok()) return Fallback();

  Row row{};
  row.cfa_register = kRegRsp;
  if (!Execute(Reader(cie.instructions, cie.end), cie, nullptr, pc_begin, pc, &row)) {
    return Fallback();
  }
  const Row initial = row;
  if (!Execute(reader, cie, &initial, pc_begin, pc, &row)) return Fallback();

  // libunwind also ends the stack where the caller's rbp is undefined (the
  // x86-64 ABI's other end-of-stack marker): stop where it stops.
  if (row.return_address.where == Where::kUndefined || row.rbp.where == Where::kUndefined) {
    return {FrameRuleKind::kOutermost, CfaRegister::kRsp, false, 0, 0};
  }
  if (row.cfa_expression || row.rsp_rule) return Fallback();
  if (row.cfa_register != kRegRsp && row.cfa_register != kRegRbp) return Fallback();
  if (row.return_address.where != Where::kAtCfa || row.return_address.offset != -8) {
    return Fallback();
  }
  if (row.rbp.where != Where::kSame && row.rbp.where != Where::kAtCfa) return Fallback();
  FrameRule rule;
  rule.kind = FrameRuleKind::kStandard;
  rule.cfa_register = row.cfa_register == kRegRsp ? CfaRegister::kRsp : CfaRegister::kRbp;
  rule.cfa_offset = row.cfa_offset;
  rule.rbp_saved = row.rbp.where == Where::kAtCfa;
  rule.rbp_offset = row.rbp.offset;
  return rule;
}

}  // namespace retain::shim
