// The one way oomlab's C++ entry points report failure: every extern "C" function is noexcept
// and runs its body through `guarded`, which turns a C++ exception into return code 1 and a
// message in the caller's buffer, never unwinding into Rust. Shared by shim.cpp and optim.cpp.
#pragma once

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>

namespace oomlab {

// Writes a message into the caller's buffer, always NUL-terminated. One longer than the buffer
// keeps its start and its end, a line "..." between: a TorchScript failure's traceback of the
// module's code fills the middle, and what the module raised is its last line.
inline void set_err(char* err, size_t len, const char* msg) {
  if (err == nullptr || len == 0) return;
  const size_t n = std::strlen(msg);
  if (n < len || len < 64) {
    std::snprintf(err, len, "%s", msg);
    return;
  }
  static const char kGap[] = "\n...\n";
  const size_t room = len - 1 - (sizeof kGap - 1);
  const size_t head = room / 4, tail = room - head;
  std::memcpy(err, msg, head);
  std::memcpy(err + head, kGap, sizeof kGap - 1);
  std::memcpy(err + head + sizeof kGap - 1, msg + n - tail, tail);
  err[len - 1] = '\0';
}

// Runs `f`, turning any C++ exception into return code 1 and a message.
template <typename F>
int guarded(char* err, size_t len, F&& f) noexcept {
  try {
    f();
    return 0;
  } catch (const c10::Error& e) {
    set_err(err, len, e.what_without_backtrace());
  } catch (const std::exception& e) {
    set_err(err, len, e.what());
  } catch (...) {
    set_err(err, len, "unknown C++ exception");
  }
  return 1;
}

}  // namespace oomlab
