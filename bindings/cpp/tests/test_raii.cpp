// Test of the C++17 RAII wrapper (bindings/cpp/include/kvstore/kvstore.hpp). Exit 0 = pass;
// every check prints one line. Built and run by tests/cpp_binding.rs, plainly and under
// AddressSanitizer + UBSan.
//
// Handle ownership is checked through libkvstore's handle registry, not ASan: handles are
// generation-tagged slot numbers, so a second MXNDArrayFree is refused with an error rather
// than a heap double free, and an unfreed handle stays reachable (no LeakSanitizer report).
// nd_live()/kv_live() ask the registry whether a handle is still live (safe on libkvstore
// only; on libmxnet.so a dead handle is a dangling pointer).
#include "kvstore/kvstore.hpp"

#include <cstdio>
#include <string>

static int failures = 0;
static int checks = 0;
// Prints one line per check: "ok   <line>: <condition>" or "FAIL <file>:<line>: <condition>".
#define EXPECT(cond)                                                                  \
  do {                                                                                \
    checks++;                                                                         \
    if (cond) {                                                                       \
      std::printf("ok   %d: %s\n", __LINE__, #cond);                                 \
    } else {                                                                          \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                    \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);      \
      failures++;                                                                     \
    }                                                                                 \
  } while (0)

template <typename F> static std::string error_of(F&& f) {
  try {
    f();
  } catch (const kvstore::Error& e) {
    return e.what();
  }
  return "";
}

static bool nd_live(NDArrayHandle h) {
  int dtype = 0;
  return MXNDArrayGetDType(h, &dtype) == 0;
}
static bool kv_live(KVStoreHandle h) {
  const char* type = nullptr;
  return MXKVStoreGetType(h, &type) == 0;
}

static std::vector<float> filled(float v, std::size_t n = 6) { return std::vector<float>(n, v); }

int main() {
  using kvstore::Context;
  using kvstore::KVStore;
  using kvstore::NDArray;
  const std::vector<std::uint32_t> shape{2, 3};

  // arrays: shape, dtype, context, round trip
  NDArray a = NDArray::from(filled(1.5f), shape, Context::cpu(2));
  EXPECT(a.shape() == shape);
  EXPECT(a.size() == 6);
  EXPECT(a.dtype() == kvstore::DType::Float32);
  EXPECT(a.context() == Context::cpu(2));
  EXPECT(a.to_vector<float>() == filled(1.5f));
  EXPECT(!error_of([&] { a.to_vector<double>(); }).empty());           // wrong element type
  EXPECT(!error_of([&] { a.copy_from(filled(1.f, 5)); }).empty());       // wrong count
  NDArray ints = NDArray::from(std::vector<std::int64_t>{1, 2, 3}, {3});
  EXPECT(ints.dtype() == kvstore::DType::Int64);
  EXPECT((ints.to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 2, 3}));

  // moves: the moved-from array is empty, the handle is freed once (ASan would see twice)
  NDArray moved = std::move(a);
  EXPECT(!a && moved);
  EXPECT(moved.to_vector<float>() == filled(1.5f));
  a = NDArray::from(filled(2.f), shape);
  NDArrayHandle replaced = a.handle();
  a = std::move(moved);
  EXPECT(a.to_vector<float>() == filled(1.5f));
  EXPECT(!nd_live(replaced));  // move-assignment freed the array it replaced
  std::string planted;
  {
    NDArray x = NDArray::from(filled(1.f), shape);
    NDArrayHandle hx = x.handle();
    {
      NDArray y = std::move(x);
      EXPECT(!x && y.handle() == hx && nd_live(hx));
    }
    EXPECT(!nd_live(hx));  // freed once, by y; the failed lookup plants a known last error
    planted = MXGetLastError();
  }  // x, moved-from, is destroyed: a second MXNDArrayFree (of hx or NULL) would fail and
     // replace the last error
  EXPECT(!planted.empty() && planted == MXGetLastError());


  // store: int keys, four devices, sum and multi-device pull
  KVStore kv("device");
  EXPECT(kv.type() == "device" && kv.rank() == 0 && kv.group_size() == 1);
  kv.init(3, NDArray::from(filled(0.f), shape));
  NDArray g0 = NDArray::from(filled(1.f), shape, Context::cpu(0)), g1 = NDArray::from(filled(2.f), shape, Context::cpu(1)),
          g2 = NDArray::from(filled(3.f), shape, Context::cpu(2)), g3 = NDArray::from(filled(4.f), shape, Context::cpu(3));
  kv.push(3, {g0, g1, g2, g3});
  NDArray o0(shape, Context::cpu(0)), o1(shape, Context::cpu(1));
  kv.pull(3, {o0, o1});
  EXPECT(o0.to_vector<float>() == filled(10.f) && o1.to_vector<float>() == filled(10.f));
  std::printf("push of 4 devices, pull into 2: %g\n", o0.to_vector<float>()[0]);

  // updater: stored += 2 * recv, writing through the stored value's alias
  int calls = 0;
  kv.set_updater([&](int key, const NDArray& recv, NDArray& stored) {
    calls++;
    EXPECT(key == 3);
    auto r = recv.to_vector<float>(), s = stored.to_vector<float>();
    for (std::size_t i = 0; i < s.size(); i++) s[i] += 2 * r[i];
    stored.copy_from(s);
  });
  kv.push(3, {g0, g1});
  kv.pull(3, {o0});
  EXPECT(calls == 1);
  EXPECT(o0.to_vector<float>() == filled(10.f + 2 * 3.f));
  std::printf("updater stored += 2*recv: %g\n", o0.to_vector<float>()[0]);

  // an exception in the updater does not cross the C library; it is rethrown later
  kv.set_updater([](int, const NDArray&, NDArray&) { throw std::runtime_error("updater failed"); });
  kv.push(3, {g0});
  kv.pull(3, {o0});
  std::string rethrown;
  try {
    kv.rethrow_updater_error();
  } catch (const std::runtime_error& e) {
    rethrown = e.what();
  }
  EXPECT(rethrown == "updater failed");
  EXPECT(o0.to_vector<float>() == filled(16.f));  // unchanged by the failed update
  kv.set_updater(nullptr);                        // back to assignment
  kv.push(3, {g2, g3});
  kv.pull(3, {o0});
  EXPECT(o0.to_vector<float>() == filled(7.f));

  // pushpull
  kv.pushpull(3, {g0, g1}, {o0, o1});
  EXPECT(o1.to_vector<float>() == filled(3.f));

  // the vector-of-pointers overloads; pushpull in place (outs are the pushed values)
  kv.push(3, std::vector<const NDArray*>{&g0, &g1, &g2, &g3});
  NDArray o2(shape, Context::cpu(2)), o3(shape, Context::cpu(3));
  kv.pull(3, std::vector<NDArray*>{&o0, &o1, &o2, &o3});
  EXPECT(o0.to_vector<float>() == filled(10.f) && o3.to_vector<float>() == filled(10.f));
  EXPECT(o2.context() == Context::cpu(2));
  EXPECT(!error_of([&] { kv.pull(3, std::vector<NDArray*>{&o0, nullptr}); }).empty());
  kv.pushpull(3, std::vector<const NDArray*>{&o0, &o1}, std::vector<NDArray*>{&o0, &o1});
  EXPECT(o0.to_vector<float>() == filled(20.f) && o1.to_vector<float>() == filled(20.f));

  // errors: uninitialised keys, mixed key types, wrong shapes, each with the library's message
  std::string uninit = error_of([&] { kv.pull(99, {o0}); });
  EXPECT(uninit.find("99") != std::string::npos);
  std::printf("pull of an uninitialised key: %s\n", uninit.c_str());
  EXPECT(!error_of([&] { kv.init("w", NDArray::from(filled(1.f), shape)); }).empty());
  NDArray wrong = NDArray::from(filled(1.f, 4), {4});
  EXPECT(!error_of([&] { kv.push(3, {wrong}); }).empty());
  kv.pull(3, {o0});
  EXPECT(o0.to_vector<float>() == filled(20.f));  // the refused push changed nothing

  // string keys
  KVStore skv;
  skv.init("w", NDArray::from(filled(5.f), shape));
  skv.push("w", {g0, g0});
  skv.pull("w", {o1});
  EXPECT(o1.to_vector<float>() == filled(2.f));
  skv.pushpull("w", {g0, g1, g2}, {o1});
  EXPECT(o1.to_vector<float>() == filled(6.f));
  skv.pushpull("w", std::vector<const NDArray*>{&g3}, std::vector<NDArray*>{&o1});
  EXPECT(o1.to_vector<float>() == filled(4.f));
  std::string missing = error_of([&] { skv.pull("nope", {o1}); });
  EXPECT(missing.find("nope") != std::string::npos);
  std::printf("pull of an uninitialised string key: %s\n", missing.c_str());
  // a string-key store's updater sees the key's internal id (0: the first key initialised)
  int seen_key = -1;
  NDArrayHandle seen_recv = nullptr, seen_stored = nullptr;
  skv.set_updater([&](int key, const NDArray& recv, NDArray& stored) {
    seen_key = key;
    seen_recv = recv.handle();
    seen_stored = stored.handle();
    auto r = recv.to_vector<float>(), s = stored.to_vector<float>();
    for (std::size_t i = 0; i < s.size(); i++) s[i] += 2 * r[i];
    stored.copy_from(s);
  });
  skv.push("w", {g0});
  skv.pull("w", {o1});
  EXPECT(seen_key == 0 && o1.to_vector<float>() == filled(4.f + 2 * 1.f));
  EXPECT(seen_recv && seen_stored && !nd_live(seen_recv) && !nd_live(seen_stored));  // adopted, freed
  EXPECT(!error_of([&] { skv.init(1, NDArray::from(filled(1.f), shape)); }).empty());

  KVStoreHandle hs;
  {
    KVStore t("local");
    hs = t.handle();
    KVStore u = std::move(t);
    EXPECT(!t.handle() && u.handle() == hs && kv_live(hs));
  }
  EXPECT(!kv_live(hs));  // freed once, by u
  KVStoreHandle hs2;
  {
    KVStore t2("local"), u2("local");
    hs = u2.handle();
    hs2 = t2.handle();
    u2 = std::move(t2);
    EXPECT(kv_live(hs2) && !kv_live(hs));  // move-assignment freed u2's own store
    planted = MXGetLastError();
  }  // u2 frees hs2 (a success leaves the last error alone); t2, moved-from, frees nothing
  EXPECT(!planted.empty() && planted == MXGetLastError());
  EXPECT(!kv_live(hs2));

  // a moved store keeps working; the moved-from one is empty
  KVStore other = std::move(skv);
  other.push("w", {g1});  // the updater moved with the store: 6 + 2*2
  other.pull("w", {o1});
  EXPECT(other.handle() && !skv.handle());
  EXPECT(o1.to_vector<float>() == filled(10.f));

  if (failures) {
    std::fprintf(stderr, "%d of %d checks failed\n", failures, checks);
    return 1;
  }
  std::printf("raii wrapper: all checks passed (%d)\n", checks);
  return 0;
}
