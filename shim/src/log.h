// log: the shim's only way to speak, one line at a time on stderr.
//
// Uses write(2) on fd 2 and a fixed-size stack buffer: safe inside hooks,
// never allocates, preserves errno. Every line starts with "retain: ".
#ifndef RETAIN_SHIM_SRC_LOG_H_
#define RETAIN_SHIM_SRC_LOG_H_

namespace retain::shim {

// Warnings are always printed (bad configuration, a failed snapshot when
// asked for one). Diagnostics only when RETAIN_LOG=1.
void LogWarning(const char* format, ...) __attribute__((format(printf, 1, 2)));
void LogDiagnostic(const char* format, ...) __attribute__((format(printf, 1, 2)));
void SetDiagnosticsEnabled(bool enabled);

}  // namespace retain::shim

#endif  // RETAIN_SHIM_SRC_LOG_H_
