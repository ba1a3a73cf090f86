//! ZFS-style sizes: `7T`, `1.5G`, `512k`, `10GiB` in (powers of 1024, case-insensitive), and
//! the 5-character style out (`290K`, `30.5G`, `1.78T`).

/// Why a size did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseSizeError {
    /// Empty string.
    #[error("empty size")]
    Empty,
    /// Not a number followed by an optional suffix.
    #[error("bad numeric value '{0}'")]
    Invalid(String),
    /// Too large for 64 bits.
    #[error("numeric value '{0}' is too large")]
    Overflow(String),
}

const SUFFIXES: &[u8] = b"BKMGTPE";

/// Parses a size the way `zfs set quota=...` does. Accepts a plain number of bytes, or a number
/// (possibly with a fraction) followed by one of `B K M G T P E`, optionally followed by `B` or
/// `iB`, in any case.
pub fn parse_size(text: &str) -> Result<u64, ParseSizeError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(ParseSizeError::Empty);
    }
    let invalid = || ParseSizeError::Invalid(text.to_string());
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() || number.matches('.').count() > 1 {
        return Err(invalid());
    }
    let suffix = suffix.to_ascii_uppercase();
    let shift = match suffix.as_str() {
        "" => 0,
        _ => {
            let bytes = suffix.as_bytes();
            let index = SUFFIXES
                .iter()
                .position(|&s| s == bytes[0])
                .ok_or_else(invalid)?;
            let rest = &suffix[1..];
            let rest_ok = match index {
                0 => rest.is_empty(),
                _ => rest.is_empty() || rest == "B" || rest == "IB",
            };
            if !rest_ok {
                return Err(invalid());
            }
            10 * index as u32
        }
    };
    let overflow = || ParseSizeError::Overflow(text.to_string());
    if let Some((whole, fraction)) = number.split_once('.') {
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| invalid())?
        };
        let multiplier = 1u128 << shift;
        let digits = fraction.len().min(18) as u32;
        let fraction: u128 = if digits == 0 {
            0
        } else {
            fraction[..digits as usize].parse().map_err(|_| invalid())?
        };
        let total = u128::from(whole) * multiplier + fraction * multiplier / 10u128.pow(digits);
        u64::try_from(total).map_err(|_| overflow())
    } else {
        let whole: u64 = number.parse().map_err(|_| overflow())?;
        whole.checked_mul(1u64 << shift).ok_or_else(overflow)
    }
}

/// Formats bytes in ZFS's 5-character style: `0B`, `512B`, `1K`, `290K`, `30.5G`, `1.78T`.
#[must_use]
pub fn format_size(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut index = 0;
    let mut divisor = 1u64;
    while index + 1 < SUFFIXES.len() && bytes >= divisor * 1024 {
        divisor *= 1024;
        index += 1;
    }
    let suffix = SUFFIXES[index] as char;
    if bytes.is_multiple_of(divisor) {
        return format!("{}{suffix}", bytes / divisor);
    }
    let value = bytes as f64 / divisor as f64;
    // Like ZFS's zfs_nicenum: as many decimals as fit in 4 characters before the suffix.
    for decimals in [2usize, 1, 0] {
        let text = format!("{value:.decimals$}");
        if text.len() <= 4 {
            return format!("{text}{suffix}");
        }
    }
    format!("{value:.0}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: Option<u64>) {
        assert_eq!(parse_size(input).ok(), expected, "parse_size({input:?})");
    }

    #[test]
    fn parses_zfs_sizes() {
        check("0", Some(0));
        check("512", Some(512));
        check("512k", Some(512 << 10));
        check("10G", Some(10 << 30));
        check("10GiB", Some(10 << 30));
        check("10gb", Some(10 << 30));
        check("7T", Some(7 << 40));
        check("1.5G", Some(3 << 29));
        check("100B", Some(100));
        check("", None);
        check("abc", None);
        check("10X", None);
        check("1.2.3G", None);
        check("16E", None);
        check("-1", None);
    }

    #[test]
    fn prints_zfs_sizes() {
        for (bytes, text) in [
            (0, "0B"),
            (512, "512B"),
            (1024, "1K"),
            (290 << 10, "290K"),
            (1536, "1.50K"),
            (30 * (1 << 30) + (1 << 29), "30.5G"),
            (1_957_000_000_000, "1.78T"),
            (128 << 10, "128K"),
        ] {
            assert_eq!(format_size(bytes), text, "format_size({bytes})");
        }
    }
}
