//! Workers 0 and 1 as partners (`pairs`): their pushes summed before the servers get them,
//! their pulls answered once and forwarded, the rank-order sums unchanged, and a partner that
//! leaves early.

use super::*;
use crate::store::Updaters;
use Role::{Server, Worker};

/// Worker `rank`'s value for round `round`: every element different, and sums whose bits
/// depend on their association.
fn varied(rank: usize, round: usize, n: usize) -> Vec<f32> {
    (0..n).map(|j| (j % 1013) as f32 * 0.1 + rank as f32 * 0.37 + round as f32 * 1e-3 + 1.0 / (1 + j % 7) as f32).collect()
}

fn array_of(values: &[f32], shape: &[usize]) -> NDArray {
    let a = NDArray::zeros(shape, Context::cpu(0), DType::Float32).unwrap();
    a.copy_from_host(bytemuck::cast_slice(values)).unwrap();
    a
}

/// The round's sum in worker-rank order over `ranks`.
fn rank_order(ranks: &[usize], round: usize, n: usize) -> Vec<f32> {
    let values: Vec<Vec<f32>> = ranks.iter().map(|&r| varied(r, round, n)).collect();
    (0..n).map(|j| values.iter().skip(1).fold(values[0][j], |acc, v| acc + v[j])).collect()
}

fn first_difference(got: &[f32], want: &[f32]) -> Option<usize> {
    got.iter().zip(want).position(|(g, w)| g.to_bits() != w.to_bits())
}

/// 4 workers + 2 servers: world ranks 0 and 3 serve, 1, 2, 4, 5 are workers 0–3.
const FOUR_TWO: [Role; 6] = [Server, Worker, Worker, Server, Worker, Worker];

#[test]
fn partners_push_their_sum_and_share_pulls_and_every_sum_keeps_rank_order() {
    assert!(std::env::var_os("KVSTORE_DIST_PAIRS").is_none() && std::env::var_os("KVSTORE_DIST_CHUNK_BYTES").is_none());
    // A big key split over both servers and pushed in chunks, small keys placed whole, and a
    // float64 key (not paired).
    let (big, small) = ([1001, 1001], [1000]);
    let n = 1001 * 1001;
    let job = run_job(
        &FOUR_TWO,
        mode("dist_sync"),
        plain_servers(),
        Arc::new(move |store| {
            let rank = store.rank() as usize;
            let wide = NDArray::zeros(&small, Context::cpu(0), DType::Float64).unwrap();
            store.init(Keys::Int(&[5, 6, 7, 8]), &[filled(0.0, &big), filled(0.0, &small), filled(0.0, &small), wide]).unwrap();
            for round in 0..5 {
                let (want_big, want_small) = (rank_order(&[0, 1, 2, 3], round, n), rank_order(&[0, 1, 2, 3], round, 1000));
                let values = vec![array_of(&varied(rank, round, n), &big), array_of(&varied(rank, round, 1000), &small), array_of(&varied(rank, round, 1000), &small)];
                // Round 3 mixes the two ways within the pair: worker 0 push-pulls, worker 1
                // pushes and then pulls.
                let push_pull = round % 2 == 1 && !(round == 3 && rank == 1);
                let outs = vec![filled(-1.0, &big), filled(-1.0, &small), filled(-1.0, &small)];
                if push_pull {
                    store.push_pull(Keys::Int(&[5, 6, 7]), values, Keys::Int(&[5, 6, 7]), outs.clone(), 0).unwrap();
                } else if rank == 3 && round != 3 {
                    // Worker 3 pushes once the others have sent their pulls, which then wait
                    // at the servers for the round: both partners' pulls are answered at once.
                    store.barrier().unwrap();
                    store.push(Keys::Int(&[5, 6, 7]), values, 0).unwrap();
                    store.pull(Keys::Int(&[5, 6, 7]), outs.clone(), 0, true).unwrap();
                } else {
                    store.push(Keys::Int(&[5, 6, 7]), values, 0).unwrap();
                    store.pull(Keys::Int(&[5, 6, 7]), outs.clone(), 0, true).unwrap();
                    if round != 3 {
                        store.barrier().unwrap();
                    }
                }
                let got: Vec<Vec<f32>> = outs.iter().map(read).collect();
                assert_eq!(first_difference(&got[0], &want_big), None, "round {round}, worker {rank}: the big key");
                assert_eq!(first_difference(&got[1], &want_small), None, "round {round}, worker {rank}: key 6");
                assert_eq!(first_difference(&got[2], &want_small), None, "round {round}, worker {rank}: key 7");
            }
            // The float64 key goes to its server from every worker.
            let mine = NDArray::zeros(&small, Context::cpu(0), DType::Float64).unwrap();
            mine.copy_from_host(bytemuck::cast_slice(&vec![rank as f64 + 0.5; 1000])).unwrap();
            store.push(Keys::Int(&[8]), vec![mine], 0).unwrap();
            let out = NDArray::zeros(&small, Context::cpu(0), DType::Float64).unwrap();
            store.pull(Keys::Int(&[8]), vec![out.clone()], 0, true).unwrap();
            let mut got = vec![0f64; 1000];
            out.copy_to_host(bytemuck::cast_slice_mut(&mut got)).unwrap();
            assert_eq!(got, vec![8.0; 1000]);
        }),
    );
    // The sums above would differ in some element had a round been summed in another order.
    let v: Vec<Vec<f32>> = (0..4).map(|r| varied(r, 0, n)).collect();
    let right_first: Vec<f32> = (0..n).map(|j| v[0][j] + (v[1][j] + (v[2][j] + v[3][j]))).collect();
    assert!(first_difference(&rank_order(&[0, 1, 2, 3], 0, n), &right_first).is_some(), "the values do not show the order of their sums");
    // What crossed the links: the servers got about half as much from workers 0 and 1 as
    // from workers 2 and 3 (worker 0's init aside) and sent them about half as much but in
    // round 3 (each partner's value once for its push-pull or pull, the other's pull apart),
    // and the partners exchanged their pieces and answers.
    let (servers, partners, others) = ([0, 3], [1, 2], [4, 5]);
    let sum = |from: &[usize], to: &[usize]| -> u64 { from.iter().flat_map(|&f| to.iter().map(move |&t| (f, t))).map(|(f, t)| job.traffic(f, t)).sum() };
    let (pushed_pair, pushed_others) = (sum(&partners, &servers), sum(&others, &servers));
    let (pulled_pair, pulled_others) = (sum(&servers, &partners), sum(&servers, &others));
    assert!(pushed_pair * 10 < pushed_others * 7, "pushes: the pair sent {pushed_pair} bytes, workers 2 and 3 {pushed_others}");
    assert!(pulled_pair * 10 < pulled_others * 7, "answers: the pair got {pulled_pair} bytes, workers 2 and 3 {pulled_others}");
    let (one_way, other_way) = (job.traffic(1, 2), job.traffic(2, 1));
    let each = (n * 4 * 5) as u64;
    assert!(one_way > each / 2 && other_way > each / 2, "between the partners: {one_way} and {other_way} bytes");
}

#[test]
fn with_an_updater_on_the_servers_the_partners_share_the_updated_value() {
    let log: UpdateLog = Arc::default();
    let l = Arc::clone(&log);
    let servers: ServerSetup = Arc::new(move |store| {
        store.set_updaters(Updaters { int: Some(adding_updater(store.rank(), &l)), string: None });
        None
    });
    let big = [1001, 1001];
    let n = 1001 * 1001;
    let job = run_job(
        &FOUR_TWO,
        mode("dist_sync"),
        servers,
        Arc::new(move |store| {
            let rank = store.rank() as usize;
            store.init(Keys::Int(&[5]), &[filled(1.0, &big)]).unwrap();
            let mut stored = vec![1.0f32; n];
            for round in 0..3 {
                let sum = rank_order(&[0, 1, 2, 3], round, n);
                stored.iter_mut().zip(&sum).for_each(|(s, v)| *s += v);
                store.push(Keys::Int(&[5]), vec![array_of(&varied(rank, round, n), &big)], 0).unwrap();
                let got = pull(store, 5, &big);
                assert_eq!(first_difference(&got, &stored), None, "round {round}, worker {rank}");
            }
        }),
    );
    assert_eq!(log.lock().len(), 6, "one update per round on each server's part");
    assert!(job.traffic(0, 1) + job.traffic(0, 2) < job.traffic(0, 4) + job.traffic(0, 5), "server 0 answered the pair once per round");
}

#[test]
fn a_partner_that_leaves_early_lets_the_other_push_alone() {
    let small = [1000];
    for leaver in [0, 1] {
        // 3 workers + 1 server: worker `leaver` leaves after one round.
        run_job(
            &[Server, Worker, Worker, Worker],
            mode("dist_sync"),
            plain_servers(),
            Arc::new(move |store| {
                let rank = store.rank() as usize;
                store.init(Keys::Int(&[1, 2]), &[filled(0.0, &small), filled(0.0, &small)]).unwrap();
                let rounds = if rank == leaver { 1 } else { 4 };
                for round in 0..rounds {
                    let values = vec![array_of(&varied(rank, round, 1000), &small), array_of(&varied(rank, round, 1000), &small)];
                    store.push(Keys::Int(&[1, 2]), values, 0).unwrap();
                    let want = if round == 0 { rank_order(&[0, 1, 2], 0, 1000) } else { rank_order(&[leaver ^ 1, 2], round, 1000) };
                    for key in [1, 2] {
                        let got = pull(store, key, &small);
                        assert_eq!(first_difference(&got, &want), None, "worker {rank}, round {round}, key {key} (worker {leaver} left)");
                    }
                    if round == 0 {
                        // Every worker has its first round before worker `leaver` leaves; the
                        // others go on once it has joined (the loopback job's engine is the
                        // process's: its exit waits for their pushes).
                        store.barrier().unwrap();
                        if rank != leaver {
                            store.barrier().unwrap();
                        }
                    }
                }
            }),
        );
    }
}
