//! A minimal timestamped logger for `rundir/daemon.log` (the workspace has no `tracing`).

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use tarn_base::Clock;

/// A log file is set aside as `<name>.old` when it is larger than this at open, so the log
/// stays bounded across restarts without a rotation thread.
pub const LOG_BYTES_MAX: u64 = 16 << 20;

/// Appends `YYYY-MM-DD.HH:MM:SS message` lines (UTC) to a file. Write errors are dropped:
/// the log is the place errors are reported to, so there is nowhere else to send them.
#[derive(Debug)]
pub struct Logger {
    file: Mutex<std::fs::File>,
    clock: tarn_base::SystemClock,
}

impl Logger {
    /// Opens `path` for appending (creating it 0600), first moving it aside if it is larger
    /// than `LOG_BYTES_MAX`.
    pub fn open(path: &Path) -> std::io::Result<Logger> {
        use std::os::unix::fs::OpenOptionsExt;
        if std::fs::metadata(path).is_ok_and(|meta| meta.len() > LOG_BYTES_MAX) {
            let mut old = path.as_os_str().to_owned();
            old.push(".old");
            std::fs::rename(path, old)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        Ok(Logger {
            file: Mutex::new(file),
            clock: tarn_base::SystemClock::new(),
        })
    }

    /// Writes one line; newlines inside `message` are replaced so one event is one line.
    pub fn log(&self, message: &str) {
        let line = format!(
            "{} {}\n",
            utc_timestamp(self.clock.now_unix_secs()),
            message.replace('\n', " ")
        );
        let mut file = match self.file.lock() {
            Ok(file) => file,
            Err(poisoned) => poisoned.into_inner(),
        };
        let _ = file.write_all(line.as_bytes());
    }
}

/// Formats seconds since the epoch as `YYYY-MM-DD.HH:MM:SS` in UTC, the layout of ZFS's
/// `zpool history` (`%F.%T`).
#[must_use]
pub fn utc_timestamp(unix_secs: u64) -> String {
    let days = unix_secs / 86_400;
    let secs = unix_secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}.{:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`, restricted to non-negative days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    assert!(
        (1..=12).contains(&month) && (1..=31).contains(&day),
        "civil date out of range"
    );
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_match_known_dates() {
        for (secs, text) in [
            (0, "1970-01-01.00:00:00"),
            (951_782_400, "2000-02-29.00:00:00"),
            (1_700_000_000, "2023-11-14.22:13:20"),
            (4_107_542_399, "2100-02-28.23:59:59"),
            (4_107_542_400, "2100-03-01.00:00:00"),
        ] {
            assert_eq!(utc_timestamp(secs), text, "{secs}");
        }
    }

    #[test]
    fn log_lines_are_single_and_timestamped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("daemon.log");
        let logger = Logger::open(&path).expect("open");
        logger.log("first\nsecond");
        logger.log("third");
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].ends_with(" first second"), "{text}");
        assert_eq!(lines[1].len(), "YYYY-MM-DD.HH:MM:SS third".len(), "{text}");
    }
}
