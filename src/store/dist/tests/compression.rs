//! Gradient compression on a loopback job: set by every worker, forwarded to the servers by
//! worker 0; each worker quantizes its pushes with its own residual, the server dequantizes.

use super::*;
use crate::store::Updaters;
use Role::{Server, Worker};

#[test]
fn two_bit_pushes_carry_the_threshold_and_keep_the_rest_as_residual() {
    let log: UpdateLog = Arc::default();
    let servers: ServerSetup = Arc::new(move |store| {
        store.set_updaters(Updaters { int: Some(adding_updater(store.rank(), &log)), string: None });
        None
    });
    run_job(
        &[Worker, Server, Worker],
        mode("dist_sync"),
        servers,
        Arc::new(|store| {
            let params = [("type", "2bit"), ("threshold", "0.5")].map(|(k, v)| (k.to_string(), v.to_string()));
            store.set_gradient_compression(&params).unwrap();
            store.barrier().unwrap();
            let shape = [1000];
            store.init(Keys::Int(&[9]), &[filled(0.0, &shape)]).unwrap();
            let out = filled(-1.0, &shape);
            let m = refusal("a compressed push-pull", store.push_pull(Keys::Int(&[9]), vec![filled(0.3, &shape)], Keys::Int(&[9]), vec![out], 0));
            assert!(m.contains("Compression not supported with PushPull"), "{m}");
            // Pushes of 0.3 with threshold 0.5 send 0, 0.5, 0, 0.5, 0.5 (the residual grows
            // 0.3, 0.6 -> 0.1, 0.4, 0.7 -> 0.2, 0.5 -> 0); the updater adds both workers'.
            let mut want = 0.0;
            for sent in [0.0, 0.5, 0.0, 0.5, 0.5] {
                store.push(Keys::Int(&[9]), vec![filled(0.3, &shape)], 0).unwrap();
                want += 2.0 * sent;
                assert_eq!(pull(store, 9, &shape), vec![want; 1000], "after a push that sends {sent}");
            }
        }),
    );
}
