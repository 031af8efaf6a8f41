use super::*;

/// The profiler is process-wide: its tests take turns.
static TURN: Mutex<()> = parking_lot::const_mutex(());

fn args() -> Args {
    vec![("key", Arg::Int(3)), ("bytes", Arg::Int(64))]
}

#[test]
fn off_by_default_then_records_spans_ops_and_aggregates() {
    let _turn = TURN.lock();
    let path = std::env::temp_dir().join(format!("kvstore-profiler-unit-{}.json", std::process::id()));
    // Before any run, nothing is recorded and a dump is refused.
    set_state(0, 0).unwrap();
    assert!(!enabled());
    drop(span(Class::Call, "push", || panic!("args are not evaluated while off")));
    configure(&[]).unwrap();
    let _ = dump(true, 0).map(|_| panic!("a dump before running must fail"));
    assert!(dump(true, 0).unwrap_err().message().contains("has not been run"));

    // A bad key changes nothing: the previous configuration stays.
    assert!(configure(&[("filename", "x.json"), ("profile_everything", "1")]).is_err());
    configure(&[("filename", path.to_str().unwrap()), ("profile_all", "True"), ("aggregate_stats", "True")]).unwrap();
    set_state(1, 0).unwrap();
    assert!(enabled());
    {
        let _call = span(Class::Call, "push", args);
        let op = traced("sum", args, |_| Ok(()));
        let var = crate::engine::Var::new();
        crate::engine::engine().push_batch(&[], &[var], 0, false, false, op);
        crate::engine::engine().wait_to_write(var).unwrap();
    }
    pause(true, 0).unwrap();
    drop(span(Class::Call, "paused_call", args));
    pause(false, 0).unwrap();
    let table = aggregate_stats(false, 0, 0, false).unwrap();
    assert!(table.contains("kvstore\n=================") && table.contains("\npush "), "{table}");
    assert!(table.contains("engine\n=================") && table.contains("\nsum "), "{table}");
    set_state(0, 0).unwrap();
    assert!(!enabled());
    dump(true, 0).unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    assert!(json.starts_with("{\n    \"traceEvents\": [") && json.ends_with("\"displayTimeUnit\": \"ms\"\n}\n"), "{json}");
    assert!(json.contains("\"name\": \"push\", \"cat\": \"kvstore\", \"ph\": \"B\""), "{json}");
    assert!(json.contains("\"name\": \"sum\", \"cat\": \"engine\", \"ph\": \"E\""), "{json}");
    assert!(json.contains("\"args\": {\"key\": 3, \"bytes\": 64}"), "{json}");
    assert!(!json.contains("paused_call"), "{json}");
    // Aggregates count each record once, whether printed before the dump or not.
    let table = aggregate_stats(true, 0, 4, false).unwrap();
    let push = table.lines().find(|l| l.starts_with("push ")).unwrap();
    assert_eq!(push.split_whitespace().nth(1), Some("1"), "{table}");
    assert!(!aggregate_stats(false, 0, 0, false).unwrap().contains("push"), "reset clears");
    // Finished: output ends until the next run.
    assert!(dump(true, 0).is_err());
    assert!(set_state(2, 0).is_err() && aggregate_stats(false, 2, 0, false).is_err() && aggregate_stats(false, 0, 5, false).is_err());
    assert!(dump(false, 1).unwrap_err().message().contains("server"));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn user_objects_record_while_running() {
    let _turn = TURN.lock();
    let path = std::env::temp_dir().join(format!("kvstore-profiler-objects-{}.json", std::process::id()));
    configure(&[("filename", path.to_str().unwrap()), ("profile_api", "False"), ("profile_imperative", "False"), ("profile_symbolic", "False")]).unwrap();
    let domain = objects::Domain::new("my domain");
    let task = objects::Duration::new(objects::DurationKind::Task, "my task", Some(&domain));
    let counter = objects::Counter::new(&domain, "queue");
    assert!(task.stop().unwrap_err().message().contains("was not started"));
    set_state(1, 0).unwrap();
    drop(span(Class::Call, "push", args));
    task.start();
    counter.set(5);
    counter.adjust(-2).unwrap();
    assert!(counter.adjust(-4).is_err() && counter.value() == 3);
    objects::mark(&domain, "here", "thread").unwrap();
    assert!(objects::mark(&domain, "here", "galaxy").is_err());
    task.stop().unwrap();
    set_state(0, 0).unwrap();
    dump(true, 0).unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    assert!(!json.contains("\"push\""), "profile_api off: {json}");
    assert!(json.contains("\"name\": \"my task\", \"cat\": \"my domain\", \"ph\": \"b\""), "{json}");
    assert!(json.contains("\"ph\": \"C\"") && json.contains("\"args\": {\"queue\": 3}"), "{json}");
    assert!(json.contains("\"name\": \"here\", \"cat\": \"my domain,instant_marker\", \"ph\": \"i\"") && json.contains("\"s\": \"t\""), "{json}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn device_rows_are_named_processes_of_their_own_and_gated_with_ops() {
    let _turn = TURN.lock();
    let path = std::env::temp_dir().join(format!("kvstore-profiler-device-{}.json", std::process::id()));
    configure(&[("filename", path.to_str().unwrap()), ("profile_imperative", "False"), ("profile_symbolic", "False")]).unwrap();
    set_state(1, 0).unwrap();
    assert!(enabled() && !gpu_enabled(), "GPU work is recorded with engine ops only");
    configure(&[("filename", path.to_str().unwrap()), ("profile_all", "True")]).unwrap();
    assert!(gpu_enabled());
    let row0 = row("gpu(0) stream 0 (compute)");
    assert_eq!(row("gpu(0) stream 0 (compute)"), row0, "one row per name");
    assert_ne!(row("gpu(0) stream 1 (host to device)"), row0);
    let t = now_us();
    record_span("gpu/0".into(), row0, "kernel sum_float32".into(), t, t + 5.0, vec![("bytes", Arg::Int(400))]);
    pause(true, 0).unwrap();
    assert!(!gpu_enabled(), "paused");
    set_state(0, 0).unwrap();
    assert!(!gpu_enabled(), "stopped");
    dump(true, 0).unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    assert!(json.contains("\"args\": {\"name\": \"gpu/0\"}"), "{json}");
    assert!(json.contains(&format!("\"tid\": {row0}, \"args\": {{\"name\": \"gpu(0) stream 0 (compute)\"}}")), "{json}");
    assert!(json.contains(&format!("\"name\": \"kernel sum_float32\", \"cat\": \"gpu/0\", \"ph\": \"B\", \"ts\": {t:.3}")), "{json}");
    assert!(json.contains("\"args\": {\"bytes\": 400}"), "{json}");
    let _ = std::fs::remove_file(&path);
}
