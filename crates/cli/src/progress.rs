//! How progress of long work (`scrub -w`, `wait`, `replace`; `send -v`, `receive -v` on
//! stderr) is shown: an `indicatif` bar when the output is a terminal, one plain line per
//! report otherwise (pipes, logs, tests), and nothing with `-j`.

use std::io::Write;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tarn_proto::Progress;

use crate::render;

/// The bar takes what the terminal's width leaves; the figures keep ZFS's words.
const TEMPLATE: &str = "{msg} [{wide_bar}] {percent}% {bytes}/{total_bytes} {bytes_per_sec} {eta}";

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
                // A total of 0 means "not listed yet": nothing worth a bar so far.
                if bar.is_none() && progress.total == 0 {
                    return;
                }
                let bar = bar.get_or_insert_with(|| new_bar(&progress.operation));
                if bar.message() != progress.operation {
                    // New work (or a sequential resilver's scrub): a fresh rate and eta.
                    bar.reset_elapsed();
                    bar.reset_eta();
                    bar.set_message(progress.operation.clone());
                }
                bar.set_length(progress.total.max(1));
                bar.set_position(progress.done.min(progress.total));
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

/// The progress of `send -v` and `receive -v`, on stderr (a send's stdout is the stream):
/// on a terminal bytes, rate and, once the reports carry a total, a bar and the ETA; one
/// line of bytes per report otherwise; nothing without `-v` or with `-j`. A send has a
/// total when the daemon sized it first (this bar, `-P`); a receive when the stream says
/// its size (a sized send's first BEGIN, docs/FORMAT.md 21.4), else only bytes and rate.
/// Send and receive share the templates.
pub(crate) enum StreamProgress {
    Quiet,
    Lines,
    Bar(ProgressBar),
}

impl StreamProgress {
    pub(crate) fn new(verbose: bool, json: bool, terminal: bool) -> StreamProgress {
        match (verbose && !json, terminal) {
            (false, _) => StreamProgress::Quiet,
            (true, false) => StreamProgress::Lines,
            (true, true) => {
                let bar = ProgressBar::hidden();
                if let Ok(style) = ProgressStyle::with_template(stream_template(false)) {
                    bar.set_style(style);
                }
                bar.set_draw_target(ProgressDrawTarget::stderr());
                StreamProgress::Bar(bar)
            }
        }
    }

    pub(crate) fn report(&mut self, progress: &Progress) {
        match self {
            StreamProgress::Quiet => {}
            StreamProgress::Lines => {
                let size = tarn_base::units::format_size(progress.done);
                eprintln!("{}: {size}", progress.operation);
            }
            StreamProgress::Bar(bar) => {
                bar.set_message(progress.operation.clone());
                if progress.total > 0 && bar.length() != Some(progress.total) {
                    if let Ok(style) = ProgressStyle::with_template(stream_template(true)) {
                        bar.set_style(style.progress_chars("=> "));
                    }
                    bar.set_length(progress.total);
                }
                bar.set_position(progress.done);
            }
        }
    }

    /// Whether the display would show a total (a bar on a terminal): worth a send's sizing.
    pub(crate) fn wants_total(&self) -> bool {
        matches!(self, StreamProgress::Bar(_))
    }

    pub(crate) fn finish(self) {
        if let StreamProgress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// A stream whose size is not known ahead (an unsized one's receive): bytes so far, the
/// rate and the time taken.
const STREAM_TEMPLATE: &str = "{msg} {bytes} {bytes_per_sec} {elapsed}";
/// A stream whose size is known (a sized send's, and its receive's): a bar, bytes of the
/// total, the rate and the time left.
const STREAM_SIZED_TEMPLATE: &str =
    "{msg} [{wide_bar}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}";

/// The template of a stream's bar, with or without a known total.
fn stream_template(total_known: bool) -> &'static str {
    match total_known {
        true => STREAM_SIZED_TEMPLATE,
        false => STREAM_TEMPLATE,
    }
}

fn new_bar(operation: &str) -> ProgressBar {
    // Styled and named while hidden, then shown on stdout (the stream whose being a terminal
    // chose the bar), so the first frame is already complete.
    let bar = ProgressBar::hidden();
    if let Ok(style) = ProgressStyle::with_template(TEMPLATE) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(operation.to_string());
    bar.set_draw_target(ProgressDrawTarget::stdout());
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

    /// A stream's bar shows the ETA only with a total; both templates parse; only a bar
    /// asks a send to be sized first. Negative control: with `stream_template` ignoring
    /// the total (the template of bytes, rate and elapsed time), the ETA check fails.
    #[test]
    fn a_stream_with_a_total_shows_its_eta() {
        for known in [false, true] {
            assert!(ProgressStyle::with_template(stream_template(known)).is_ok());
        }
        assert!(stream_template(true).contains("{eta}"));
        assert!(stream_template(true).contains("{total_bytes}"));
        assert!(!stream_template(false).contains("{eta}"));
        assert!(StreamProgress::new(true, false, true).wants_total());
        for (verbose, json, terminal) in [(true, false, false), (false, false, true)] {
            assert!(!StreamProgress::new(verbose, json, terminal).wants_total());
        }
        assert!(!StreamProgress::new(true, true, true).wants_total());
    }
}
