//! Calls a distributed store refuses: each returns its error to the caller and changes
//! nothing, and the job goes on.

use super::*;
use Role::{Server, Worker};

#[test]
fn refused_calls_return_their_errors_and_leave_the_values() {
    run_job(
        &[Worker, Server, Worker],
        mode("dist_sync"),
        plain_servers(),
        Arc::new(|store| {
            let shape = [4];
            store.init(Keys::Int(&[3, 4]), &[filled(7.0, &shape), filled(8.0, &shape)]).unwrap();
            let expect = |what: &str, r: crate::Result<()>, part: &str| {
                let m = refusal(what, r);
                assert!(m.contains(part), "{what}: {m}");
            };
            let out = filled(-1.0, &shape);
            expect("a pull of an uninited key", store.pull(Keys::Int(&[77]), vec![out.clone()], 0, true), "key 77 has not been inited");
            expect("a push of an uninited key", store.push(Keys::Int(&[77]), vec![filled(1.0, &shape)], 0), "key 77 has not been inited");
            expect("a push of another shape", store.push(Keys::Int(&[3]), vec![filled(1.0, &[5])], 0), "shape mismatch for key 3: the stored value has shape (4), the pushed value (5)");
            let wide = NDArray::zeros(&shape, Context::cpu(0), DType::Float64).unwrap();
            expect("a push of another dtype", store.push(Keys::Int(&[3]), vec![wide], 0), "dtype mismatch for key 3: the stored value is float32, the pushed value float64");
            expect(
                "a push-pull of other keys",
                store.push_pull(Keys::Int(&[3]), vec![filled(1.0, &shape)], Keys::Int(&[4]), vec![out.clone()], 0),
                "List of push and pull keys are different",
            );
            expect("a pull without ignore_sparse", store.pull(Keys::Int(&[3]), vec![out.clone()], 0, false), "ignore_sparse");
            expect("a second init", store.init(Keys::Int(&[3]), &[filled(1.0, &shape)]), "duplicate init of key 3");
            expect("RunServer on a worker", store.run_server(None), "RunServer is for server and scheduler processes");
            assert_eq!(pull(store, 3, &shape), vec![7.0; 4]);
            assert_eq!(pull(store, 4, &shape), vec![8.0; 4]);
            // The job goes on: a round after the refusals sums as usual.
            store.push(Keys::Int(&[4]), vec![filled(1.0, &shape)], 0).unwrap();
            assert_eq!(pull(store, 4, &shape), vec![2.0; 4]);
        }),
    );
}
