//! Aggregate statistics (`aggregate_stats`): count and total/min/max/average time per event
//! name within each category, printed as MXNet's table or JSON
//! (`MXAggregateProfileStatsPrintEx`).

use super::record::{Kind, Record};
use crate::error::Result;
use std::collections::BTreeMap;
use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq)]
enum StatKind {
    /// Microseconds per span.
    Duration,
    /// Values a counter took.
    Counter,
}

#[derive(Debug, Clone, Copy)]
struct Stat {
    kind: StatKind,
    count: u64,
    /// Durations: their sum; counters: the last value (as MXNet keeps it).
    total: f64,
    min: f64,
    max: f64,
}

impl Stat {
    fn avg(&self) -> f64 {
        match self.kind {
            StatKind::Duration => self.total / self.count as f64,
            // MXNet's figure for a counter's "average": half its range.
            StatKind::Counter => (self.max - self.min) / 2.0,
        }
    }
}

/// Per category, per event name.
#[derive(Debug, Default)]
pub(crate) struct Aggregate {
    stats: BTreeMap<String, BTreeMap<String, Stat>>,
}

/// How `MXAggregateProfileStatsPrintEx` sorts the rows of each category.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SortBy {
    Total,
    Avg,
    Min,
    Max,
    Count,
}

impl SortBy {
    pub(crate) fn from_int(v: i32) -> Result<SortBy> {
        Ok(match v {
            0 => SortBy::Total,
            1 => SortBy::Avg,
            2 => SortBy::Min,
            3 => SortBy::Max,
            4 => SortBy::Count,
            _ => crate::bail!("sort_by {v} is not 0 (total), 1 (avg), 2 (min), 3 (max) or 4 (count)"),
        })
    }
}

impl Aggregate {
    pub(crate) fn add(&mut self, r: &Record) {
        let (kind, value) = match r.kind {
            Kind::Duration { start, end } | Kind::Task { start, end, .. } => (StatKind::Duration, (end - start).max(0.0)),
            Kind::Counter { value, .. } => (StatKind::Counter, value as f64),
            Kind::Instant { .. } => return,
        };
        let stat = self.stats.entry(r.cat.to_string()).or_default().entry(r.name.to_string()).or_insert(Stat {
            kind,
            count: 0,
            total: 0.0,
            min: f64::INFINITY,
            max: 0.0,
        });
        stat.count += 1;
        stat.total = if kind == StatKind::Counter { value } else { stat.total + value };
        stat.min = stat.min.min(value);
        stat.max = stat.max.max(value);
    }

    pub(crate) fn clear(&mut self) {
        self.stats.clear();
    }

    fn sorted(rows: &BTreeMap<String, Stat>, sort_by: SortBy, ascending: bool) -> Vec<(&String, &Stat)> {
        let key = |s: &Stat| match sort_by {
            SortBy::Total => s.total,
            SortBy::Avg => s.avg(),
            SortBy::Min => s.min,
            SortBy::Max => s.max,
            SortBy::Count => s.count as f64,
        };
        let mut v: Vec<_> = rows.iter().collect();
        v.sort_by(|(na, a), (nb, b)| {
            let (ka, kb) = if ascending { (-key(a), -key(b)) } else { (key(a), key(b)) };
            kb.total_cmp(&ka).then(nb.cmp(na))
        });
        v
    }

    /// MXNet's table: per category a header, then name, count, total, min, max and average
    /// (milliseconds; counters print their values as MXNet does).
    pub(crate) fn table(&self, sort_by: SortBy, ascending: bool) -> String {
        let mut s = String::from("\nProfile Statistics:\n\tNote the difference in units for different entries.\n");
        for (cat, rows) in &self.stats {
            let _ = writeln!(s, "{cat}\n=================");
            let _ = writeln!(
                s,
                "{:<25}{:>16} {:>16} {:>16} {:>16} {:>16}",
                "Name", "Total Count", "Time (ms)", "Min Time (ms)", "Max Time (ms)", "Avg Time (ms)"
            );
            let _ = writeln!(s, "{:<25}{:>16} {:>16} {:>16} {:>16} {:>16}", "----", "-----------", "---------", "-------------", "-------------", "-------------");
            for (name, st) in Self::sorted(rows, sort_by, ascending) {
                let avg = st.avg() / 1000.0;
                let _ = writeln!(
                    s,
                    "{name:<25}{:>16} {:>16.4} {:>16.4} {:>16.4} {avg:>16.4}",
                    st.count,
                    st.total / 1000.0,
                    st.min / 1000.0,
                    st.max / 1000.0
                );
            }
            s.push('\n');
        }
        s
    }

    /// MXNet's JSON form: `{"Time": {category: {name: {Count, Total, Min, Max, Avg}}},
    /// "Memory": {}, "Unit": {"Time": "ms", "Memory": "kB"}}`.
    pub(crate) fn json(&self, sort_by: SortBy, ascending: bool) -> String {
        use super::trace::escape;
        let cats: Vec<String> = self
            .stats
            .iter()
            .map(|(cat, rows)| {
                let rows: Vec<String> = Self::sorted(rows, sort_by, ascending)
                    .into_iter()
                    .map(|(name, st)| {
                        format!(
                            "            \"{}\": {{\"Count\": {}, \"Total\": {:.4}, \"Min\": {:.4}, \"Max\": {:.4}, \"Avg\": {:.4}}}",
                            escape(name),
                            st.count,
                            st.total / 1000.0,
                            st.min / 1000.0,
                            st.max / 1000.0,
                            st.avg() / 1000.0
                        )
                    })
                    .collect();
                format!("        \"{}\": {{\n{}\n        }}", escape(cat), rows.join(",\n"))
            })
            .collect();
        format!(
            "{{\n    \"Time\": {{\n{}\n    }},\n    \"Memory\": {{\n    }},\n    \"Unit\": {{\n        \"Time\": \"ms\",\n        \"Memory\": \"kB\"\n    }}\n}}\n",
            cats.join(",\n")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn span(name: &'static str, us: f64) -> Record {
        Record { name: Cow::Borrowed(name), cat: Cow::Borrowed("kvstore"), kind: Kind::Duration { start: 10.0, end: 10.0 + us }, tid: 1, args: vec![] }
    }

    #[test]
    fn table_lists_count_total_min_max_avg_per_name() {
        let mut a = Aggregate::default();
        for r in [span("push", 1000.0), span("push", 3000.0), span("pull", 500.0)] {
            a.add(&r);
        }
        let t = a.table(SortBy::Total, false);
        let push = t.lines().find(|l| l.starts_with("push")).unwrap();
        let cols: Vec<&str> = push.split_whitespace().collect();
        assert_eq!(cols, ["push", "2", "4.0000", "1.0000", "3.0000", "2.0000"]);
        let lines: Vec<&str> = t.lines().collect();
        let (ipush, ipull) = (lines.iter().position(|l| l.starts_with("push")), lines.iter().position(|l| l.starts_with("pull")));
        assert!(ipush < ipull, "sorted by total, descending:\n{t}");
        let t = a.table(SortBy::Total, true);
        assert!(t.find("\npull").unwrap() < t.find("\npush").unwrap(), "ascending:\n{t}");
        assert!(t.contains("kvstore\n=================\nName "));
        assert!(a.json(SortBy::Count, false).contains("\"push\": {\"Count\": 2, \"Total\": 4.0000, \"Min\": 1.0000, \"Max\": 3.0000, \"Avg\": 2.0000}"));
        a.clear();
        assert!(!a.table(SortBy::Total, false).contains("push"));
    }
}
