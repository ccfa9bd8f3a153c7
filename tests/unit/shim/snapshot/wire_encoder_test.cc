// The shim's hand-written wire encoder must produce bytes the generated
// protobuf classes parse to the same values.
#include "snapshot/wire_encoder.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "retain.pb.h"
#include "snapshot/crc32.h"

namespace retain::shim {
namespace {

std::string Bytes(const ProtoBuffer& buffer) {
  return std::string(reinterpret_cast<const char*>(buffer.data()), buffer.size());
}

TEST(WireEncoderTest, VarintsOfEverySize) {
  for (uint64_t value : {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{300},
                         uint64_t{1} << 35, std::numeric_limits<uint64_t>::max()}) {
    ProtoBuffer header;
    header.UintField(13, value);
    v1::Header parsed;
    ASSERT_TRUE(parsed.ParseFromString(Bytes(header)));
    EXPECT_EQ(parsed.next_birth_sequence(), value);
    if (value != 0) {
      EXPECT_EQ(header.size(), 1 + VarintSize(value));
    }
  }
}

TEST(WireEncoderTest, NestedMessagesStringsBytesAndRepeatedStrings) {
  ProtoBuffer header;
  header.UintField(1, 1);
  header.UintField(2, 4242);
  header.StringField(5, "/usr/bin/thing");
  const uint8_t build_id[] = {0xde, 0xad, 0x00, 0xbe, 0xef};
  header.BytesField(6, build_id, sizeof(build_id));
  header.RepeatedStringField(7, "prog", 4);
  header.RepeatedStringField(7, "", 0);  // an empty argument is kept
  header.RepeatedStringField(7, "--flag=1", 8);
  header.UintField(11, 3);
  header.StringField(12, "");  // empty: skipped
  ProtoBuffer snapshot;
  snapshot.MessageField(1, header);

  v1::Snapshot parsed;
  ASSERT_TRUE(parsed.ParseFromString(Bytes(snapshot)));
  EXPECT_EQ(parsed.header().format_version(), 1u);
  EXPECT_EQ(parsed.header().pid(), 4242u);
  EXPECT_EQ(parsed.header().exe_path(), "/usr/bin/thing");
  EXPECT_EQ(parsed.header().exe_build_id(), std::string("\xde\xad\x00\xbe\xef", 5));
  ASSERT_EQ(parsed.header().command_line_size(), 3);
  EXPECT_EQ(parsed.header().command_line(1), "");
  EXPECT_EQ(parsed.header().command_line(2), "--flag=1");
  EXPECT_EQ(parsed.header().trigger(), v1::TRIGGER_API);
  EXPECT_EQ(parsed.header().label(), "");
}

TEST(WireEncoderTest, PackedColumnsAndRepeatedMessages) {
  ProtoBuffer snapshot;
  for (int block = 0; block < 3; ++block) {
    ProtoBuffer sizes, kinds, stacks;
    for (int i = 0; i < 1000; ++i) {
      sizes.Varint(uint64_t(block) * 1000000 + i);
      kinds.Varint(i % 2 == 0 ? 1 : 3);
      stacks.Varint(i);
    }
    ProtoBuffer allocation_block;
    allocation_block.PackedField(2, sizes);
    allocation_block.PackedField(3, kinds);
    allocation_block.PackedField(4, stacks);
    snapshot.MessageField(5, allocation_block);
  }
  v1::Snapshot parsed;
  ASSERT_TRUE(parsed.ParseFromString(Bytes(snapshot)));
  ASSERT_EQ(parsed.allocations_size(), 3);
  const v1::AllocationBlock& last = parsed.allocations(2);
  ASSERT_EQ(last.size_size(), 1000);
  EXPECT_EQ(last.size(999), 2000999u);
  EXPECT_EQ(last.kind(1), v1::KIND_MMAP_FILE);
  EXPECT_EQ(last.stack_id(500), 500u);
}

// The footer's fixed encoding parses as Snapshot.footer, with both fields
// present even when 0 (where proto3 writers would skip them).
TEST(WireEncoderTest, FooterIsSixteenBytesThatParseAsTheFooterField) {
  for (const auto& [length, crc] :
       {std::pair<uint64_t, uint32_t>{0, 0},
        {1009, 0x3dc13597},
        {std::numeric_limits<uint64_t>::max(), std::numeric_limits<uint32_t>::max()}}) {
    uint8_t footer[kFooterSize];
    EncodeFooter(length, crc, footer);
    EXPECT_EQ(footer[0], 0x7a);
    EXPECT_EQ(footer[1], 0x0e);
    EXPECT_EQ(footer[2], 0x09);
    EXPECT_EQ(footer[11], 0x15);
    v1::Snapshot parsed;
    ASSERT_TRUE(parsed.ParseFromArray(footer, sizeof(footer)));
    ASSERT_TRUE(parsed.has_footer());
    EXPECT_EQ(parsed.footer().length(), length);
    EXPECT_EQ(parsed.footer().crc32(), crc);
  }
}

// The shim's CRC-32 against zlib's, over every length up to 64 and longer
// buffers at every alignment, whole and in pieces (the writer feeds it one
// flushed buffer at a time).
TEST(Crc32Test, AgreesWithZlib) {
  EXPECT_EQ(Crc32Update(kCrc32Initial, "123456789", 9), 0xcbf43926u);  // the check value
  EXPECT_EQ(Crc32Update(kCrc32Initial, nullptr, 0), 0u);
  std::string data(70000, '\0');
  uint32_t state = 12345;
  for (char& c : data) {
    state = state * 1103515245 + 12345;
    c = static_cast<char>(state >> 16);
  }
  const auto zlib = [](const char* p, size_t n) {
    return static_cast<uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(p), n));
  };
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t size : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63},
                        size_t{64}, size_t{4096}, size_t{65537}}) {
      ASSERT_EQ(Crc32Update(kCrc32Initial, data.data() + offset, size),
                zlib(data.data() + offset, size))
          << "offset " << offset << " size " << size;
    }
  }
  for (size_t size = 0; size <= 64; ++size) {
    ASSERT_EQ(Crc32Update(kCrc32Initial, data.data(), size), zlib(data.data(), size)) << size;
  }
  uint32_t running = kCrc32Initial;
  for (size_t done = 0; done < data.size();) {
    const size_t piece = std::min<size_t>(data.size() - done, 1 + done % 1000);
    running = Crc32Update(running, data.data() + done, piece);
    done += piece;
  }
  EXPECT_EQ(running, zlib(data.data(), data.size()));
}

TEST(WireEncoderTest, GrowsPastManyPages) {
  ProtoBuffer big;
  for (int i = 0; i < 1000000; ++i) big.Varint(uint64_t{1} << 40);
  EXPECT_FALSE(big.failed());
  EXPECT_EQ(big.size(), 1000000u * VarintSize(uint64_t{1} << 40));
}

}  // namespace
}  // namespace retain::shim
