//! Man pages and shell completions, generated from the clap definition of the command line
//! (`tarn man DIR`, `tarn completions SHELL`), so they always match the commands the binary
//! takes. Section 8 (system administration), as ZFS's own pages.

use std::path::Path;

use clap::CommandFactory;

use crate::args::Cli;
use crate::run::Outcome;

/// `tarn completions SHELL`: the completion script on stdout.
pub(crate) fn completions(shell: clap_complete::Shell) -> Outcome {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "tarn", &mut script);
    Outcome::ok(String::from_utf8_lossy(&script).into_owned())
}

/// `tarn man DIR`: one page per command into DIR.
pub(crate) fn man_pages(dir: &Path) -> Outcome {
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    let written = std::fs::create_dir_all(dir).and_then(|()| write_pages(command, dir));
    match written {
        Ok(()) => Outcome::ok(String::new()),
        Err(error) => Outcome::refused(crate::render::error_line(
            "write man pages to",
            Some(&dir.display().to_string()),
            &tarn_daemon::describe_io(&error),
        )),
    }
}

/// The page of `command` and of each of its subcommands, in section 8.
fn write_pages(command: clap::Command, dir: &Path) -> std::io::Result<()> {
    for sub in command
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
    {
        write_pages(sub, dir)?;
    }
    clap_mangen::Man::new(command)
        .section("8")
        .generate_to(dir)?;
    Ok(())
}
