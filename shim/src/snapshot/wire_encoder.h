// wire_encoder: the protobuf wire format, written by hand, so the shim never
// links libprotobuf into a host that may carry its own.
//
// ProtoBuffer is a growable byte buffer in arena scratch pages with the encodings
// proto/retain.proto needs: varints, fixed-length and length-delimited
// fields, packed repeated varints and nested messages (encode the child
// into its own ProtoBuffer, then AppendMessage). A buffer that could not
// grow (the kernel refused) remembers it: failed() stays true and the writer
// gives up on the snapshot instead of writing a corrupt one.
//
// Thread-compatible (one owner). Never allocates from the host heap.
#ifndef RETAIN_SHIM_SRC_SNAPSHOT_WIRE_ENCODER_H_
#define RETAIN_SHIM_SRC_SNAPSHOT_WIRE_ENCODER_H_

#include <cstddef>
#include <cstdint>

namespace retain::shim {

class ProtoBuffer {
 public:
  ProtoBuffer() = default;
  ~ProtoBuffer();
  ProtoBuffer(const ProtoBuffer&) = delete;
  ProtoBuffer& operator=(const ProtoBuffer&) = delete;

  // Raw encodings.
  void Varint(uint64_t value);
  void Tag(uint32_t field, uint32_t wire_type);
  void Bytes(const void* data, size_t size);

  // Fields. Scalars equal to 0 (and empty strings) are skipped, as proto3
  // writers do; repeated and packed fields are written as given.
  void UintField(uint32_t field, uint64_t value);
  void BoolField(uint32_t field, bool value) { UintField(field, value ? 1 : 0); }
  void BytesField(uint32_t field, const void* data, size_t size);
  void StringField(uint32_t field, const char* text);
  // A string element of a repeated field: written even when empty.
  void RepeatedStringField(uint32_t field, const char* text, size_t size);
  void MessageField(uint32_t field, const ProtoBuffer& message);
  // A packed repeated varint field whose payload (the varints) is `packed`.
  void PackedField(uint32_t field, const ProtoBuffer& packed);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool failed() const { return failed_; }
  void Clear() { size_ = 0; }

 private:
  bool Reserve(size_t extra);

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
  bool failed_ = false;
};

inline constexpr uint32_t kWireVarint = 0;
inline constexpr uint32_t kWireFixed64 = 1;
inline constexpr uint32_t kWireLengthDelimited = 2;
inline constexpr uint32_t kWireFixed32 = 5;

// Snapshot.footer (proto/retain.proto, message Footer) as the last bytes of
// the file: always these 16, so a reader finds it without parsing:
//   0x7a 0x0e, 0x09 + length (8 bytes, little-endian), 0x15 + crc32 (4 bytes).
inline constexpr size_t kFooterSize = 16;
void EncodeFooter(uint64_t length, uint32_t crc32, uint8_t (&out)[kFooterSize]);

// Encoded size of a varint.
inline size_t VarintSize(uint64_t value) {
  size_t size = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++size;
  }
  return size;
}

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_SNAPSHOT_WIRE_ENCODER_H_
