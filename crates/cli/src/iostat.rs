//! `tarn pool iostat [-v] [-l] [-q] [-H] [-p] [POOL]... [INTERVAL [COUNT]]`: I/O rates in
//! `zpool iostat`'s layout.
//!
//! ```text
//!               capacity     operations     bandwidth    total_wait    syncq_read   asyncq_write
//! pool        alloc   free   read  write   read  write   read  write   pend  activ   pend  activ
//! ----------  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----
//! tank        1.42G  8.08G      0     57      0  5.84M      -    9ms      0      0      3      1
//! ```
//! The daemon reports running totals since import; this module turns two reports into
//! per-second rates. The first report covers the time since import (as `zpool iostat`'s first
//! covers the time since boot), each later one the interval before it. `total_wait` is the
//! average latency of the accesses in the report's span as the leaves measured it; `-q` shows
//! the queues now: reads are synchronous (`syncq_read`), writes go through a device's
//! write-behind queue (`asyncq_write`: `pend` waiting, `activ` being written).

use std::fmt::Write as _;
use std::path::Path;

use tarn_proto::{IostatPool, IostatRow, ReplyPayload, Request, Response};

use crate::render::Column;
use crate::run::{Outcome, Plan, View};

/// How to show `pool iostat` (the flags and the repetition).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct IostatView {
    pub(crate) verbose: bool,
    pub(crate) latency: bool,
    pub(crate) queues: bool,
    pub(crate) scripted: bool,
    pub(crate) parsable: bool,
    /// Seconds between reports; `None`: one report.
    pub(crate) interval: Option<f64>,
    /// Reports to print; `None` with an interval: until killed.
    pub(crate) count: Option<u64>,
}

impl Eq for IostatView {}

/// Splits `[POOL]... [INTERVAL [COUNT]]` as `zpool iostat` does: a trailing number is the
/// interval, and if the argument before it is a number too, that one is the interval and the
/// last the count.
/// Pools, interval and count of an iostat command line.
type Split = (Vec<String>, Option<f64>, Option<u64>);

fn split_args(mut args: Vec<String>) -> Result<Split, String> {
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let mut interval = None;
    let mut count = None;
    if args.last().is_some_and(|a| number(a)) {
        let last = args.pop().unwrap_or_default();
        if args.last().is_some_and(|a| number(a)) {
            interval = args.pop();
            count = Some(last);
        } else {
            interval = Some(last);
        }
    }
    let interval = match interval {
        None => None,
        Some(text) => match text.parse::<f64>() {
            Ok(seconds) if seconds > 0.0 && seconds.is_finite() => Some(seconds),
            _ => {
                return Err(format!(
                    "invalid interval '{text}': must be a positive number"
                ));
            }
        },
    };
    let count = match count {
        None => None,
        Some(text) => match text.parse::<u64>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                return Err(format!(
                    "invalid count '{text}': must be a whole number above 0"
                ));
            }
        },
    };
    Ok((args, interval, count))
}

/// Plans `pool iostat` (pure).
pub(crate) fn plan(args: crate::args::IostatArgs) -> Result<Plan, Outcome> {
    let (names, interval, count) =
        split_args(args.args).map_err(|why| Outcome::usage(format!("tarn pool iostat: {why}")))?;
    let object = match names.as_slice() {
        [name] => Some(name.clone()),
        _ => None,
    };
    let verb = if object.is_some() {
        "open"
    } else {
        "get iostat"
    };
    Ok(Plan {
        request: Request::PoolIostat { names },
        verb,
        object,
        view: View::Iostat(IostatView {
            verbose: args.verbose,
            latency: args.latency,
            queues: args.queues,
            scripted: args.scripted,
            parsable: args.parsable,
            interval,
            count,
        }),
    })
}

/// One row's rates over one report's span.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Rates {
    name: String,
    alloc: Option<u64>,
    free: Option<u64>,
    read_ops: u64,
    write_ops: u64,
    read_bytes: u64,
    write_bytes: u64,
    total_wait_read_ns: Option<u64>,
    total_wait_write_ns: Option<u64>,
    syncq_read_pend: u64,
    syncq_read_activ: u64,
    asyncq_write_pend: u64,
    asyncq_write_activ: u64,
    children: Vec<Rates>,
}

fn per_second(count: u64, seconds: f64) -> u64 {
    // Rounded to whole units, as zpool prints them; counts stay far below 2^52.
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    #[allow(clippy::cast_sign_loss)]
    let rate = (count as f64 / seconds).round() as u64;
    rate
}

fn average(wait_ns: u64, ops: u64) -> Option<u64> {
    wait_ns.checked_div(ops)
}

/// The rates of `now` against `before` (the totals at the start of the span, or none for
/// the span since import) over `seconds`.
pub(crate) fn rates(now: &IostatRow, before: Option<&IostatRow>, seconds: f64) -> Rates {
    let zero = IostatRow::default();
    let was = before.unwrap_or(&zero);
    let delta = |a: u64, b: u64| a.saturating_sub(b);
    let read_ops = delta(now.read_ops, was.read_ops);
    let write_ops = delta(now.write_ops, was.write_ops);
    let children = now
        .children
        .iter()
        .map(|child| {
            let earlier = was.children.iter().find(|c| c.name == child.name);
            rates(child, earlier.or(before.map(|_| &zero)), seconds)
        })
        .collect();
    Rates {
        name: now.name.clone(),
        alloc: now.alloc,
        free: now.free,
        read_ops: per_second(read_ops, seconds),
        write_ops: per_second(write_ops, seconds),
        read_bytes: per_second(delta(now.read_bytes, was.read_bytes), seconds),
        write_bytes: per_second(delta(now.write_bytes, was.write_bytes), seconds),
        total_wait_read_ns: average(delta(now.read_wait_ns, was.read_wait_ns), read_ops),
        total_wait_write_ns: average(delta(now.write_wait_ns, was.write_wait_ns), write_ops),
        syncq_read_pend: 0,
        syncq_read_activ: now.reads_active,
        asyncq_write_pend: now.writes_pending,
        asyncq_write_activ: now.writes_active,
        children,
    }
}

/// `zpool iostat`'s numbers: plain below 1024, else `1.50K` (no `B`).
fn nicenum(value: u64, parsable: bool) -> String {
    if parsable || value < 1024 {
        value.to_string()
    } else {
        tarn_base::format_size(value)
    }
}

/// A latency as `zpool iostat -l` prints it: `621us`, `9.1ms`, `2s`; `-` for no accesses.
fn nicetime(ns: Option<u64>, parsable: bool) -> String {
    let Some(ns) = ns else {
        return "-".to_string();
    };
    if parsable {
        return ns.to_string();
    }
    let units = [
        ("ns", 1u64),
        ("us", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
    ];
    let (suffix, divisor) = units
        .iter()
        .rev()
        .find(|(_, divisor)| ns >= *divisor)
        .copied()
        .unwrap_or(("ns", 1));
    if ns.is_multiple_of(divisor) {
        return format!("{}{suffix}", ns / divisor);
    }
    #[allow(clippy::cast_precision_loss)]
    let value = ns as f64 / divisor as f64;
    for decimals in [2usize, 1, 0] {
        let text = format!("{value:.decimals$}{suffix}");
        if text.len() <= 5 {
            return text;
        }
    }
    format!("{value:.0}{suffix}")
}

/// Column groups of the table, in order: (title, columns).
fn groups(view: &IostatView) -> Vec<(&'static str, [&'static str; 2])> {
    let mut groups = vec![
        ("capacity", ["alloc", "free"]),
        ("operations", ["read", "write"]),
        ("bandwidth", ["read", "write"]),
    ];
    if view.latency {
        groups.push(("total_wait", ["read", "write"]));
    }
    if view.queues {
        groups.push(("syncq_read", ["pend", "activ"]));
        groups.push(("asyncq_write", ["pend", "activ"]));
    }
    groups
}

fn cells(rates: &Rates, view: &IostatView, depth: usize) -> Vec<String> {
    let p = view.parsable;
    let size = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| nicenum(v, p));
    let indent = if view.scripted {
        String::new()
    } else {
        " ".repeat(depth)
    };
    let mut row = vec![
        format!("{indent}{}", rates.name),
        size(rates.alloc),
        size(rates.free),
        nicenum(rates.read_ops, p),
        nicenum(rates.write_ops, p),
        nicenum(rates.read_bytes, p),
        nicenum(rates.write_bytes, p),
    ];
    if view.latency {
        row.push(nicetime(rates.total_wait_read_ns, p));
        row.push(nicetime(rates.total_wait_write_ns, p));
    }
    if view.queues {
        row.push(nicenum(rates.syncq_read_pend, p));
        row.push(nicenum(rates.syncq_read_activ, p));
        row.push(nicenum(rates.asyncq_write_pend, p));
        row.push(nicenum(rates.asyncq_write_activ, p));
    }
    row
}

fn rows_of(rates: &Rates, view: &IostatView, depth: usize, out: &mut Vec<Vec<String>>) {
    out.push(cells(rates, view, depth));
    if view.verbose {
        for child in &rates.children {
            rows_of(child, view, depth + 2, out);
        }
    }
}

/// The group titles, each centred over its two columns (ZFS leans a spare space left).
fn group_line(view: &IostatView, name_width: usize) -> String {
    let mut line = " ".repeat(name_width);
    for (title, _) in groups(view) {
        let span: usize = 12;
        let left = span.saturating_sub(title.len()).div_ceil(2);
        let right = span.saturating_sub(title.len() + left);
        let _ = write!(line, "  {}{title}{}", " ".repeat(left), " ".repeat(right));
    }
    line.push('\n');
    line
}

/// One report: the pools' rows (and with `-v` their vdevs and devices) as text.
pub(crate) fn render(pools: &[Rates], view: &IostatView, header: bool) -> String {
    let mut out = String::new();
    let mut blocks: Vec<Vec<Vec<String>>> = Vec::new();
    for pool in pools {
        let mut rows = Vec::new();
        rows_of(pool, view, 0, &mut rows);
        blocks.push(rows);
    }
    if view.scripted {
        for row in blocks.iter().flatten() {
            out.push_str(&row.join("\t"));
            out.push('\n');
        }
        return out;
    }
    let name_width = blocks
        .iter()
        .flatten()
        .map(|row| row[0].len())
        .chain([10])
        .max()
        .unwrap_or(10);
    let mut columns = vec![Column {
        header: "pool".into(),
        right: false,
        width_min: name_width,
    }];
    for (_, names) in groups(view) {
        for name in names {
            columns.push(Column {
                header: name.into(),
                right: true,
                width_min: 5,
            });
        }
    }
    let dashes: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| "-".repeat(if i == 0 { name_width } else { c.width_min }))
        .collect();
    let widen = |row: &[String]| -> Vec<String> {
        let mut row = row.to_vec();
        row[0] = format!("{:<name_width$}", row[0]);
        row
    };
    let mut rows = Vec::new();
    if header {
        out.push_str(&group_line(view, name_width));
        let headers: Vec<String> = columns.iter().map(|c| c.header.to_string()).collect();
        rows.push(widen(&headers));
        rows.push(dashes.clone());
    }
    for block in &blocks {
        rows.extend(block.iter().map(|r| widen(r)));
        if view.verbose {
            rows.push(dashes.clone());
        }
    }
    out.push_str(&aligned(&columns, &rows));
    out
}

/// Rows joined with two spaces, numbers right-aligned to width 5 or more.
fn aligned(columns: &[Column], rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    for row in rows {
        for (i, (cell, column)) in row.iter().zip(columns).enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            let width = column.width_min;
            if column.right {
                let _ = write!(out, "{cell:>width$}");
            } else {
                out.push_str(cell);
            }
        }
        out.push('\n');
    }
    out
}

/// Turns a reply into rates against the previous reply (none: since import).
fn report(pools: &[IostatPool], previous: Option<&[IostatPool]>) -> Vec<Rates> {
    pools
        .iter()
        .map(|pool| {
            let before = previous.and_then(|p| p.iter().find(|b| b.name == pool.name));
            let start = before.map_or(pool.imported_ns, |b| b.time_ns);
            #[allow(clippy::cast_precision_loss)]
            let seconds = (pool.time_ns.saturating_sub(start) as f64 / 1e9).max(1e-3);
            rates(&pool.root, before.map(|b| &b.root), seconds)
        })
        .collect()
}

fn text_of(mut rates: Vec<Rates>, view: &IostatView, json: bool, first: bool) -> String {
    if json {
        if !view.verbose {
            for pool in &mut rates {
                pool.children.clear();
            }
        }
        let pools: Vec<serde_json::Value> = rates.iter().map(json_of).collect();
        let report = serde_json::json!({ "pools": pools });
        let mut text = serde_json::to_string_pretty(&report)
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        text.push('\n');
        return text;
    }
    if rates.is_empty() {
        return "no pools available\n".to_string();
    }
    render(&rates, view, first || view.verbose)
}

/// One row as JSON (tarn-proto holds the only serializable types, so this is built by hand;
/// the field names are the `Rates` fields, children only where there are some).
fn json_of(rates: &Rates) -> serde_json::Value {
    let mut value = serde_json::json!({
        "name": rates.name,
        "alloc": rates.alloc,
        "free": rates.free,
        "read_ops": rates.read_ops,
        "write_ops": rates.write_ops,
        "read_bytes": rates.read_bytes,
        "write_bytes": rates.write_bytes,
        "total_wait_read_ns": rates.total_wait_read_ns,
        "total_wait_write_ns": rates.total_wait_write_ns,
        "syncq_read_pend": rates.syncq_read_pend,
        "syncq_read_activ": rates.syncq_read_activ,
        "asyncq_write_pend": rates.asyncq_write_pend,
        "asyncq_write_activ": rates.asyncq_write_activ,
    });
    if !rates.children.is_empty() {
        let children: Vec<serde_json::Value> = rates.children.iter().map(json_of).collect();
        value["children"] = serde_json::Value::Array(children);
    }
    value
}

/// Runs `pool iostat`: one report, or one every interval until `count` were printed.
pub(crate) fn run(plan: &Plan, rundir: &Path, json: bool) -> Outcome {
    use std::io::Write;
    let View::Iostat(view) = &plan.view else {
        unreachable!("iostat::run is called for the iostat view only")
    };
    let mut client = match tarn_daemon::Client::connect_or_start(rundir) {
        Ok(client) => client,
        Err(error) => return Outcome::refused(error.to_string()),
    };
    let mut previous: Option<Vec<IostatPool>> = None;
    let mut printed = 0u64;
    loop {
        let response = match client.call(&plan.request, |_| {}) {
            Ok(response) => response,
            Err(error) => return Outcome::refused(error.to_string()),
        };
        let Response::Ok(ReplyPayload::Iostat(pools)) = response else {
            return crate::run::finish(plan, response, json);
        };
        let text = text_of(
            report(&pools, previous.as_deref()),
            view,
            json,
            printed == 0,
        );
        printed += 1;
        let Some(interval) = view.interval else {
            return Outcome::ok(text);
        };
        let mut stdout = std::io::stdout().lock();
        if stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return Outcome::ok(String::new());
        }
        drop(stdout);
        if view.count.is_some_and(|count| printed >= count) {
            return Outcome::ok(String::new());
        }
        previous = Some(pools);
        std::thread::sleep(std::time::Duration::from_secs_f64(interval));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> IostatView {
        IostatView {
            verbose: false,
            latency: false,
            queues: false,
            scripted: false,
            parsable: false,
            interval: None,
            count: None,
        }
    }

    fn leaf(name: &str, reads: u64, wait: u64) -> IostatRow {
        IostatRow {
            name: name.into(),
            read_ops: reads,
            read_bytes: reads * 4096,
            read_wait_ns: wait,
            write_ops: 10,
            write_bytes: 10 * 131_072,
            write_wait_ns: 10 * 9_100_000,
            writes_pending: 3,
            writes_active: 1,
            ..IostatRow::default()
        }
    }

    fn pool() -> IostatPool {
        let leaves = vec![
            leaf("/d/a", 100, 100 * 621_000),
            leaf("/d/long-device-name", 0, 0),
        ];
        let mut top = IostatRow {
            name: "mirror-0".into(),
            alloc: Some(1 << 30),
            free: Some(9 << 30),
            children: leaves.clone(),
            ..IostatRow::default()
        };
        for leaf in &leaves {
            top.read_ops += leaf.read_ops;
            top.read_bytes += leaf.read_bytes;
            top.read_wait_ns += leaf.read_wait_ns;
            top.write_ops += leaf.write_ops;
            top.write_bytes += leaf.write_bytes;
            top.write_wait_ns += leaf.write_wait_ns;
            top.writes_pending += leaf.writes_pending;
            top.writes_active += leaf.writes_active;
        }
        let mut root = top.clone();
        root.name = "tank".into();
        root.children = vec![top];
        IostatPool {
            name: "tank".into(),
            time_ns: 12_000_000_000,
            imported_ns: 2_000_000_000,
            root,
        }
    }

    fn check(view: &IostatView, expected: &str) {
        let rates = report(&[pool()], None);
        assert_eq!(render(&rates, view, true), expected);
    }

    /// Goal: the default layout, with rates over the 10 s since import.
    #[test]
    fn pools_only() {
        check(
            &view(),
            "              capacity     operations     bandwidth \n\
             pool        alloc   free   read  write   read  write\n\
             ----------  -----  -----  -----  -----  -----  -----\n\
             tank           1G     9G     10      2    40K   256K\n",
        );
    }

    /// Goal: -v adds vdevs and devices (capacity `-` below top level), a dashed line after
    /// each pool; -l and -q add latency and queue groups.
    #[test]
    fn verbose_latency_queues() {
        let mut v = view();
        v.verbose = true;
        v.latency = true;
        v.queues = true;
        let expected = [
            "                           capacity     operations     bandwidth    total_wait  \
             \u{20} syncq_read   asyncq_write",
            "pool                     alloc   free   read  write   read  write   read  write   \
             pend  activ   pend  activ",
            "-----------------------  -----  -----  -----  -----  -----  -----  -----  -----  \
             -----  -----  -----  -----",
            "tank                        1G     9G     10      2    40K   256K  621us  9.1ms  \
             \u{20}   0      0      6      2",
            "  mirror-0                  1G     9G     10      2    40K   256K  621us  9.1ms  \
             \u{20}   0      0      6      2",
            "    /d/a                     -      -     10      1    40K   128K  621us  9.1ms  \
             \u{20}   0      0      3      1",
            "    /d/long-device-name      -      -      0      1      0   128K      -  9.1ms  \
             \u{20}   0      0      3      1",
            "-----------------------  -----  -----  -----  -----  -----  -----  -----  -----  \
             -----  -----  -----  -----",
        ];
        check(&v, &format!("{}\n", expected.join("\n")));
    }

    /// Goal: -H drops headers and padding (tabs), -p prints exact numbers.
    #[test]
    fn scripted_and_parsable() {
        let mut v = view();
        v.scripted = true;
        v.parsable = true;
        v.verbose = true;
        v.latency = true;
        check(
            &v,
            "tank\t1073741824\t9663676416\t10\t2\t40960\t262144\t621000\t9100000\n\
             mirror-0\t1073741824\t9663676416\t10\t2\t40960\t262144\t621000\t9100000\n\
             /d/a\t-\t-\t10\t1\t40960\t131072\t621000\t9100000\n\
             /d/long-device-name\t-\t-\t0\t1\t0\t131072\t-\t9100000\n",
        );
    }

    /// Goal: a later report covers only its interval.
    #[test]
    fn intervals_subtract_the_previous_report() {
        let first = pool();
        let mut second = pool();
        second.time_ns += 2_000_000_000;
        second.root.read_ops += 8;
        second.root.read_wait_ns += 8 * 2_000;
        let rates = report(&[second], Some(&[first]));
        assert_eq!(rates[0].read_ops, 4);
        assert_eq!(rates[0].write_ops, 0);
        assert_eq!(rates[0].total_wait_read_ns, Some(2_000));
        assert_eq!(rates[0].total_wait_write_ns, None);
    }

    /// Goal: trailing numbers are interval and count; bad ones are refused.
    #[test]
    fn arguments_split_like_zpool() {
        let split = |args: &[&str]| split_args(args.iter().map(|s| s.to_string()).collect());
        assert_eq!(split(&[]), Ok((vec![], None, None)));
        assert_eq!(split(&["tank"]), Ok((vec!["tank".into()], None, None)));
        assert_eq!(
            split(&["tank", "2"]),
            Ok((vec!["tank".into()], Some(2.0), None))
        );
        assert_eq!(split(&["1", "3"]), Ok((vec![], Some(1.0), Some(3))));
        assert_eq!(split(&["a", "b", "0.5", "3"]).unwrap().1, Some(0.5));
        assert_eq!(
            split(&["tank", "0"]),
            Err("invalid interval '0': must be a positive number".into())
        );
        assert_eq!(
            split(&["1", "0"]),
            Err("invalid count '0': must be a whole number above 0".into())
        );
        assert_eq!(nicetime(Some(621_000), false), "621us");
        assert_eq!(nicetime(Some(9_100_000), false), "9.1ms");
        assert_eq!(nicetime(Some(2_000_000_000), false), "2s");
        assert_eq!(nicetime(Some(1_234_567), false), "1.2ms");
        assert_eq!(nicetime(Some(12), false), "12ns");
    }
}
