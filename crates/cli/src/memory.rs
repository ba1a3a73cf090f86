//! `tarn memory`: the daemon's memory by category beside its RSS, the ARC's counters (what
//! `arcstat` shows for ZFS) and the bound, once or every INTERVAL seconds; `tarn memory set
//! arc_max=SIZE arc_min=SIZE` changes the ARC's limits while the daemon runs.
//!
//! One report is a two-column table (`NAME VALUE`, `-H` tab-separated without the header,
//! `-p` exact bytes), or with `-j` the reply as JSON. With an interval, one arcstat-like
//! line per report: time, RSS, ARC size and target, hits and misses since the last report,
//! dirty data, available memory.

use std::path::Path;

use tarn_base::units::{format_size, parse_size};
use tarn_proto::{MemoryInfo, ReplyPayload, Request, Response};

use crate::render::error_line;
use crate::run::Outcome;

/// `tarn memory` as typed.
#[derive(Debug, clap::Args)]
pub(crate) struct MemoryArgs {
    /// Scripted mode: no header, tab-separated columns.
    #[arg(short = 'H')]
    scripted: bool,
    /// Exact byte counts.
    #[arg(short = 'p')]
    parsable: bool,
    /// `set arc_max=SIZE arc_min=SIZE`, or INTERVAL [COUNT] to report repeatedly.
    #[arg(value_name = "set PROPERTY=VALUE... | INTERVAL [COUNT]")]
    words: Vec<String>,
}

/// What the words ask for.
#[derive(Debug, PartialEq, Eq)]
enum Action {
    Report {
        interval: Option<u64>,
        count: Option<u64>,
    },
    Set {
        arc_max: Option<u64>,
        arc_min: Option<u64>,
    },
}

const PROPERTIES: &str = "arc_max, arc_min";

fn parse(words: &[String]) -> Result<Action, String> {
    if words.first().map(String::as_str) == Some("set") {
        let mut action = (None, None);
        if words.len() == 1 {
            return Err(format!("missing PROPERTY=VALUE (properties: {PROPERTIES})"));
        }
        for word in &words[1..] {
            let Some((name, value)) = word.split_once('=') else {
                return Err(format!("'{word}' is not PROPERTY=VALUE"));
            };
            let bytes = parse_size(value).map_err(|_| {
                format!("bad {name} value '{value}': expected a size (512M, 4G, bytes)")
            })?;
            match name {
                "arc_max" => action.0 = Some(bytes),
                "arc_min" => action.1 = Some(bytes),
                _ => return Err(format!("no property '{name}' (properties: {PROPERTIES})")),
            }
        }
        return Ok(Action::Set {
            arc_max: action.0,
            arc_min: action.1,
        });
    }
    let number = |word: &String, what: &str| {
        word.parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("bad {what} '{word}': expected a positive whole number"))
    };
    match words {
        [] => Ok(Action::Report {
            interval: None,
            count: None,
        }),
        [interval] => Ok(Action::Report {
            interval: Some(number(interval, "interval")?),
            count: None,
        }),
        [interval, count] => Ok(Action::Report {
            interval: Some(number(interval, "interval")?),
            count: Some(number(count, "count")?),
        }),
        _ => Err("too many arguments: expected INTERVAL [COUNT] or set PROPERTY=VALUE".into()),
    }
}

/// The rows of one report, in order: the categories that add up to RSS, then the ARC and
/// the bound.
fn rows(info: &MemoryInfo) -> Vec<(&'static str, i128)> {
    let u = |v: u64| i128::from(v);
    vec![
        ("rss", u(info.rss)),
        ("arc_data", u(info.arc_data)),
        ("arc_metadata", u(info.arc_metadata)),
        ("arc_headers", u(info.arc_headers)),
        ("dirty", u(info.dirty)),
        ("syncing", u(info.syncing)),
        ("intent_log", u(info.intent_log)),
        ("l2arc_headers", u(info.l2arc_headers)),
        ("scan_queue", u(info.scan_queue)),
        ("fuse_buffers", u(info.fuse_buffers)),
        ("buffer_stock", u(info.buffer_stock)),
        ("allocator_free", u(info.allocator_free)),
        ("program", u(info.program)),
        ("stacks", u(info.stacks)),
        ("other", i128::from(info.other)),
        ("arc_size", u(info.arc_size)),
        ("arc_target", u(info.arc_target)),
        ("arc_lent", u(info.arc_lent)),
        ("arc_min", u(info.arc_min)),
        ("arc_max", u(info.arc_max)),
        ("arc_entries", u(info.arc_entries)),
        ("arc_hits", u(info.arc_hits)),
        ("arc_misses", u(info.arc_misses)),
        ("arc_evictions", u(info.arc_evictions)),
        ("heap_allocated", u(info.heap_allocated)),
        ("dirty_max", u(info.dirty_max)),
        ("overhead", u(info.overhead)),
        ("bound", u(info.bound)),
        ("mem_available", u(info.mem_available)),
        ("mem_total", u(info.mem_total)),
        ("threads", u(info.threads)),
    ]
}

/// Rows that count things, not bytes.
fn is_count(name: &str) -> bool {
    matches!(
        name,
        "arc_entries" | "arc_hits" | "arc_misses" | "arc_evictions" | "threads"
    )
}

fn value(name: &str, value: i128, parsable: bool) -> String {
    if parsable || is_count(name) {
        return value.to_string();
    }
    let size = format_size(u64::try_from(value.unsigned_abs()).unwrap_or(u64::MAX));
    if value < 0 { format!("-{size}") } else { size }
}

/// One report as the table (pure).
fn table(info: &MemoryInfo, scripted: bool, parsable: bool) -> String {
    let mut out = String::new();
    if !scripted {
        out.push_str(&format!("{:<16}{}\n", "NAME", "VALUE"));
    }
    for (name, v) in rows(info) {
        let v = value(name, v, parsable);
        if scripted {
            out.push_str(&format!("{name}\t{v}\n"));
        } else {
            out.push_str(&format!("{name:<16}{v}\n"));
        }
    }
    out
}

/// One arcstat-like line against the previous report (pure).
fn line(info: &MemoryInfo, previous: &MemoryInfo, time: &str, parsable: bool) -> String {
    let hits = info.arc_hits.saturating_sub(previous.arc_hits);
    let misses = info.arc_misses.saturating_sub(previous.arc_misses);
    let reads = hits + misses;
    let hit_pct = (hits * 100).checked_div(reads).unwrap_or(0);
    let size = |v: u64| match parsable {
        true => v.to_string(),
        false => format_size(v),
    };
    format!(
        "{time:>8} {:>7} {:>5} {:>4} {:>4} {:>7} {:>7} {:>7} {:>7}\n",
        size(info.rss),
        reads,
        hit_pct,
        if reads == 0 { 0 } else { 100 - hit_pct },
        size(info.arc_size),
        size(info.arc_target),
        size(info.dirty + info.syncing),
        size(info.mem_available),
    )
}

const LINE_HEADER: &str = "    time     rss  read hit% miss%   arcsz       c   dirty   avail\n";

/// `tarn memory set`: one request, silent on success.
fn set(client: &mut tarn_daemon::Client, arc_max: Option<u64>, arc_min: Option<u64>) -> Outcome {
    match client.call(&Request::MemorySet { arc_max, arc_min }, |_| {}) {
        Ok(Response::Ok(_)) => Outcome::ok(String::new()),
        Ok(Response::Error(error)) => {
            Outcome::refused(error_line("set", Some("memory"), &error.message))
        }
        Err(error) => Outcome::refused(error.to_string()),
    }
}

/// One report from the daemon.
fn fetch(client: &mut tarn_daemon::Client) -> Result<MemoryInfo, Outcome> {
    let refused = |why: &str| Outcome::refused(error_line("report", Some("memory"), why));
    match client.call(&Request::Memory, |_| {}) {
        Ok(Response::Ok(ReplyPayload::Memory(info))) => Ok(*info),
        Ok(Response::Error(error)) => Err(refused(&error.message)),
        Ok(_) => Err(refused(
            "unexpected reply from the daemon (is it another version?)",
        )),
        Err(error) => Err(Outcome::refused(error.to_string())),
    }
}

/// The text of one report: JSON, the table, or (with an interval) one line against the
/// previous report, after the header on the first.
fn text_of(
    args: &MemoryArgs,
    json: bool,
    interval: bool,
    info: &MemoryInfo,
    previous: Option<&MemoryInfo>,
) -> Result<String, String> {
    if json {
        let payload = ReplyPayload::Memory(Box::new(info.clone()));
        return serde_json::to_string(&payload)
            .map(|text| format!("{text}\n"))
            .map_err(|error| format!("cannot print JSON: {error}"));
    }
    if !interval {
        return Ok(table(info, args.scripted, args.parsable));
    }
    let header = if previous.is_none() && !args.scripted {
        LINE_HEADER
    } else {
        ""
    };
    use tarn_base::Clock;
    let time = tarn_daemon::utc_timestamp(tarn_base::SystemClock::new().now_unix_secs());
    let time = time.get(11..19).unwrap_or(&time).to_string();
    let text = line(info, previous.unwrap_or(info), &time, args.parsable);
    Ok(match args.scripted {
        true => text.split_whitespace().collect::<Vec<_>>().join("\t") + "\n",
        false => format!("{header}{text}"),
    })
}

/// Runs `tarn memory` against the daemon of `rundir`.
pub(crate) fn run(args: &MemoryArgs, rundir: &Path, json: bool) -> Outcome {
    let refuse = |message: &str| Outcome::usage(error_line("run", Some("memory"), message));
    let action = match parse(&args.words) {
        Ok(action) => action,
        Err(message) => return refuse(&message),
    };
    let mut client = match tarn_daemon::Client::connect_or_start(rundir) {
        Ok(client) => client,
        Err(error) => return Outcome::refused(error.to_string()),
    };
    let (interval, count) = match action {
        Action::Set { arc_max, arc_min } => return set(&mut client, arc_max, arc_min),
        Action::Report { interval, count } => (interval, count),
    };
    let mut previous: Option<MemoryInfo> = None;
    for printed in 1u64.. {
        let info = match fetch(&mut client) {
            Ok(info) => info,
            Err(outcome) => return outcome,
        };
        let text = match text_of(args, json, interval.is_some(), &info, previous.as_ref()) {
            Ok(text) => text,
            Err(message) => return refuse(&message),
        };
        let Some(seconds) = interval else {
            return Outcome::ok(text);
        };
        if !crate::run::print_now(&text) || count.is_some_and(|count| printed >= count) {
            return Outcome::ok(String::new());
        }
        previous = Some(info);
        std::thread::sleep(std::time::Duration::from_secs(seconds));
    }
    Outcome::ok(String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn words_parse_into_reports_and_settings() {
        let report = |interval, count| Action::Report { interval, count };
        assert_eq!(parse(&words("")), Ok(report(None, None)));
        assert_eq!(parse(&words("5")), Ok(report(Some(5), None)));
        assert_eq!(parse(&words("5 3")), Ok(report(Some(5), Some(3))));
        assert_eq!(
            parse(&words("set arc_max=1G arc_min=64M")),
            Ok(Action::Set {
                arc_max: Some(1 << 30),
                arc_min: Some(64 << 20)
            })
        );
        for (line, error) in [
            ("0", "bad interval '0': expected a positive whole number"),
            ("1 x", "bad count 'x': expected a positive whole number"),
            (
                "1 2 3",
                "too many arguments: expected INTERVAL [COUNT] or set PROPERTY=VALUE",
            ),
            (
                "set",
                "missing PROPERTY=VALUE (properties: arc_max, arc_min)",
            ),
            ("set arc_max", "'arc_max' is not PROPERTY=VALUE"),
            (
                "set arc_max=lots",
                "bad arc_max value 'lots': expected a size (512M, 4G, bytes)",
            ),
            (
                "set arc=1G",
                "no property 'arc' (properties: arc_max, arc_min)",
            ),
        ] {
            assert_eq!(parse(&words(line)), Err(error.to_string()), "{line}");
        }
    }

    #[test]
    fn reports_render_as_tables_and_lines() {
        let info = MemoryInfo {
            rss: 3 << 20,
            arc_data: 1 << 20,
            other: -4096,
            arc_hits: 90,
            arc_misses: 10,
            bound: 1 << 30,
            ..MemoryInfo::default()
        };
        let text = table(&info, false, false);
        assert!(
            text.starts_with("NAME            VALUE\nrss             3M\n"),
            "{text}"
        );
        assert!(text.contains("\nother           -4K\n"), "{text}");
        assert!(text.contains("\narc_hits        90\n"), "{text}");
        let scripted = table(&info, true, true);
        assert!(
            scripted.starts_with("rss\t3145728\narc_data\t1048576\n"),
            "{scripted}"
        );
        assert!(
            scripted.contains("\nother\t-4096\n") && scripted.contains("\nbound\t1073741824\n")
        );
        let before = MemoryInfo::default();
        let line = line(&info, &before, "12:00:00", false);
        assert_eq!(
            line.split_whitespace().collect::<Vec<_>>()[..5],
            ["12:00:00", "3M", "100", "90", "10"]
        );
    }
}
