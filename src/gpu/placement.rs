//! Where a `device` store's merge buffers live: MXNet 1.9's `CommDevice::InitMergeBuffer`
//! (src/kvstore/comm.h), reproduced exactly, because the merge buffer's device is visible
//! (an updater receives handles on it).
//!
//! MXNet sorts the keys by size, largest first, with `std::sort`, which is not stable: keys
//! of equal size end up in the order libstdc++'s introsort leaves them, so [`libstdcxx_sort`]
//! is that algorithm step for step. The devices live in a `std::unordered_map<int, ..>` keyed
//! by `dev_id` (a later context with the same id replaces an earlier one), iterated in
//! libstdc++'s bucket-list order ([`StdUnorderedIntMap`]); each key goes to the least-loaded
//! device, compared with `<=`, so the last minimum in iteration order wins. Every placement
//! runs over all keys again (the list stays sorted between runs, new keys appended): keys
//! already placed keep their buffer, but the load is counted where the new run puts them.

use crate::base::id_hasher::IdHasher;
use crate::base::Context;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// libstdc++'s `std::sort` (introsort: median-of-three quicksort down to runs of 16, heap
/// sort past the depth limit, then insertion sort), with `less` as the comparator.
pub fn libstdcxx_sort<T: Clone>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let n = v.len();
    if n > 1 {
        let depth = 2 * (usize::BITS - 1 - n.leading_zeros()) as usize;
        introsort_loop(v, 0, n, depth, less);
        final_insertion_sort(v, 0, n, less);
    }
}

const THRESHOLD: usize = 16;

fn introsort_loop<T: Clone>(v: &mut [T], first: usize, mut last: usize, mut depth: usize, less: &impl Fn(&T, &T) -> bool) {
    while last - first > THRESHOLD {
        if depth == 0 {
            heap_sort(&mut v[first..last], less);
            return;
        }
        depth -= 1;
        let cut = partition_pivot(v, first, last, less);
        introsort_loop(v, cut, last, depth, less);
        last = cut;
    }
}

fn partition_pivot<T: Clone>(v: &mut [T], first: usize, last: usize, less: &impl Fn(&T, &T) -> bool) -> usize {
    let mid = first + (last - first) / 2;
    move_median_to_first(v, first, first + 1, mid, last - 1, less);
    unguarded_partition(v, first + 1, last, first, less)
}

fn move_median_to_first<T>(v: &mut [T], result: usize, a: usize, b: usize, c: usize, less: &impl Fn(&T, &T) -> bool) {
    let pick = if less(&v[a], &v[b]) {
        if less(&v[b], &v[c]) {
            b
        } else if less(&v[a], &v[c]) {
            c
        } else {
            a
        }
    } else if less(&v[a], &v[c]) {
        a
    } else if less(&v[b], &v[c]) {
        c
    } else {
        b
    };
    v.swap(result, pick);
}

fn unguarded_partition<T: Clone>(v: &mut [T], mut first: usize, mut last: usize, pivot: usize, less: &impl Fn(&T, &T) -> bool) -> usize {
    loop {
        while less(&v[first], &v[pivot]) {
            first += 1;
        }
        last -= 1;
        while less(&v[pivot], &v[last]) {
            last -= 1;
        }
        if first >= last {
            return first;
        }
        v.swap(first, last);
        first += 1;
    }
}

fn final_insertion_sort<T: Clone>(v: &mut [T], first: usize, last: usize, less: &impl Fn(&T, &T) -> bool) {
    if last - first > THRESHOLD {
        insertion_sort(v, first, first + THRESHOLD, less);
        for i in first + THRESHOLD..last {
            unguarded_linear_insert(v, i, less);
        }
    } else {
        insertion_sort(v, first, last, less);
    }
}

fn insertion_sort<T: Clone>(v: &mut [T], first: usize, last: usize, less: &impl Fn(&T, &T) -> bool) {
    if first == last {
        return;
    }
    for i in first + 1..last {
        if less(&v[i], &v[first]) {
            v[first..=i].rotate_right(1);
        } else {
            unguarded_linear_insert(v, i, less);
        }
    }
}

fn unguarded_linear_insert<T: Clone>(v: &mut [T], mut last: usize, less: &impl Fn(&T, &T) -> bool) {
    let val = v[last].clone();
    while less(&val, &v[last - 1]) {
        v[last] = v[last - 1].clone();
        last -= 1;
    }
    v[last] = val;
}

fn heap_sort<T: Clone>(v: &mut [T], less: &impl Fn(&T, &T) -> bool) {
    let len = v.len();
    if len >= 2 {
        let mut parent = (len - 2) / 2;
        loop {
            let value = v[parent].clone();
            adjust_heap(v, parent, len, value, less);
            if parent == 0 {
                break;
            }
            parent -= 1;
        }
    }
    let mut last = len;
    while last > 1 {
        last -= 1;
        let value = v[last].clone();
        v[last] = v[0].clone();
        adjust_heap(&mut v[..last], 0, last, value, less);
    }
}

fn adjust_heap<T: Clone>(v: &mut [T], mut hole: usize, len: usize, value: T, less: &impl Fn(&T, &T) -> bool) {
    let top = hole;
    let mut second = hole;
    while second < (len.saturating_sub(1)) / 2 {
        second = 2 * (second + 1);
        if less(&v[second], &v[second - 1]) {
            second -= 1;
        }
        v[hole] = v[second].clone();
        hole = second;
    }
    if len & 1 == 0 && len >= 2 && second == (len - 2) / 2 {
        second = 2 * (second + 1);
        v[hole] = v[second - 1].clone();
        hole = second - 1;
    }
    // push_heap
    let mut parent = hole.wrapping_sub(1) / 2;
    while hole > top && less(&v[parent], &value) {
        v[hole] = v[parent].clone();
        hole = parent;
        parent = hole.wrapping_sub(1) / 2;
    }
    v[hole] = value;
}

/// The iteration order of libstdc++'s `std::unordered_map<int, V>` (identity hash, prime
/// bucket counts, one singly linked list threaded through the buckets).
#[derive(Debug, Default)]
pub struct StdUnorderedIntMap {
    /// Nodes as (key), `next` links as indices; `head` is the list's first node.
    keys: Vec<i32>,
    next: Vec<Option<usize>>,
    head: Option<usize>,
    /// For each bucket, the node *before* its first node (None = the list head sentinel).
    buckets: Vec<Option<Option<usize>>>,
    next_resize: usize,
}

const FAST_BUCKETS: [usize; 14] = [2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13];
const PRIMES: [usize; 32] =
    [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 103, 109, 113, 127, 137, 139, 149];

impl StdUnorderedIntMap {
    /// An empty map (one bucket, as libstdc++ starts).
    pub fn new() -> Self {
        StdUnorderedIntMap { buckets: vec![None], ..Default::default() }
    }

    fn bucket(&self, key: i32) -> usize {
        (key as i64 as u64 as usize) % self.buckets.len()
    }

    fn next_bucket_count(&mut self, n: usize) -> usize {
        let count = if n < FAST_BUCKETS.len() {
            FAST_BUCKETS[n]
        } else {
            PRIMES.iter().copied().find(|p| *p >= n).unwrap_or(n | 1)
        };
        self.next_resize = count;
        count
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: i32) -> bool {
        self.keys.contains(&key)
    }

    /// `map[key]` for a key not yet present: the rehash policy, then insertion at the start
    /// of its bucket (or of the whole list when the bucket is empty).
    pub fn insert(&mut self, key: i32) {
        if self.contains(key) {
            return;
        }
        let n_elt = self.keys.len();
        if n_elt + 1 > self.next_resize {
            let floor = if self.next_resize == 0 { 11 } else { 0 };
            let min_buckets = (n_elt + 1).max(floor);
            if min_buckets >= self.buckets.len() {
                let count = self.next_bucket_count((min_buckets + 1).max(self.buckets.len() * 2));
                self.rehash(count);
            } else {
                self.next_resize = self.buckets.len();
            }
        }
        let node = self.keys.len();
        self.keys.push(key);
        self.next.push(None);
        let b = self.bucket(key);
        match self.buckets[b] {
            Some(before) => {
                let after = match before {
                    None => self.head,
                    Some(p) => self.next[p],
                };
                self.next[node] = after;
                match before {
                    None => self.head = Some(node),
                    Some(p) => self.next[p] = Some(node),
                }
            }
            None => {
                self.next[node] = self.head;
                self.head = Some(node);
                if let Some(old_first) = self.next[node] {
                    let ob = self.bucket(self.keys[old_first]);
                    self.buckets[ob] = Some(Some(node));
                }
                self.buckets[b] = Some(None);
            }
        }
    }

    fn rehash(&mut self, count: usize) {
        let mut p = self.head;
        self.head = None;
        let mut buckets: Vec<Option<Option<usize>>> = vec![None; count];
        let mut begin_bucket = 0;
        while let Some(node) = p {
            let next = self.next[node];
            let b = (self.keys[node] as i64 as u64 as usize) % count;
            match buckets[b] {
                None => {
                    self.next[node] = self.head;
                    self.head = Some(node);
                    buckets[b] = Some(None);
                    if self.next[node].is_some() {
                        buckets[begin_bucket] = Some(Some(node));
                    }
                    begin_bucket = b;
                }
                Some(before) => {
                    let after = match before {
                        None => self.head,
                        Some(q) => self.next[q],
                    };
                    self.next[node] = after;
                    match before {
                        None => self.head = Some(node),
                        Some(q) => self.next[q] = Some(node),
                    }
                }
            }
            p = next;
        }
        self.buckets = buckets;
    }

    /// The keys in iteration order.
    pub fn iter_order(&self) -> Vec<i32> {
        let mut out = Vec::with_capacity(self.keys.len());
        let mut p = self.head;
        while let Some(node) = p {
            out.push(self.keys[node]);
            p = self.next[node];
        }
        out
    }
}

/// One key as `CommDevice::Init` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyAttr {
    /// The key.
    pub key: i32,
    /// Elements of the key's value (`shape.Size()`).
    pub size: u64,
}

/// A `device` store's merge-buffer placement, as `CommDevice` keeps it.
#[derive(Debug, Default)]
pub struct MergePlacement {
    sorted: Vec<KeyAttr>,
    /// Looked up for every key of every push: hashed as the store's entries are.
    placed: HashMap<i32, Context, BuildHasherDefault<IdHasher>>,
    inited: bool,
}

impl MergePlacement {
    /// An empty placement.
    pub fn new() -> Self {
        Self::default()
    }

    /// `CommDevice::Init`: records the key; the next reduction places buffers again.
    pub fn init_key(&mut self, key: i32, size: u64) {
        self.sorted.push(KeyAttr { key, size });
        self.inited = false;
    }

    /// Whether a reduction must place buffers first (a key was added since the last run).
    pub fn needs_placement(&self) -> bool {
        !self.inited
    }

    /// `InitBuffersAndComm`: places every key over the contexts of the values being reduced
    /// (in the order they were pushed), unless nothing changed since the last run.
    pub fn ensure_placed(&mut self, devs: &[Context]) {
        if self.inited {
            return;
        }
        libstdcxx_sort(&mut self.sorted, &|a: &KeyAttr, b: &KeyAttr| a.size > b.size);
        let mut order = StdUnorderedIntMap::new();
        let mut ctx_of: HashMap<i32, (Context, u64)> = HashMap::new();
        for d in devs {
            order.insert(d.dev_id);
            ctx_of.insert(d.dev_id, (*d, 0));
        }
        let iteration = order.iter_order();
        for attr in &self.sorted {
            let mut chosen: Option<Context> = None;
            let mut min = u64::MAX;
            for id in &iteration {
                let (ctx, load) = ctx_of[id];
                if load <= min {
                    chosen = Some(ctx);
                    min = load;
                }
            }
            let Some(ctx) = chosen else { return };
            self.placed.entry(attr.key).or_insert(ctx);
            if let Some(entry) = ctx_of.get_mut(&ctx.dev_id) {
                entry.1 += attr.size;
            }
        }
        self.inited = true;
    }

    /// The context of `key`'s merge buffer, once placed.
    pub fn merge_context(&self, key: i32) -> Option<Context> {
        self.placed.get(&key).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::DeviceType;

    fn gpu(id: i32) -> Context {
        Context { dev_type: DeviceType::Gpu, dev_id: id }
    }

    #[test]
    fn the_sort_sorts_and_matches_a_known_libstdcxx_tie_order() {
        // Values sort; the tie order is libstdc++'s (checked against g++ by tests/gpu_host.rs).
        let mut v: Vec<(u32, usize)> = (0..200).map(|i| ((i * 7919 % 13) as u32, i)).collect();
        libstdcxx_sort(&mut v, &|a: &(u32, usize), b: &(u32, usize)| a.0 > b.0);
        assert!(v.windows(2).all(|w| w[0].0 >= w[1].0));
        let mut ids: Vec<usize> = v.iter().map(|x| x.1).collect();
        ids.sort();
        assert_eq!(ids, (0..200).collect::<Vec<_>>());
    }

    #[test]
    fn small_maps_iterate_newest_first() {
        let mut m = StdUnorderedIntMap::new();
        for k in [0, 1, 2, 3] {
            m.insert(k);
        }
        assert_eq!(m.iter_order(), [3, 2, 1, 0]);
        // 13 shares bucket 0 with 0 in 13 buckets: it goes in front of 0, inside the list.
        m.insert(13);
        assert_eq!(m.iter_order(), [3, 2, 1, 13, 0]);
    }

    #[test]
    fn ties_go_to_the_device_pushed_first_and_the_load_decides_otherwise() {
        let mut p = MergePlacement::new();
        for (k, s) in [(0, 100), (1, 100), (2, 50), (3, 10)] {
            p.init_key(k, s);
        }
        p.ensure_placed(&[gpu(0), gpu(1), gpu(2), gpu(3)]);
        let at = |k| p.merge_context(k).unwrap().dev_id;
        // Sizes 100, 100, 50, 10 over four empty devices: one device each, the first tie to gpu(0).
        let mut got: Vec<i32> = (0..4).map(at).collect();
        got.sort();
        assert_eq!(got, [0, 1, 2, 3]);
        assert_eq!(at(0).min(at(1)), 0);
    }

    #[test]
    fn a_later_key_triggers_a_full_rerun_that_keeps_earlier_buffers() {
        let mut p = MergePlacement::new();
        p.init_key(5, 10);
        p.ensure_placed(&[gpu(0), gpu(1)]);
        assert_eq!(p.merge_context(5), Some(gpu(0)));
        assert!(!p.needs_placement());
        p.init_key(6, 1000);
        assert!(p.needs_placement());
        // The rerun puts key 6 (largest) on gpu(0) and counts key 5 on gpu(1), where it is
        // not: MXNet's load accounting, kept as is.
        p.ensure_placed(&[gpu(0), gpu(1)]);
        assert_eq!(p.merge_context(6), Some(gpu(0)));
        assert_eq!(p.merge_context(5), Some(gpu(0)));
    }

    #[test]
    fn contexts_with_one_dev_id_collapse_to_the_last_one() {
        let mut p = MergePlacement::new();
        p.init_key(1, 4);
        let cpu0 = Context::cpu(0);
        p.ensure_placed(&[gpu(0), cpu0]);
        assert_eq!(p.merge_context(1), Some(cpu0));
    }
}
