//! Pure rendering of daemon replies in ZFS's layouts (`zpool list`, `get`, `status`,
//! `import`, `history`, `create -n`): data in, the exact text out.

use std::fmt::Write as _;

use tarn_base::format_size;
use tarn_proto::ImportInfo;
use tarn_proto::{
    HistoryPool, ImportablePool, PoolLayout, PoolListRow, PoolStatusInfo, Progress, PropertyRow,
    TxgRow, VdevNodeKind, VdevRole, VdevStatus,
};

/// The one-line refusal: `cannot <verb> '<object>': <message>` (STYLE.md §6); without an
/// object, `cannot <verb>: <message>`.
pub(crate) fn error_line(verb: &str, object: Option<&str>, message: &str) -> String {
    match object {
        Some(object) => format!("cannot {verb} '{object}': {message}"),
        None => format!("cannot {verb}: {message}"),
    }
}

/// One progress report of long work (`scrub -w`): `scrub: 1.10G issued of 5G, 22.00% done`,
/// or without a total yet `scrub: 0B issued`.
pub(crate) fn progress_line(progress: &Progress) -> String {
    let done = format_size(progress.done);
    if progress.total == 0 {
        return format!("{}: {done} issued", progress.operation);
    }
    let percent = progress.done.min(progress.total) as f64 * 100.0 / progress.total as f64;
    let total = format_size(progress.total);
    format!(
        "{}: {done} issued of {total}, {percent:.2}% done",
        progress.operation
    )
}

/// Lines a successful command wants the admin to read.
pub(crate) fn notice(lines: &[String]) -> String {
    lines.iter().map(|line| format!("{line}\n")).collect()
}

/// A column of a table: header, alignment, and the narrowest width ZFS gives it.
pub(crate) struct Column {
    pub(crate) header: std::borrow::Cow<'static, str>,
    pub(crate) right: bool,
    pub(crate) width_min: usize,
}

/// ZFS's property table layout: columns separated by two spaces (a tab when `scripted`,
/// which also drops the header and all padding), right-aligned numbers, and the last column
/// unpadded when it is left-aligned.
pub(crate) fn table(columns: &[Column], rows: &[Vec<String>], scripted: bool) -> String {
    let mut out = String::new();
    if scripted {
        for row in rows {
            out.push_str(&row.join("\t"));
            out.push('\n');
        }
        return out;
    }
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, column)| {
            let values = rows.iter().map(|row| row[i].len());
            values
                .chain([column.header.len(), column.width_min])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let headers: Vec<String> = columns.iter().map(|c| c.header.to_string()).collect();
    for row in std::iter::once(&headers).chain(rows) {
        assert_eq!(row.len(), columns.len(), "table row width");
        for (i, (cell, column)) in row.iter().zip(columns).enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            let width = widths[i];
            if column.right {
                let _ = write!(out, "{cell:>width$}");
            } else if i + 1 == columns.len() {
                out.push_str(cell);
            } else {
                let _ = write!(out, "{cell:<width$}");
            }
        }
        out.push('\n');
    }
    out
}

/// A column of `pool list`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListColumn {
    Name,
    Size,
    Alloc,
    Free,
    Checkpoint,
    Expandsize,
    Frag,
    Cap,
    Dedup,
    Health,
    Altroot,
    Guid,
}

/// Names `-o` accepts per column (property name first, then ZFS's column alias).
const LIST_COLUMNS: &[(ListColumn, &[&str])] = &[
    (ListColumn::Name, &["name"]),
    (ListColumn::Size, &["size"]),
    (ListColumn::Alloc, &["allocated", "alloc"]),
    (ListColumn::Free, &["free"]),
    (ListColumn::Checkpoint, &["checkpoint", "ckpoint"]),
    (ListColumn::Expandsize, &["expandsize", "expandsz"]),
    (ListColumn::Frag, &["fragmentation", "frag"]),
    (ListColumn::Cap, &["capacity", "cap"]),
    (ListColumn::Dedup, &["dedupratio", "dedup"]),
    (ListColumn::Health, &["health"]),
    (ListColumn::Altroot, &["altroot"]),
    (ListColumn::Guid, &["guid"]),
];

/// Columns of `pool list` without `-o`.
pub(crate) const LIST_DEFAULT: &[ListColumn] = &[
    ListColumn::Name,
    ListColumn::Size,
    ListColumn::Alloc,
    ListColumn::Free,
    ListColumn::Checkpoint,
    ListColumn::Expandsize,
    ListColumn::Frag,
    ListColumn::Cap,
    ListColumn::Dedup,
    ListColumn::Health,
    ListColumn::Altroot,
];

/// Parses `-o name,size,...` for `pool list`.
pub(crate) fn list_columns(spec: &str) -> Result<Vec<ListColumn>, String> {
    spec.split(',')
        .map(|word| {
            let lower = word.trim().to_ascii_lowercase();
            LIST_COLUMNS
                .iter()
                .find(|(_, names)| names.contains(&lower.as_str()))
                .map(|(column, _)| *column)
                .ok_or_else(|| {
                    let valid: Vec<&str> = LIST_COLUMNS.iter().map(|(_, names)| names[0]).collect();
                    format!(
                        "invalid property '{word}': valid columns are {}",
                        valid.join(", ")
                    )
                })
        })
        .collect()
}

impl ListColumn {
    fn column(self) -> Column {
        let (header, right, width_min) = match self {
            ListColumn::Name => ("NAME", false, 0),
            ListColumn::Size => ("SIZE", true, 5),
            ListColumn::Alloc => ("ALLOC", true, 5),
            ListColumn::Free => ("FREE", true, 5),
            ListColumn::Checkpoint => ("CKPOINT", true, 5),
            ListColumn::Expandsize => ("EXPANDSZ", true, 5),
            ListColumn::Frag => ("FRAG", true, 5),
            ListColumn::Cap => ("CAP", true, 5),
            ListColumn::Dedup => ("DEDUP", true, 5),
            ListColumn::Health => ("HEALTH", true, 8),
            ListColumn::Altroot => ("ALTROOT", false, 0),
            ListColumn::Guid => ("GUID", true, 5),
        };
        Column {
            header: header.into(),
            right,
            width_min,
        }
    }

    pub(crate) fn value(self, row: &PoolListRow, parsable: bool) -> String {
        let size = |bytes: u64| {
            if parsable {
                bytes.to_string()
            } else {
                format_size(bytes)
            }
        };
        let percent = |value: u64| {
            if parsable {
                value.to_string()
            } else {
                format!("{value}%")
            }
        };
        match self {
            ListColumn::Name => row.name.clone(),
            ListColumn::Size => size(row.size),
            ListColumn::Alloc => size(row.alloc),
            ListColumn::Free => size(row.free),
            ListColumn::Checkpoint => row.checkpoint.map_or_else(|| "-".to_string(), size),
            ListColumn::Expandsize => row.expandsize.map_or_else(|| "-".to_string(), size),
            ListColumn::Frag => row.frag.map_or_else(|| "-".to_string(), percent),
            ListColumn::Cap => percent(row.cap),
            ListColumn::Dedup => {
                let ratio = format!(
                    "{}.{:02}",
                    row.dedup_hundredths / 100,
                    row.dedup_hundredths % 100
                );
                if parsable { ratio } else { format!("{ratio}x") }
            }
            ListColumn::Health => row.health.clone(),
            ListColumn::Altroot => row.altroot.clone().unwrap_or_else(|| "-".to_string()),
            ListColumn::Guid => row.guid.to_string(),
        }
    }
}

/// `tarn pool list`.
pub(crate) fn pool_list(
    rows: &[PoolListRow],
    columns: &[ListColumn],
    scripted: bool,
    parsable: bool,
) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            columns
                .iter()
                .map(|column| column.value(row, parsable))
                .collect()
        })
        .collect();
    let columns: Vec<Column> = columns.iter().map(|column| column.column()).collect();
    table(&columns, &cells, scripted)
}

/// A field of `pool get -o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GetField {
    Name,
    Property,
    Value,
    Source,
}

/// Fields of `pool get` without `-o`.
pub(crate) const GET_DEFAULT: &[GetField] = &[
    GetField::Name,
    GetField::Property,
    GetField::Value,
    GetField::Source,
];

/// Parses `-o name,property,value,source` for `pool get`.
pub(crate) fn get_fields(spec: &str) -> Result<Vec<GetField>, String> {
    spec.split(',')
        .map(|word| match word.trim().to_ascii_lowercase().as_str() {
            "name" => Ok(GetField::Name),
            "property" => Ok(GetField::Property),
            "value" => Ok(GetField::Value),
            "source" => Ok(GetField::Source),
            _ => Err(format!(
                "invalid field '{word}': valid fields are name, property, value, source"
            )),
        })
        .collect()
}

/// The human form of an exact property value (what `zpool get` shows without `-p`).
pub(crate) fn human_value(property: &str, value: &str) -> String {
    let Ok(number) = value.parse::<u64>() else {
        if matches!(property, "dedupratio" | "bcloneratio") && value.parse::<f64>().is_ok() {
            return format!("{value}x");
        }
        return value.to_string();
    };
    match property {
        "size" | "allocated" | "free" | "freeing" | "leaked" | "checkpoint" | "expandsize"
        | "bcloneused" | "bclonesaved" => format_size(number),
        "capacity" | "fragmentation" => format!("{number}%"),
        "dedupratio" | "bcloneratio" => format!("{value}x"),
        _ => value.to_string(),
    }
}

/// `tarn pool get`.
pub(crate) fn properties(
    rows: &[PropertyRow],
    fields: &[GetField],
    scripted: bool,
    parsable: bool,
) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            fields
                .iter()
                .map(|field| match field {
                    GetField::Name => row.name.clone(),
                    GetField::Property => row.property.clone(),
                    GetField::Value if parsable => row.value.clone(),
                    GetField::Value => human_value(&row.property, &row.value),
                    GetField::Source => row.source.clone(),
                })
                .collect()
        })
        .collect();
    let columns: Vec<Column> = fields
        .iter()
        .map(|field| {
            let header = match field {
                GetField::Name => "NAME",
                GetField::Property => "PROPERTY",
                GetField::Value => "VALUE",
                GetField::Source => "SOURCE",
            };
            Column {
                header: header.into(),
                right: false,
                width_min: 0,
            }
        })
        .collect();
    table(&columns, &cells, scripted)
}

/// A status or action text: continuation lines are indented with a tab, as ZFS does.
fn push_labelled(out: &mut String, label: &str, text: &str) {
    let mut lines = text.lines();
    let _ = writeln!(out, "{label} {}", lines.next().unwrap_or(""));
    for line in lines {
        let _ = writeln!(out, "\t{line}");
    }
}

/// ZFS's `nicenum` for error counters: plain below 1024, else `1.50K`.
pub(crate) fn counter(value: u64) -> String {
    if value < 1024 {
        value.to_string()
    } else {
        format_size(value)
    }
}

/// Width of the NAME column: the widest name plus its indentation (2 per level), counting
/// spares at the first level, and at least 10.
fn name_width(config: &VdevStatus, spares: &[VdevStatus]) -> usize {
    fn widest(node: &VdevStatus, depth: usize) -> usize {
        let own = node.name.len() + depth;
        node.children
            .iter()
            .map(|child| widest(child, depth + 2))
            .fold(own, usize::max)
    }
    let spares = spares.iter().map(|spare| widest(spare, 2));
    spares.fold(widest(config, 0), usize::max).max(10)
}

/// The class sections after the data vdevs, in ZFS's order.
const CLASSES: &[(VdevRole, &str)] = &[(VdevRole::Special, "special"), (VdevRole::Log, "logs")];

/// What the config table shows besides names and states.
#[derive(Clone, Copy)]
struct Counters {
    /// READ, WRITE, CKSUM (not for spares).
    errors: bool,
    /// SLOW (`status -s`): a leaf's count, `-` for interior nodes as ZFS prints them.
    slow: bool,
}

fn status_row(out: &mut String, node: &VdevStatus, depth: usize, width: usize, shown: Counters) {
    let indent = " ".repeat(depth);
    let name_width = width - depth;
    let _ = write!(
        out,
        "\t{indent}{:<name_width$}  {:<8}",
        node.name, node.state
    );
    if shown.errors {
        let _ = write!(
            out,
            " {:>5} {:>5} {:>5}",
            counter(node.read),
            counter(node.write),
            counter(node.cksum)
        );
        if shown.slow {
            let slow = match node.kind {
                VdevNodeKind::Leaf => counter(node.slow),
                _ => "-".to_string(),
            };
            let _ = write!(out, " {slow:>5}");
        }
    }
    if let Some(note) = &node.note {
        let _ = write!(out, "  {note}");
    }
    out.push('\n');
    for child in &node.children {
        status_row(out, child, depth + 2, width, shown);
    }
}

fn status_config(out: &mut String, config: &VdevStatus, spares: &[VdevStatus], slow: bool) {
    let width = name_width(config, spares);
    let _ = write!(
        out,
        "\t{:<width$}  {:<8} {:>5} {:>5} {:>5}",
        "NAME", "STATE", "READ", "WRITE", "CKSUM"
    );
    out.push_str(if slow { "  SLOW\n" } else { "\n" });
    let counters = Counters { errors: true, slow };
    let mut root = config.clone();
    root.children.retain(|child| child.role == VdevRole::Data);
    status_row(out, &root, 0, width, counters);
    for (role, heading) in CLASSES {
        let mut members = config
            .children
            .iter()
            .filter(|child| child.role == *role)
            .peekable();
        if members.peek().is_some() {
            let _ = writeln!(out, "\t{heading}\t");
        }
        for member in members {
            status_row(out, member, 2, width, counters);
        }
    }
    let caches: Vec<&VdevStatus> = config
        .children
        .iter()
        .filter(|child| child.role == VdevRole::Cache)
        .collect();
    if !caches.is_empty() {
        out.push_str("\tcache\n");
        for cache in caches {
            status_row(out, cache, 2, width, counters);
        }
    }
    if !spares.is_empty() {
        out.push_str("\tspares\n");
        for spare in spares {
            status_row(
                out,
                spare,
                2,
                width,
                Counters {
                    errors: false,
                    slow: false,
                },
            );
        }
    }
}

fn status_one(out: &mut String, pool: &PoolStatusInfo, verbose: bool, slow: bool) {
    let _ = writeln!(out, "  pool: {}", pool.name);
    let _ = writeln!(out, " state: {}", pool.state);
    if let Some(status) = &pool.status {
        push_labelled(out, "status:", status);
    }
    if let Some(action) = &pool.action {
        push_labelled(out, "action:", action);
    }
    if let Some(see) = &pool.see {
        let _ = writeln!(out, "   see: {see}");
    }
    push_labelled(
        out,
        "  scan:",
        pool.scan.as_deref().unwrap_or("none requested"),
    );
    out.push_str("config:\n\n");
    status_config(out, &pool.config, &pool.spares, slow);
    out.push('\n');
    if pool.error_count == 0 {
        out.push_str("errors: No known data errors\n");
    } else if !verbose {
        let _ = writeln!(
            out,
            "errors: {} data errors, use '-v' for a list",
            pool.error_count
        );
    } else {
        out.push_str("errors: Permanent errors have been detected in the following files:\n\n");
        for path in &pool.errors {
            let _ = writeln!(out, "        {path}");
        }
    }
}

/// `tarn pool status`: one block per pool, separated by a blank line.
pub(crate) fn status(pools: &[PoolStatusInfo], verbose: bool) -> String {
    status_with(pools, verbose, false)
}

/// `tarn pool status [-v] [-s]`.
pub(crate) fn status_with(pools: &[PoolStatusInfo], verbose: bool, slow: bool) -> String {
    let mut out = String::new();
    for (i, pool) in pools.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        status_one(&mut out, pool, verbose, slow);
    }
    out
}

/// `tarn pool status -x`: only pools with a problem (`status` set). Named pools that are
/// fine get `pool 'x' is healthy`; with no names and nothing wrong, `all pools are healthy`.
pub(crate) fn status_explain(
    pools: &[PoolStatusInfo],
    names: &[String],
    verbose: bool,
    slow: bool,
) -> String {
    let unhealthy: Vec<PoolStatusInfo> = pools
        .iter()
        .filter(|pool| pool.status.is_some())
        .cloned()
        .collect();
    if names.is_empty() {
        if unhealthy.is_empty() {
            return "all pools are healthy\n".to_string();
        }
        return status_with(&unhealthy, verbose, slow);
    }
    let mut out = String::new();
    let mut first_block = true;
    for name in names {
        match unhealthy.iter().find(|pool| &pool.name == name) {
            Some(pool) => {
                if !first_block {
                    out.push('\n');
                }
                first_block = false;
                status_one(&mut out, pool, verbose, slow);
            }
            None => {
                let _ = writeln!(out, "pool '{name}' is healthy");
            }
        }
    }
    out
}

fn import_row(out: &mut String, node: &VdevStatus, depth: usize, width: usize) {
    let indent = " ".repeat(depth);
    let name_width = width - depth;
    let _ = write!(out, "\t{indent}{:<name_width$}  {}", node.name, node.state);
    if let Some(note) = &node.note {
        let _ = write!(out, "  {note}");
    }
    out.push('\n');
    for child in &node.children {
        import_row(out, child, depth + 2, width);
    }
}

fn import_one(out: &mut String, pool: &ImportablePool) {
    let _ = writeln!(out, "   pool: {}", pool.name);
    let _ = writeln!(out, "     id: {}", pool.guid);
    let _ = writeln!(out, "  state: {}", pool.state);
    if let Some(status) = &pool.status {
        push_labelled(out, " status:", status);
    }
    push_labelled(out, " action:", &pool.action);
    if let Some(see) = &pool.see {
        let _ = writeln!(out, "    see: {see}");
    }
    out.push_str(" config:\n\n");
    let width = name_width(&pool.config, &pool.spares);
    let mut root = pool.config.clone();
    root.children.retain(|child| child.role == VdevRole::Data);
    import_row(out, &root, 0, width);
    let caches: Vec<&VdevStatus> = pool
        .config
        .children
        .iter()
        .filter(|child| child.role == VdevRole::Cache)
        .collect();
    if !caches.is_empty() {
        out.push_str("\tcache\n");
        for cache in caches {
            let _ = writeln!(out, "\t  {}", cache.name);
        }
    }
    if !pool.spares.is_empty() {
        out.push_str("\tspares\n");
        for spare in &pool.spares {
            let _ = writeln!(out, "\t  {}", spare.name);
        }
    }
    for (role, heading) in CLASSES {
        let mut members = pool
            .config
            .children
            .iter()
            .filter(|child| child.role == *role)
            .peekable();
        if members.peek().is_some() {
            let _ = writeln!(out, "\t{heading}\t");
        }
        for member in members {
            import_row(out, member, 2, width);
        }
    }
}

/// `tarn pool import` without a pool: one block per importable pool.
pub(crate) fn importable(pools: &[ImportablePool]) -> String {
    let mut out = String::new();
    for (i, pool) in pools.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        import_one(&mut out, pool);
    }
    out
}

fn layout_node(out: &mut String, node: &VdevStatus, indent: usize) {
    let _ = writeln!(out, "\t{}{}", " ".repeat(indent), node.name);
    for child in &node.children {
        layout_node(out, child, indent + 2);
    }
}

/// `tarn pool create -n`, and `tarn pool add -n` (`update`).
pub(crate) fn layout(name: &str, update: bool, layout: &PoolLayout) -> String {
    let mut out = if update {
        format!("would update '{name}' to the following configuration:\n\n")
    } else {
        format!("would create '{name}' with the following layout:\n\n")
    };
    let _ = writeln!(out, "\t{}", layout.config.name);
    let sections = [
        (VdevRole::Data, None),
        (VdevRole::Special, Some("special")),
        (VdevRole::Log, Some("logs")),
        (VdevRole::Cache, Some("cache")),
    ];
    for (role, heading) in sections {
        let mut members = layout
            .config
            .children
            .iter()
            .filter(|child| child.role == role)
            .peekable();
        if let Some(heading) = heading
            && members.peek().is_some()
        {
            let _ = writeln!(out, "\t{heading}");
        }
        for member in members {
            layout_node(&mut out, member, 2);
        }
    }
    if !layout.spares.is_empty() {
        out.push_str("\tspares\n");
        for spare in &layout.spares {
            layout_node(&mut out, spare, 2);
        }
    }
    out
}

/// `tarn pool import` that rewound or previewed: the txg opened and, when older than the
/// newest, exactly which txgs and how much time the rewind discards.
pub(crate) fn imported(info: &ImportInfo) -> String {
    let at = |txg: u64, time: u64| format!("{} (txg {txg})", tarn_daemon::utc_timestamp(time));
    let opened = at(info.txg, info.timestamp);
    let pool = &info.pool;
    if info.txg >= info.newest_txg {
        return match info.dry_run {
            true => format!(
                "pool '{pool}' would import at its newest txg, {opened}, discarding nothing; \
                 nothing was imported\n"
            ),
            false => String::new(),
        };
    }
    let newest = at(info.newest_txg, info.newest_timestamp);
    let span = info.newest_timestamp.saturating_sub(info.timestamp);
    let discarded = format!(
        "txgs {} to {} (the last {} of changes, up to {newest})",
        info.txg + 1,
        info.newest_txg,
        span_text(span),
    );
    match info.dry_run {
        true => format!(
            "would return pool '{pool}' to its state as of {opened}, discarding {discarded}; \
             nothing was imported\n"
        ),
        false => {
            format!("pool '{pool}' returned to its state as of {opened}; discarded {discarded}\n")
        }
    }
}

/// A span of seconds as an admin reads it: `12 seconds`, `4 min 05 s`, `3 h 02 min`.
fn span_text(secs: u64) -> String {
    match secs {
        0..120 => format!("{secs} seconds"),
        120..7200 => format!("{} min {:02} s", secs / 60, secs % 60),
        _ => format!("{} h {:02} min", secs / 3600, secs % 3600 / 60),
    }
}

/// `tarn pool import --list-txgs`.
pub(crate) fn txgs(rows: &[TxgRow], scripted: bool) -> String {
    let columns = [
        Column {
            header: "TXG".into(),
            right: true,
            width_min: 0,
        },
        Column {
            header: "TIMESTAMP".into(),
            right: true,
            width_min: 0,
        },
        Column {
            header: "DATE".into(),
            right: false,
            width_min: 0,
        },
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            vec![
                row.txg.to_string(),
                row.timestamp.to_string(),
                tarn_daemon::utc_timestamp(row.timestamp),
            ]
        })
        .collect();
    table(&columns, &cells, scripted)
}

/// `tarn pool history`: `History for 'tank':`, one line per entry, a blank line per pool.
pub(crate) fn history(pools: &[HistoryPool], long: bool) -> String {
    let mut out = String::new();
    for pool in pools {
        let _ = writeln!(out, "History for '{}':", pool.name);
        for entry in &pool.entries {
            let _ = write!(
                out,
                "{} {}",
                tarn_daemon::utc_timestamp(entry.time),
                entry.command
            );
            if long {
                let _ = write!(out, " [user {} ", entry.uid);
                if !entry.user.is_empty() {
                    let _ = write!(out, "({}) ", entry.user);
                }
                let _ = write!(out, "on {}]", entry.host);
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;

/// `pool events`: `TIME CLASS` rows as `zpool events` prints them (UTC); with `verbose`, each
/// event's facts indented below it.
pub(crate) fn events(rows: &[tarn_proto::EventRow], verbose: bool, header: bool) -> String {
    let mut out = String::new();
    if header {
        out.push_str(&format!("{:<20} {}\n", "TIME", "CLASS"));
    }
    for row in rows {
        let time = tarn_daemon::utc_timestamp(row.time);
        out.push_str(&format!("{time:<20} {}\n", row.class));
        if !verbose {
            continue;
        }
        out.push_str(&format!(
            "        eid = {}\n        pool = \"{}\"\n",
            row.eid, row.pool
        ));
        if row.vdev_guid != 0 {
            out.push_str(&format!("        vdev_guid = {:#x}\n", row.vdev_guid));
            out.push_str(&format!("        vdev_path = \"{}\"\n", row.vdev_path));
        }
        for (name, value) in &row.payload {
            out.push_str(&format!("        {name} = \"{value}\"\n"));
        }
        out.push('\n');
    }
    out
}
