//! `tarn pool iostat [-v] [-l] [-q] [-w] [-r] [-H] [-p] [POOL]... [INTERVAL [COUNT]]`: I/O
//! rates, latencies, queues and histograms in `zpool iostat`'s layouts.
//!
//! ```text
//!               capacity     operations     bandwidth    total_wait     disk_wait    syncq_wait
//! pool        alloc   free   read  write   read  write   read  write   read  write   read  write
//! ----------  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----
//! tank        1.42G  8.08G      0     57      0  5.84M      -    9ms      -  8.1ms      -      -
//! ```
//! (`-l` goes on with `asyncq_wait read write`.) The daemon reports running totals since
//! import; this module turns two reports into per-second rates and averages. The first report
//! covers the time since import (as `zpool iostat`'s first covers the time since boot), each
//! later one the interval before it.
//!
//! `-l`: average latency per class over the span (what each class is in tarn: the engine's
//! `iostat` module). `total_wait` is a read's whole call and a write's acknowledgement to
//! its being applied; `disk_wait` the device's own time; `syncq_wait` a read waiting for the
//! device's queued writes; `asyncq_wait` a write waiting in that write-behind queue. tarn has
//! no sync-write queue and reads no queue of their own, so `syncq_wait write` and
//! `asyncq_wait read` are always `-`, and ZFS's scrub, trim and rebuild columns do not exist.
//! `-q`: the queues now, `syncq_read` (`pend`: reads waiting for queued writes, `activ`:
//! reads in the device) and `asyncq_write` (`pend`: writes queued, `activ`: being written).
//! `-w`: one latency histogram table per row (buckets as rows, labelled by their upper end
//! as ZFS does: 1ns, 3ns, ... 137s; the classes of `-l` as columns). `-r`: request sizes
//! (rows 512 .. 16M; `ind` counts each access; tarn does not aggregate, so `agg` is `-`).

use std::fmt::Write as _;
use std::path::Path;

use tarn_proto::{IostatPool, IostatRow, IostatWait, IostatWaits, ReplyPayload, Request, Response};

use tarn_proto::IOSTAT_LATENCY_BUCKETS as LATENCY_BUCKETS;
use tarn_proto::IOSTAT_SIZE_BUCKETS as SIZE_BUCKETS;

use crate::render::Column;
use crate::run::{Outcome, Plan, View};

/// How to show `pool iostat` (the flags and the repetition).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct IostatView {
    pub(crate) verbose: bool,
    pub(crate) latency: bool,
    pub(crate) queues: bool,
    /// `-w`: latency histograms.
    pub(crate) histograms: bool,
    /// `-r`: request-size histograms.
    pub(crate) sizes: bool,
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
    let tables = u8::from(args.histograms) + u8::from(args.sizes);
    if tables > 1 || (tables == 1 && (args.latency || args.queues)) {
        return Err(Outcome::usage(
            "tarn pool iostat: -w and -r each stand alone: they cannot be combined with each \
             other, -l or -q"
                .to_string(),
        ));
    }
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
            histograms: args.histograms,
            sizes: args.sizes,
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
    disk_wait_read_ns: Option<u64>,
    disk_wait_write_ns: Option<u64>,
    syncq_wait_read_ns: Option<u64>,
    asyncq_wait_write_ns: Option<u64>,
    /// The span's latency histograms, in [`CLASSES`] order.
    histograms: Vec<Vec<u64>>,
    read_sizes: Vec<u64>,
    write_sizes: Vec<u64>,
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

/// The latency classes, in `-l` and `-w` column order (`None`: tarn has no such class).
const CLASSES: [Option<&str>; 8] = [
    Some("total_read"),
    Some("total_write"),
    Some("disk_read"),
    Some("disk_write"),
    Some("syncq_read"),
    None,
    None,
    Some("asyncq_write"),
];

fn class_of<'a>(waits: &'a IostatWaits, name: &str) -> &'a IostatWait {
    match name {
        "total_read" => &waits.total_read,
        "total_write" => &waits.total_write,
        "disk_read" => &waits.disk_read,
        "disk_write" => &waits.disk_write,
        "syncq_read" => &waits.syncq_read,
        _ => &waits.asyncq_write,
    }
}

/// `now - was` bucket by bucket (missing buckets count as 0).
fn delta_vec(now: &[u64], was: &[u64]) -> Vec<u64> {
    now.iter()
        .enumerate()
        .map(|(i, n)| n.saturating_sub(was.get(i).copied().unwrap_or(0)))
        .collect()
}

/// A class's histogram over the span and its average latency.
fn class_delta(now: &IostatWait, was: &IostatWait) -> (Vec<u64>, Option<u64>) {
    let histogram = delta_vec(&now.histogram, &was.histogram);
    let count: u64 = histogram.iter().sum();
    let average = average(now.total_ns.saturating_sub(was.total_ns), count);
    (histogram, average)
}

/// The rates of `now` against `before` (the totals at the start of the span, or none for
/// the span since import) over `seconds`.
pub(crate) fn rates(now: &IostatRow, before: Option<&IostatRow>, seconds: f64) -> Rates {
    let zero = IostatRow::default();
    let was = before.unwrap_or(&zero);
    let delta = |a: u64, b: u64| a.saturating_sub(b);
    let read_ops = delta(now.read_ops, was.read_ops);
    let write_ops = delta(now.write_ops, was.write_ops);
    let mut histograms = Vec::new();
    let mut averages = Vec::new();
    for class in CLASSES.iter().flatten() {
        let (histogram, avg) =
            class_delta(class_of(&now.waits, class), class_of(&was.waits, class));
        histograms.push(histogram);
        averages.push(avg);
    }
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
        total_wait_read_ns: averages[0],
        total_wait_write_ns: averages[1],
        disk_wait_read_ns: averages[2],
        disk_wait_write_ns: averages[3],
        syncq_wait_read_ns: averages[4],
        asyncq_wait_write_ns: averages[5],
        histograms,
        read_sizes: delta_vec(&now.read_sizes, &was.read_sizes),
        write_sizes: delta_vec(&now.write_sizes, &was.write_sizes),
        syncq_read_pend: now.reads_pending,
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
        groups.push(("disk_wait", ["read", "write"]));
        groups.push(("syncq_wait", ["read", "write"]));
        groups.push(("asyncq_wait", ["read", "write"]));
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
    if is_section(rates) {
        // A section heading (`cache`): its devices' rows carry the numbers, as in zpool.
        let columns = 2 * groups(view).len();
        let mut row = vec![format!("{indent}{}", rates.name)];
        row.extend(std::iter::repeat_n("-".to_string(), columns));
        return row;
    }
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
        for wait in [
            rates.total_wait_read_ns,
            rates.total_wait_write_ns,
            rates.disk_wait_read_ns,
            rates.disk_wait_write_ns,
            rates.syncq_wait_read_ns,
            None,
            None,
            rates.asyncq_wait_write_ns,
        ] {
            row.push(nicetime(wait, p));
        }
    }
    if view.queues {
        row.push(nicenum(rates.syncq_read_pend, p));
        row.push(nicenum(rates.syncq_read_activ, p));
        row.push(nicenum(rates.asyncq_write_pend, p));
        row.push(nicenum(rates.asyncq_write_activ, p));
    }
    row
}

/// A row that only groups devices with a capacity of their own (the `cache` heading): no
/// capacity itself, and children that all have one. Interior vdev rows (`replacing-N`) have
/// leaves below them, which have no capacity.
fn is_section(rates: &Rates) -> bool {
    rates.alloc.is_none()
        && !rates.children.is_empty()
        && rates.children.iter().all(|c| c.alloc.is_some())
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
    if view.histograms || view.sizes {
        return render_tables(pools, view);
    }
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

/// A histogram row label: the bucket's upper end in the largest unit it reaches, cut to a
/// whole number as ZFS prints it (`1023 ns` is `1us`); exact nanoseconds with `-p`.
fn latency_label(bucket: usize, parsable: bool) -> String {
    let upper = (2u64 << bucket) - 1;
    if parsable {
        return upper.to_string();
    }
    let units = [("s", 1_000_000_000u64), ("ms", 1_000_000), ("us", 1_000)];
    units.iter().find(|(_, unit)| upper >= *unit).map_or_else(
        || format!("{upper}ns"),
        |(suffix, unit)| format!("{}{suffix}", upper / unit),
    )
}

/// A request-size row label: `512`, `1K` ... `16M` (exact bytes with `-p`).
fn size_label(bucket: usize, parsable: bool) -> String {
    nicenum(512u64 << bucket, parsable)
}

/// Every row to tabulate: the pools, and with `-v` every vdev and device below them.
fn flatten<'a>(rates: &'a Rates, verbose: bool, out: &mut Vec<&'a Rates>) {
    out.push(rates);
    if verbose {
        for child in &rates.children {
            flatten(child, verbose, out);
        }
    }
}

/// `-w` and `-r`: one table per row, buckets as rows (module docs).
fn render_tables(pools: &[Rates], view: &IostatView) -> String {
    let p = view.parsable;
    let mut rows = Vec::new();
    for pool in pools {
        flatten(pool, view.verbose, &mut rows);
    }
    let mut out = String::new();
    for rates in rows {
        let (corner, groups, labels, columns) = if view.histograms {
            let groups = vec![
                ("total_wait", ["read", "write"]),
                ("disk_wait", ["read", "write"]),
                ("syncq_wait", ["read", "write"]),
                ("asyncq_wait", ["read", "write"]),
            ];
            let mut measured = rates.histograms.iter();
            let columns: Vec<Option<&Vec<u64>>> = CLASSES
                .iter()
                .map(|class| class.and_then(|_| measured.next()))
                .collect();
            let labels: Vec<String> = (0..LATENCY_BUCKETS).map(|b| latency_label(b, p)).collect();
            ("latency", groups, labels, columns)
        } else {
            let groups = vec![("read", ["ind", "agg"]), ("write", ["ind", "agg"])];
            let columns = vec![
                Some(&rates.read_sizes),
                None,
                Some(&rates.write_sizes),
                None,
            ];
            let labels: Vec<String> = (0..SIZE_BUCKETS).map(|b| size_label(b, p)).collect();
            ("req_size", groups, labels, columns)
        };
        let cells: Vec<Vec<String>> = labels
            .into_iter()
            .enumerate()
            .map(|(b, label)| {
                let mut row = vec![label];
                for column in &columns {
                    let count = column.map(|c| c.get(b).copied().unwrap_or(0));
                    row.push(count.map_or_else(|| "-".to_string(), |n| nicenum(n, p)));
                }
                row
            })
            .collect();
        out.push_str(&table(&rates.name, corner, &groups, &cells, view.scripted));
    }
    out
}

/// One `-w`/`-r` table: the row's name over the bucket column, the group titles, the
/// column names, dashes, then the buckets (with `-H` only the buckets, tab-separated).
fn table(
    name: &str,
    corner: &'static str,
    groups: &[(&'static str, [&'static str; 2])],
    cells: &[Vec<String>],
    scripted: bool,
) -> String {
    if scripted {
        let mut out = String::new();
        for row in cells {
            out.push_str(&row.join("\t"));
            out.push('\n');
        }
        return out;
    }
    let width = name.len().max(10);
    let mut columns = vec![Column {
        header: corner.into(),
        right: false,
        width_min: width,
    }];
    let mut title = format!("{name:<width$}");
    for (group, names) in groups {
        let left = 12usize.saturating_sub(group.len()).div_ceil(2);
        let right = 12usize.saturating_sub(group.len() + left);
        let _ = write!(title, "  {}{group}{}", " ".repeat(left), " ".repeat(right));
        for column in names {
            columns.push(Column {
                header: (*column).into(),
                right: true,
                width_min: 5,
            });
        }
    }
    let mut rows = vec![
        columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    format!("{:<width$}", c.header)
                } else {
                    c.header.to_string()
                }
            })
            .collect::<Vec<String>>(),
        columns
            .iter()
            .map(|c| "-".repeat(c.width_min))
            .collect::<Vec<String>>(),
    ];
    rows.extend(cells.iter().map(|row| {
        let mut row = row.clone();
        row[0] = format!("{:<width$}", row[0]);
        row
    }));
    let mut out = title.trim_end().to_string();
    out.push('\n');
    out.push_str(&aligned(&columns, &rows));
    out.push('\n');
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
        let pools: Vec<serde_json::Value> = rates.iter().map(|r| json_of(r, view)).collect();
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
fn json_of(rates: &Rates, view: &IostatView) -> serde_json::Value {
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
        "disk_wait_read_ns": rates.disk_wait_read_ns,
        "disk_wait_write_ns": rates.disk_wait_write_ns,
        "syncq_wait_read_ns": rates.syncq_wait_read_ns,
        "asyncq_wait_write_ns": rates.asyncq_wait_write_ns,
        "syncq_read_pend": rates.syncq_read_pend,
        "syncq_read_activ": rates.syncq_read_activ,
        "asyncq_write_pend": rates.asyncq_write_pend,
        "asyncq_write_activ": rates.asyncq_write_activ,
    });
    if view.histograms {
        let mut measured = rates.histograms.iter();
        let mut classes = serde_json::Map::new();
        for class in CLASSES.iter().flatten() {
            let histogram = measured.next().cloned().unwrap_or_default();
            classes.insert((*class).to_string(), serde_json::json!(histogram));
        }
        let upper: Vec<u64> = (0..LATENCY_BUCKETS).map(|b| (2u64 << b) - 1).collect();
        value["latency_histogram_upper_ns"] = serde_json::json!(upper);
        value["latency_histograms"] = serde_json::Value::Object(classes);
    }
    if view.sizes {
        let floor: Vec<u64> = (0..SIZE_BUCKETS).map(|b| 512u64 << b).collect();
        value["request_size_floor_bytes"] = serde_json::json!(floor);
        value["request_sizes"] = serde_json::json!({
            "read": rates.read_sizes,
            "write": rates.write_sizes,
        });
    }
    if !rates.children.is_empty() {
        let children: Vec<serde_json::Value> =
            rates.children.iter().map(|c| json_of(c, view)).collect();
        value["children"] = serde_json::Value::Array(children);
    }
    value
}

/// Runs `pool iostat`: one report, or one every interval until `count` were printed.
pub(crate) fn run(plan: &Plan, rundir: &Path, json: bool) -> Outcome {
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
            return crate::run::finish(plan, response, None);
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
        if !crate::run::print_now(&text) {
            return Outcome::ok(String::new());
        }
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
            histograms: false,
            sizes: false,
            scripted: false,
            parsable: false,
            interval: None,
            count: None,
        }
    }

    /// A class of `count` accesses of `each_ns` (all in that latency's bucket).
    fn wait(count: u64, each_ns: u64) -> IostatWait {
        let mut histogram = vec![0u64; LATENCY_BUCKETS];
        histogram[63 - each_ns.max(1).leading_zeros() as usize] = count;
        IostatWait {
            total_ns: count * each_ns,
            histogram,
        }
    }

    /// Reads of 621 us (500 us in the device, 121 us waiting for queued writes), writes of
    /// 9.1 ms from acknowledgement (8 ms in the device, 1.1 ms in the queue).
    fn leaf(name: &str, reads: u64, wait_ns: u64) -> IostatRow {
        let each = wait_ns.checked_div(reads).unwrap_or(0);
        let waits = IostatWaits {
            total_read: wait(reads, each),
            total_write: wait(10, 9_100_000),
            disk_read: wait(reads, each.saturating_sub(121_000)),
            disk_write: wait(10, 8_000_000),
            syncq_read: wait(reads, each.min(121_000)),
            asyncq_write: wait(10, 1_100_000),
        };
        let mut read_sizes = vec![0u64; SIZE_BUCKETS];
        read_sizes[3] = reads;
        let mut write_sizes = vec![0u64; SIZE_BUCKETS];
        write_sizes[8] = 10;
        IostatRow {
            name: name.into(),
            read_ops: reads,
            read_bytes: reads * 4096,
            read_wait_ns: wait_ns,
            write_ops: 10,
            write_bytes: 10 * 131_072,
            write_wait_ns: 10 * 9_100_000,
            waits,
            read_sizes,
            write_sizes,
            reads_pending: 2,
            writes_pending: 3,
            writes_active: 1,
            ..IostatRow::default()
        }
    }

    fn add_vec(sum: &mut Vec<u64>, more: &[u64]) {
        sum.resize(sum.len().max(more.len()), 0);
        for (s, m) in sum.iter_mut().zip(more) {
            *s += m;
        }
    }

    fn add_wait(sum: &mut IostatWait, more: &IostatWait) {
        sum.total_ns += more.total_ns;
        add_vec(&mut sum.histogram, &more.histogram);
    }

    fn add_row(sum: &mut IostatRow, leaf: &IostatRow) {
        sum.read_ops += leaf.read_ops;
        sum.read_bytes += leaf.read_bytes;
        sum.read_wait_ns += leaf.read_wait_ns;
        sum.write_ops += leaf.write_ops;
        sum.write_bytes += leaf.write_bytes;
        sum.write_wait_ns += leaf.write_wait_ns;
        sum.reads_pending += leaf.reads_pending;
        sum.writes_pending += leaf.writes_pending;
        sum.writes_active += leaf.writes_active;
        let (w, m) = (&mut sum.waits, &leaf.waits);
        add_wait(&mut w.total_read, &m.total_read);
        add_wait(&mut w.total_write, &m.total_write);
        add_wait(&mut w.disk_read, &m.disk_read);
        add_wait(&mut w.disk_write, &m.disk_write);
        add_wait(&mut w.syncq_read, &m.syncq_read);
        add_wait(&mut w.asyncq_write, &m.asyncq_write);
        add_vec(&mut sum.read_sizes, &leaf.read_sizes);
        add_vec(&mut sum.write_sizes, &leaf.write_sizes);
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
            add_row(&mut top, leaf);
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
             \u{20}  disk_wait    syncq_wait    asyncq_wait   syncq_read   asyncq_write",
            "pool                     alloc   free   read  write   read  write   read  write \
             \u{20} read  write   read  write   read  write   pend  activ   pend  activ",
            "-----------------------  -----  -----  -----  -----  -----  -----  -----  ----- \
             \u{20}-----  -----  -----  -----  -----  -----  -----  -----  -----  -----",
            "tank                        1G     9G     10      2    40K   256K  621us  9.1ms \
             \u{20}500us    8ms  121us      -      -  1.1ms      4      0      6      2",
            "  mirror-0                  1G     9G     10      2    40K   256K  621us  9.1ms \
             \u{20}500us    8ms  121us      -      -  1.1ms      4      0      6      2",
            "    /d/a                     -      -     10      1    40K   128K  621us  9.1ms \
             \u{20}500us    8ms  121us      -      -  1.1ms      2      0      3      1",
            "    /d/long-device-name      -      -      0      1      0   128K      -  9.1ms \
             \u{20}    -    8ms      -      -      -  1.1ms      2      0      3      1",
            "-----------------------  -----  -----  -----  -----  -----  -----  -----  ----- \
             \u{20}-----  -----  -----  -----  -----  -----  -----  -----  -----  -----",
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
            "tank\t1073741824\t9663676416\t10\t2\t40960\t262144\t621000\t9100000\t500000\t\
             8000000\t121000\t-\t-\t1100000\n\
             mirror-0\t1073741824\t9663676416\t10\t2\t40960\t262144\t621000\t9100000\t\
             500000\t8000000\t121000\t-\t-\t1100000\n\
             /d/a\t-\t-\t10\t1\t40960\t131072\t621000\t9100000\t500000\t8000000\t121000\t\
             -\t-\t1100000\n\
             /d/long-device-name\t-\t-\t0\t1\t0\t131072\t-\t9100000\t-\t8000000\t-\t-\t-\t\
             1100000\n",
        );
    }

    /// Goal: -w prints ZFS's histogram table for each row: the row's name over the bucket
    /// column, the four classes of -l as column groups, 37 rows labelled by the bucket's
    /// upper end (1ns ... 137s), counts in the right rows, `-` where tarn has no class.
    #[test]
    fn latency_histograms() {
        let mut v = view();
        v.histograms = true;
        let rates = report(&[pool()], None);
        let text = render(&rates, &v, true);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3 + 37 + 1, "{text}");
        assert_eq!(
            lines[0],
            "tank         total_wait     disk_wait    syncq_wait    asyncq_wait"
        );
        assert_eq!(
            lines[1],
            "latency      read  write   read  write   read  write   read  write"
        );
        assert_eq!(
            lines[3],
            "1ns             0      0      0      0      0      -      -      0"
        );
        // 621 us reads (bucket 19: 524288..1048575 ns, labelled 1ms), 500 us in the
        // device (bucket 18, 524us), 121 us waiting (bucket 16, 131us); writes of 9.1 ms
        // (bucket 23, 16ms), 8 ms in the device (bucket 22, 8ms), 1.1 ms queued (bucket
        // 20, 2ms).
        let row = |label: &str| {
            lines
                .iter()
                .find(|l| l.split_whitespace().next() == Some(label))
                .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
                .unwrap()
        };
        assert_eq!(row("131us"), "0 0 0 0 100 - - 0");
        assert_eq!(row("524us"), "0 0 100 0 0 - - 0");
        assert_eq!(row("1ms"), "100 0 0 0 0 - - 0");
        assert_eq!(row("2ms"), "0 0 0 0 0 - - 20");
        assert_eq!(row("8ms"), "0 0 0 20 0 - - 0");
        assert_eq!(row("16ms"), "0 20 0 0 0 - - 0");
        assert_eq!(
            lines[39],
            "137s            0      0      0      0      0      -      -      0"
        );
        v.verbose = true;
        let names: Vec<String> = render(&rates, &v, true)
            .lines()
            .filter(|l| l.contains("total_wait"))
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect();
        assert_eq!(names, ["tank", "mirror-0", "/d/a", "/d/long-device-name"]);
        v.verbose = false;
        v.parsable = true;
        v.scripted = true;
        let scripted = render(&rates, &v, true);
        assert_eq!(scripted.lines().count(), 37);
        assert_eq!(
            scripted.lines().nth(19),
            Some("1048575\t100\t0\t0\t0\t0\t-\t-\t0")
        );
    }

    /// Goal: -r prints request sizes, 512 to 16M, reads and writes (`agg` is `-`), and
    /// -j carries both kinds of histogram with their bucket edges.
    #[test]
    fn request_sizes_and_json() {
        let mut v = view();
        v.sizes = true;
        let rates = report(&[pool()], None);
        let text = render(&rates, &v, true);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3 + 16 + 1, "{text}");
        assert_eq!(lines[0], "tank            read          write");
        assert_eq!(lines[1], "req_size      ind    agg    ind    agg");
        assert_eq!(lines[3], "512             0      -      0      -");
        assert_eq!(lines[6], "4K            100      -      0      -");
        assert_eq!(lines[11], "128K            0      -     20      -");
        assert_eq!(lines[18], "16M             0      -      0      -");
        v.histograms = true;
        let json: serde_json::Value =
            serde_json::from_str(&text_of(rates, &v, true, true)).unwrap();
        let tank = &json["pools"][0];
        assert_eq!(tank["request_sizes"]["read"][3], 100);
        assert_eq!(tank["request_size_floor_bytes"][3], 4096);
        assert_eq!(tank["latency_histograms"]["total_read"][19], 100);
        assert_eq!(tank["latency_histograms"]["asyncq_write"][20], 20);
        assert_eq!(tank["latency_histogram_upper_ns"][19], 1_048_575);
        assert_eq!(tank["disk_wait_write_ns"], 8_000_000);
        assert_eq!(tank["syncq_wait_read_ns"], 121_000);
        assert_eq!(tank["syncq_read_pend"], 4);
    }

    /// Goal: a later report covers only its interval.
    #[test]
    fn intervals_subtract_the_previous_report() {
        let first = pool();
        let mut second = pool();
        second.time_ns += 2_000_000_000;
        second.root.read_ops += 8;
        add_wait(&mut second.root.waits.total_read, &wait(8, 2_000));
        add_wait(&mut second.root.waits.disk_write, &wait(2, 300));
        second.root.read_sizes[15] += 8;
        let rates = report(&[second], Some(&[first]));
        assert_eq!(rates[0].read_ops, 4);
        assert_eq!(rates[0].write_ops, 0);
        assert_eq!(rates[0].total_wait_read_ns, Some(2_000));
        assert_eq!(rates[0].total_wait_write_ns, None);
        assert_eq!(rates[0].disk_wait_write_ns, Some(300));
        assert_eq!(rates[0].disk_wait_read_ns, None);
        assert_eq!(
            rates[0].histograms[0][10], 8,
            "2 us accesses in the 1-2 us bucket"
        );
        assert_eq!(rates[0].histograms[0].iter().sum::<u64>(), 8);
        assert_eq!(rates[0].read_sizes[15], 8);
        assert_eq!(rates[0].read_sizes.iter().sum::<u64>(), 8);
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
