//! The NBD wire format, pure: bytes in, values or errors out, values in, bytes out. No I/O,
//! no state beyond what the caller passes. Every integer on the wire is big-endian (network
//! order, as the NBD protocol says); every decoder bounds what it accepts and never panics on
//! garbage (fuzzed: `fuzz/fuzz_targets/nbd_request.rs`, `nbd_option.rs`).

/// `NBDMAGIC`, the first eight bytes the server sends.
pub const INIT_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: the newstyle magic, also before every option.
pub const OPTION_MAGIC: u64 = 0x4948_4156_454f_5054;
/// Magic of an option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a compact (32-bit length) request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of an extended (64-bit length) request.
pub const EXTENDED_REQUEST_MAGIC: u32 = 0x21e4_1c71;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;
/// Magic of an extended reply chunk.
pub const EXTENDED_REPLY_MAGIC: u32 = 0x6e8a_278c;

/// Handshake flags (server, 16 bits).
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// The server omits the 124 zero bytes after `EXPORT_NAME` when the client agrees.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flags (32 bits).
pub const CLIENT_FIXED_NEWSTYLE: u32 = 1 << 0;
/// The client does not want the 124 zero bytes.
pub const CLIENT_NO_ZEROES: u32 = 1 << 1;

/// Transmission flags (16 bits).
pub mod tflags {
    /// Always set.
    pub const HAS_FLAGS: u16 = 1 << 0;
    /// The export is read-only.
    pub const READ_ONLY: u16 = 1 << 1;
    /// FLUSH is supported.
    pub const SEND_FLUSH: u16 = 1 << 2;
    /// FUA is supported.
    pub const SEND_FUA: u16 = 1 << 3;
    /// TRIM is supported.
    pub const SEND_TRIM: u16 = 1 << 5;
    /// WRITE_ZEROES is supported.
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    /// Several connections see each other's flushed writes.
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
    /// CACHE is supported.
    pub const SEND_CACHE: u16 = 1 << 10;
    /// WRITE_ZEROES with FAST_ZERO is supported.
    pub const SEND_FAST_ZERO: u16 = 1 << 11;
}

/// Options.
pub mod opt {
    /// Choose an export and end the handshake (no reply packet).
    pub const EXPORT_NAME: u32 = 1;
    /// Soft disconnect.
    pub const ABORT: u32 = 2;
    /// List exports.
    pub const LIST: u32 = 3;
    /// Upgrade the connection to TLS (offered by TCP listeners configured for it).
    pub const STARTTLS: u32 = 5;
    /// Describe an export.
    pub const INFO: u32 = 6;
    /// Describe an export and end the handshake.
    pub const GO: u32 = 7;
    /// Structured replies.
    pub const STRUCTURED_REPLY: u32 = 8;
    /// List meta contexts.
    pub const LIST_META_CONTEXT: u32 = 9;
    /// Choose meta contexts.
    pub const SET_META_CONTEXT: u32 = 10;
    /// 64-bit request and reply headers.
    pub const EXTENDED_HEADERS: u32 = 11;
}

/// Option reply types.
pub mod rep {
    /// Done.
    pub const ACK: u32 = 1;
    /// One export (LIST).
    pub const SERVER: u32 = 2;
    /// One piece of information (INFO, GO).
    pub const INFO: u32 = 3;
    /// One meta context.
    pub const META_CONTEXT: u32 = 4;
    const ERR: u32 = 1 << 31;
    /// Option unknown.
    pub const ERR_UNSUP: u32 = ERR + 1;
    /// Refused by policy.
    pub const ERR_POLICY: u32 = ERR + 2;
    /// Syntactically or semantically invalid.
    pub const ERR_INVALID: u32 = ERR + 3;
    /// TLS must be negotiated first.
    pub const ERR_TLS_REQD: u32 = ERR + 5;
    /// No such export.
    pub const ERR_UNKNOWN: u32 = ERR + 6;
    /// Option payload too big.
    pub const ERR_TOO_BIG: u32 = ERR + 9;
    /// Extended headers required (or already negotiated).
    pub const ERR_EXT_HEADER_REQD: u32 = ERR + 10;
}

/// Information types of `NBD_REP_INFO`.
pub mod info {
    /// Size and transmission flags.
    pub const EXPORT: u16 = 0;
    /// Block sizes.
    pub const BLOCK_SIZE: u16 = 3;
}

/// Commands.
pub mod cmd {
    /// Read.
    pub const READ: u16 = 0;
    /// Write.
    pub const WRITE: u16 = 1;
    /// Disconnect.
    pub const DISC: u16 = 2;
    /// Flush.
    pub const FLUSH: u16 = 3;
    /// Trim.
    pub const TRIM: u16 = 4;
    /// Prefetch.
    pub const CACHE: u16 = 5;
    /// Write zeroes.
    pub const WRITE_ZEROES: u16 = 6;
    /// Block status.
    pub const BLOCK_STATUS: u16 = 7;
}

/// Command flags.
pub mod cflags {
    /// Durable before the reply.
    pub const FUA: u16 = 1 << 0;
    /// WRITE_ZEROES must not leave holes.
    pub const NO_HOLE: u16 = 1 << 1;
    /// Do not fragment a structured read reply.
    pub const DF: u16 = 1 << 2;
    /// BLOCK_STATUS: one extent is enough.
    pub const REQ_ONE: u16 = 1 << 3;
    /// WRITE_ZEROES: fail fast rather than write zeroes slowly.
    pub const FAST_ZERO: u16 = 1 << 4;
    /// The extended header's length is a payload length (BLOCK_STATUS filters).
    pub const PAYLOAD_LEN: u16 = 1 << 5;
    /// Every flag this server knows.
    pub const KNOWN: u16 = FUA | NO_HOLE | DF | REQ_ONE | FAST_ZERO | PAYLOAD_LEN;
}

/// Structured reply chunk types.
pub mod chunk {
    /// No payload (the final chunk of a successful reply).
    pub const NONE: u16 = 0;
    /// Data at an offset.
    pub const OFFSET_DATA: u16 = 1;
    /// Block status with 32-bit descriptors.
    pub const BLOCK_STATUS: u16 = 5;
    /// Block status with 64-bit descriptors (extended headers).
    pub const BLOCK_STATUS_EXT: u16 = 6;
    /// An error.
    pub const ERROR: u16 = (1 << 15) + 1;
    /// Flag of the last chunk of a reply.
    pub const FLAG_DONE: u16 = 1 << 0;
}

/// Error values of replies (errno numbers the protocol fixes).
pub mod errno {
    /// Not permitted (a write to a read-only export).
    pub const EPERM: u32 = 1;
    /// I/O error.
    pub const EIO: u32 = 5;
    /// Out of memory.
    pub const ENOMEM: u32 = 12;
    /// Invalid argument.
    pub const EINVAL: u32 = 22;
    /// No space.
    pub const ENOSPC: u32 = 28;
    /// Past the end of the export.
    pub const EOVERFLOW: u32 = 75;
    /// Not supported.
    pub const ENOTSUP: u32 = 95;
    /// The server is shutting down.
    pub const ESHUTDOWN: u32 = 108;
}

/// Flags of `base:allocation` extents.
pub const STATE_HOLE: u32 = 1 << 0;
/// The extent reads as zeros.
pub const STATE_ZERO: u32 = 1 << 1;

/// The one meta context this server offers.
pub const BASE_ALLOCATION: &str = "base:allocation";
/// Its id in this server's replies.
pub const BASE_ALLOCATION_ID: u32 = 1;

/// Largest option payload accepted (names are at most 4096 bytes; queries a few).
pub const OPTION_LEN_MAX: u32 = 64 << 10;
/// Longest string (export name, query) the protocol allows.
pub const STRING_MAX: usize = 4096;
/// Most meta-context queries in one option.
pub const QUERIES_MAX: usize = 64;
/// Most information requests in one INFO/GO.
pub const INFO_REQUESTS_MAX: usize = 64;

/// Why bytes did not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// Fewer bytes than the message needs.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// A magic number that is not the expected one.
    #[error("bad magic in {0}")]
    Magic(&'static str),
    /// A field out of its allowed range.
    #[error("invalid {0}")]
    Invalid(&'static str),
}

/// A big-endian cursor over a byte slice.
struct Cursor<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Cursor<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Cursor { bytes, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.bytes.len() < n {
            return Err(CodecError::Truncated(self.what));
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// A string of `len` bytes: UTF-8, no NUL, at most [`STRING_MAX`].
    fn string(&mut self, len: usize) -> Result<String, CodecError> {
        if len > STRING_MAX {
            return Err(CodecError::Invalid("string length"));
        }
        let bytes = self.take(len)?;
        if bytes.contains(&0) {
            return Err(CodecError::Invalid("string with NUL"));
        }
        String::from_utf8(bytes.to_vec()).map_err(|_| CodecError::Invalid("string encoding"))
    }

    fn rest(&self) -> usize {
        self.bytes.len()
    }
}

/// The server's greeting: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
#[must_use]
pub fn encode_greeting() -> [u8; 18] {
    let mut out = [0u8; 18];
    out[..8].copy_from_slice(&INIT_MAGIC.to_be_bytes());
    out[8..16].copy_from_slice(&OPTION_MAGIC.to_be_bytes());
    out[16..].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    out
}

/// The client's flags; unknown bits are an error (the spec says to close then).
pub fn decode_client_flags(bytes: [u8; 4]) -> Result<u32, CodecError> {
    let flags = u32::from_be_bytes(bytes);
    if flags & !(CLIENT_FIXED_NEWSTYLE | CLIENT_NO_ZEROES) != 0 {
        return Err(CodecError::Invalid("client flags"));
    }
    Ok(flags)
}

/// An option header: (option, payload length). A payload longer than
/// [`OPTION_LEN_MAX`] is still returned: the caller skips it and answers `ERR_TOO_BIG`.
pub fn decode_option_header(bytes: [u8; 16]) -> Result<(u32, u32), CodecError> {
    let mut c = Cursor::new(&bytes, "option header");
    if c.u64()? != OPTION_MAGIC {
        return Err(CodecError::Magic("option header"));
    }
    Ok((c.u32()?, c.u32()?))
}

/// The payload of `INFO`/`GO`/`EXPORT_NAME`-like options, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OptionRequest {
    /// `EXPORT_NAME`: the name is the whole payload.
    ExportName(String),
    /// `INFO` (`go` false) or `GO`: export name and information requested.
    Info {
        /// `GO` rather than `INFO`.
        go: bool,
        /// Export name (empty: the default export).
        name: String,
        /// Information types asked for.
        requests: Vec<u16>,
    },
    /// `LIST_META_CONTEXT` (`set` false) or `SET_META_CONTEXT`.
    MetaContext {
        /// `SET` rather than `LIST`.
        set: bool,
        /// Export name.
        name: String,
        /// Queries.
        queries: Vec<String>,
    },
    /// An option without payload: `ABORT`, `LIST`, `STRUCTURED_REPLY`, `EXTENDED_HEADERS`.
    Bare(u32),
    /// An option this server does not know (answered `ERR_UNSUP`).
    Unknown(u32),
}

/// Decodes an option's payload (at most [`OPTION_LEN_MAX`] bytes).
pub fn decode_option(option: u32, payload: &[u8]) -> Result<OptionRequest, CodecError> {
    if payload.len() > OPTION_LEN_MAX as usize {
        return Err(CodecError::Invalid("option length"));
    }
    let mut c = Cursor::new(payload, "option payload");
    let request = match option {
        opt::EXPORT_NAME => OptionRequest::ExportName(c.string(payload.len())?),
        opt::INFO | opt::GO => {
            let len = c.u32()? as usize;
            let name = c.string(len)?;
            let count = usize::from(c.u16()?);
            if count > INFO_REQUESTS_MAX {
                return Err(CodecError::Invalid("information request count"));
            }
            let mut requests = Vec::with_capacity(count);
            for _ in 0..count {
                requests.push(c.u16()?);
            }
            OptionRequest::Info {
                go: option == opt::GO,
                name,
                requests,
            }
        }
        opt::LIST_META_CONTEXT | opt::SET_META_CONTEXT => {
            let len = c.u32()? as usize;
            let name = c.string(len)?;
            let count = c.u32()? as usize;
            if count > QUERIES_MAX {
                return Err(CodecError::Invalid("meta context query count"));
            }
            let mut queries = Vec::with_capacity(count);
            for _ in 0..count {
                let len = c.u32()? as usize;
                queries.push(c.string(len)?);
            }
            OptionRequest::MetaContext {
                set: option == opt::SET_META_CONTEXT,
                name,
                queries,
            }
        }
        opt::ABORT | opt::LIST | opt::STARTTLS | opt::STRUCTURED_REPLY | opt::EXTENDED_HEADERS => {
            OptionRequest::Bare(option)
        }
        other => OptionRequest::Unknown(other),
    };
    if c.rest() != 0 {
        return Err(CodecError::Invalid("option payload length"));
    }
    Ok(request)
}

/// An option reply packet.
#[must_use]
pub fn encode_option_reply(option: u32, reply: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + data.len());
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply.to_be_bytes());
    let len = u32::try_from(data.len()).expect("option replies are small");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// `NBD_INFO_EXPORT`: size and transmission flags.
#[must_use]
pub fn info_export(size: u64, flags: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    out.extend_from_slice(&info::EXPORT.to_be_bytes());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out
}

/// `NBD_INFO_BLOCK_SIZE`: minimum, preferred, maximum.
#[must_use]
pub fn info_block_size(min: u32, preferred: u32, max: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(14);
    out.extend_from_slice(&info::BLOCK_SIZE.to_be_bytes());
    for v in [min, preferred, max] {
        out.extend_from_slice(&v.to_be_bytes());
    }
    out
}

/// `NBD_REP_SERVER` data: one export name.
#[must_use]
pub fn rep_server(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    let len = u32::try_from(name.len()).expect("names are at most 4096 bytes");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

/// `NBD_REP_META_CONTEXT` data: id and name.
#[must_use]
pub fn rep_meta_context(id: u32, name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

/// The reply to `EXPORT_NAME`: size, flags and (unless `no_zeroes`) 124 zero bytes.
#[must_use]
pub fn encode_export_name_reply(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(134);
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        out.extend_from_slice(&[0u8; 124]);
    }
    out
}

/// Length of a compact request header.
pub const REQUEST_LEN: usize = 28;
/// Length of an extended request header.
pub const EXTENDED_REQUEST_LEN: usize = 32;

/// One request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Command flags.
    pub flags: u16,
    /// Command type.
    pub kind: u16,
    /// The client's cookie (handle), echoed in the reply.
    pub cookie: u64,
    /// Offset.
    pub offset: u64,
    /// Length (of the effect; for WRITE also of the payload that follows).
    pub len: u64,
}

/// Decodes a request header: compact ([`REQUEST_LEN`] bytes) unless `extended`
/// ([`EXTENDED_REQUEST_LEN`] bytes). `bytes` must be exactly that long.
pub fn decode_request(bytes: &[u8], extended: bool) -> Result<Request, CodecError> {
    let want = if extended {
        EXTENDED_REQUEST_LEN
    } else {
        REQUEST_LEN
    };
    if bytes.len() != want {
        return Err(CodecError::Truncated("request header"));
    }
    let mut c = Cursor::new(bytes, "request header");
    let magic = c.u32()?;
    let expected = if extended {
        EXTENDED_REQUEST_MAGIC
    } else {
        REQUEST_MAGIC
    };
    if magic != expected {
        return Err(CodecError::Magic("request header"));
    }
    let flags = c.u16()?;
    let kind = c.u16()?;
    let cookie = c.u64()?;
    let offset = c.u64()?;
    let len = if extended {
        c.u64()?
    } else {
        u64::from(c.u32()?)
    };
    Ok(Request {
        flags,
        kind,
        cookie,
        offset,
        len,
    })
}

/// Encodes a request header (for tests and the fuzz targets' round trips).
#[must_use]
pub fn encode_request(request: &Request, extended: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(EXTENDED_REQUEST_LEN);
    let magic = if extended {
        EXTENDED_REQUEST_MAGIC
    } else {
        REQUEST_MAGIC
    };
    out.extend_from_slice(&magic.to_be_bytes());
    out.extend_from_slice(&request.flags.to_be_bytes());
    out.extend_from_slice(&request.kind.to_be_bytes());
    out.extend_from_slice(&request.cookie.to_be_bytes());
    out.extend_from_slice(&request.offset.to_be_bytes());
    if extended {
        out.extend_from_slice(&request.len.to_be_bytes());
    } else {
        let len = u32::try_from(request.len).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_be_bytes());
    }
    out
}

/// Which reply headers a connection negotiated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyStyle {
    /// Simple replies only.
    Simple,
    /// Structured replies (`STRUCTURED_REPLY`).
    Structured,
    /// Extended headers (`EXTENDED_HEADERS`): every reply is an extended chunk.
    Extended,
}

/// A simple reply header.
#[must_use]
pub fn encode_simple_reply(cookie: u64, error: u32) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out[4..8].copy_from_slice(&error.to_be_bytes());
    out[8..].copy_from_slice(&cookie.to_be_bytes());
    out
}

/// A structured (or, with `extended`, extended) chunk header for `payload_len` bytes;
/// `offset` is the request's offset (only the extended header carries it).
#[must_use]
pub fn encode_chunk_header(
    extended: bool,
    flags: u16,
    kind: u16,
    cookie: u64,
    offset: u64,
    payload_len: u64,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    if extended {
        out.extend_from_slice(&EXTENDED_REPLY_MAGIC.to_be_bytes());
    } else {
        out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    }
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    if extended {
        out.extend_from_slice(&offset.to_be_bytes());
        out.extend_from_slice(&payload_len.to_be_bytes());
    } else {
        let len = u32::try_from(payload_len).expect("structured chunks are under 4G");
        out.extend_from_slice(&len.to_be_bytes());
    }
    out
}

/// The payload of an error chunk: error value and a message.
#[must_use]
pub fn error_payload(error: u32, message: &str) -> Vec<u8> {
    let text = &message.as_bytes()[..message.len().min(STRING_MAX)];
    let mut out = Vec::with_capacity(6 + text.len());
    out.extend_from_slice(&error.to_be_bytes());
    let len = u16::try_from(text.len()).expect("messages are at most 4096 bytes");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(text);
    out
}

/// The payload of a block-status chunk: the context id, then `(length, flags)` per extent,
/// 32-bit descriptors (`BLOCK_STATUS`) or, with `extended`, a count and 64-bit descriptors
/// (`BLOCK_STATUS_EXT`).
#[must_use]
pub fn block_status_payload(extended: bool, context: u32, extents: &[(u64, u32)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + extents.len() * 16);
    out.extend_from_slice(&context.to_be_bytes());
    if extended {
        let count = u32::try_from(extents.len()).expect("extent lists are bounded");
        out.extend_from_slice(&count.to_be_bytes());
        for (len, flags) in extents {
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&u64::from(*flags).to_be_bytes());
        }
    } else {
        for (len, flags) in extents {
            let len = u32::try_from(*len).expect("compact extents are under 4G");
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&flags.to_be_bytes());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: requests round-trip in both header forms; a wrong magic or length is an error.
    #[test]
    fn requests_round_trip_and_garbage_is_an_error() {
        let request = Request {
            flags: cflags::FUA,
            kind: cmd::WRITE,
            cookie: 0xdead_beef,
            offset: 1 << 40,
            len: 4096,
        };
        for extended in [false, true] {
            let bytes = encode_request(&request, extended);
            assert_eq!(decode_request(&bytes, extended), Ok(request));
            assert!(decode_request(&bytes, !extended).is_err());
            let mut bad = bytes.clone();
            bad[0] ^= 1;
            assert_eq!(
                decode_request(&bad, extended),
                Err(CodecError::Magic("request header"))
            );
            assert!(decode_request(&bytes[..bytes.len() - 1], extended).is_err());
        }
    }

    /// Goal: option payloads decode; lengths that lie, NULs and oversize counts are errors.
    #[test]
    fn options_decode_and_lies_are_errors() {
        let mut go = Vec::new();
        go.extend_from_slice(&4u32.to_be_bytes());
        go.extend_from_slice(b"tank");
        go.extend_from_slice(&1u16.to_be_bytes());
        go.extend_from_slice(&info::BLOCK_SIZE.to_be_bytes());
        assert_eq!(
            decode_option(opt::GO, &go),
            Ok(OptionRequest::Info {
                go: true,
                name: "tank".into(),
                requests: vec![info::BLOCK_SIZE]
            })
        );
        assert!(decode_option(opt::GO, &go[..go.len() - 1]).is_err());
        let mut long = go.clone();
        long.push(0);
        assert!(decode_option(opt::GO, &long).is_err(), "trailing bytes");
        let mut lying = go.clone();
        lying[3] = 200;
        assert!(decode_option(opt::GO, &lying).is_err());
        assert!(decode_option(opt::EXPORT_NAME, b"a\0b").is_err());
        let mut meta = Vec::new();
        meta.extend_from_slice(&0u32.to_be_bytes());
        meta.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode_option(opt::SET_META_CONTEXT, &meta).is_err());
        assert_eq!(decode_option(99, &[]), Ok(OptionRequest::Unknown(99)));
        assert!(decode_option_header([0u8; 16]).is_err());
        assert!(decode_client_flags([0, 0, 0, 4]).is_err());
        assert_eq!(decode_client_flags([0, 0, 0, 3]), Ok(3));
    }
}
