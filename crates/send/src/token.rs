//! The resume token of a partial receive (`receive_resume_token`, `send -t`): which
//! snapshot was being received, relative to which, with which features, and the first
//! object and offset not yet received. Text: `1-` then the hexadecimal bytes of the encoding
//! and its 16-byte BLAKE3 check (docs/FORMAT.md section 21.5), so a token pasted wrong is
//! refused, never misread.

use crate::StreamError;
use crate::record::{Cursor, NAME_MAX};

/// Version of the token encoding (the part before the `-`).
pub const TOKEN_VERSION: u32 = 1;
/// Longest token text accepted.
const TOKEN_TEXT_MAX: usize = 2 * (64 + 2 * NAME_MAX + 16) + 8;

/// What a partial receive needs from the sender to go on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResumeToken {
    /// Feature bits of the interrupted stream.
    pub features: u64,
    /// GUID of its source snapshot (0: a full stream).
    pub from_guid: u64,
    /// GUID of the snapshot being received.
    pub to_guid: u64,
    /// First object not yet received completely.
    pub object: u64,
    /// First offset in `object` not yet received.
    pub offset: u64,
    /// Stream bytes received so far (informational).
    pub bytes: u64,
    /// Full name of the source snapshot on the sender (empty for a full stream).
    pub from_name: String,
    /// Full name of the snapshot on the sender.
    pub to_name: String,
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 15)]));
    }
    out
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    text.as_bytes()
        .chunks_exact(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

impl ResumeToken {
    /// The token's text.
    #[must_use]
    pub fn encode(&self) -> String {
        let mut bytes = Vec::new();
        for value in [
            self.features,
            self.from_guid,
            self.to_guid,
            self.object,
            self.offset,
            self.bytes,
        ] {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
        for name in [&self.from_name, &self.to_name] {
            assert!(name.len() <= NAME_MAX, "name in a resume token");
            bytes.extend_from_slice(&(name.len() as u16).to_le_bytes());
            bytes.extend_from_slice(name.as_bytes());
        }
        let check = blake3::hash(&bytes);
        bytes.extend_from_slice(&check.as_bytes()[..16]);
        format!("{TOKEN_VERSION}-{}", hex(&bytes))
    }

    /// Decodes a token's text; anything else is [`StreamError::BadToken`].
    pub fn decode(text: &str) -> Result<ResumeToken, StreamError> {
        let bad = StreamError::BadToken;
        let text = text.trim();
        if text.len() > TOKEN_TEXT_MAX {
            return Err(bad("too long"));
        }
        let Some((version, body)) = text.split_once('-') else {
            return Err(bad("no version"));
        };
        if version != TOKEN_VERSION.to_string() {
            return Err(bad("unknown version"));
        }
        let bytes = unhex(body).ok_or(bad("not hexadecimal"))?;
        if bytes.len() < 16 {
            return Err(bad("too short"));
        }
        let (fields, check) = bytes.split_at(bytes.len() - 16);
        if blake3::hash(fields).as_bytes()[..16] != *check {
            return Err(bad("checksum mismatch"));
        }
        let mut r = Cursor { bytes: fields };
        let mut next = || r.u64().map_err(bad);
        let (features, from_guid, to_guid) = (next()?, next()?, next()?);
        let (object, offset, bytes) = (next()?, next()?, next()?);
        let from_name = r.str16(NAME_MAX).map_err(bad)?;
        let to_name = r.str16(NAME_MAX).map_err(bad)?;
        if !r.bytes.is_empty() || to_guid == 0 || to_name.is_empty() {
            return Err(bad("malformed"));
        }
        Ok(ResumeToken {
            features,
            from_guid,
            to_guid,
            object,
            offset,
            bytes,
            from_name,
            to_name,
        })
    }
}
