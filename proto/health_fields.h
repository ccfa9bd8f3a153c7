// health_fields: the field numbers of proto/retain.proto's ShimHealth
// message, named, for the shim's snapshot writer (snapshot/encoding.cc),
// which writes the wire format by hand and never links protobuf.
//
// RETAIN_FOR_EACH_HEALTH_FIELD(X) expands X(Name, field, number) per field:
// `Name` the constant's name without its k (retain::health_field::kName) and
// the generated accessor's CamelCase, `field` the proto field's name,
// `number` its number. tests/unit/shim/snapshot/health_fields_test.cc checks
// every row against the generated descriptor and constants, and that every
// field of ShimHealth has a row.
//
// Header only, constants only: safe anywhere.
#ifndef RETAIN_PROTO_HEALTH_FIELDS_H_
#define RETAIN_PROTO_HEALTH_FIELDS_H_

#define RETAIN_FOR_EACH_HEALTH_FIELD(X)                   \
  X(ArenaBytes, arena_bytes, 1)                           \
  X(ArenaCapBytes, arena_cap_bytes, 2)                    \
  X(Degraded, degraded, 3)                                \
  X(DroppedRecords, dropped_records, 4)                   \
  X(UnwindFailures, unwind_failures, 5)                   \
  X(ReentriesSkipped, reentries_skipped, 6)               \
  X(UnknownFrees, unknown_frees, 7)                       \
  X(BootstrapBytes, bootstrap_bytes, 8)                   \
  X(StacksInterned, stacks_interned, 9)                   \
  X(FpFallbacks, fp_fallbacks, 10)                        \
  X(PreviousWriteUs, previous_write_us, 11)               \
  X(DroppedBytes, dropped_bytes, 12)                      \
  X(MissedFrees, missed_frees, 13)                        \
  X(LiveTableBytes, live_table_bytes, 14)                 \
  X(StackTableBytes, stack_table_bytes, 15)               \
  X(CfiFallbacks, cfi_fallbacks, 16)                      \
  X(LibunwindValidations, libunwind_validations, 17)      \
  X(TagTableBytes, tag_table_bytes, 18)                   \
  X(TagsRetained, tags_retained, 19)                      \
  X(TagsReleased, tags_released, 20)                      \
  X(TagsReleasedUnreported, tags_released_unreported, 21) \
  X(DroppedLiveBytes, dropped_live_bytes, 22)             \
  X(DroppedLiveCount, dropped_live_count, 23)             \
  X(FailedSnapshots, failed_snapshots, 24)                \
  X(LastFailure, last_failure, 25)                        \
  X(GpuBackingsDropped, gpu_backings_dropped, 26)

namespace retain::health_field {

#define RETAIN_HEALTH_FIELD_CONSTANT(Name, field, number) \
  inline constexpr unsigned k##Name = number;
RETAIN_FOR_EACH_HEALTH_FIELD(RETAIN_HEALTH_FIELD_CONSTANT)
#undef RETAIN_HEALTH_FIELD_CONSTANT

}  // namespace retain::health_field

#endif  // RETAIN_PROTO_HEALTH_FIELDS_H_
