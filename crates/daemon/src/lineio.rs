//! Bounded line reading and line writing shared by the server and the client (I2 of
//! tarn-proto: neither side buffers more than `MAX_LINE_BYTES` for one message).

use std::io::{BufRead, Read, Write};

use tarn_proto::MAX_LINE_BYTES;

/// What one bounded read produced.
#[derive(Debug)]
pub(crate) enum LineRead {
    /// A complete line, `\n` included (or the final unterminated bytes before EOF).
    Line(Vec<u8>),
    /// The peer closed the stream before sending anything more.
    Eof,
    /// More than `MAX_LINE_BYTES` without a newline; the stream cannot be resynchronized.
    TooLong,
}

/// Reads one line of at most `MAX_LINE_BYTES` bytes.
pub(crate) fn read_line(reader: &mut impl BufRead) -> std::io::Result<LineRead> {
    let mut line = Vec::new();
    let limit = u64::try_from(MAX_LINE_BYTES).unwrap_or(u64::MAX);
    reader.by_ref().take(limit).read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Ok(LineRead::Eof);
    }
    if line.len() >= MAX_LINE_BYTES && line.last() != Some(&b'\n') {
        return Ok(LineRead::TooLong);
    }
    Ok(LineRead::Line(line))
}

/// Writes one encoded line and flushes it.
pub(crate) fn write_line(writer: &mut impl Write, line: &[u8]) -> std::io::Result<()> {
    debug_assert_eq!(
        line.last(),
        Some(&b'\n'),
        "encoded lines end with a newline"
    );
    writer.write_all(line)?;
    writer.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_lines_then_eof() {
        let mut input = std::io::Cursor::new(b"one\ntwo".to_vec());
        assert!(matches!(read_line(&mut input), Ok(LineRead::Line(l)) if l == b"one\n"));
        assert!(matches!(read_line(&mut input), Ok(LineRead::Line(l)) if l == b"two"));
        assert!(matches!(read_line(&mut input), Ok(LineRead::Eof)));
    }

    #[test]
    fn refuses_lines_over_the_limit() {
        let mut input = std::io::Cursor::new(vec![b'x'; MAX_LINE_BYTES + 10]);
        assert!(matches!(read_line(&mut input), Ok(LineRead::TooLong)));
        let mut exact = vec![b'x'; MAX_LINE_BYTES - 1];
        exact.push(b'\n');
        let mut input = std::io::Cursor::new(exact);
        assert!(
            matches!(read_line(&mut input), Ok(LineRead::Line(l)) if l.len() == MAX_LINE_BYTES)
        );
    }
}
