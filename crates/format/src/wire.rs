//! Bounded little-endian reading and writing, and the tagged-field (TLV) encoding used by
//! labels' configuration. Every read checks its bounds and returns `FormatError::Truncated`
//! instead of panicking: bytes from a device are input (STYLE.md §5, kind 3).

use crate::FormatError;

/// Reads fixed-width little-endian values from a byte slice, front to back.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`; `what` names the structure in errors.
    #[must_use]
    pub fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader {
            bytes,
            position: 0,
            what,
        }
    }

    /// The next `len` bytes.
    pub fn take(&mut self, len: usize) -> Result<&'a [u8], FormatError> {
        let end = self
            .position
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len());
        let Some(end) = end else {
            return Err(FormatError::Truncated { what: self.what });
        };
        let slice = self
            .bytes
            .get(self.position..end)
            .ok_or(FormatError::Truncated { what: self.what })?;
        self.position = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// Next byte.
    pub fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.array::<1>()?[0])
    }

    /// Next little-endian u16.
    pub fn u16(&mut self) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// Next little-endian u32.
    pub fn u32(&mut self) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// Next little-endian u64.
    pub fn u64(&mut self) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Bytes not yet read.
    #[must_use]
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    /// Current position from the start.
    #[must_use]
    pub fn position(&self) -> usize {
        self.position
    }
}

/// Appends little-endian values to a growing buffer.
#[derive(Debug, Default)]
pub struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    #[must_use]
    pub fn new() -> Self {
        Writer::default()
    }

    /// Appends a byte.
    pub fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    /// Appends a little-endian u16.
    pub fn u16(&mut self, value: u16) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends a little-endian u32.
    pub fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends a little-endian u64.
    pub fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_le_bytes());
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, value: &[u8]) {
        self.bytes.extend_from_slice(value);
    }

    /// Pads with zeros up to `len` bytes in total.
    pub fn pad_to(&mut self, len: usize) {
        assert!(
            self.bytes.len() <= len,
            "structure of {} bytes overflows {len}",
            self.bytes.len()
        );
        self.bytes.resize(len, 0);
    }

    /// Bytes written so far.
    #[must_use]
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True when nothing was written.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The encoded bytes.
    #[must_use]
    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

/// Largest single TLV field (a whole vdev tree fits easily).
pub const TLV_FIELD_MAX: usize = 1 << 20;

/// Writes tagged fields: `tag: u16, len: u32, value: [u8; len]`. Readers skip tags they do not
/// know, so new fields never break old readers (the feature-flag list says when a new field is
/// required to understand the pool).
#[derive(Debug, Default)]
pub struct TlvWriter {
    inner: Writer,
}

impl TlvWriter {
    /// An empty field list.
    #[must_use]
    pub fn new() -> Self {
        TlvWriter::default()
    }

    /// A field holding raw bytes.
    pub fn bytes(&mut self, tag: u16, value: &[u8]) {
        assert!(
            value.len() <= TLV_FIELD_MAX,
            "TLV field {tag} of {} bytes",
            value.len()
        );
        self.inner.u16(tag);
        self.inner.u32(value.len() as u32);
        self.inner.bytes(value);
    }

    /// A field holding a u64.
    pub fn u64(&mut self, tag: u16, value: u64) {
        self.bytes(tag, &value.to_le_bytes());
    }

    /// A field holding a UTF-8 string.
    pub fn str(&mut self, tag: u16, value: &str) {
        self.bytes(tag, value.as_bytes());
    }

    /// The encoded field list.
    #[must_use]
    pub fn finish(self) -> Vec<u8> {
        self.inner.finish()
    }
}

/// Iterates over the fields written by [`TlvWriter`].
#[derive(Debug)]
pub struct TlvReader<'a> {
    reader: Reader<'a>,
}

impl<'a> TlvReader<'a> {
    /// A reader over an encoded field list.
    #[must_use]
    pub fn new(bytes: &'a [u8], what: &'static str) -> Self {
        TlvReader {
            reader: Reader::new(bytes, what),
        }
    }

    /// The next `(tag, value)`, or `None` at the end.
    pub fn next_field(&mut self) -> Result<Option<(u16, &'a [u8])>, FormatError> {
        if self.reader.remaining() == 0 {
            return Ok(None);
        }
        let tag = self.reader.u16()?;
        let len = self.reader.u32()? as usize;
        if len > TLV_FIELD_MAX {
            return Err(FormatError::Invalid {
                what: self.reader.what,
                why: "field too long",
            });
        }
        Ok(Some((tag, self.reader.take(len)?)))
    }
}

/// Decodes a u64 field value.
pub fn tlv_u64(value: &[u8], what: &'static str) -> Result<u64, FormatError> {
    let array: [u8; 8] = value.try_into().map_err(|_| FormatError::Invalid {
        what,
        why: "u64 field is not 8 bytes",
    })?;
    Ok(u64::from_le_bytes(array))
}

/// Decodes a UTF-8 string field value.
pub fn tlv_str(value: &[u8], what: &'static str) -> Result<String, FormatError> {
    String::from_utf8(value.to_vec()).map_err(|_| FormatError::Invalid {
        what,
        why: "not UTF-8",
    })
}
