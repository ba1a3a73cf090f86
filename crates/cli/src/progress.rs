//! How progress of long work (`scrub -w`, `wait`, `replace`) is shown: an `indicatif` bar
//! when stdout is a terminal, one plain line per report otherwise (pipes, logs, tests), and
//! nothing with `-j`.

use std::io::Write;

use indicatif::{ProgressBar, ProgressStyle};
use tarn_proto::Progress;

use crate::render;

const TEMPLATE: &str =
    "{msg} [{bar:40}] {bytes}/{total_bytes} {percent}% at {bytes_per_sec}, {eta} to go";

/// The display of one command's progress reports.
pub(crate) enum ProgressView {
    /// `-j`: reports are not shown.
    Quiet,
    /// Not a terminal: one line per report.
    Lines,
    /// A terminal: a bar, made at the first report.
    Bar(Option<ProgressBar>),
}

impl ProgressView {
    pub(crate) fn new(json: bool, terminal: bool) -> ProgressView {
        match (json, terminal) {
            (true, _) => ProgressView::Quiet,
            (false, false) => ProgressView::Lines,
            (false, true) => ProgressView::Bar(None),
        }
    }

    /// Shows one report.
    pub(crate) fn report(&mut self, progress: &Progress) {
        match self {
            ProgressView::Quiet => {}
            ProgressView::Lines => {
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{}", render::progress_line(progress));
                let _ = stdout.flush();
            }
            ProgressView::Bar(bar) => {
                let bar = bar.get_or_insert_with(new_bar);
                // A total of 0 means "not listed yet": an empty bar, not a full one.
                bar.set_length(progress.total.max(1));
                bar.set_position(progress.done.min(progress.total));
                if bar.message() != progress.operation {
                    // The work changed (a sequential resilver's scrub): a fresh rate and eta.
                    bar.reset_elapsed();
                    bar.reset_eta();
                    bar.set_message(progress.operation.clone());
                }
            }
        }
    }

    /// Leaves the last state of the bar on the screen.
    pub(crate) fn finish(self) {
        if let ProgressView::Bar(Some(bar)) = self {
            bar.finish();
        }
    }
}

fn new_bar() -> ProgressBar {
    let bar = ProgressBar::new(1);
    if let Ok(style) = ProgressStyle::with_template(TEMPLATE) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_parses_and_json_and_pipes_get_no_bar() {
        assert!(ProgressStyle::with_template(TEMPLATE).is_ok());
        assert!(matches!(ProgressView::new(true, true), ProgressView::Quiet));
        assert!(matches!(
            ProgressView::new(false, false),
            ProgressView::Lines
        ));
        assert!(matches!(
            ProgressView::new(false, true),
            ProgressView::Bar(None)
        ));
    }
}
