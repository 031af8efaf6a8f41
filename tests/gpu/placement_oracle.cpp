// The oracle for src/gpu/placement.rs: MXNet 1.9's CommDevice merge-buffer placement logic
// written against the real libstdc++ std::sort and std::unordered_map, whose tie orders the
// Rust model reproduces. Reads cases on stdin, prints each key's merge context.
//   case:   <n_ops> then ops: "I <key> <size>" (Init) or "P <n> <dev_type> <dev_id> ..." (a
//           reduction over values on those contexts); prints "<key> <dev_type> <dev_id>" per
//           placed key in key order, then "end".
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

struct Ctx { int type, id; };
typedef std::tuple<int, unsigned long long, int> KeyAttr;  // key, size, (dtype: unused)

int main() {
  int cases;
  if (std::scanf("%d", &cases) != 1) return 1;
  for (int c = 0; c < cases; ++c) {
    std::vector<KeyAttr> sorted;
    std::map<int, Ctx> merged;
    bool inited = false;
    int ops;
    if (std::scanf("%d", &ops) != 1) return 1;
    for (int o = 0; o < ops; ++o) {
      char op[2];
      if (std::scanf("%1s", op) != 1) return 1;
      if (op[0] == 'I') {
        int key; unsigned long long size;
        if (std::scanf("%d %llu", &key, &size) != 2) return 1;
        sorted.emplace_back(key, size, 0);
        inited = false;
      } else {
        int n;
        if (std::scanf("%d", &n) != 1) return 1;
        std::vector<Ctx> devs(n);
        for (auto& d : devs) if (std::scanf("%d %d", &d.type, &d.id) != 2) return 1;
        if (inited) continue;
        std::sort(sorted.begin(), sorted.end(), [](const KeyAttr& a, const KeyAttr& b) {
          return std::get<1>(a) > std::get<1>(b);
        });
        std::unordered_map<int, std::pair<Ctx, unsigned long long>> info;
        for (auto d : devs) info[d.id] = std::make_pair(d, 0ULL);
        for (auto& ka : sorted) {
          Ctx ctx{0, 0};
          unsigned long long min_size = std::numeric_limits<unsigned long long>::max();
          for (auto& kv : info) {
            if (kv.second.second <= min_size) { ctx = kv.second.first; min_size = kv.second.second; }
          }
          if (!merged.count(std::get<0>(ka))) merged[std::get<0>(ka)] = ctx;
          info[ctx.id].second += std::get<1>(ka);
        }
        inited = true;
      }
    }
    for (auto& kv : merged) std::printf("%d %d %d\n", kv.first, kv.second.type, kv.second.id);
    std::printf("end\n");
  }
  return 0;
}
