// kvstore.hpp: a header-only C++17 RAII wrapper over libkvstore's C API (MXNet 1.9's
// KVStore and NDArray functions). It works unchanged on libmxnet.so too.
//
// Ownership: kvstore::NDArray and kvstore::KVStore own one handle each, are move-only, and
// free it in their destructor. Every failing C call throws kvstore::Error carrying
// MXGetLastError()'s text.
#ifndef KVSTORE_KVSTORE_HPP
#define KVSTORE_KVSTORE_HPP

#include "kvstore.h"

#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvstore {

/// A failed C API call; what() is MXGetLastError() of that call.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// Throws Error when a C API call answered -1.
inline void check(int rc) {
  if (rc != 0) throw Error(MXGetLastError());
}

enum class DType : int {
  Float32 = 0, Float64 = 1, Float16 = 2, UInt8 = 3, Int32 = 4,
  Int8 = 5, Int64 = 6, Bool = 7, BFloat16 = 12,
};

/// The DType of a C++ element type (float16/bfloat16 have none: use raw bytes).
template <typename T> constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::Float32;
  else if constexpr (std::is_same_v<T, double>) return DType::Float64;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return DType::UInt8;
  else if constexpr (std::is_same_v<T, std::int32_t>) return DType::Int32;
  else if constexpr (std::is_same_v<T, std::int8_t>) return DType::Int8;
  else if constexpr (std::is_same_v<T, std::int64_t>) return DType::Int64;
  else if constexpr (std::is_same_v<T, bool>) return DType::Bool;
  else static_assert(sizeof(T) == 0, "no MXNet dtype for this element type");
}

struct Context {
  int dev_type = 1;  // MXNet's codes: 1 cpu, 2 gpu, 3 cpu_pinned, 5 cpu_shared
  int dev_id = 0;
  static Context cpu(int id = 0) { return Context{1, id}; }
  bool operator==(const Context& o) const { return dev_type == o.dev_type && dev_id == o.dev_id; }
};

/// Owns one NDArrayHandle.
class NDArray {
 public:
  /// A dense array of zeros-or-garbage (as MXNDArrayCreateEx: contents unspecified).
  explicit NDArray(const std::vector<std::uint32_t>& shape, Context ctx = Context::cpu(),
                   DType dtype = DType::Float32) {
    check(MXNDArrayCreateEx(shape.data(), static_cast<std::uint32_t>(shape.size()), ctx.dev_type,
                            ctx.dev_id, 0, static_cast<int>(dtype), &handle_));
  }

  /// An array of `shape` holding `values` (their count must match the shape's size).
  template <typename T>
  static NDArray from(const std::vector<T>& values, const std::vector<std::uint32_t>& shape,
                      Context ctx = Context::cpu()) {
    NDArray a(shape, ctx, dtype_of<T>());
    a.copy_from(values);
    return a;
  }

  /// Takes ownership of a handle the C API gave out (updater arguments, for instance).
  static NDArray adopt(NDArrayHandle handle) { return NDArray(handle); }

  NDArray(NDArray&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  NDArray& operator=(NDArray&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  NDArray(const NDArray&) = delete;
  NDArray& operator=(const NDArray&) = delete;
  ~NDArray() { reset(); }

  NDArrayHandle handle() const { return handle_; }
  /// Gives up ownership: the caller frees the handle.
  NDArrayHandle release() { return std::exchange(handle_, nullptr); }
  explicit operator bool() const { return handle_ != nullptr; }

  std::vector<std::uint32_t> shape() const {
    int ndim = 0;
    const int* dims = nullptr;
    check(MXNDArrayGetShapeEx(handle_, &ndim, &dims));
    return std::vector<std::uint32_t>(dims, dims + (ndim > 0 ? ndim : 0));
  }
  std::size_t size() const {
    int ndim = 0;
    const int* dims = nullptr;
    check(MXNDArrayGetShapeEx(handle_, &ndim, &dims));
    std::size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= static_cast<std::size_t>(dims[i]);
    return n;
  }
  DType dtype() const {
    int d = 0;
    check(MXNDArrayGetDType(handle_, &d));
    return static_cast<DType>(d);
  }
  Context context() const {
    Context c;
    check(MXNDArrayGetContext(handle_, &c.dev_type, &c.dev_id));
    return c;
  }

  template <typename T> void copy_from(const std::vector<T>& values) {
    check_element_type<T>();
    if (values.size() != size()) throw Error("copy_from: " + std::to_string(values.size()) +
                                             " values for an array of " + std::to_string(size()));
    check(MXNDArraySyncCopyFromCPU(handle_, values.data(), values.size()));
  }
  template <typename T> std::vector<T> to_vector() const {
    check_element_type<T>();
    std::vector<T> out(size());
    check(MXNDArraySyncCopyToCPU(handle_, out.data(), out.size()));
    return out;
  }
  void wait_to_read() const { check(MXNDArrayWaitToRead(handle_)); }

 private:
  explicit NDArray(NDArrayHandle handle) : handle_(handle) {}
  void reset() noexcept {
    if (handle_) MXNDArrayFree(handle_);  // cannot fail for a live handle; nothing to report
    handle_ = nullptr;
  }
  template <typename T> void check_element_type() const {
    if (dtype() != dtype_of<T>())
      throw Error("element type does not match the array's dtype " +
                  std::to_string(static_cast<int>(dtype())));
  }
  NDArrayHandle handle_ = nullptr;
};

/// Owns one KVStoreHandle.
class KVStore {
 public:
  /// `update(key, recv, stored)`: `recv` is the merged pushed value, `stored` aliases the
  /// store's value (write into it). Keys are the int key, or the store's internal id of a
  /// string key, as MXNet passes them.
  using Updater = std::function<void(int key, const NDArray& recv, NDArray& stored)>;

  explicit KVStore(const std::string& type = "local") { check(MXKVStoreCreate(type.c_str(), &handle_)); }
  KVStore(KVStore&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), updater_(std::move(other.updater_)) {}
  KVStore& operator=(KVStore&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
      updater_ = std::move(other.updater_);
    }
    return *this;
  }
  KVStore(const KVStore&) = delete;
  KVStore& operator=(const KVStore&) = delete;
  ~KVStore() { reset(); }

  KVStoreHandle handle() const { return handle_; }

  std::string type() const {
    const char* t = nullptr;
    check(MXKVStoreGetType(handle_, &t));
    return t;
  }
  int rank() const {
    int r = 0;
    check(MXKVStoreGetRank(handle_, &r));
    return r;
  }
  int group_size() const {
    int n = 0;
    check(MXKVStoreGetGroupSize(handle_, &n));
    return n;
  }

  void init(int key, const NDArray& value) {
    NDArrayHandle v = value.handle();
    check(MXKVStoreInit(handle_, 1, &key, &v));
  }
  void init(const std::string& key, const NDArray& value) {
    const char* k = key.c_str();
    NDArrayHandle v = value.handle();
    check(MXKVStoreInitEx(handle_, 1, &k, &v));
  }

  /// Pushes several values for one key: they are summed.
  void push(int key, std::initializer_list<std::reference_wrapper<const NDArray>> values, int priority = 0) {
    push_handles(key, handles_of(values), priority);
  }
  void push(const std::string& key, std::initializer_list<std::reference_wrapper<const NDArray>> values,
            int priority = 0) {
    push_handles(key, handles_of(values), priority);
  }
  void push(int key, const std::vector<const NDArray*>& values, int priority = 0) {
    push_handles(key, handles_of(values), priority);
  }
  void push(const std::string& key, const std::vector<const NDArray*>& values, int priority = 0) {
    push_handles(key, handles_of(values), priority);
  }

  /// Pulls one key's value into every output.
  void pull(int key, std::initializer_list<std::reference_wrapper<NDArray>> outs, int priority = 0) {
    pull_handles(key, handles_of(outs), priority);
  }
  void pull(const std::string& key, std::initializer_list<std::reference_wrapper<NDArray>> outs,
            int priority = 0) {
    pull_handles(key, handles_of(outs), priority);
  }
  void pull(int key, const std::vector<NDArray*>& outs, int priority = 0) {
    pull_handles(key, handles_of(outs), priority);
  }
  void pull(const std::string& key, const std::vector<NDArray*>& outs, int priority = 0) {
    pull_handles(key, handles_of(outs), priority);
  }

  /// Push then pull in one call; `outs` receive the (updated) value and may be `values`.
  void pushpull(int key, std::initializer_list<std::reference_wrapper<const NDArray>> values,
                std::initializer_list<std::reference_wrapper<NDArray>> outs, int priority = 0) {
    pushpull_handles(key, handles_of(values), handles_of(outs), priority);
  }
  void pushpull(const std::string& key, std::initializer_list<std::reference_wrapper<const NDArray>> values,
                std::initializer_list<std::reference_wrapper<NDArray>> outs, int priority = 0) {
    pushpull_handles(key, handles_of(values), handles_of(outs), priority);
  }
  void pushpull(int key, const std::vector<const NDArray*>& values, const std::vector<NDArray*>& outs,
                int priority = 0) {
    pushpull_handles(key, handles_of(values), handles_of(outs), priority);
  }
  void pushpull(const std::string& key, const std::vector<const NDArray*>& values,
                const std::vector<NDArray*>& outs, int priority = 0) {
    pushpull_handles(key, handles_of(values), handles_of(outs), priority);
  }

  /// Installs `update` (or, with an empty function, goes back to assigning the pushed sum).
  /// An exception thrown by `update` cannot cross the C library: it is kept and rethrown by
  /// the next call to rethrow_updater_error() (pulls still see the value as it was left).
  void set_updater(Updater update) {
    auto state = update ? std::make_unique<UpdaterState>(UpdaterState{std::move(update), nullptr}) : nullptr;
    check(MXNDArrayWaitAll());  // no push still running may call the updater being replaced
    check(MXKVStoreSetUpdater(handle_, state ? &KVStore::call_updater : nullptr, state.get()));
    updater_ = std::move(state);  // the old state is freed only once the library no longer uses it
  }
  void rethrow_updater_error() {
    if (updater_ && updater_->error) std::rethrow_exception(std::exchange(updater_->error, nullptr));
  }

 private:
  struct UpdaterState {
    Updater update;
    std::exception_ptr error;
  };

  static void call_updater(int key, NDArrayHandle recv, NDArrayHandle local, void* data) {
    // The handles are the callee's to free (MXNet's contract): adopt them.
    NDArray recv_array = NDArray::adopt(recv), local_array = NDArray::adopt(local);
    auto* state = static_cast<UpdaterState*>(data);
    try {
      state->update(key, recv_array, local_array);
    } catch (...) {
      if (!state->error) state->error = std::current_exception();
    }
  }

  using Handles = std::vector<NDArrayHandle>;
  static NDArrayHandle handle_of(const NDArray& a) { return a.handle(); }
  static NDArrayHandle handle_of(const NDArray* a) {
    if (!a) throw Error("null NDArray pointer");
    return a->handle();
  }
  template <typename Range> static Handles handles_of(const Range& arrays) {
    Handles handles;
    for (const auto& a : arrays) handles.push_back(handle_of(unwrap(a)));
    return handles;
  }
  template <typename A> static const A& unwrap(const A& a) { return a; }
  template <typename A> static const A& unwrap(const std::reference_wrapper<A>& a) { return a.get(); }

  void push_handles(int key, Handles h, int priority) {
    std::vector<int> keys(h.size(), key);
    check(MXKVStorePush(handle_, count(h), keys.data(), h.data(), priority));
  }
  void push_handles(const std::string& key, Handles h, int priority) {
    std::vector<const char*> keys(h.size(), key.c_str());
    check(MXKVStorePushEx(handle_, count(h), keys.data(), h.data(), priority));
  }
  void pull_handles(int key, Handles h, int priority) {
    std::vector<int> keys(h.size(), key);
    check(MXKVStorePull(handle_, count(h), keys.data(), h.data(), priority));
  }
  void pull_handles(const std::string& key, Handles h, int priority) {
    std::vector<const char*> keys(h.size(), key.c_str());
    check(MXKVStorePullEx(handle_, count(h), keys.data(), h.data(), priority));
  }
  void pushpull_handles(int key, Handles v, Handles o, int priority) {
    std::vector<int> vkeys(v.size(), key), okeys(o.size(), key);
    check(MXKVStorePushPull(handle_, count(v), vkeys.data(), count(o), okeys.data(), v.data(), o.data(),
                            priority));
  }
  void pushpull_handles(const std::string& key, Handles v, Handles o, int priority) {
    std::vector<const char*> vkeys(v.size(), key.c_str()), okeys(o.size(), key.c_str());
    check(MXKVStorePushPullEx(handle_, count(v), vkeys.data(), count(o), okeys.data(), v.data(), o.data(),
                              priority));
  }
  static std::uint32_t count(const std::vector<NDArrayHandle>& v) { return static_cast<std::uint32_t>(v.size()); }

  void reset() noexcept {
    if (handle_) MXKVStoreFree(handle_);
    handle_ = nullptr;
    updater_.reset();
  }

  KVStoreHandle handle_ = nullptr;
  std::unique_ptr<UpdaterState> updater_;
};

}  // namespace kvstore

#endif  // KVSTORE_KVSTORE_HPP
