//! `tarn checksum [-a ALGORITHM] [-H] [-p] [--xattr NAME] FILE...`: each file's adler32
//! (the default: what grid transfers compare), md5, sha256 or crc32c, computed in the
//! daemon through the engine and cached with the file, so asking again is free until the
//! file changes (docs/CHECKSUM.md).
//!
//! # Output
//! ```text
//!   ALGORITHM  VALUE     FILE                 default (a header, aligned columns)
//!   adler32    11e60398  /tank/data/f
//!   adler32\t11e60398\t/tank/data/f           -H (tab-separated, no header)
//! ```
//! `-v` adds a SOURCE column (`cached` or `computed`); `-j` prints one document,
//! `{"output_version": ..., "checksums": {FILE: {algorithm, value, size, cached, ...}}}`.
//! A file that cannot be checksummed is one line on stderr, `cannot checksum 'FILE': ...`,
//! and the exit status 1; the other files are still answered (as `sha256sum` does).
//!
//! # Not here
//! The verify mode of `sha256sum -c` (compare with a list): scripts compare the output.

use std::path::Path;

use serde_json::{Map, Value, json};
use tarn_proto::{ChecksumRow, ReplyPayload, Request, Response};

use crate::render::error_line;
use crate::run::Outcome;

/// `tarn checksum` as typed.
#[derive(Debug, clap::Args)]
pub(crate) struct ChecksumArgs {
    /// adler32 (default), md5, sha256 or crc32c.
    #[arg(short = 'a', value_name = "ALGORITHM", default_value = "adler32")]
    algorithm: String,
    /// Scripted mode: no header, tab-separated columns.
    #[arg(short = 'H')]
    scripted: bool,
    /// Show where each value came from (SOURCE: cached or computed).
    #[arg(short = 'v')]
    verbose: bool,
    /// Also write the value (lowercase hex) as this user attribute of each file, where a
    /// grid middleware reads it (e.g. user.storm.checksum.adler32).
    #[arg(long, value_name = "NAME")]
    xattr: Option<String>,
    /// Regular files on tarn mounts.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<std::path::PathBuf>,
}

/// What valid algorithms the errors list (the daemon checks again).
const ALGORITHMS: &str = "adler32, md5, sha256, crc32c";

/// One file's answer: its row, or the line saying why not.
type Answer = Result<ChecksumRow, String>;

/// Runs `tarn checksum` against the daemon of `rundir`.
pub(crate) fn run(
    args: &ChecksumArgs,
    rundir: &Path,
    json: Option<&crate::json::JsonOptions>,
) -> Outcome {
    let algorithm = args.algorithm.to_ascii_lowercase();
    if !ALGORITHMS.split(", ").any(|name| name == algorithm) {
        let why = format!("unknown algorithm (valid: {ALGORITHMS})");
        return Outcome::usage(error_line("checksum", Some(&args.algorithm), &why));
    }
    let mut client = match tarn_daemon::Client::connect_or_start(rundir) {
        Ok(client) => client,
        Err(error) => return Outcome::refused(error.to_string()),
    };
    let answers: Vec<(String, Answer)> = args
        .files
        .iter()
        .map(|file| {
            let shown = file.display().to_string();
            let answer = ask(&mut client, file, &algorithm, args.xattr.as_deref());
            (shown, answer)
        })
        .collect();
    let failed = answers.iter().any(|(_, answer)| answer.is_err());
    let stdout = match json {
        Some(options) => format!("{:#}\n", document(options, &answers)),
        None => table(&answers, args.scripted, args.verbose),
    };
    let stderr: String = answers
        .iter()
        .filter_map(|(file, answer)| answer.as_ref().err().map(|why| (file, why)))
        .map(|(file, why)| error_line("checksum", Some(file), why) + "\n")
        .collect();
    Outcome {
        stdout,
        stderr: if json.is_some() {
            String::new()
        } else {
            stderr
        },
        code: i32::from(failed),
    }
}

/// One file: its canonical path (symlinks resolved, so the daemon finds the mount) asked.
fn ask(
    client: &mut tarn_daemon::Client,
    file: &Path,
    algorithm: &str,
    xattr: Option<&str>,
) -> Answer {
    let path = std::fs::canonicalize(file).map_err(|e| tarn_daemon::describe_io(&e))?;
    let request = Request::Checksum {
        path: path.to_string_lossy().into_owned(),
        algorithm: algorithm.to_string(),
        xattr: xattr.map(str::to_string),
    };
    match client.call(&request, |_| {}) {
        Ok(Response::Ok(ReplyPayload::Checksum(mut row))) => {
            // Shown as typed, like sha256sum does.
            row.path = file.display().to_string();
            Ok(row)
        }
        Ok(Response::Error(error)) => Err(error.message),
        Ok(_) => Err("unexpected reply from the daemon (is it another version?)".into()),
        Err(error) => Err(error.to_string()),
    }
}

/// The rows that succeeded as the table (pure).
fn table(answers: &[(String, Answer)], scripted: bool, verbose: bool) -> String {
    let rows: Vec<&ChecksumRow> = answers
        .iter()
        .filter_map(|(_, a)| a.as_ref().ok())
        .collect();
    let source = |row: &ChecksumRow| if row.cached { "cached" } else { "computed" };
    let mut lines: Vec<Vec<&str>> = Vec::new();
    if !scripted {
        let mut header = vec!["ALGORITHM", "VALUE"];
        if verbose {
            header.push("SOURCE");
        }
        header.push("FILE");
        lines.push(header);
    }
    for row in &rows {
        let mut line = vec![row.algorithm.as_str(), row.value.as_str()];
        if verbose {
            line.push(source(row));
        }
        line.push(row.path.as_str());
        lines.push(line);
    }
    if rows.is_empty() {
        return String::new();
    }
    if scripted {
        return lines.iter().map(|line| line.join("\t") + "\n").collect();
    }
    let columns = lines.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| lines.iter().map(|line| line[c].len()).max().unwrap_or(0))
        .collect();
    lines
        .iter()
        .map(|line| {
            let mut text = String::new();
            for (c, cell) in line.iter().enumerate() {
                if c + 1 == columns {
                    text.push_str(cell);
                } else {
                    text.push_str(&format!("{cell:<width$}  ", width = widths[c]));
                }
            }
            text + "\n"
        })
        .collect()
}

/// The `-j` document: successes under `checksums`, failures under `errors` (each the line
/// the text output prints), both keyed by the file as typed.
fn document(options: &crate::json::JsonOptions, answers: &[(String, Answer)]) -> Value {
    let mut checksums = Map::new();
    let mut errors = Map::new();
    for (file, answer) in answers {
        match answer {
            Ok(row) => {
                let number = |n: u64| match options.int {
                    true => Value::from(n),
                    false => Value::from(n.to_string()),
                };
                checksums.insert(
                    file.clone(),
                    json!({
                        "algorithm": row.algorithm,
                        "value": row.value,
                        "size": number(row.size),
                        "cached": row.cached,
                        "stored": row.stored,
                        "bytes_read": number(row.bytes_read),
                        "xattr": row.xattr,
                    }),
                );
            }
            Err(why) => {
                errors.insert(
                    file.clone(),
                    Value::from(error_line("checksum", Some(file), why)),
                );
            }
        }
    }
    let mut document = crate::json::head(options);
    document.insert("checksums".into(), Value::Object(checksums));
    if !errors.is_empty() {
        document.insert("errors".into(), Value::Object(errors));
    }
    Value::Object(document)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(path: &str, value: &str, cached: bool) -> ChecksumRow {
        ChecksumRow {
            path: path.into(),
            algorithm: "adler32".into(),
            value: value.into(),
            size: 9,
            cached,
            stored: true,
            bytes_read: if cached { 0 } else { 9 },
            xattr: None,
        }
    }

    #[test]
    fn tables_scripted_and_verbose() {
        let answers = vec![
            ("/t/a".to_string(), Ok(row("/t/a", "11e60398", false))),
            ("/t/b".to_string(), Err("is a directory".to_string())),
            ("/t/long".to_string(), Ok(row("/t/long", "00000001", true))),
        ];
        assert_eq!(
            table(&answers, false, false),
            "ALGORITHM  VALUE     FILE\n\
             adler32    11e60398  /t/a\n\
             adler32    00000001  /t/long\n"
        );
        assert_eq!(
            table(&answers, true, false),
            "adler32\t11e60398\t/t/a\nadler32\t00000001\t/t/long\n"
        );
        assert_eq!(
            table(&answers, true, true),
            "adler32\t11e60398\tcomputed\t/t/a\nadler32\t00000001\tcached\t/t/long\n"
        );
        let options = crate::json::JsonOptions {
            command: "tarn checksum".into(),
            int: true,
            ..Default::default()
        };
        let doc = document(&options, &answers);
        assert_eq!(doc["checksums"]["/t/a"]["value"], "11e60398");
        assert_eq!(doc["checksums"]["/t/long"]["cached"], true);
        assert_eq!(doc["checksums"]["/t/a"]["size"], 9);
        assert_eq!(
            doc["errors"]["/t/b"],
            "cannot checksum '/t/b': is a directory"
        );
        assert_eq!(doc["output_version"]["command"], "tarn checksum");
    }
}
