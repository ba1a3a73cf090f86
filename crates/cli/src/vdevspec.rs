//! The vdev grammar of `tarn pool create`, parsed in the CLI so that mistakes are reported
//! before anything reaches the daemon:
//!
//! ```text
//! spec    := data-group+ section*
//! data-group := (mirror|raidz|raidz1|raidz2|raidz3|DRAID) DEV+ | DEV  (a bare DEV: one disk)
//! DRAID   := draid[PARITY][:DATAd][:CHILDRENc][:SPARESs]   (parity 1-3, default 1; data
//!            default min(8, devices - parity - spares); children, if given, = devices;
//!            spares default 0)
//! section := spare DEV+ | cache DEV+ | log group+ | special sgroup+   (each at most once)
//! group   := mirror DEV+ | DEV
//! sgroup  := (mirror|raidz|raidz1|raidz2|raidz3) DEV+ | DEV
//! ```
//! `tarn pool add` takes the same grammar without the need for a data group
//! ([`parse_add`]).
//! Every device path is made absolute against the CLI's working directory, because the
//! daemon runs elsewhere.

use std::path::Path;

use tarn_proto::{VdevGroupSpec, VdevKind, VdevRole};

/// Parses `words` (everything after the pool name). Errors are the text after
/// `invalid vdev specification: `.
pub(crate) fn parse(words: &[String], cwd: &Path) -> Result<Vec<VdevGroupSpec>, String> {
    let groups = parse_groups(words, cwd)?;
    if !groups.iter().any(|g| g.role == VdevRole::Data) {
        return Err("at least one data vdev must be specified".to_string());
    }
    finish(groups)
}

/// Parses the vdevs of `tarn pool add`: the create grammar, where any section may come
/// alone (`add tank log /d/l`, `add tank spare /d/s`).
pub(crate) fn parse_add(words: &[String], cwd: &Path) -> Result<Vec<VdevGroupSpec>, String> {
    let groups = parse_groups(words, cwd)?;
    if groups.is_empty() {
        return Err("no vdevs given".to_string());
    }
    finish(groups)
}

fn parse_groups(words: &[String], cwd: &Path) -> Result<Vec<VdevGroupSpec>, String> {
    let mut groups: Vec<VdevGroupSpec> = Vec::new();
    let mut role = VdevRole::Data;
    let mut sections_seen: Vec<VdevRole> = Vec::new();
    let mut open: Option<VdevGroupSpec> = None;
    let mut draid: Option<DraidWord> = None;
    let mut section_devices = 0usize;
    for word in words {
        if let Some(new_role) = role_keyword(word) {
            close(&mut open, &mut draid, &mut groups)?;
            check_section_end(role, section_devices)?;
            if sections_seen.contains(&new_role) {
                return Err(format!("'{word}' can be specified only once"));
            }
            sections_seen.push(new_role);
            role = new_role;
            section_devices = 0;
        } else if word.starts_with("draid") && !word.contains('/') {
            close(&mut open, &mut draid, &mut groups)?;
            let (group, parsed) = DraidWord::open(word, role)?;
            open = Some(group);
            draid = Some(parsed);
        } else if let Some(kind) = kind_keyword(word) {
            close(&mut open, &mut draid, &mut groups)?;
            let allowed = match role {
                VdevRole::Data => true,
                VdevRole::Log => kind == VdevKind::Mirror,
                // ZFS takes raidz here too (the replication check decides with -f).
                VdevRole::Special => true,
                VdevRole::Spare | VdevRole::Cache => false,
            };
            if !allowed {
                return Err(format!(
                    "'{word}' is not allowed in a {} section{}",
                    role.keyword(),
                    match role {
                        VdevRole::Log => "; use mirror or plain devices",
                        _ => "; list plain devices",
                    }
                ));
            }
            open = Some(VdevGroupSpec {
                role,
                kind,
                devices: Vec::new(),
            });
        } else if looks_like_vdev_type(word) {
            return Err(format!(
                "unknown vdev type '{word}' (valid: mirror, raidz, raidz1, raidz2, raidz3, \
                 draid, spare, log, cache, special)"
            ));
        } else {
            let device = absolute(word, cwd)?;
            section_devices += 1;
            match open.as_mut() {
                Some(group) => group.devices.push(device),
                None => groups.push(VdevGroupSpec {
                    role,
                    kind: VdevKind::Disk,
                    devices: vec![device],
                }),
            }
        }
    }
    close(&mut open, &mut draid, &mut groups)?;
    check_section_end(role, section_devices)?;
    Ok(groups)
}

/// A `draid[PARITY][:DATAd][:CHILDRENc][:SPARESs]` word, before its devices are known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DraidWord {
    parity: u8,
    data: Option<u8>,
    children: Option<usize>,
    spares: u8,
}

impl DraidWord {
    /// The group a dRAID word opens (data sections only; its data width is set when it
    /// closes, [`close_draid`]).
    fn open(word: &str, role: VdevRole) -> Result<(VdevGroupSpec, DraidWord), String> {
        if role != VdevRole::Data {
            return Err(format!(
                "'{word}' is not allowed in a {} section",
                role.keyword()
            ));
        }
        let parsed = DraidWord::parse(word)?;
        let group = VdevGroupSpec {
            role,
            kind: VdevKind::Draid {
                parity: parsed.parity,
                data: 1,
                spares: parsed.spares,
            },
            devices: Vec::new(),
        };
        Ok((group, parsed))
    }

    /// Parses the word; the fields after the parity come in any order, each at most once.
    fn parse(word: &str) -> Result<DraidWord, String> {
        let usage = || {
            format!(
                "invalid draid '{word}' (valid: draid[PARITY][:DATAd][:CHILDRENc][:SPARESs], \
                 parity 1-3, e.g. draid2:8d:90c:2s)"
            )
        };
        let rest = word.strip_prefix("draid").ok_or_else(usage)?;
        let mut fields = rest.split(':');
        let parity = match fields.next() {
            Some("") | None => 1,
            Some(p) => p.parse::<u8>().map_err(|_| usage())?,
        };
        if !(1..=3).contains(&parity) {
            return Err(format!("invalid draid '{word}': parity must be 1, 2 or 3"));
        }
        let mut parsed = DraidWord {
            parity,
            data: None,
            children: None,
            spares: 0,
        };
        let mut seen = String::new();
        for field in fields {
            let suffix = field.chars().last().ok_or_else(usage)?;
            let number: usize = field[..field.len() - 1].parse().map_err(|_| usage())?;
            if seen.contains(suffix) {
                return Err(usage());
            }
            seen.push(suffix);
            let small = |n: usize| u8::try_from(n).map_err(|_| usage());
            match suffix {
                'd' if number > 0 => parsed.data = Some(small(number)?),
                'c' => parsed.children = Some(number),
                's' => parsed.spares = small(number)?,
                _ => return Err(usage()),
            }
        }
        Ok(parsed)
    }
}

/// Ends an open dRAID group: its children count must match its devices, and its data
/// width defaults to min(8, devices - parity - spares), as in OpenZFS.
fn close_draid(
    open: &mut Option<VdevGroupSpec>,
    draid: &mut Option<DraidWord>,
) -> Result<(), String> {
    let (Some(group), Some(word)) = (open.as_mut(), draid.take()) else {
        return Ok(());
    };
    let devices = group.devices.len();
    let (parity, spares) = (usize::from(word.parity), usize::from(word.spares));
    let name = |data: usize| format!("draid{parity}:{data}d:{spares}s");
    if let Some(children) = word.children
        && children != devices
    {
        return Err(format!(
            "{} names {children} children but {devices} devices are listed",
            name(word.data.map_or(8, usize::from))
        ));
    }
    let data = match word.data {
        Some(data) => usize::from(data),
        None => devices.saturating_sub(parity + spares).clamp(1, 8),
    };
    if devices < data + parity + spares {
        return Err(format!(
            "{} requires at least {} devices (data + parity + spares), {devices} given",
            name(data),
            data + parity + spares
        ));
    }
    group.kind = VdevKind::Draid {
        parity: word.parity,
        data: u8::try_from(data).map_err(|_| "draid data width over 255".to_string())?,
        spares: word.spares,
    };
    Ok(())
}

fn finish(groups: Vec<VdevGroupSpec>) -> Result<Vec<VdevGroupSpec>, String> {
    if groups.len() > tarn_base::limits::TOP_VDEVS_MAX {
        return Err(format!(
            "{} top-level vdevs exceed the limit of {}",
            groups.len(),
            tarn_base::limits::TOP_VDEVS_MAX
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for device in groups.iter().flat_map(|g| &g.devices) {
        if !seen.insert(device.as_str()) {
            return Err(format!("device '{device}' is listed more than once"));
        }
    }
    for group in &groups {
        group.check()?;
    }
    Ok(groups)
}

/// A role keyword followed by nothing is an error, as in ZFS.
fn check_section_end(role: VdevRole, devices: usize) -> Result<(), String> {
    if role != VdevRole::Data && devices == 0 {
        return Err(format!("{} requires at least 1 device", role.keyword()));
    }
    Ok(())
}

fn close(
    open: &mut Option<VdevGroupSpec>,
    draid: &mut Option<DraidWord>,
    groups: &mut Vec<VdevGroupSpec>,
) -> Result<(), String> {
    close_draid(open, draid)?;
    if let Some(group) = open.take() {
        group.check()?;
        groups.push(group);
    }
    Ok(())
}

/// A bare word (no `/`) that starts like a vdev keyword but is none: a typo such as `raidz4`,
/// `raid5` or `mirrors` would otherwise be taken for a device path in the current directory.
fn looks_like_vdev_type(word: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "raid", "draid", "mirror", "spare", "log", "cache", "special",
    ];
    !word.contains('/') && PREFIXES.iter().any(|p| word.starts_with(p))
}

fn role_keyword(word: &str) -> Option<VdevRole> {
    match word {
        "spare" => Some(VdevRole::Spare),
        "log" => Some(VdevRole::Log),
        "cache" => Some(VdevRole::Cache),
        "special" => Some(VdevRole::Special),
        _ => None,
    }
}

fn kind_keyword(word: &str) -> Option<VdevKind> {
    match word {
        "mirror" => Some(VdevKind::Mirror),
        "raidz" | "raidz1" => Some(VdevKind::Raidz(1)),
        "raidz2" => Some(VdevKind::Raidz(2)),
        "raidz3" => Some(VdevKind::Raidz(3)),
        _ => None,
    }
}

/// Makes `path` absolute against `cwd` (without resolving symlinks: the daemon opens the
/// same path the admin typed).
pub(crate) fn absolute(path: &str, cwd: &Path) -> Result<String, String> {
    if path.is_empty() {
        return Err("empty device path".to_string());
    }
    let joined = cwd.join(path);
    joined
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| format!("device path '{}' is not valid UTF-8", joined.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    fn group(role: VdevRole, kind: VdevKind, devices: &[&str]) -> VdevGroupSpec {
        VdevGroupSpec {
            role,
            kind,
            devices: devices.iter().map(|d| d.to_string()).collect(),
        }
    }

    fn check(text: &str, expected: Result<Vec<VdevGroupSpec>, &str>) {
        let parsed = parse(&words(text), Path::new("/cwd"));
        assert_eq!(parsed, expected.map_err(str::to_string), "{text}");
    }

    #[test]
    fn bare_devices_become_one_disk_each() {
        use VdevKind::Disk;
        use VdevRole::Data;
        check(
            "/d/a b",
            Ok(vec![
                group(Data, Disk, &["/d/a"]),
                group(Data, Disk, &["/cwd/b"]),
            ]),
        );
    }

    #[test]
    fn groups_and_sections() {
        use VdevKind::{Disk, Mirror, Raidz};
        use VdevRole::{Cache, Data, Log, Spare, Special};
        check(
            "raidz2 /a /b /c raidz /d /e mirror /f /g spare /s1 /s2 log mirror /l1 /l2 \
             cache /c1 special mirror /m1 /m2",
            Ok(vec![
                group(Data, Raidz(2), &["/a", "/b", "/c"]),
                group(Data, Raidz(1), &["/d", "/e"]),
                group(Data, Mirror, &["/f", "/g"]),
                group(Spare, Disk, &["/s1"]),
                group(Spare, Disk, &["/s2"]),
                group(Log, Mirror, &["/l1", "/l2"]),
                group(Cache, Disk, &["/c1"]),
                group(Special, Mirror, &["/m1", "/m2"]),
            ]),
        );
        check(
            "/a log /l1 /l2",
            Ok(vec![
                group(Data, Disk, &["/a"]),
                group(Log, Disk, &["/l1"]),
                group(Log, Disk, &["/l2"]),
            ]),
        );
    }

    #[test]
    fn grammar_errors_name_the_problem() {
        check("mirror /a", Err("mirror requires at least 2 devices"));
        check("raidz3 /a /b /c", Err("raidz3 requires at least 4 devices"));
        check(
            "raidz5 /a /b /c",
            Err(
                "unknown vdev type 'raidz5' (valid: mirror, raidz, raidz1, raidz2, raidz3, \
                 draid, spare, log, cache, special)",
            ),
        );
        check("mirror", Err("mirror requires at least 2 devices"));
        check("/a spare", Err("spare requires at least 1 device"));
        check("/a log /b log /c", Err("'log' can be specified only once"));
        check("spare /s", Err("at least one data vdev must be specified"));
        check("", Err("at least one data vdev must be specified"));
        check("/a /b /a", Err("device '/a' is listed more than once"));
        check("/cwd/a a", Err("device '/cwd/a' is listed more than once"));
        check(
            "/a cache mirror /b /c",
            Err("'mirror' is not allowed in a cache section; list plain devices"),
        );
        check(
            "/a log raidz /b /c",
            Err("'raidz' is not allowed in a log section; use mirror or plain devices"),
        );
    }

    #[test]
    fn special_takes_raidz_and_add_needs_no_data_group() {
        use VdevKind::{Disk, Mirror, Raidz};
        use VdevRole::{Data, Log, Spare, Special};
        check(
            "mirror /a /b special raidz2 /s1 /s2 /s3",
            Ok(vec![
                group(Data, Mirror, &["/a", "/b"]),
                group(Special, Raidz(2), &["/s1", "/s2", "/s3"]),
            ]),
        );
        let add = |text: &str| parse_add(&words(text), Path::new("/cwd"));
        assert_eq!(
            add("special mirror /s1 /s2 log /l spare s"),
            Ok(vec![
                group(Special, Mirror, &["/s1", "/s2"]),
                group(Log, Disk, &["/l"]),
                group(Spare, Disk, &["/cwd/s"]),
            ])
        );
        assert_eq!(add("/d"), Ok(vec![group(Data, Disk, &["/d"])]));
        assert_eq!(add(""), Err("no vdevs given".to_string()));
        assert_eq!(
            add("log"),
            Err("log requires at least 1 device".to_string())
        );
    }

    /// Goal: the dRAID grammar takes OpenZFS's forms and defaults, and every malformed or
    /// impossible form is one clear line. Method: parse each.
    #[test]
    fn draid_grammar() {
        use VdevKind::Draid;
        use VdevRole::Data;
        let devs = |n: usize| (0..n).map(|i| format!("/d{i}")).collect::<Vec<_>>();
        let text = |word: &str, n: usize| format!("{word} {}", devs(n).join(" "));
        let draid = |parity, data, spares, n: usize| {
            let names = devs(n);
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            Ok(vec![group(
                Data,
                Draid {
                    parity,
                    data,
                    spares,
                },
                &names,
            )])
        };
        check(&text("draid", 10), draid(1, 8, 0, 10));
        check(&text("draid2:8d:12c:2s", 12), draid(2, 8, 2, 12));
        check(&text("draid2:2s:8d", 12), draid(2, 8, 2, 12));
        check(&text("draid3", 6), draid(3, 3, 0, 6));
        check(&text("draid2:4d:1s:11c", 11), draid(2, 4, 1, 11));
    }

    /// Goal: malformed, impossible and misplaced dRAID words are refused in one line.
    #[test]
    fn draid_grammar_refusals() {
        use VdevKind::Draid;
        use VdevRole::Data;
        let devs = |n: usize| (0..n).map(|i| format!("/d{i}")).collect::<Vec<_>>();
        let text = |word: &str, n: usize| format!("{word} {}", devs(n).join(" "));
        let usage = "(valid: draid[PARITY][:DATAd][:CHILDRENc][:SPARESs], parity 1-3, e.g. \
                     draid2:8d:90c:2s)";
        check(
            &text("draid4", 10),
            Err("invalid draid 'draid4': parity must be 1, 2 or 3"),
        );
        check(
            &text("draid2:8x", 12),
            Err(&format!("invalid draid 'draid2:8x' {usage}")),
        );
        check(
            &text("draid2:0d", 12),
            Err(&format!("invalid draid 'draid2:0d' {usage}")),
        );
        check(
            &text("draid2:8d:8d", 12),
            Err(&format!("invalid draid 'draid2:8d:8d' {usage}")),
        );
        check(
            &text("draid2:8d:90c:2s", 89),
            Err("draid2:8d:2s names 90 children but 89 devices are listed"),
        );
        check(
            &text("draid2:8d:2s", 11),
            Err("draid2:8d:2s requires at least 12 devices (data + parity + spares), 11 given"),
        );
        check(
            &text("draid2:8d", 256),
            Err("draid2:8d:0s of 256 devices exceeds the limit of 255"),
        );
        check(
            "/a special draid1 /b /c /d",
            Err("'draid1' is not allowed in a special section"),
        );
        check(
            "draid1:1d /a /b mirror /c /d",
            Ok(vec![
                group(
                    Data,
                    Draid {
                        parity: 1,
                        data: 1,
                        spares: 0,
                    },
                    &["/a", "/b"],
                ),
                group(Data, VdevKind::Mirror, &["/c", "/d"]),
            ]),
        );
    }

    #[test]
    fn top_level_count_is_bounded() {
        let many: Vec<String> = (0..=tarn_base::limits::TOP_VDEVS_MAX)
            .map(|i| format!("/d/{i}"))
            .collect();
        let error = parse(&many, Path::new("/")).expect_err("too many");
        assert_eq!(error, "1025 top-level vdevs exceed the limit of 1024");
    }
}
