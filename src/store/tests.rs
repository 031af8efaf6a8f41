//! The store's semantics, tested through the safe core.

use super::*;
use crate::ndarray::DType;
use std::sync::Arc;

fn filled(value: f32, n: usize, dev: i32) -> NDArray {
    let a = NDArray::zeros(&[n], Context::cpu(dev), DType::Float32).unwrap();
    a.copy_from_host(bytemuck::cast_slice(&vec![value; n])).unwrap();
    a
}

fn read(a: &NDArray) -> Vec<f32> {
    let mut out = vec![0f32; a.size()];
    a.copy_to_host(bytemuck::cast_slice_mut(&mut out)).unwrap();
    out
}

fn pull_one(kv: &KVStore, key: i32, n: usize) -> Vec<f32> {
    let out = filled(-1.0, n, 0);
    kv.pull(Keys::Int(&[key]), std::slice::from_ref(&out), 0, true).unwrap();
    read(&out)
}

#[test]
fn init_deep_copies_and_push_sums_then_assigns() {
    let kv = KVStore::new("local").unwrap();
    let v = filled(2.0, 3, 0);
    kv.init(Keys::Int(&[3]), std::slice::from_ref(&v)).unwrap();
    v.copy_from_host(bytemuck::cast_slice(&[9f32; 3])).unwrap();
    assert_eq!(pull_one(&kv, 3, 3), vec![2.0; 3]);
    let vals: Vec<NDArray> = (0..4).map(|d| filled(1.0, 3, d)).collect();
    kv.push(Keys::Int(&[3, 3, 3, 3]), vals.clone(), 0).unwrap();
    assert_eq!(pull_one(&kv, 3, 3), vec![4.0; 3]);
    // Assignment copies: changing the pushed array later does not change the store.
    let single = filled(8.0, 3, 0);
    kv.push(Keys::Int(&[3]), std::slice::from_ref(&single), 0).unwrap();
    single.copy_from_host(bytemuck::cast_slice(&[0f32; 3])).unwrap();
    assert_eq!(pull_one(&kv, 3, 3), vec![8.0; 3]);
}

#[test]
fn bad_pushes_fail_and_leave_the_store_unchanged() {
    let kv = KVStore::new("local").unwrap();
    kv.init(Keys::Int(&[1, 2]), &[filled(1.0, 4, 0), filled(2.0, 4, 0)]).unwrap();
    let wrong_shape = filled(5.0, 3, 0);
    let err = kv.push(Keys::Int(&[2, 1]), &[filled(7.0, 4, 0), wrong_shape], 0).unwrap_err();
    assert!(err.message().contains("shape mismatch for key 1"), "{err}");
    let wrong_dtype = NDArray::zeros(&[4], Context::cpu(0), DType::Float64).unwrap();
    assert!(kv.push(Keys::Int(&[1]), &[wrong_dtype], 0).unwrap_err().message().contains("dtype mismatch"));
    assert_eq!(pull_one(&kv, 1, 4), vec![1.0; 4]);
    assert_eq!(pull_one(&kv, 2, 4), vec![2.0; 4], "a failing call pushes nothing, not even its valid keys");
    assert!(kv.push(Keys::Int(&[9]), &[filled(1.0, 4, 0)], 0).unwrap_err().message().contains("key 9 has not been inited"));
    kv.init(Keys::Int(&[9]), &[filled(3.0, 4, 0)]).unwrap();
    assert_eq!(pull_one(&kv, 9, 4), vec![3.0; 4], "a key that failed to push can still be initialised");
    assert!(kv.init(Keys::Int(&[10, 1]), &[filled(0.0, 4, 0), filled(0.0, 4, 0)]).is_err());
    assert!(kv.pull(Keys::Int(&[10]), &[filled(0.0, 4, 0)], 0, true).is_err(), "a failing init initialises nothing");
}

#[test]
fn updater_receives_sums_in_ascending_key_order() {
    let kv = KVStore::new("local").unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    kv.set_int_updater(Some(Arc::new(move |key, recv: NDArray, local: NDArray| {
        let (r, mut l) = (read(&recv), read(&local));
        for (x, y) in l.iter_mut().zip(&r) {
            *x += 2.0 * y;
        }
        local.copy_from_host(bytemuck::cast_slice(&l)).unwrap();
        s.lock().push((key, r[0]));
    })));
    kv.init(Keys::Int(&[9, 5, 7]), &[filled(1.0, 2, 0), filled(1.0, 2, 0), filled(1.0, 2, 0)]).unwrap();
    let vals: Vec<NDArray> = (0..6).map(|d| filled(1.0, 2, d % 4)).collect();
    kv.push(Keys::Int(&[9, 7, 5, 9, 7, 5]), vals.clone(), 0).unwrap();
    assert_eq!(*seen.lock(), vec![(5, 2.0), (7, 2.0), (9, 2.0)]);
    assert_eq!(pull_one(&kv, 7, 2), vec![5.0; 2]);
    kv.set_int_updater(None);
    kv.push(Keys::Int(&[7]), &[filled(6.0, 2, 0)], 0).unwrap();
    assert_eq!(pull_one(&kv, 7, 2), vec![6.0; 2], "no updater: assignment again");
}

#[test]
fn string_store_with_only_an_int_updater_passes_internal_ids() {
    let kv = KVStore::new("local").unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    kv.set_int_updater(Some(Arc::new(move |key, _recv, _local| s.lock().push(key))));
    kv.init(Keys::Str(&["b", "a"]), &[filled(0.0, 1, 0), filled(0.0, 1, 0)]).unwrap();
    kv.push(Keys::Str(&["a", "b"]), &[filled(1.0, 1, 0), filled(1.0, 1, 0)], 0).unwrap();
    assert_eq!(*seen.lock(), vec![0, 1], "b was initialised first, so it is id 0");
    let names = Arc::new(Mutex::new(Vec::new()));
    let n = Arc::clone(&names);
    kv.set_updaters(Updaters {
        int: None,
        string: Some(Arc::new(move |key: &std::ffi::CStr, _r, _l| n.lock().push(key.to_str().unwrap().to_string()))),
    });
    kv.push(Keys::Str(&["a", "b"]), &[filled(1.0, 1, 0), filled(1.0, 1, 0)], 0).unwrap();
    assert_eq!(*names.lock(), vec!["b".to_string(), "a".to_string()]);
    assert!(kv.push(Keys::Int(&[0]), &[filled(1.0, 1, 0)], 0).unwrap_err().message().contains("Mixed key types"));
}

#[test]
fn push_pull_in_place_reads_every_input_before_writing() {
    let kv = KVStore::new("device").unwrap();
    let keys = [1, 2, 3];
    kv.init(Keys::Int(&keys), &[filled(0.0, 5, 0), filled(0.0, 5, 0), filled(0.0, 5, 0)]).unwrap();
    let arrays: Vec<NDArray> = (0..4).map(|d| filled(2.0, 5, d)).collect();
    let (mut vkeys, mut vals) = (Vec::new(), Vec::new());
    for k in keys {
        for a in &arrays {
            vkeys.push(k);
            vals.push(a.clone());
        }
    }
    kv.push_pull(Keys::Int(&vkeys), vals.clone(), Keys::Int(&vkeys), vals.clone(), 0).unwrap();
    for a in &arrays {
        assert_eq!(read(a), vec![8.0; 5]);
    }
}

/// Holds `array`'s next readers until the returned gate is passed twice (by the test).
fn held(array: &NDArray) -> Arc<std::sync::Barrier> {
    let gate = Arc::new(std::sync::Barrier::new(2));
    let g = Arc::clone(&gate);
    crate::engine::engine().push(&[], &[array.var()], 0, move |_| {
        g.wait();
        Ok(())
    });
    gate
}

fn handed(kv: &KVStore, key: i32) -> usize {
    kv.state.lock().entries.get(&key).and_then(|e| e.joinable.as_ref()).map_or(0, |j| j.handed())
}

#[test]
fn a_pull_behind_its_push_is_written_by_the_sum_with_the_same_values() {
    let n = 1 << 19; // 2 MiB of float32: big enough to join.
    for (store, push_pull) in [("local", false), ("device", false), ("local", true)] {
        let kv = KVStore::new(store).unwrap();
        kv.init(Keys::Int(&[4]), &[filled(1.0, n, 0)]).unwrap();
        let vals: Vec<NDArray> = (0..4).map(|d| filled(0.25 * (d + 1) as f32, n, d)).collect();
        let outs: Vec<NDArray> = (0..4).map(|d| filled(-1.0, n, d)).collect();
        // The sum cannot start before the pull is scheduled.
        let gate = held(&vals[3]);
        if push_pull {
            kv.push_pull(Keys::Int(&[4; 4]), vals.clone(), Keys::Int(&[4; 4]), outs.clone(), 0).unwrap();
        } else {
            kv.push(Keys::Int(&[4; 4]), vals.clone(), 0).unwrap();
            kv.pull(Keys::Int(&[4; 4]), outs.clone(), 0, true).unwrap();
        }
        assert_eq!(handed(&kv, 4), 4, "{store}: the outputs joined the sum");
        gate.wait();
        for o in &outs {
            assert_eq!(read(o), vec![2.5; n], "{store}");
        }
        assert_eq!(pull_one(&kv, 4, n), vec![2.5; n], "{store}: the stored value");
        // Once the sum has run, a pull copies.
        let late = filled(0.0, n, 1);
        kv.pull(Keys::Int(&[4]), std::slice::from_ref(&late), 0, true).unwrap();
        assert_eq!(read(&late), vec![2.5; n]);
    }
}

#[test]
fn pulls_join_the_sums_of_later_batches_of_a_push() {
    // One push, three batches: a small key (no pull joins it), then two big keys. Each big
    // key's pull must find its own batch's op.
    let n = 1 << 19;
    let kv = KVStore::new("local").unwrap();
    kv.init(Keys::Int(&[2, 4, 5]), &[filled(1.0, 16, 0), filled(1.0, n, 0), filled(1.0, n, 0)]).unwrap();
    let small = filled(3.0, 16, 0);
    let (four, five): (Vec<NDArray>, Vec<NDArray>) = ((0..4).map(|d| filled(1.0, n, d)).collect(), (0..4).map(|d| filled(2.0, n, d)).collect());
    let gates = [held(&four[3]), held(&five[3])];
    let values: Vec<NDArray> = std::iter::once(small).chain(four.iter().cloned()).chain(five.iter().cloned()).collect();
    kv.push(Keys::Int(&[2, 4, 4, 4, 4, 5, 5, 5, 5]), values, 0).unwrap();
    let outs: Vec<NDArray> = (0..8).map(|d| filled(-1.0, n, d % 4)).collect();
    kv.pull(Keys::Int(&[4, 4, 4, 4, 5, 5, 5, 5]), outs.clone(), 0, true).unwrap();
    assert_eq!((handed(&kv, 4), handed(&kv, 5)), (4, 4), "each big key's outputs joined its own sum");
    // Key 5's outputs wait for key 5's sum only: they are readable while key 4's is held.
    gates[1].wait();
    let (tx, rx) = std::sync::mpsc::channel();
    let later: Vec<NDArray> = outs[4..].to_vec();
    std::thread::spawn(move || tx.send(later.iter().map(|o| o.wait_to_read().is_ok()).collect::<Vec<_>>()));
    assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(10)).ok(), Some(vec![true; 4]), "key 5's outputs wait for key 4's sum");
    gates[0].wait();
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(read(o), vec![if i < 4 { 4.0 } else { 8.0 }; n]);
    }
    assert_eq!(pull_one(&kv, 2, 16), vec![3.0; 16]);
}

#[test]
fn a_pull_into_busy_or_unlike_outputs_does_not_join_and_keeps_call_order() {
    let n = 1 << 19;
    let kv = KVStore::new("local").unwrap();
    kv.init(Keys::Int(&[1]), &[filled(1.0, n, 0)]).unwrap();
    let vals: Vec<NDArray> = (0..2).map(|d| filled(1.0, n, d)).collect();
    // In place: the outputs are the sum's own inputs.
    let gate = held(&vals[0]);
    kv.push_pull(Keys::Int(&[1, 1]), vals.clone(), Keys::Int(&[1, 1]), vals.clone(), 0).unwrap();
    assert_eq!(handed(&kv, 1), 0);
    gate.wait();
    assert_eq!((read(&vals[0]), read(&vals[1])), (vec![2.0; n], vec![2.0; n]));
    // An output another pending op reads: the pull waits for that read, as a copy would.
    let (busy, other) = (filled(-1.0, n, 0), filled(-1.0, n, 1));
    let seen = Arc::new(Mutex::new(0f32));
    let gate = held(&vals[1]);
    let (b, s) = (busy.clone(), Arc::clone(&seen));
    crate::engine::engine().push(&[busy.var()], &[], 0, move |_| {
        *s.lock() = read_now(&b);
        Ok(())
    });
    kv.push(Keys::Int(&[1, 1]), vals.clone(), 0).unwrap();
    // Two outputs of one array, and a float64 output: copies too.
    let wide = NDArray::zeros(&[n], Context::cpu(0), DType::Float64).unwrap();
    kv.pull(Keys::Int(&[1, 1, 1, 1]), &[busy.clone(), other.clone(), other.clone(), wide.clone()], 0, true).unwrap();
    assert_eq!(handed(&kv, 1), 0);
    gate.wait();
    assert_eq!(read(&busy), vec![4.0; n]);
    assert_eq!(read(&other), vec![4.0; n]);
    assert_eq!(*seen.lock(), -1.0, "the earlier reader saw the output before the pull");
    let mut w = vec![0f64; n];
    wide.copy_to_host(bytemuck::cast_slice_mut(&mut w)).unwrap();
    assert!(w.iter().all(|&x| x == 4.0));
}

/// The first element of `a`, read inside an op that holds its read dependency.
fn read_now(a: &NDArray) -> f32 {
    a.read_bytes(|b| bytemuck::cast_slice::<u8, f32>(&b[..4])[0])
}

#[test]
fn broadcast_initialises_then_pulls_and_refuses_existing_keys() {
    let kv = KVStore::new("local").unwrap();
    let outs = [filled(0.0, 2, 0), filled(0.0, 2, 1)];
    kv.broadcast(Keys::Str(&["w"]), &[filled(3.0, 2, 0)], Keys::Str(&["w", "w"]), &outs, 0).unwrap();
    assert_eq!(read(&outs[1]), vec![3.0; 2]);
    let err = kv.broadcast(Keys::Str(&["w"]), &[filled(1.0, 2, 0)], Keys::Str(&["w"]), &outs[..1], 0).unwrap_err();
    assert!(err.message().contains("duplicate init of key w"), "{err}");
    let err = kv.broadcast(Keys::Str(&["v"]), &[filled(1.0, 2, 0)], Keys::Str(&["zz"]), &outs[..1], 0).unwrap_err();
    assert!(err.message().contains("zz doesn't exist"), "{err}");
    assert!(kv.pull(Keys::Str(&["v"]), &outs[..1], 0, true).is_err(), "the failed broadcast registered nothing");
}

#[test]
fn concurrent_pushes_with_an_updater_lose_no_update() {
    let kv = Arc::new(KVStore::new("local").unwrap());
    kv.set_int_updater(Some(Arc::new(|_key, recv: NDArray, local: NDArray| {
        let (r, mut l) = (read(&recv), read(&local));
        for (x, y) in l.iter_mut().zip(&r) {
            *x += y;
        }
        local.copy_from_host(bytemuck::cast_slice(&l)).unwrap();
    })));
    kv.init(Keys::Int(&[0, 1, 2, 3, 100]), &(0..5).map(|_| filled(0.0, 64, 0)).collect::<Vec<_>>()).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let kv = Arc::clone(&kv);
            std::thread::spawn(move || {
                for _ in 0..50 {
                    kv.push(Keys::Int(&[t, 100, 100]), &[filled(1.0, 64, 0), filled(1.0, 64, 1), filled(2.0, 64, 2)], 0).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for t in 0..4 {
        assert_eq!(pull_one(&kv, t, 64), vec![50.0; 64]);
    }
    assert_eq!(pull_one(&kv, 100, 64), vec![600.0; 64]);
}

fn row_sparse(rows: usize, ids: &[i64], value: f32) -> NDArray {
    let a = NDArray::empty_row_sparse(&[rows, 2], Context::cpu(0), DType::Float32).unwrap();
    let data = NDArray::zeros(&[ids.len(), 2], Context::cpu(0), DType::Float32).unwrap();
    data.copy_from_host(bytemuck::cast_slice(&vec![value; ids.len() * 2])).unwrap();
    let idx = NDArray::zeros(&[ids.len()], Context::cpu(0), DType::Int64).unwrap();
    idx.copy_from_host(bytemuck::cast_slice(ids)).unwrap();
    a.set_sparse_data_from(&data).unwrap();
    a.set_aux_from(0, &idx).unwrap();
    a
}

#[test]
fn row_sparse_pushes_take_the_union_of_rows_and_change_the_key_type() {
    let kv = KVStore::new("local").unwrap();
    kv.init(Keys::Int(&[1]), &[NDArray::zeros(&[5, 2], Context::cpu(0), DType::Float32).unwrap()]).unwrap();
    kv.push(Keys::Int(&[1, 1]), &[row_sparse(5, &[0, 3], 1.0), row_sparse(5, &[3, 4], 2.0)], 0).unwrap();
    let dense = NDArray::zeros(&[5, 2], Context::cpu(0), DType::Float32).unwrap();
    kv.pull(Keys::Int(&[1]), std::slice::from_ref(&dense), 0, true).unwrap();
    assert_eq!(read(&dense), vec![1., 1., 0., 0., 0., 0., 3., 3., 2., 2.]);
    let out = NDArray::empty_row_sparse(&[5, 2], Context::cpu(0), DType::Float32).unwrap();
    let rid = NDArray::zeros(&[3], Context::cpu(0), DType::Float64).unwrap();
    rid.copy_from_host(bytemuck::cast_slice(&[4.0f64, 1.0, 4.0])).unwrap();
    kv.pull_row_sparse(Keys::Int(&[1]), std::slice::from_ref(&out), std::slice::from_ref(&rid), 0).unwrap();
    out.wait_to_read().unwrap();
    let rows = out.rows_now().unwrap();
    assert_eq!(rows.ids, vec![1, 4]);
    assert_eq!(bytemuck::cast_slice::<u8, f32>(&rows.data), &[0., 0., 2., 2.]);
    // A dense push turns the key dense again; row_sparse_pull of a dense key is refused.
    kv.push(Keys::Int(&[1]), std::slice::from_ref(&dense), 0).unwrap();
    let err = kv.pull_row_sparse(Keys::Int(&[1]), &[out], &[rid], 0).unwrap_err();
    assert!(err.message().contains("PullRowSparse expects row_sparse src"), "{err}");
}

#[test]
fn a_push_pull_reads_the_value_its_push_leaves_and_a_value_without_rows_gives_none() {
    let kv = KVStore::new("local").unwrap();
    kv.init(Keys::Int(&[1]), &[NDArray::zeros(&[5, 2], Context::cpu(0), DType::Float32).unwrap()]).unwrap();
    // The push gives the key a new (row_sparse) stored value; the pull reads that one.
    let dense = NDArray::zeros(&[5, 2], Context::cpu(0), DType::Float32).unwrap();
    dense.copy_from_host(bytemuck::cast_slice(&[-1.0f32; 10])).unwrap();
    kv.push_pull(Keys::Int(&[1]), vec![row_sparse(5, &[2], 3.0)], Keys::Int(&[1]), vec![dense.clone()], 0).unwrap();
    assert_eq!(read(&dense), vec![0., 0., 0., 0., 3., 3., 0., 0., 0., 0.]);
    // A row_sparse pull of a value without rows gives no rows (not zero rows), as MXNet's.
    kv.init(Keys::Int(&[2]), &[row_sparse(5, &[], 0.0)]).unwrap();
    let out = row_sparse(5, &[1], 9.0);
    let rid = NDArray::zeros(&[2], Context::cpu(0), DType::Float64).unwrap();
    rid.copy_from_host(bytemuck::cast_slice(&[3.0f64, 1.0])).unwrap();
    kv.pull_row_sparse(Keys::Int(&[2]), std::slice::from_ref(&out), std::slice::from_ref(&rid), 0).unwrap();
    out.wait_to_read().unwrap();
    assert!(out.rows_now().unwrap().ids.is_empty());
}

#[test]
fn batches_that_share_arrays_between_keys_keep_call_order() {
    // Small keys are batched into one op whose locks are all taken at once; arrays shared
    // between keys must neither deadlock that op nor change what each key gets.
    let kv = KVStore::new("local").unwrap();
    let keys: Vec<i32> = (0..6).collect();
    let inits: Vec<NDArray> = keys.iter().map(|&k| filled(k as f32, 5, 0)).collect();
    kv.init(Keys::Int(&keys), &inits).unwrap();
    // One array pushed for several keys (read twice in one batch).
    let shared = filled(1.5, 5, 0);
    kv.push(Keys::Int(&[0, 0, 1, 2, 2]), vec![shared.clone(), shared.clone(), shared.clone(), filled(2.0, 5, 1), shared.clone()], 0).unwrap();
    assert_eq!(pull_one(&kv, 0, 5), vec![3.0; 5]);
    assert_eq!(pull_one(&kv, 1, 5), vec![1.5; 5]);
    assert_eq!(pull_one(&kv, 2, 5), vec![3.5; 5]);
    // One output pulled for several keys (written twice in one batch): keys are served in
    // ascending order, so the last key's value stays, as in MXNet.
    let out = filled(-1.0, 5, 0);
    let other = filled(-1.0, 5, 1);
    kv.pull(Keys::Int(&[5, 3, 4]), &[out.clone(), other.clone(), out.clone()], 0, true).unwrap();
    assert_eq!(read(&out), vec![5.0; 5]);
    assert_eq!(read(&other), vec![3.0; 5]);
    // In place: the outputs are the pushed arrays.
    let vals: Vec<NDArray> = (0..4).map(|d| filled(d as f32, 5, d)).collect();
    kv.push_pull(Keys::Int(&[4, 4, 4, 4]), vals.clone(), Keys::Int(&[4, 4, 4, 4]), vals.clone(), 0).unwrap();
    for v in &vals {
        assert_eq!(read(v), vec![6.0; 5]);
    }
}

/// An `nccl` store without the GPU check of its creation: its rules on host values.
fn nccl_store() -> KVStore {
    KVStore::with_comm("nccl".to_string(), comm::single_process(StoreKind::Nccl)).unwrap()
}

fn f32_matrix(rows: usize, value: f32) -> NDArray {
    let a = NDArray::zeros(&[rows, 2], Context::cpu(0), DType::Float32).unwrap();
    a.copy_from_host(bytemuck::cast_slice(&vec![value; rows * 2])).unwrap();
    a
}

#[test]
fn nccl_refuses_sparse_arrays_compression_and_host_sums_and_changes_nothing() {
    let kv = nccl_store();
    assert_eq!(kv.kind(), StoreKind::Nccl);
    let message = |r: Result<()>| r.unwrap_err().message().to_string();
    kv.init(Keys::Int(&[1]), &[f32_matrix(5, 1.0)]).unwrap();
    let pull = |key: i32| {
        let out = f32_matrix(5, -1.0);
        kv.pull(Keys::Int(&[key]), std::slice::from_ref(&out), 0, true).unwrap();
        read(&out)
    };
    // Init: a row_sparse value refused, and the call's other (valid) key not initialised.
    let m = message(kv.init(Keys::Int(&[2, 3]), &[f32_matrix(5, 2.0), row_sparse(5, &[1], 1.0)]));
    assert!(m.contains("the nccl store supports dense arrays only: key 3 was given a row_sparse value to initialise"), "{m}");
    assert!(kv.pull(Keys::Int(&[2]), &[f32_matrix(5, 0.0)], 0, true).unwrap_err().message().contains("key 2 has not been inited"));
    // Push: a row_sparse value refused (the local store would sum it), key 1 unchanged.
    let m = message(kv.push(Keys::Int(&[1, 1]), &[f32_matrix(5, 4.0), row_sparse(5, &[0, 3], 1.0)], 0));
    assert!(m.contains("dense arrays only: key 1 was given a row_sparse pushed value"), "{m}");
    // Pull: sparse outputs refused (the local store skips them), as is ignore_sparse=false.
    let m = message(kv.pull(Keys::Int(&[1]), &[row_sparse(5, &[0], 0.0)], 0, true));
    assert!(m.contains("key 1 was given a row_sparse output"), "{m}");
    let m = message(kv.pull(Keys::Int(&[1]), &[f32_matrix(5, 0.0)], 0, false));
    assert!(m.contains("ignore_sparse"), "{m}");
    let rid = NDArray::zeros(&[1], Context::cpu(0), DType::Int64).unwrap();
    let m = message(kv.pull_row_sparse(Keys::Int(&[1]), &[row_sparse(5, &[0], 0.0)], &[rid], 0));
    assert!(m.contains("no row_sparse pull"), "{m}");
    // Push-pull and broadcast: the same rules, nothing pushed or initialised.
    let m = message(kv.push_pull(Keys::Int(&[1]), &[f32_matrix(5, 4.0)], Keys::Int(&[1]), &[row_sparse(5, &[0], 0.0)], 0));
    assert!(m.contains("row_sparse output"), "{m}");
    let m = message(kv.broadcast(Keys::Int(&[4]), &[row_sparse(5, &[0], 1.0)], Keys::Int(&[4]), &[f32_matrix(5, 0.0)], 0));
    assert!(m.contains("key 4 was given a row_sparse value to initialise"), "{m}");
    // Compression: refused whatever its parameters; pushes stay uncompressed.
    let m = message(kv.set_gradient_compression(&[("type".to_string(), "2bit".to_string())]));
    assert_eq!(m, "the nccl store does not support gradient compression");
    assert!(message(kv.set_gradient_compression(&[("bogus".to_string(), "x".to_string())])).contains("gradient compression"));
    // Several host values of a key: refused (NCCL sums device memory), the set not fixed.
    let m = message(kv.push(Keys::Int(&[1, 1]), &[f32_matrix(5, 2.0), f32_matrix(5, 3.0)], 0));
    assert!(m.contains("on GPUs only: key 1 has a value on cpu(0)"), "{m}");
    assert!(kv.state.lock().nccl.is_none());
    assert_eq!(pull(1), vec![1.0; 10], "every refusal left key 1 as initialised");
    // What MXNet's nccl store does with host values: a single value is stored as it is
    // (copied here), pulls copy, push-pull and broadcast work, an int8 key too.
    kv.push(Keys::Int(&[1]), &[f32_matrix(5, 0.3)], 0).unwrap();
    assert_eq!(pull(1), vec![0.3; 10]);
    let out = f32_matrix(5, 0.0);
    kv.push_pull(Keys::Int(&[1]), &[f32_matrix(5, 0.25)], Keys::Int(&[1]), std::slice::from_ref(&out), 0).unwrap();
    assert_eq!(read(&out), vec![0.25; 10]);
    let (a, b) = (f32_matrix(5, 0.0), f32_matrix(5, 0.0));
    kv.broadcast(Keys::Int(&[5]), &[f32_matrix(5, 7.0)], Keys::Int(&[5, 5]), &[a.clone(), b.clone()], 0).unwrap();
    assert_eq!((read(&a), read(&b)), (vec![7.0; 10], vec![7.0; 10]));
    let i8 = NDArray::zeros(&[3], Context::cpu(0), DType::Int8).unwrap();
    kv.init(Keys::Int(&[6]), std::slice::from_ref(&i8)).unwrap();
    kv.push(Keys::Int(&[6]), std::slice::from_ref(&i8), 0).unwrap();
    let m = message(kv.push(Keys::Int(&[6, 6]), &[i8.clone(), i8], 0));
    assert!(m.contains("on GPUs only"), "{m}");
}

/// A distributed store's comm that records what reaches its servers: the store's planner must
/// check every call (with the distributed rules) before anything gets here.
struct RecordingServers(Arc<parking_lot::Mutex<Vec<String>>>);

impl Comm for RecordingServers {
    fn kind(&self) -> StoreKind {
        StoreKind::Local
    }
    fn sum_order(&self) -> SumOrder {
        SumOrder::CpuComm
    }
    fn applies_compression(&self) -> bool {
        true
    }
    fn rules(&self) -> Rules {
        Rules::distributed()
    }
    fn servers(&self, _call: &str) -> Result<Option<&dyn Servers>> {
        Ok(Some(self))
    }
}

impl Servers for RecordingServers {
    fn init(&self, inits: &[(i32, NDArray, NDArray)], _: Option<GradientCompression>) -> Result<()> {
        self.0.lock().push(format!("init {:?}", inits.iter().map(|i| i.0).collect::<Vec<_>>()));
        Ok(())
    }
    fn push(&self, jobs: Vec<(i32, Vec<NDArray>, NDArray)>, compression: Option<GradientCompression>, fetch_back: bool, _: i32) {
        for (id, values, _) in jobs {
            self.0.lock().push(format!("push {id} x{} compressed={} fetch_back={fetch_back}", values.len(), compression.is_some()));
        }
    }
    fn fetch(&self, id: i32, _: &NDArray, _: i32) {
        self.0.lock().push(format!("fetch {id}"));
    }
    fn fetch_rows(&self, id: i32, _: &NDArray, _: &NDArray, _: i32) -> Result<()> {
        self.0.lock().push(format!("fetch_rows {id}"));
        Ok(())
    }
}

#[test]
fn distributed_calls_are_checked_by_the_planner_and_refused_ones_reach_no_server() {
    let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let kv = KVStore::with_comm("dist_sync".into(), Box::new(RecordingServers(Arc::clone(&log)))).unwrap();
    let dense = || NDArray::zeros(&[5, 2], Context::cpu(0), DType::Float32).unwrap();
    let one_d_sparse = NDArray::empty_row_sparse(&[5], Context::cpu(0), DType::Float32).unwrap();
    let refused = |r: Result<()>, why: &str| {
        let e = r.expect_err(why);
        assert!(e.message().contains(why), "{e}");
    };
    refused(kv.init(Keys::Int(&[9]), &[one_d_sparse]), "needs rows of at least one element");
    kv.init(Keys::Int(&[1, 2]), &[dense(), row_sparse(5, &[0, 4], 1.0)]).unwrap();
    refused(kv.init(Keys::Int(&[1]), &[dense()]), "duplicate init of key 1");
    // Pushes keep the key's storage type; pulls are dense, of dense keys, ignoring sparse outputs.
    refused(kv.push(Keys::Int(&[1]), &[row_sparse(5, &[1], 1.0)], 0), "push of a row_sparse value to a default key");
    refused(kv.push(Keys::Int(&[2]), &[dense()], 0), "(row_sparse keys take row_sparse pushes and PullRowSparse)");
    refused(kv.push(Keys::Int(&[7]), &[dense()], 0), "key 7 has not been inited");
    refused(kv.push(Keys::Int(&[1]), &[NDArray::zeros(&[2, 5], Context::cpu(0), DType::Float32).unwrap()], 0), "shape mismatch for key 1");
    refused(kv.pull(Keys::Int(&[1]), &[dense()], 0, false), "doesn't support ignore_sparse=False");
    refused(kv.pull(Keys::Int(&[2]), &[dense()], 0, true), "are read with PullRowSparse");
    refused(kv.push_pull(Keys::Int(&[1]), &[dense()], Keys::Int(&[2]), &[dense()], 0), "are read with PullRowSparse");
    let f64_out = NDArray::zeros(&[5, 2], Context::cpu(0), DType::Float64).unwrap();
    refused(kv.push_pull(Keys::Int(&[1]), &[dense()], Keys::Int(&[1]), &[f64_out], 0), "Output buffer dtype is different");
    let rid = NDArray::zeros(&[1], Context::cpu(0), DType::Int64).unwrap();
    let rsp_out = || NDArray::empty_row_sparse(&[5, 2], Context::cpu(0), DType::Float32).unwrap();
    refused(kv.pull_row_sparse(Keys::Int(&[2, 2]), &[rsp_out(), rsp_out()], &[rid.clone(), rid.clone()], 0), "appears twice");
    refused(kv.pull_row_sparse(Keys::Int(&[1]), &[rsp_out()], std::slice::from_ref(&rid), 0), "PullRowSparse expects row_sparse src");
    refused(kv.push(Keys::Str(&["a"]), &[dense()], 0), "Mixed key types");
    assert_eq!(*log.lock(), vec!["init [1, 2]"], "a refused call reached the servers");
    // Accepted calls reach them: one job per key, values grouped in ascending key order.
    kv.push(Keys::Int(&[2, 1, 1]), &[row_sparse(5, &[3], 1.0), dense(), dense()], 0).unwrap();
    kv.pull(Keys::Int(&[1, 1]), &[dense(), dense()], 0, true).unwrap();
    kv.push_pull(Keys::Int(&[1]), &[dense()], Keys::Int(&[1]), &[dense()], 0).unwrap();
    kv.pull_row_sparse(Keys::Int(&[2]), &[rsp_out()], std::slice::from_ref(&rid), 0).unwrap();
    kv.set_gradient_compression(&[("type".into(), "2bit".into())]).unwrap();
    refused(kv.push_pull(Keys::Int(&[1]), &[dense()], Keys::Int(&[1]), &[dense()], 0), "Compression not supported with PushPull");
    refused(kv.push(Keys::Int(&[2]), &[row_sparse(5, &[3], 1.0)], 0), "gradient compression does not support row_sparse values");
    kv.push(Keys::Int(&[1]), &[dense()], 0).unwrap();
    assert_eq!(
        *log.lock(),
        vec![
            "init [1, 2]",
            "push 1 x2 compressed=false fetch_back=false",
            "push 2 x1 compressed=false fetch_back=false",
            "fetch 1",
            "push 1 x1 compressed=false fetch_back=true",
            "fetch_rows 2",
            "push 1 x1 compressed=true fetch_back=false",
        ]
    );
}
