// What an opaque C API handle points at, and how misuse of one is caught.
//
// A handle is a Handle<T> shell: a magic word (8 ASCII bytes naming the handle type) in its first
// field, then the owned object. create sets the word; every call checks it before touching the
// object (handle_object); destroy checks it, frees the object and writes kDestroyedHandle into
// the shell. The shell itself is not freed: it goes to a per-type pool that tessera owns, so a
// stale handle still points at readable memory holding kDestroyedHandle. Later creates of the
// same type reuse pooled shells, oldest first; the pool keeps at most kPooledShells of them and
// frees the oldest beyond that.
//
// Caught (Error kInvalidArgument naming the argument): NULL (destroy: a no-op instead); a
// handle used or destroyed again after destroy, until a later create reuses its shell or
// kPooledShells newer shells push it out of the pool; a handle of the other type; a pointer to
// readable memory that does not start with the type's magic word. Not caught: a stale handle
// whose shell a later create reused (it now names that live object), one freed out of the pool
// or a pointer to unmapped memory (undefined behaviour, as with any freed pointer), and two
// threads destroying one handle at the same time.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

#include "tessera/core/status.h"

namespace tessera::c_api {

// "tsr:" + 4 characters naming the type, as one little-endian word (readable in a memory dump).
constexpr uint64_t magic_word(const char (&name)[9]) {
  uint64_t w = 0;
  for (int i = 7; i >= 0; --i) w = (w << 8) | static_cast<unsigned char>(name[i]);
  return w;
}
inline constexpr uint64_t kDestroyedHandle = magic_word("tsr:dead");
inline constexpr size_t kPooledShells = 4096;

template <class T>
struct Handle {
  uint64_t magic = 0;
  std::unique_ptr<T> object;
};

// Destroyed shells of one handle type, reused oldest first. Never destroyed itself: a handle
// destroyed from a static destructor at exit still finds it.
template <class Shell>
class ShellPool {
 public:
  static ShellPool& instance() {
    static ShellPool* pool = new ShellPool;
    return *pool;
  }
  Shell* take() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!shells_.empty()) {
        Shell* s = shells_.front();
        shells_.pop_front();
        return s;
      }
    }
    return new Shell;
  }
  void give(Shell* s) {
    Shell* evicted = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shells_.push_back(s);
      if (shells_.size() > kPooledShells) {
        evicted = shells_.front();
        shells_.pop_front();
      }
    }
    delete evicted;
  }

 private:
  std::mutex mutex_;
  std::deque<Shell*> shells_;
};

// Checks that `h` is a live handle of its type; names `arg` and says what it is otherwise.
template <class Shell>
void check_live(const Shell* h, const char* arg) {
  TESSERA_CHECK(h != nullptr, arg, ": NULL handle");
  TESSERA_CHECK(h->magic != kDestroyedHandle, arg, ": this ", Shell::kTypeName,
                " was destroyed; a destroyed handle cannot be used or destroyed again");
  TESSERA_CHECK(h->magic == Shell::kMagic, arg, ": not a ", Shell::kTypeName,
                " (not a pointer its create call returned)");
}

// A live handle owning `object` (a pooled shell when there is one).
template <class Shell, class T>
Shell* create_handle(std::unique_ptr<T> object) {
  Shell* h = ShellPool<Shell>::instance().take();
  h->object = std::move(object);
  h->magic = Shell::kMagic;
  return h;
}

template <class Shell>
auto& handle_object(Shell* h, const char* arg) {
  check_live(h, arg);
  return *h->object;
}

// NULL: nothing. Else the handle must be live; its object is freed, its shell pooled.
template <class Shell>
void destroy_handle(Shell* h, const char* arg) {
  if (h == nullptr) return;
  check_live(h, arg);
  h->magic = kDestroyedHandle;
  h->object.reset();
  ShellPool<Shell>::instance().give(h);
}

}  // namespace tessera::c_api
