//! `cargo run -p xtask -- tidy [--update-lengths]`: runs every tidy check on the workspace,
//! prints one `path:line: rule: message` line per violation and exits 1 if there are any.
//! With `--update-lengths` it first rewrites xtask/function-lengths.txt (see
//! `xtask::update_function_lengths`). Exit codes follow STYLE.md §6: 0 clean, 1 violations or
//! a check that could not run, 2 usage.

use std::process::ExitCode;

const USAGE: &str = "usage: cargo run -p xtask -- tidy [--update-lengths]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let update_lengths = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["tidy"] => false,
        ["tidy", "--update-lengths"] => true,
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match tidy(update_lengths) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(count) => {
            eprintln!("tidy: {count} violation(s)");
            ExitCode::from(1)
        }
        Err(error) => {
            eprintln!("tidy: cannot run: {error}");
            ExitCode::from(1)
        }
    }
}

/// Runs the checks, printing each violation; returns how many there were.
fn tidy(update_lengths: bool) -> Result<usize, xtask::TidyError> {
    let root = xtask::workspace_root();
    if update_lengths {
        let tree = xtask::Tree::open(&root)?;
        let recorded = xtask::update_function_lengths(&tree)?;
        eprintln!(
            "tidy: recorded {recorded} function(s) in {}",
            xtask::LENGTHS_FILE
        );
    }
    let violations = xtask::run_all(&root)?;
    for violation in &violations {
        println!("{violation}");
    }
    Ok(violations.len())
}
