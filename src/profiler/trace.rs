//! The Chrome trace JSON MXNet's profiler writes (`traceEvents`, `displayTimeUnit`), which
//! chrome://tracing and Perfetto open: one process per category (named by a `process_name`
//! metadata event), one thread per recording thread (named by `thread_name`), spans as
//! `B`/`E` pairs properly nested on each thread, user tasks as async `b`/`e`, counters as `C`,
//! markers as `i`. Timestamps are microseconds (fractional).

use super::record::{Arg, Kind, Record};
use std::collections::BTreeMap;
use std::fmt::Write;

/// JSON string contents for `s` (quotes, backslashes and control characters escaped).
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn args_json(args: &[(&'static str, Arg)]) -> String {
    let mut s = String::from("{");
    for (i, (k, v)) in args.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        match v {
            Arg::Int(n) => {
                let _ = write!(s, "\"{}\": {n}", escape(k));
            }
            Arg::Text(t) => {
                let _ = write!(s, "\"{}\": \"{}\"", escape(k), escape(t));
            }
        }
    }
    s.push('}');
    s
}

fn event(out: &mut Vec<String>, r: &Record, ph: char, ts: f64, pid: usize, extra: &str) {
    out.push(format!(
        "        {{\"name\": \"{}\", \"cat\": \"{}\", \"ph\": \"{ph}\", \"ts\": {ts:.3}, \"pid\": {pid}, \"tid\": {}{extra}}}",
        escape(&r.name),
        escape(&r.cat),
        r.tid
    ));
}

/// The whole trace file for `records`; `thread_names` names the `tid`s.
pub(crate) fn write(records: &[Record], thread_names: &BTreeMap<u32, String>) -> String {
    // Categories become processes in order of first appearance.
    let mut pids: Vec<&str> = Vec::new();
    for r in records {
        if !pids.contains(&&*r.cat) {
            pids.push(&r.cat);
        }
    }
    let pid = |cat: &str| pids.iter().position(|c| *c == cat).unwrap_or(0);

    let mut out: Vec<String> = Vec::new();
    for (p, cat) in pids.iter().enumerate() {
        out.push(format!(
            "        {{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {p}, \"args\": {{\"name\": \"{}\"}}}}",
            escape(cat)
        ));
    }
    let mut threads: Vec<(usize, u32)> = records.iter().map(|r| (pid(&r.cat), r.tid)).collect();
    threads.sort_unstable();
    threads.dedup();
    for (p, tid) in &threads {
        let name = thread_names.get(tid).cloned().unwrap_or_else(|| format!("thread {tid}"));
        out.push(format!(
            "        {{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": {p}, \"tid\": {tid}, \"args\": {{\"name\": \"{}\"}}}}",
            escape(&name)
        ));
    }

    // Spans, per track: sorted by start (outer first on ties), then a sweep that closes every
    // span ending before the next one starts, so B/E pairs nest in file order.
    let mut tracks: BTreeMap<(usize, u32), Vec<&Record>> = BTreeMap::new();
    for r in records {
        if let Kind::Duration { .. } = r.kind {
            tracks.entry((pid(&r.cat), r.tid)).or_default().push(r);
        }
    }
    for ((p, _), mut spans) in tracks {
        spans.sort_by(|a, b| {
            let (Kind::Duration { start: sa, end: ea }, Kind::Duration { start: sb, end: eb }) = (&a.kind, &b.kind) else {
                return std::cmp::Ordering::Equal;
            };
            sa.total_cmp(sb).then(eb.total_cmp(ea))
        });
        let mut open: Vec<(&Record, f64)> = Vec::new();
        for r in spans {
            let Kind::Duration { start, end } = r.kind else { continue };
            while let Some(&(top, top_end)) = open.last() {
                if top_end > start {
                    break;
                }
                event(&mut out, top, 'E', top_end, p, "");
                open.pop();
            }
            // A span outliving its parent (never from guards on one thread) is cut to it.
            let end = open.last().map_or(end, |&(_, parent_end)| end.min(parent_end));
            let args = if r.args.is_empty() { String::new() } else { format!(", \"args\": {}", args_json(&r.args)) };
            event(&mut out, r, 'B', start, p, &args);
            open.push((r, end));
        }
        while let Some((top, top_end)) = open.pop() {
            event(&mut out, top, 'E', top_end, p, "");
        }
    }

    for r in records {
        let p = pid(&r.cat);
        match r.kind {
            Kind::Duration { .. } => {}
            Kind::Task { start, end, id } => {
                event(&mut out, r, 'b', start, p, &format!(", \"id\": {id}"));
                event(&mut out, r, 'e', end, p, &format!(", \"id\": {id}"));
            }
            Kind::Counter { at, value } => {
                event(&mut out, r, 'C', at, p, &format!(", \"args\": {{\"{}\": {value}}}", escape(&r.name)));
            }
            Kind::Instant { at, scope } => {
                let args = if r.args.is_empty() { String::new() } else { format!(", \"args\": {}", args_json(&r.args)) };
                event(&mut out, r, 'i', at, p, &format!(", \"s\": \"{scope}\"{args}"));
            }
        }
    }
    format!("{{\n    \"traceEvents\": [\n{}\n    ],\n    \"displayTimeUnit\": \"ms\"\n}}\n", out.join(",\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn span(name: &'static str, start: f64, end: f64, tid: u32) -> Record {
        Record { name: Cow::Borrowed(name), cat: Cow::Borrowed("kvstore"), kind: Kind::Duration { start, end }, tid, args: vec![] }
    }

    #[test]
    fn spans_nest_in_file_order_even_with_equal_times() {
        // Recorded as guards drop: inner first. Equal starts put the longer span outside.
        let records = vec![span("inner", 1.0, 2.0, 1), span("outer", 1.0, 3.0, 1), span("next", 3.0, 4.0, 1)];
        let json = write(&records, &BTreeMap::new());
        let order: Vec<&str> = json.lines().filter(|l| l.contains("\"ph\": \"B\"") || l.contains("\"ph\": \"E\"")).collect();
        let seq: Vec<String> = order
            .iter()
            .map(|l| {
                let name = l.split("\"name\": \"").nth(1).unwrap().split('"').next().unwrap();
                let ph = if l.contains("\"ph\": \"B\"") { "B" } else { "E" };
                format!("{ph}:{name}")
            })
            .collect();
        assert_eq!(seq, ["B:outer", "B:inner", "E:inner", "E:outer", "B:next", "E:next"]);
        assert!(json.contains("\"displayTimeUnit\": \"ms\""));
        assert!(json.contains("\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": \"kvstore\"}"));
    }

    #[test]
    fn names_and_args_are_escaped() {
        let mut r = span("a\"b\\c\n", 1.0, 2.0, 1);
        r.args = vec![("key", Arg::Text("k\"1".into())), ("bytes", Arg::Int(64))];
        let json = write(&[r], &BTreeMap::new());
        assert!(json.contains("\"name\": \"a\\\"b\\\\c\\n\""), "{json}");
        assert!(json.contains("\"args\": {\"key\": \"k\\\"1\", \"bytes\": 64}"), "{json}");
    }
}
