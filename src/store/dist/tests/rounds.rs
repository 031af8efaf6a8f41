//! Sync rounds, server updaters, sharding, async pushes and joins on loopback jobs.

use super::*;
use crate::store::Updaters;
use std::sync::atomic::{AtomicUsize, Ordering};
use Role::{Scheduler, Server, Worker};

#[test]
fn init_is_worker_0s_and_sync_pushes_sum_over_the_workers() {
    let servers: ServerSetup = Arc::new(|store| {
        assert!((0..2).contains(&store.rank()), "server rank {}", store.rank());
        assert_eq!(store.group_size(), 2);
        let m = refusal("init on a server", store.init(Keys::Int(&[1]), &[filled(1.0, &[4])]));
        assert!(m.contains("init is for worker processes"), "{m}");
        None
    });
    run_job(
        &[Server, Worker, Server, Worker, Scheduler],
        mode("dist_sync"),
        servers,
        Arc::new(|store| {
            let rank = store.rank();
            assert!((0..2).contains(&rank), "worker rank {rank}");
            assert_eq!(store.group_size(), 2);
            let (small, big) = ([4], [1000]);
            // Every worker offers its own init value; all see worker 0's.
            let offered = 100.0 * (rank + 1) as f32;
            store.init(Keys::Int(&[3, 9]), &[filled(offered, &small), filled(offered, &big)]).unwrap();
            assert_eq!(pull(store, 3, &small), vec![100.0; 4]);
            assert_eq!(pull(store, 9, &big), vec![100.0; 1000]);
            // Without an updater the round's sum is the new value: 1 + 2.
            let mine = (rank + 1) as f32;
            store.push(Keys::Int(&[3, 9]), vec![filled(mine, &small), filled(mine, &big)], 0).unwrap();
            assert_eq!(pull(store, 3, &small), vec![3.0; 4]);
            assert_eq!(pull(store, 9, &big), vec![3.0; 1000]);
            // Two values of one key are summed on the worker first: 2 * (1 + 2).
            store.push(Keys::Int(&[9, 9]), vec![filled(mine, &big), filled(mine, &big)], 0).unwrap();
            assert_eq!(pull(store, 9, &big), vec![6.0; 1000]);
            store.barrier().unwrap();
            // Push-pull: one round trip, the output holds the round's result.
            let out = filled(-1.0, &small);
            store.push_pull(Keys::Int(&[3]), vec![filled(10.0 * mine, &small)], Keys::Int(&[3]), vec![out.clone()], 0).unwrap();
            assert_eq!(read(&out), vec![30.0; 4]);
        }),
    );
}

/// MXNet's `(n / servers * i).round()` boundaries, for two servers.
fn two_server_parts(n: usize) -> [usize; 2] {
    let first = (n as f64 / 2.0).round() as usize;
    [first, n - first]
}

#[test]
fn big_keys_are_split_over_the_servers_and_each_updates_its_part() {
    assert!(std::env::var_os("MXNET_KVSTORE_BIGARRAY_BOUND").is_none(), "this test assumes the default bound of 1e6 elements");
    let log: UpdateLog = Arc::default();
    let l = Arc::clone(&log);
    let servers: ServerSetup = Arc::new(move |store| {
        store.set_updaters(Updaters { int: Some(adding_updater(store.rank(), &l)), string: None });
        None
    });
    // An odd number of elements, past the bound: 1001 * 1001.
    let (big, small) = ([1001, 1001], [4]);
    run_job(
        &[Worker, Server, Worker, Server],
        mode("dist_sync"),
        servers,
        Arc::new(move |store| {
            store.init(Keys::Int(&[8, 3]), &[filled(1.0, &big), filled(1.0, &small)]).unwrap();
            let mine = (store.rank() + 1) as f32;
            store.push(Keys::Int(&[8, 3]), vec![filled(mine, &big), filled(mine, &small)], 0).unwrap();
            // stored (1) += the round's sum (1 + 2).
            let got = pull(store, 8, &big);
            assert!(got.iter().all(|&v| v == 4.0), "big key: {:?}", got.iter().find(|&&v| v != 4.0));
            assert_eq!(pull(store, 3, &small), vec![4.0; 4]);
            let out = filled(-1.0, &small);
            store.push_pull(Keys::Int(&[3]), vec![filled(mine, &small)], Keys::Int(&[3]), vec![out.clone()], 0).unwrap();
            assert_eq!(read(&out), vec![7.0; 4]);
        }),
    );
    let mut calls = log.lock().clone();
    calls.sort();
    let [first, second] = two_server_parts(1001 * 1001);
    // A small key goes to the server with the fewest bytes: server 1, whose part of the big
    // key is one element shorter; one updater call per round.
    assert_eq!(first, second + 1);
    let mut want = vec![(0, 8, first), (1, 8, second), (1, 3, 4), (1, 3, 4)];
    want.sort();
    assert_eq!(calls, want);
}

#[test]
fn dist_async_refuses_pushes_until_every_server_has_an_updater_then_applies_each() {
    let log: UpdateLog = Arc::default();
    let commands = Arc::new(AtomicUsize::new(0));
    let (l, c) = (Arc::clone(&log), Arc::clone(&commands));
    // As ctests/dist_async.c: worker 0's command makes the servers' controller install it.
    let servers: ServerSetup = Arc::new(move |store| {
        let (server, log, commands) = (Arc::downgrade(store), Arc::clone(&l), Arc::clone(&c));
        Some(Arc::new(move |id: i32, body: &std::ffi::CStr| {
            assert_eq!((id, body.to_str().unwrap()), (0, "set updater"));
            commands.fetch_add(1, Ordering::SeqCst);
            let store = server.upgrade().expect("the server's store");
            store.set_int_updater(Some(adding_updater(store.rank(), &log)));
        }))
    });
    let c = Arc::clone(&commands);
    run_job(
        &[Server, Worker, Worker, Server],
        mode("dist_async"),
        servers,
        Arc::new(move |store| {
            let shape = [5];
            store.init(Keys::Int(&[5]), &[filled(0.0, &shape)]).unwrap();
            let mine = (store.rank() + 1) as f32;
            let m = refusal("an async push without updaters", store.push(Keys::Int(&[5]), vec![filled(mine, &shape)], 0));
            assert!(m.contains("need an updater on every server"), "{m}");
            store.barrier().unwrap();
            if store.rank() == 0 {
                store.send_command(0, b"set updater\0").unwrap();
                assert_eq!(c.load(Ordering::SeqCst), 2, "send_command returned before both servers' controllers ran");
            }
            store.barrier().unwrap();
            // Each push is applied alone, at once: after both, 0 + 1 + 2.
            store.push(Keys::Int(&[5]), vec![filled(mine, &shape)], 0).unwrap();
            pull(store, 5, &shape);
            store.barrier().unwrap();
            assert_eq!(pull(store, 5, &shape), vec![3.0; 5]);
        }),
    );
    let calls = log.lock().clone();
    // The only key goes to the first of the servers holding nothing (MXNet: (5 * 9973) % 2 = 1).
    assert_eq!(calls, vec![(0, 5, 5), (0, 5, 5)], "one update per push, on the key's server");
}

#[test]
fn a_worker_that_leaves_early_counts_as_zero_and_the_others_finish() {
    run_job(
        &[Server, Worker, Worker],
        mode("dist_sync"),
        plain_servers(),
        Arc::new(|store| {
            let shape = [3];
            store.init(Keys::Int(&[1]), &[filled(0.0, &shape)]).unwrap();
            if store.rank() == 1 {
                // Returning drops the store: worker 1 joins and waits at the exit barrier.
                return;
            }
            // Released once worker 1 has joined: it no longer waits for it.
            store.barrier().unwrap();
            store.push(Keys::Int(&[1]), vec![filled(5.0, &shape)], 0).unwrap();
            assert_eq!(pull(store, 1, &shape), vec![5.0; 3], "the round waited for a worker that left, or counted it");
        }),
    );
}

/// (server, key) of each updater call, sorted.
fn updated(log: &UpdateLog) -> Vec<(i32, i32)> {
    let mut calls: Vec<(i32, i32)> = log.lock().iter().map(|&(s, k, _)| (s, k)).collect();
    calls.sort();
    calls
}

#[test]
fn small_keys_go_to_the_least_loaded_server_the_same_on_every_worker() {
    let log: UpdateLog = Arc::default();
    let l = Arc::clone(&log);
    let servers: ServerSetup = Arc::new(move |store| {
        store.set_updaters(Updaters { int: Some(adding_updater(store.rank(), &l)), string: None });
        None
    });
    run_job(
        &[Server, Worker, Server, Worker],
        mode("dist_sync"),
        servers,
        Arc::new(move |store| {
            let mine = (store.rank() + 1) as f32;
            // Odd keys: MXNet puts all of them on server 1 of 2 ((key * 9973) % 2). Each
            // worker gives them in another order: the placement does not depend on it.
            let keys: &[i32] = if store.rank() == 0 { &[1, 3, 5, 7] } else { &[7, 5, 3, 1] };
            let sizes = |k: i32| [if k == 7 { 8 } else { 4 }];
            let values: Vec<NDArray> = keys.iter().map(|&k| filled(1.0, &sizes(k))).collect();
            store.init(Keys::Int(keys), &values).unwrap();
            // A later call continues from the loads so far.
            store.init(Keys::Int(&[9]), &[filled(1.0, &[4])]).unwrap();
            store.barrier().unwrap();
            let all = [1, 3, 5, 7, 9];
            let values: Vec<NDArray> = all.iter().map(|&k| filled(mine, if k == 7 { &[8][..] } else { &[4][..] })).collect();
            store.push(Keys::Int(&all), values, 0).unwrap();
            for k in all {
                let shape = if k == 7 { [8] } else { [4] };
                assert_eq!(pull(store, k, &shape), vec![4.0; shape[0]], "key {k}: 1 + (1 + 2)");
            }
        }),
    );
    // Largest first, each to the lighter server (ties: the lower rank, then the smaller key):
    // 7 (32 B) on 0; 1, 3, 5 (16 B each) on 1, 1, 0 → 48 / 32 bytes; then 9 on 1.
    assert_eq!(updated(&log), vec![(0, 5), (0, 7), (1, 1), (1, 3), (1, 9)]);
}

#[test]
fn workers_that_init_different_keys_fail_the_init_instead_of_hanging() {
    run_job(
        &[Server, Worker, Server, Worker],
        mode("dist_sync"),
        plain_servers(),
        Arc::new(move |store| {
            store.init(Keys::Int(&[1]), &[filled(1.0, &[4])]).unwrap();
            // Worker 1 inits a key of another size: its placement would differ.
            let n = if store.rank() == 0 { 4 } else { 6 };
            let m = refusal("an init that differs between workers", store.init(Keys::Int(&[2]), &[filled(1.0, &[n])]));
            assert!(m.contains("different keys initialised") && m.contains("every worker must init the same keys"), "{m}");
            assert!(m.contains("worker 0: ") && m.contains("worker 1: "), "{m}");
            // Both workers refused alike and registered nothing: the job goes on.
            store.push(Keys::Int(&[1]), vec![filled(1.0, &[4])], 0).unwrap();
            assert_eq!(pull(store, 1, &[4]), vec![2.0; 4]);
        }),
    );
}

/// Worker `rank`'s pushed value for round `round`: every element different, so that a chunk
/// summed or answered at the wrong offset shows.
fn varied(rank: usize, round: usize, n: usize) -> Vec<f32> {
    (0..n).map(|j| (j % 1009) as f32 * 0.1 + rank as f32 * 0.37 + round as f32 * 1e-3).collect()
}

fn array_of(values: &[f32], shape: &[usize]) -> NDArray {
    let a = NDArray::zeros(shape, Context::cpu(0), DType::Float32).unwrap();
    a.copy_from_host(bytemuck::cast_slice(values)).unwrap();
    a
}

#[test]
fn big_parts_pushed_in_chunks_are_summed_in_rank_order_and_answered_chunk_by_chunk() {
    assert!(std::env::var_os("KVSTORE_DIST_CHUNK_BYTES").is_none(), "this test assumes chunks of 1 MiB");
    // 1001 * 1001 float32 values (4 MB) over 2 servers: parts of 2 MB, each pushed in two
    // chunks; 3 workers, so a chunk that arrives before a lower rank's is held (rank order).
    let shape = [1001, 1001];
    let n = 1001 * 1001;
    run_job(
        &[Server, Worker, Worker, Server, Worker],
        mode("dist_sync"),
        plain_servers(),
        Arc::new(move |store| {
            let rank = store.rank() as usize;
            store.init(Keys::Int(&[5]), &[filled(0.0, &shape)]).unwrap();
            for round in 0..4 {
                // The round's sum, in worker-rank order: ((w0 + w1) + w2), in float32.
                let (w0, w1, w2) = (varied(0, round, n), varied(1, round, n), varied(2, round, n));
                let expected: Vec<f32> = (0..n).map(|j| (w0[j] + w1[j]) + w2[j]).collect();
                let mine = array_of(&varied(rank, round, n), &shape);
                if round % 2 == 0 {
                    store.push(Keys::Int(&[5]), vec![mine], 0).unwrap();
                    let got = pull(store, 5, &shape);
                    let bad = got.iter().zip(&expected).position(|(g, e)| g.to_bits() != e.to_bits());
                    assert_eq!(bad, None, "round {round}: element {bad:?} differs");
                } else {
                    // A push-pull gets each chunk of its parts back with the chunk's answer.
                    let out = filled(-1.0, &shape);
                    store.push_pull(Keys::Int(&[5]), vec![mine], Keys::Int(&[5]), vec![out.clone()], 0).unwrap();
                    let got = read(&out);
                    let bad = got.iter().zip(&expected).position(|(g, e)| g.to_bits() != e.to_bits());
                    assert_eq!(bad, None, "round {round} (push-pull): element {bad:?} differs");
                }
            }
        }),
    );
}
