//! The command line, declared with clap: `tarn [--rundir DIR] [-j] <daemon|pool VERB> ...`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// tarn: ZFS-style pooled storage in user space.
#[derive(Debug, Parser)]
#[command(name = "tarn", version)]
pub(crate) struct Cli {
    /// Run directory of the daemon (socket, pid file, cache file, log).
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) rundir: Option<PathBuf>,
    /// Print the reply as JSON instead of a table (OpenZFS's schema; docs/JSON.md).
    #[arg(short = 'j', long = "json", global = true)]
    pub(crate) json: bool,
    /// With -j: numbers as JSON integers instead of strings.
    #[arg(long = "json-int", global = true)]
    pub(crate) json_int: bool,
    /// With -j (`pool status`): every vdev in one flat map, each naming its parent.
    #[arg(long = "json-flat-vdevs", global = true)]
    pub(crate) json_flat_vdevs: bool,
    /// With -j (`pool status`, `list`, `get`): pools keyed by GUID instead of name.
    #[arg(long = "json-pool-key-guid", global = true)]
    pub(crate) json_pool_key_guid: bool,
    /// The command as ZFS names it (`zpool status`, `zfs list`), filled by `command_name`.
    #[arg(skip)]
    pub(crate) command_name: String,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The command line as `tarn` parses it, and which name the program was called by.
#[derive(Debug)]
pub(crate) struct EntryArgs {
    /// `zpool`, `zfs` or `tarn`.
    pub(crate) called: &'static str,
    /// `argv` as `tarn` takes it: `zpool VERB ...` becomes `tarn pool VERB ...`.
    pub(crate) args: Vec<std::ffi::OsString>,
}

/// ZFS's entry points: called as `zpool` (a link to this binary), the arguments are those of
/// `tarn pool`; called as `zfs`, those of `tarn` itself (the dataset verbs). Any other name
/// is `tarn`.
pub(crate) fn entry_point(mut argv: Vec<std::ffi::OsString>) -> EntryArgs {
    let name = argv
        .first()
        .map(std::path::Path::new)
        .and_then(std::path::Path::file_name)
        .and_then(std::ffi::OsStr::to_str)
        .unwrap_or("tarn");
    let called = match name {
        "zpool" => "zpool",
        "zfs" => "zfs",
        _ => "tarn",
    };
    if called == "zpool" {
        // Global flags (`-j`) may come first, as in `zpool -j status`: clap takes them after
        // `pool` as well.
        argv.insert(1.min(argv.len()), "pool".into());
    }
    EntryArgs { called, args: argv }
}

/// The command as ZFS names it, whichever entry point ran it (`zpool status` for `tarn pool
/// status`, `zfs list` for `tarn list`); `tarn VERB` for verbs ZFS does not have.
pub(crate) fn command_name(matches: &clap::ArgMatches) -> String {
    match matches.subcommand() {
        Some(("pool", pool)) => format!("zpool {}", pool.subcommand_name().unwrap_or("")),
        Some((
            verb @ ("daemon" | "demo" | "memory" | "completions" | "man" | "nbd" | "checksum"),
            _,
        )) => {
            format!("tarn {verb}")
        }
        Some((verb, _)) => format!("zfs {verb}"),
        None => "tarn".to_string(),
    }
}

/// Parses the command line (exiting on a parse error, `parse_error`) and names the command.
pub(crate) fn parse(argv: &EntryArgs) -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let parsed = Cli::command()
        .try_get_matches_from(&argv.args)
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, command_name(&matches))));
    match parsed {
        Ok((mut cli, name)) => {
            cli.command_name = name;
            cli
        }
        Err(error) => parse_error(argv, &error),
    }
}

/// Prints a parse error and exits. Under `zpool` and `zfs` a verb tarn does not have is one
/// line naming it (a script must never get a different meaning or a page of usage); help,
/// version and other errors print as clap words them. Under `-j` an error is the JSON
/// `error` document on stdout instead (help and version stay text).
pub(crate) fn parse_error(argv: &EntryArgs, error: &clap::Error) -> ! {
    use clap::error::ErrorKind;
    let unknown = error.kind() == ErrorKind::InvalidSubcommand;
    let line = (argv.called != "tarn" && unknown).then(|| {
        let verb = match error.get(clap::error::ContextKind::InvalidSubcommand) {
            Some(clap::error::ContextValue::String(verb)) => verb.clone(),
            _ => String::new(),
        };
        format!(
            "{}: unsupported command '{verb}': tarn has no such verb (see 'tarn --help')",
            argv.called
        )
    });
    let text = matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if !text && wants_json(&argv.args) {
        let rendered = error.render().to_string();
        let first = rendered
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("error: ");
        let message = line.unwrap_or_else(|| first.to_string());
        let options = crate::json::JsonOptions {
            command: command_words(&argv.args),
            ..Default::default()
        };
        println!("{:#}", crate::json::error(&options, &message, 2));
        std::process::exit(2);
    }
    if let Some(line) = line {
        eprintln!("{line}");
        std::process::exit(2);
    }
    error.exit()
}

/// Whether the raw arguments ask for JSON (`-j`, `--json`, or `-j` among short flags).
fn wants_json(args: &[std::ffi::OsString]) -> bool {
    args.iter().skip(1).filter_map(|a| a.to_str()).any(|arg| {
        arg == "--json"
            || (arg.starts_with('-')
                && !arg.starts_with("--")
                && arg.len() > 1
                && arg[1..].bytes().all(|b| b.is_ascii_alphabetic())
                && arg.contains('j'))
    })
}

/// The command's ZFS name from raw arguments (for an error found before parsing succeeded):
/// the first words that are not flags, `--rundir`'s value skipped.
fn command_words(args: &[std::ffi::OsString]) -> String {
    let mut words = Vec::new();
    let mut skip = false;
    for arg in args.iter().skip(1).filter_map(|a| a.to_str()) {
        if std::mem::take(&mut skip) {
            continue;
        }
        if arg == "--rundir" {
            skip = true;
        } else if !arg.starts_with('-') {
            words.push(arg);
        }
    }
    match words.as_slice() {
        ["pool", verb, ..] => format!("zpool {verb}"),
        ["pool"] => "zpool".to_string(),
        [verb, ..] => format!("zfs {verb}"),
        [] => "tarn".to_string(),
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the daemon in the foreground (the CLI starts it on demand).
    Daemon(DaemonArgs),
    /// Pool commands (what `zpool` does).
    #[command(subcommand)]
    Pool(PoolCommand),
    /// Create a raidz2 pool on sparse files, write and verify data, export and re-import it
    /// (runs the engine in this process; needs no daemon).
    Demo(DemoArgs),
    /// The daemon's memory by category and the ARC (`set arc_max=SIZE` changes its limit).
    Memory(crate::memory::MemoryArgs),
    /// Checksum files on tarn mounts (adler32, md5, sha256, crc32c), computed by the daemon
    /// and cached with each file until it changes.
    Checksum(crate::checksum::ChecksumArgs),
    /// Print a shell completion script for tarn (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write man pages for tarn and every subcommand (tarn.8, tarn-pool-create.8, ...) into
    /// DIR.
    Man {
        /// Directory to write them into (created if missing).
        dir: PathBuf,
    },
    /// Create a dataset (a filesystem, mounted at its mountpoint), or with -V a volume (a
    /// block device served over NBD).
    Create {
        /// Create missing parent datasets.
        #[arg(short = 'p')]
        parents: bool,
        /// Create a volume of this size (`10G`).
        #[arg(short = 'V', value_name = "SIZE")]
        volsize: Option<String>,
        /// Sparse volume: no refreservation (with -V).
        #[arg(short = 's', requires = "volsize")]
        sparse: bool,
        /// Volume block size (with -V; `volblocksize`).
        #[arg(short = 'b', requires = "volsize", value_name = "BLOCKSIZE")]
        blocksize: Option<String>,
        /// Property (repeatable).
        #[arg(short = 'o', value_parser = property_pair, value_name = "PROPERTY=VALUE")]
        properties: Vec<(String, String)>,
        /// Dataset name (POOL/NAME...).
        name: String,
    },
    /// Destroy a dataset (and with -r its descendants), or snapshots (DS@SNAP[,SNAP|%RANGE]).
    Destroy {
        /// Destroy descendants too (snapshots: the same snapshot of every descendant).
        #[arg(short = 'r')]
        recursive: bool,
        /// Unmount busy datasets.
        #[arg(short = 'f')]
        force: bool,
        /// Dry run: destroy nothing (snapshots; with -v, say what would go).
        #[arg(short = 'n')]
        dry_run: bool,
        /// Print the snapshots destroyed and the space reclaimed.
        #[arg(short = 'v')]
        verbose: bool,
        /// Print exact numbers (with -v).
        #[arg(short = 'p')]
        parsable: bool,
        /// Defer: a held snapshot is destroyed when its last hold is released.
        #[arg(short = 'd')]
        defer: bool,
        /// Destroy dependents too: the clones of the snapshots destroyed (implies -r).
        #[arg(short = 'R')]
        dependents: bool,
        /// Dataset or snapshot name.
        name: String,
    },
    /// What changed between a snapshot and a later snapshot or the dataset now: `M`
    /// modified, `+` added, `-` removed, `R` renamed, by path.
    Diff {
        /// Show each file's type (`F` file, `/` directory, `@` symlink, `|` FIFO, `=` socket,
        /// `C`/`B` devices).
        #[arg(short = 'F')]
        types: bool,
        /// Scripted output: a rename's two paths separated by a tab instead of ` -> `
        /// (fields are tab-separated either way, and paths escaped as ZFS escapes them:
        /// non-printable bytes, space and `\` as `\0ooo`).
        #[arg(short = 'H')]
        scripted: bool,
        /// Show each change's time (`SECONDS.NANOSECONDS`) first.
        #[arg(short = 't')]
        times: bool,
        /// The older snapshot (DATASET@SNAPSHOT).
        snapshot: String,
        /// A later snapshot or the dataset (default: the dataset).
        other: Option<String>,
    },
    /// Create a bookmark of a snapshot (or copy a bookmark): a source for `send -i` that
    /// outlives the snapshot.
    Bookmark {
        /// The snapshot (DATASET@SNAPSHOT) or bookmark (DATASET#BOOKMARK).
        source: String,
        /// The new bookmark (DATASET#BOOKMARK).
        target: String,
    },
    /// Promote a clone: the origin's snapshots up to the clone's origin move to it and the
    /// origin becomes its clone (so the origin can be destroyed).
    Promote {
        /// The clone.
        name: String,
    },
    /// Create a clone: a writable dataset that starts as a snapshot's content and shares
    /// its blocks.
    Clone {
        /// Create missing parent datasets.
        #[arg(short = 'p')]
        parents: bool,
        /// Property (repeatable).
        #[arg(short = 'o', value_parser = property_pair, value_name = "PROPERTY=VALUE")]
        properties: Vec<(String, String)>,
        /// The origin snapshot (DATASET@SNAPSHOT).
        snapshot: String,
        /// The new dataset's name.
        name: String,
    },
    /// Place a user hold on snapshots (a held snapshot cannot be destroyed).
    Hold {
        /// The same snapshot of every descendant too.
        #[arg(short = 'r')]
        recursive: bool,
        /// The hold's tag.
        tag: String,
        /// Snapshot names (DATASET@SNAPSHOT).
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Release a user hold from snapshots.
    Release {
        /// The same snapshot of every descendant too.
        #[arg(short = 'r')]
        recursive: bool,
        /// The hold's tag.
        tag: String,
        /// Snapshot names (DATASET@SNAPSHOT).
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// The volumes served over NBD: each one's URI and open connections.
    Nbd {
        /// Scripted: no header, tab-separated.
        #[arg(short = 'H')]
        scripted: bool,
    },
    /// List the user holds of snapshots.
    Holds {
        /// The same snapshot of every descendant too.
        #[arg(short = 'r')]
        recursive: bool,
        /// Scripted: no header, tab-separated.
        #[arg(short = 'H')]
        scripted: bool,
        /// Exact timestamps (Unix seconds).
        #[arg(short = 'p')]
        parsable: bool,
        /// Snapshot names (DATASET@SNAPSHOT).
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Take snapshots (every named one, with -r every descendant's too, in one txg).
    Snapshot {
        /// Snapshot every descendant too.
        #[arg(short = 'r')]
        recursive: bool,
        /// User property (repeatable).
        #[arg(short = 'o', value_parser = property_pair, value_name = "PROPERTY=VALUE")]
        properties: Vec<(String, String)>,
        /// Snapshot names (DATASET@SNAPSHOT).
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Write a snapshot as a stream to stdout (full, or incremental from -i/-I).
    Send {
        /// Incremental from this earlier snapshot (`@a`, `a` or `pool/ds@a`).
        #[arg(short = 'i', value_name = "SNAPSHOT", conflicts_with = "intermediates")]
        from: Option<String>,
        /// Incremental from this snapshot, with every snapshot in between. Two or more
        /// snapshots make a chain, which a receive applies all or nothing (under
        /// `receive -s`, snapshot by snapshot: a cut keeps those received, `send -t` and
        /// then the same stream again finish it).
        #[arg(short = 'I', value_name = "SNAPSHOT")]
        intermediates: Option<String>,
        /// Print what was sent (or with -n would be) on stderr; on a terminal, progress with
        /// the stream's size (sized first, reading no data block) and the time left. The
        /// size goes in the stream too, for `receive -v`'s time left.
        #[arg(short = 'v')]
        verbose: bool,
        /// Dry run: send nothing, size the stream exactly (no data block is read).
        #[arg(short = 'n')]
        dry_run: bool,
        /// Parsable sizes (with -v): `full`/`incremental` lines with bytes. The stream is
        /// sized first and carries its size, as with -v on a terminal.
        #[arg(short = 'P')]
        parsable: bool,
        /// Carry the dataset's local properties.
        #[arg(short = 'p')]
        properties: bool,
        /// The dataset with its descendants, their snapshots and properties.
        #[arg(short = 'R')]
        replicate: bool,
        /// Compressed blocks as stored (not decompressed to send).
        #[arg(short = 'c')]
        compressed: bool,
        /// Keep records larger than 128K whole (tarn always does).
        #[arg(short = 'L')]
        large_blocks: bool,
        /// Embedded blocks as they are (tarn keeps no data in block pointers).
        #[arg(short = 'e')]
        embedded: bool,
        /// Resume a partial receive from its token (`receive_resume_token`).
        #[arg(short = 't', value_name = "TOKEN", conflicts_with_all = ["from", "intermediates"])]
        token: Option<String>,
        /// Snapshot name (DATASET@SNAPSHOT).
        #[arg(required_unless_present = "token")]
        snapshot: Option<String>,
    },
    /// Create a dataset and snapshots from a stream on stdin.
    #[command(alias = "recv")]
    Receive {
        /// Roll the destination back to the stream's source snapshot (destroying later
        /// snapshots; at the stream's end), or replace one without snapshots; with a
        /// replication stream (`send -R`) also destroy the snapshots and datasets the
        /// sender no longer has.
        #[arg(short = 'F')]
        force: bool,
        /// Do not mount what was received.
        #[arg(short = 'u')]
        unmounted: bool,
        /// Print what was received; on a terminal, progress: bytes, rate and, when the
        /// sender sized the stream (`send -v` on a terminal, `send -P`), its size and the
        /// time left.
        #[arg(short = 'v')]
        verbose: bool,
        /// Keep a partial receive when the stream stops early (resume with `send -t`).
        /// A chain (`send -I` of two or more snapshots) or a `send -R` stream is then
        /// received snapshot by snapshot, not all or nothing: a cut keeps what was
        /// received, and the same stream again skips it.
        #[arg(short = 's')]
        resumable: bool,
        /// Discard the partial receive of the dataset instead (no stream).
        #[arg(short = 'A', conflicts_with_all = ["force", "resumable"])]
        abort: bool,
        /// Dry run: read and check the stream, receive nothing.
        #[arg(short = 'n')]
        dry_run: bool,
        /// Name the destination DATASET plus the sent name without its pool.
        #[arg(short = 'd', conflicts_with = "last")]
        discard_first: bool,
        /// Name the destination DATASET plus the sent name's last component.
        #[arg(short = 'e')]
        last: bool,
        /// Set a property on the received dataset (repeatable).
        #[arg(short = 'o', value_parser = property_pair, value_name = "PROPERTY=VALUE")]
        set: Vec<(String, String)>,
        /// Do not take this property from the stream (repeatable).
        #[arg(short = 'x', value_name = "PROPERTY")]
        exclude: Vec<String>,
        /// Corrective receive: heal damaged blocks of the existing snapshot named from a
        /// stream of that same snapshot (with -n: only say which it would heal).
        #[arg(short = 'c', conflicts_with_all = [
            "force", "unmounted", "resumable", "abort", "discard_first", "last", "set",
            "exclude",
        ])]
        corrective: bool,
        /// Destination dataset (or DATASET@SNAPSHOT; with -c the snapshot to heal).
        target: String,
    },
    /// Roll a dataset back to a snapshot (with -r destroying later snapshots).
    Rollback {
        /// Destroy snapshots more recent than the one named.
        #[arg(short = 'r')]
        recursive: bool,
        /// Destroy those snapshots' clones too (implies -r).
        #[arg(short = 'R')]
        dependents: bool,
        /// Unmount those clones even when busy (with -R).
        #[arg(short = 'f')]
        force: bool,
        /// Snapshot name (DATASET@SNAPSHOT).
        name: String,
    },
    /// Rename a dataset (within its pool).
    Rename {
        /// Rename the snapshot of every descendant too (snapshots only).
        #[arg(short = 'r')]
        recursive: bool,
        /// Current name.
        old: String,
        /// New name.
        new: String,
    },
    /// List datasets with their space and mountpoint.
    List(DatasetListArgs),
    /// Show dataset properties with their sources.
    Get(DatasetGetArgs),
    /// Set dataset properties.
    Set {
        /// Allow `volsize` to shrink a volume (destroys the data past the new end).
        #[arg(short = 'f')]
        force: bool,
        /// property=value (one or more), then the dataset.
        #[arg(required = true, num_args = 2.., value_name = "PROPERTY=VALUE... DATASET")]
        words: Vec<String>,
    },
    /// Remove a local property so the inherited (or default) value applies.
    Inherit {
        /// Descendants too.
        #[arg(short = 'r')]
        recursive: bool,
        /// Property.
        property: String,
        /// Dataset name.
        name: String,
    },
    /// Space used and quotas per user in a dataset.
    Userspace(SpaceArgs),
    /// Space used and quotas per group in a dataset.
    Groupspace(SpaceArgs),
    /// Space used and quotas per project in a dataset.
    Projectspace(SpaceArgs),
    /// Show, set (-p ID, -s) or clear (-C) the project of a file in a mounted dataset.
    Project(ProjectArgs),
    /// Mount a dataset, or all (-a); without arguments list what is mounted.
    Mount {
        /// Every dataset that should be mounted.
        #[arg(short = 'a', conflicts_with = "name")]
        all: bool,
        /// Dataset name.
        name: Option<String>,
    },
    /// Unmount a dataset (by name or mountpoint), or all (-a).
    #[command(alias = "umount")]
    Unmount {
        /// Detach even if busy.
        #[arg(short = 'f')]
        force: bool,
        /// Every tarn dataset.
        #[arg(short = 'a', conflicts_with = "target")]
        all: bool,
        /// Dataset name or mountpoint.
        #[arg(required_unless_present = "all")]
        target: Option<String>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct DatasetListArgs {
    /// Include descendants.
    #[arg(short = 'r')]
    pub(crate) recursive: bool,
    /// At most this many levels below each dataset.
    #[arg(short = 'd', value_name = "DEPTH")]
    pub(crate) depth: Option<u32>,
    /// Types to list: filesystem, volume (or vol), snapshot (or snap), bookmark, all
    /// (comma-separated).
    #[arg(short = 't', value_name = "TYPE")]
    pub(crate) types: Option<String>,
    /// Scripted mode: no header, tab-separated.
    #[arg(short = 'H')]
    pub(crate) scripted: bool,
    /// Exact numbers.
    #[arg(short = 'p')]
    pub(crate) parsable: bool,
    /// Columns, comma-separated (default name,used,avail,refer,mountpoint).
    #[arg(short = 'o', value_name = "COLUMNS")]
    pub(crate) columns: Option<String>,
    /// Sort ascending by this property (repeatable).
    #[arg(short = 's', value_name = "PROPERTY")]
    pub(crate) sort_ascending: Vec<String>,
    /// Sort descending by this property (repeatable).
    #[arg(short = 'S', value_name = "PROPERTY")]
    pub(crate) sort_descending: Vec<String>,
    /// Datasets (all when none).
    pub(crate) names: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct DatasetGetArgs {
    /// Include descendants.
    #[arg(short = 'r')]
    pub(crate) recursive: bool,
    /// At most this many levels below each dataset.
    #[arg(short = 'd', value_name = "DEPTH")]
    pub(crate) depth: Option<u32>,
    /// Scripted mode: no header, tab-separated.
    #[arg(short = 'H')]
    pub(crate) scripted: bool,
    /// Exact numbers.
    #[arg(short = 'p')]
    pub(crate) parsable: bool,
    /// Fields, comma-separated: name, property, value, source.
    #[arg(short = 'o', value_name = "FIELDS")]
    pub(crate) fields: Option<String>,
    /// Types to show: filesystem, volume, snapshot (or snap), bookmark, all (comma-separated;
    /// default all).
    #[arg(short = 't', value_name = "TYPE")]
    pub(crate) types: Option<String>,
    /// Only these sources, comma-separated: local, default, inherited, temporary, none.
    #[arg(short = 's', value_name = "SOURCES")]
    pub(crate) sources: Option<String>,
    /// `all` or PROPERTY[,PROPERTY...].
    pub(crate) properties: String,
    /// Datasets (all when none).
    pub(crate) names: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct SpaceArgs {
    /// Scripted mode: no header, tab-separated.
    #[arg(short = 'H')]
    pub(crate) scripted: bool,
    /// Exact numbers.
    #[arg(short = 'p')]
    pub(crate) parsable: bool,
    /// Numeric ids instead of user and group names.
    #[arg(short = 'n')]
    pub(crate) numeric: bool,
    /// Fields, comma-separated: type, name, used, quota, objused, objquota.
    #[arg(short = 'o', value_name = "FIELDS")]
    pub(crate) fields: Option<String>,
    /// Sort ascending by this field (repeatable; default type, then name).
    #[arg(short = 's', value_name = "FIELD")]
    pub(crate) sort_ascending: Vec<String>,
    /// Sort descending by this field (repeatable).
    #[arg(short = 'S', value_name = "FIELD")]
    pub(crate) sort_descending: Vec<String>,
    /// Dataset name.
    pub(crate) name: String,
}

#[derive(Debug, Args)]
pub(crate) struct ProjectArgs {
    /// Everything below a directory too.
    #[arg(short = 'r')]
    pub(crate) recursive: bool,
    /// Clear: the inherit flag goes and the id becomes 0.
    #[arg(short = 'C', conflicts_with_all = ["id", "inherit"])]
    pub(crate) clear: bool,
    /// With -C, keep the id.
    #[arg(short = 'k', requires = "clear")]
    pub(crate) keep: bool,
    /// Set the inherit flag: new entries of the directory take its project id.
    #[arg(short = 's')]
    pub(crate) inherit: bool,
    /// Project id to set.
    #[arg(short = 'p', value_name = "ID")]
    pub(crate) id: Option<u32>,
    /// A file or directory inside a mounted tarn dataset.
    pub(crate) path: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Directory for the device files (default: a new temporary directory).
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    /// Data to write, e.g. 512M or 2G.
    #[arg(long, default_value = "512M", value_parser = size_arg)]
    pub(crate) size: u64,
    /// Number of device files in the raidz2 vdev.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(3..=64))]
    pub(crate) devices: u16,
    /// Size of each device file (default: enough for the data, at least 1G).
    #[arg(long, value_parser = size_arg)]
    pub(crate) device_size: Option<u64>,
    /// Keep the device files afterwards.
    #[arg(long)]
    pub(crate) keep: bool,
    /// Open the device files with O_DIRECT.
    #[arg(long)]
    pub(crate) direct: bool,
    /// Layout of the vdev over the device files: `raidz2` (default), or another raidz or
    /// dRAID word of `pool create` (`draid2:8d:2s`).
    #[arg(long, default_value = "raidz2")]
    pub(crate) layout: String,
}

fn size_arg(text: &str) -> Result<u64, String> {
    tarn_base::parse_size(text).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub(crate) struct DaemonArgs {
    /// Stop the running daemon cleanly (pools are closed and re-imported at next start).
    #[arg(long)]
    pub(crate) stop: bool,
}

/// Parses `prop=value` (the value may contain `=`).
fn property_pair(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((property, value)) if !property.is_empty() => {
            Ok((property.to_string(), value.to_string()))
        }
        _ => Err(format!("'{text}' is not of the form property=value")),
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum PoolCommand {
    /// Create a pool.
    Create(CreateArgs),
    /// Add top-level vdevs (data, log, special) or hot spares to a pool.
    Add(AddArgs),
    /// Remove a hot spare or a log device from a pool.
    Remove {
        /// Pool name.
        name: String,
        /// Device (path or GUID; a log mirror as `mirror-N`).
        device: String,
    },
    /// Destroy a pool and everything in it.
    Destroy {
        /// Unmount busy datasets.
        #[arg(short = 'f')]
        force: bool,
        /// Pool name.
        name: String,
    },
    /// List pools with their sizes and health.
    List(ListArgs),
    /// Show the health and vdev tree of pools.
    Status {
        /// Only pools with a problem.
        #[arg(short = 'x')]
        only_unhealthy: bool,
        /// List damaged files.
        #[arg(short = 'v')]
        verbose: bool,
        /// Add a SLOW column: I/Os the slow-device detector found slow, per device.
        #[arg(short = 's')]
        slow: bool,
        /// Pools (all when none).
        names: Vec<String>,
    },
    /// Show pool properties.
    Get(GetArgs),
    /// Set a pool property.
    Set {
        /// property=value
        #[arg(value_parser = property_pair, value_name = "PROPERTY=VALUE")]
        assignment: (String, String),
        /// Pool name.
        name: String,
    },
    /// Export a pool (close it and forget it until imported again).
    Export {
        /// Unmount busy datasets.
        #[arg(short = 'f')]
        force: bool,
        /// Pool name.
        name: String,
    },
    /// Import a pool, or list importable pools when none is named.
    Import(ImportArgs),
    /// Verify every block of pools and repair what is damaged (start, resume, pause, stop).
    Scrub {
        /// Stop (cancel) the scrub.
        #[arg(short = 's', conflicts_with = "pause")]
        stop: bool,
        /// Pause the scrub (start it again to resume).
        #[arg(short = 'p')]
        pause: bool,
        /// Wait until the scrub ends, showing progress.
        #[arg(short = 'w')]
        wait: bool,
        /// Pools.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Reset the error counters of a pool's devices (or of one device).
    Clear {
        /// Pool name.
        name: String,
        /// Device (path, name or GUID).
        device: Option<String>,
    },
    /// Take a device out of service.
    Offline {
        /// Until the next import only.
        #[arg(short = 't')]
        temporary: bool,
        /// Pool name.
        name: String,
        /// Device (path, name or GUID).
        device: String,
    },
    /// Return an offline device to service (a scrub then repairs what it missed).
    Online {
        /// Pool name.
        name: String,
        /// Device (path, name or GUID).
        device: String,
    },
    /// Replace a device with a new one (or with a new device at the same path), resilvering
    /// only the live data. On a terminal it waits, showing progress.
    Replace {
        /// Sequential resilver: copy the allocated ranges of a mirror in address order, then
        /// scrub to verify (not for raidz).
        #[arg(short = 's')]
        sequential: bool,
        /// Use NEW even if it carries the label of a pool that is not imported here.
        #[arg(short = 'f')]
        force: bool,
        /// Wait until the resilver (and a sequential one's scrub) ends, showing progress.
        #[arg(short = 'w')]
        wait: bool,
        /// Pool name.
        name: String,
        /// Device to replace (path, name or GUID).
        old: String,
        /// New device (default: a new device at OLD's path).
        new: Option<String>,
    },
    /// Commit every change in memory to the pools' devices now (a txg), as `zpool sync`:
    /// the barrier for data written without fsync (every pool when none is named).
    Sync {
        /// Pool names.
        names: Vec<String>,
    },
    /// Wait until a pool's background activity ends, showing progress.
    Wait {
        /// Only this activity: scrub, resilver or replace (default: every one).
        #[arg(short = 't', value_parser = ["scrub", "resilver", "replace"])]
        activity: Option<String>,
        /// Pool name.
        name: String,
    },
    /// Mirror a device onto a new one (a single disk becomes a mirror), resilvering it.
    Attach {
        /// Pool name.
        name: String,
        /// Existing device (path, name or GUID).
        device: String,
        /// New device.
        new: String,
    },
    /// Remove a mirror side, or a device of a replacing or spare vdev.
    Detach {
        /// Pool name.
        name: String,
        /// Device (path, name or GUID).
        device: String,
    },
    /// Show the pool event log (errors, state changes, scrubs, resilvers, spares).
    Events {
        /// Show each event's payload.
        #[arg(short = 'v')]
        verbose: bool,
        /// Follow: keep printing new events until interrupted.
        #[arg(short = 'f')]
        follow: bool,
        /// Clear the event log.
        #[arg(short = 'c')]
        clear: bool,
        /// Pool (every pool when absent).
        name: Option<String>,
    },
    /// Show I/O statistics of pools (and with -v their vdevs and devices), once or every
    /// INTERVAL seconds.
    Iostat(IostatArgs),
    /// Show the command history of pools.
    History {
        /// Include internal events.
        #[arg(short = 'i')]
        internal: bool,
        /// Include user and host.
        #[arg(short = 'l')]
        long: bool,
        /// Pools (all when none).
        names: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct IostatArgs {
    /// Every vdev and device, not only pools.
    #[arg(short = 'v')]
    pub(crate) verbose: bool,
    /// Add average latency columns (total_wait, disk_wait, syncq_wait, asyncq_wait).
    #[arg(short = 'l')]
    pub(crate) latency: bool,
    /// Add queue columns (reads and writes waiting and being serviced).
    #[arg(short = 'q')]
    pub(crate) queues: bool,
    /// Latency histograms instead: buckets as rows, the -l classes as columns.
    #[arg(short = 'w')]
    pub(crate) histograms: bool,
    /// Request-size histograms instead: sizes as rows, reads and writes as columns.
    #[arg(short = 'r')]
    pub(crate) sizes: bool,
    /// Scripted: no headers, fields separated by a tab.
    #[arg(short = 'H')]
    pub(crate) scripted: bool,
    /// Exact numbers.
    #[arg(short = 'p')]
    pub(crate) parsable: bool,
    /// [POOL]... [INTERVAL [COUNT]]: pools (all when none), seconds between reports, and
    /// how many reports.
    #[arg(value_name = "ARGS")]
    pub(crate) args: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// Show the layout without creating anything.
    #[arg(short = 'n')]
    pub(crate) dry_run: bool,
    /// Use devices that look in use.
    #[arg(short = 'f')]
    pub(crate) force: bool,
    /// Pool property (repeatable).
    #[arg(short = 'o', value_parser = property_pair, value_name = "PROPERTY=VALUE")]
    pub(crate) properties: Vec<(String, String)>,
    /// Root dataset property (repeatable).
    #[arg(short = 'O', value_parser = property_pair, value_name = "PROPERTY=VALUE")]
    pub(crate) fs_properties: Vec<(String, String)>,
    /// Mountpoint of the root dataset.
    #[arg(short = 'm', value_name = "MOUNTPOINT")]
    pub(crate) mountpoint: Option<String>,
    /// Pool name.
    pub(crate) name: String,
    /// Vdev specification: [mirror|raidz|raidz1|raidz2|raidz3] DEV... [spare DEV...]
    /// [log [mirror] DEV...] [cache DEV...] [special [mirror|raidzN] DEV...]
    #[arg(required = true, value_name = "VDEV")]
    pub(crate) vdevs: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct AddArgs {
    /// Only show the configuration the pool would have; change nothing.
    #[arg(short = 'n')]
    pub(crate) dry_run: bool,
    /// Use devices that look in use, and accept a mismatched replication level.
    #[arg(short = 'f')]
    pub(crate) force: bool,
    /// Pool name.
    pub(crate) name: String,
    /// Vdev specification: [mirror|raidz|raidz1|raidz2|raidz3] DEV... [spare DEV...]
    /// [log [mirror] DEV...] [special [mirror|raidzN] DEV...]
    #[arg(required = true, value_name = "VDEV")]
    pub(crate) vdevs: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Scripted mode: no header, tab-separated.
    #[arg(short = 'H')]
    pub(crate) scripted: bool,
    /// Exact numbers.
    #[arg(short = 'p')]
    pub(crate) parsable: bool,
    /// Columns, comma-separated.
    #[arg(short = 'o', value_name = "COLUMNS")]
    pub(crate) columns: Option<String>,
    /// Pools (all when none).
    pub(crate) names: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct GetArgs {
    /// Scripted mode: no header, tab-separated.
    #[arg(short = 'H')]
    pub(crate) scripted: bool,
    /// Exact numbers.
    #[arg(short = 'p')]
    pub(crate) parsable: bool,
    /// Fields, comma-separated: name, property, value, source.
    #[arg(short = 'o', value_name = "FIELDS")]
    pub(crate) fields: Option<String>,
    /// `all` or PROPERTY[,PROPERTY...].
    pub(crate) properties: String,
    /// Pools (all when none).
    pub(crate) names: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// Directory to search for devices (repeatable).
    #[arg(short = 'd', value_name = "DIR")]
    pub(crate) dirs: Vec<PathBuf>,
    /// Import even if the pool looks in use elsewhere.
    #[arg(short = 'f')]
    pub(crate) force: bool,
    /// Rewind to the newest importable txg if the newest is damaged.
    #[arg(short = 'F')]
    pub(crate) rewind: bool,
    /// Import at exactly this txg.
    #[arg(short = 'T', value_name = "TXG")]
    pub(crate) txg: Option<u64>,
    /// Rewind further: a txg must have every metadata block readable (implies -F).
    #[arg(short = 'X')]
    pub(crate) extreme: bool,
    /// With -F, -X or -T: say which txg would be opened and what discarded; import nothing.
    #[arg(short = 'n')]
    pub(crate) dry_run: bool,
    /// Import property; only readonly=on|off.
    #[arg(short = 'o', value_parser = property_pair, value_name = "PROPERTY=VALUE")]
    pub(crate) properties: Vec<(String, String)>,
    /// List the txgs the pool can be imported at.
    #[arg(long = "list-txgs", requires = "pool")]
    pub(crate) list_txgs: bool,
    /// Pool name or numeric id.
    pub(crate) pool: Option<String>,
    /// New name for the pool.
    pub(crate) new_name: Option<String>,
}
