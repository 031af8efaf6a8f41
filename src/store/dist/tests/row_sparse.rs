//! row_sparse keys on loopback jobs: init from worker 0, pushes summed over the union of the
//! workers' rows, PullRowSparse of chosen rows.

use super::*;
use Role::{Scheduler, Server, Worker};

const ROWS: usize = 8;

/// A `(ROWS, 2)` row_sparse float32 array holding rows `ids`, every value `value`.
fn rows_of(ids: &[i64], value: f32) -> NDArray {
    let a = NDArray::empty_row_sparse(&[ROWS, 2], Context::cpu(0), DType::Float32).unwrap();
    let data = filled(value, &[ids.len(), 2]);
    let idx = NDArray::zeros(&[ids.len()], Context::cpu(0), DType::Int64).unwrap();
    idx.copy_from_host(bytemuck::cast_slice(ids)).unwrap();
    a.set_sparse_data_from(&data).unwrap();
    a.set_aux_from(0, &idx).unwrap();
    a
}

/// PullRowSparse of `want` (int64 row ids) from `key`: the output's row ids and values.
fn pull_rows(store: &KVStore, key: i32, want: &[i64]) -> (Vec<i64>, Vec<f32>) {
    let out = NDArray::empty_row_sparse(&[ROWS, 2], Context::cpu(0), DType::Float32).unwrap();
    let ids = NDArray::zeros(&[want.len()], Context::cpu(0), DType::Int64).unwrap();
    ids.copy_from_host(bytemuck::cast_slice(want)).unwrap();
    store.pull_row_sparse(Keys::Int(&[key]), std::slice::from_ref(&out), &[ids], 0).unwrap();
    out.wait_to_read().unwrap();
    let rows = out.rows_now().unwrap();
    (rows.ids, bytemuck::pod_collect_to_vec(&rows.data))
}

#[test]
fn row_sparse_pushes_sum_the_union_of_rows_and_pull_row_sparse_reads_chosen_rows() {
    run_job(
        &[Scheduler, Worker, Server, Worker],
        mode("dist_sync"),
        plain_servers(),
        Arc::new(|store| {
            let all: Vec<i64> = (0..ROWS as i64).collect();
            store.init(Keys::Int(&[11]), &[rows_of(&all, 1.5)]).unwrap();
            // Rows {7, 1, 7}: the output gets rows 1 and 7, once each.
            assert_eq!(pull_rows(store, 11, &[7, 1, 7]), (vec![1, 7], vec![1.5; 4]));
            // Worker 0 pushes rows 0..5 of 1, worker 1 rows 3..8 of 2: the round's sum covers
            // every row, and becomes the value (no updater).
            let pushed = if store.rank() == 0 { rows_of(&[0, 1, 2, 3, 4], 1.0) } else { rows_of(&[3, 4, 5, 6, 7], 2.0) };
            store.push(Keys::Int(&[11]), vec![pushed], 0).unwrap();
            let (ids, values) = pull_rows(store, 11, &[7, 0, 4, 5]);
            assert_eq!(ids, vec![0, 4, 5, 7]);
            assert_eq!(values, vec![1.0, 1.0, 3.0, 3.0, 2.0, 2.0, 2.0, 2.0]);
            // A dense pull of a row_sparse key is refused.
            let m = refusal("a dense pull of a row_sparse key", store.pull(Keys::Int(&[11]), vec![filled(0.0, &[ROWS, 2])], 0, true));
            assert!(m.contains("row_sparse keys of distributed stores are read with PullRowSparse"), "{m}");
        }),
    );
}
