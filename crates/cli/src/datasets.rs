//! The dataset verbs (`tarn create`, `destroy`, `rename`, `list`, `get`, `set`, `inherit`,
//! `mount`, `unmount`; `userspace` and its kin in `userspace.rs`): planning their requests
//! and rendering their replies in ZFS's layouts.

use std::path::Path;

use tarn_proto::{DatasetGet, DatasetProp, DatasetRow, MountRow, ReplyPayload, Request};

use crate::args::{Command, DatasetGetArgs, DatasetListArgs};
use crate::render::{self, Column, GetField};
use crate::run::{Outcome, Plan, View};
use crate::userspace::{self, Space};

/// What `-j` heads each dataset with besides its name (OpenZFS's `type`, `createtxg`).
const JSON_HEAD: &[&str] = &["type", "createtxg"];

/// Columns of `tarn list` without `-o`.
const LIST_DEFAULT: &[&str] = &["name", "used", "avail", "refer", "mountpoint"];

/// Properties shown right-aligned (numbers).
const NUMERIC: &[&str] = &[
    "used",
    "avail",
    "available",
    "refer",
    "referenced",
    "quota",
    "refquota",
    "reservation",
    "refreservation",
    "recordsize",
    "usedbydataset",
    "usedbychildren",
    "usedbyrefreservation",
    "logicalused",
    "logicalreferenced",
    "compressratio",
    "copies",
];

/// How `tarn list` shows its rows.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ListView {
    pub(crate) columns: Vec<String>,
    pub(crate) scripted: bool,
    pub(crate) parsable: bool,
    /// (property, descending), most significant first.
    pub(crate) sort: Vec<(String, bool)>,
}

/// How `tarn get` shows its rows.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct GetView {
    pub(crate) fields: Vec<GetField>,
    pub(crate) scripted: bool,
    pub(crate) parsable: bool,
    pub(crate) sources: Option<Vec<String>>,
    /// Per-owner properties asked by name: (as sent, as typed), `userquota@1000` ->
    /// `userquota@alice`; printed as typed.
    pub(crate) aliases: Vec<(String, String)>,
    /// Properties asked only for `-j`'s dataset head (`type`, `createtxg`), not shown.
    pub(crate) hidden: Vec<String>,
}

fn refuse(verb: &str, object: Option<&str>, message: &str) -> Outcome {
    Outcome::refused(render::error_line(verb, object, message))
}

fn silent(verb: &'static str, object: &str, request: Request) -> Plan {
    Plan {
        request,
        verb,
        object: Some(object.to_string()),
        view: View::Silent,
    }
}

/// Turns a dataset command into a request (pure).
pub(crate) fn plan(command: Command, cwd: &Path) -> Result<Plan, Outcome> {
    let plan = match command {
        Command::Create {
            parents,
            volsize,
            sparse,
            blocksize,
            properties,
            name,
        } => silent(
            "create",
            &name.clone(),
            Request::DatasetCreate {
                name,
                properties,
                parents,
                volume: volsize.map(|size| tarn_proto::VolumeCreate {
                    size,
                    block_size: blocksize,
                    sparse,
                }),
            },
        ),
        command @ Command::Destroy { .. } => plan_destroy(command)?,
        command @ (Command::Clone { .. }
        | Command::Rollback { .. }
        | Command::Promote { .. }
        | Command::Bookmark { .. }
        | Command::Diff { .. }) => plan_clone_verbs(command),
        command @ (Command::Hold { .. } | Command::Release { .. } | Command::Holds { .. }) => {
            plan_holds(command)
        }
        Command::Snapshot {
            recursive,
            properties,
            names,
        } => silent(
            "create snapshot",
            &names[0].clone(),
            Request::Snapshot {
                names,
                recursive,
                properties,
            },
        ),
        command @ (Command::Send { .. } | Command::Receive { .. }) => plan_stream(command),
        Command::Rename {
            old,
            new,
            recursive,
        } => {
            if recursive && !old.contains('@') {
                return Err(refuse(
                    "rename",
                    Some(&old),
                    "-r is supported for snapshots only",
                ));
            }
            let request = Request::DatasetRename {
                old: old.clone(),
                new,
                recursive,
            };
            silent("rename", &old, request)
        }
        Command::List(args) => plan_list(args)?,
        Command::Nbd { scripted } => Plan {
            verb: "list",
            object: Some("nbd exports".into()),
            view: View::Nbd { scripted },
            request: Request::NbdList,
        },
        Command::Get(args) => plan_get(args)?,
        Command::Set { force, words } => plan_set(words, force)?,
        Command::Userspace(args) => userspace::plan(Space::User, args)?,
        Command::Groupspace(args) => userspace::plan(Space::Group, args)?,
        Command::Projectspace(args) => userspace::plan(Space::Project, args)?,
        Command::Project(args) => userspace::plan_project(args, cwd),
        Command::Inherit {
            recursive,
            property,
            name,
        } => silent(
            "inherit",
            &name.clone(),
            Request::DatasetInherit {
                name,
                property: userspace::resolve_prop(&property),
                recursive,
            },
        ),
        other => plan_mount(other, cwd),
    };
    Ok(plan)
}

/// `send` and `receive`.
fn plan_stream(command: Command) -> Plan {
    match command {
        Command::Send {
            from,
            intermediates,
            verbose,
            dry_run,
            parsable,
            properties,
            replicate,
            compressed,
            large_blocks,
            embedded,
            token,
            snapshot,
        } => Plan {
            verb: "send",
            object: snapshot.clone().or(Some("resume token".into())),
            view: View::Stream {
                verbose: verbose || parsable,
                parsable,
                dry_run,
            },
            request: Request::Send {
                snapshot: snapshot.unwrap_or_default(),
                from: from.or(intermediates.clone()),
                intermediates: intermediates.is_some(),
                token,
                dry_run,
                properties,
                large_blocks,
                embedded,
                replicate,
                compressed,
                // Set by `execute_stream`, which knows whether stderr is a terminal.
                sized: false,
            },
        },
        Command::Receive {
            abort: true,
            target,
            ..
        } => Plan {
            verb: "abort the receive of",
            object: Some(target.clone()),
            view: View::Silent,
            request: Request::ReceiveAbort { target },
        },
        receive @ Command::Receive { .. } => plan_receive(receive),
        _ => unreachable!("plan_stream is called only for send and receive"),
    }
}

/// `receive` with a stream.
fn plan_receive(command: Command) -> Plan {
    match command {
        Command::Receive {
            force,
            unmounted,
            verbose,
            resumable,
            dry_run,
            discard_first,
            last,
            set,
            exclude,
            corrective,
            target,
            ..
        } => Plan {
            verb: "receive",
            object: Some(target.clone()),
            view: View::Stream {
                verbose,
                parsable: false,
                dry_run,
            },
            request: Request::Receive {
                target,
                force,
                unmounted,
                resumable,
                dry_run,
                append: (discard_first || last).then_some(discard_first),
                set,
                exclude,
                corrective,
            },
        },
        _ => unreachable!("plan_receive is called only for receive"),
    }
}

/// `hold`, `release` and `holds`.
fn plan_holds(command: Command) -> Plan {
    match command {
        Command::Hold {
            recursive,
            tag,
            names,
        } => silent(
            "hold snapshot",
            &names[0].clone(),
            Request::Hold {
                tag,
                names,
                recursive,
            },
        ),
        Command::Release {
            recursive,
            tag,
            names,
        } => silent(
            "release hold from snapshot",
            &names[0].clone(),
            Request::Release {
                tag,
                names,
                recursive,
            },
        ),
        Command::Holds {
            recursive,
            scripted,
            parsable,
            names,
        } => Plan {
            verb: "get holds for",
            object: names.first().cloned(),
            view: View::Holds { scripted, parsable },
            request: Request::Holds { names, recursive },
        },
        _ => unreachable!("plan_holds is called only for hold verbs"),
    }
}

/// `clone` and `rollback`.
fn plan_clone_verbs(command: Command) -> Plan {
    match command {
        Command::Clone {
            parents,
            properties,
            snapshot,
            name,
        } => silent(
            "create",
            &name.clone(),
            Request::Clone {
                origin: snapshot,
                name,
                properties,
                parents,
            },
        ),
        Command::Rollback {
            recursive,
            dependents,
            force,
            name,
        } => silent(
            "rollback to",
            &name.clone(),
            Request::Rollback {
                name,
                recursive,
                dependents,
                force,
            },
        ),
        Command::Promote { name } => silent("promote", &name.clone(), Request::Promote { name }),
        Command::Bookmark { source, target } => silent(
            "create bookmark",
            &target.clone(),
            Request::Bookmark { source, target },
        ),
        Command::Diff {
            types,
            scripted,
            times,
            snapshot,
            other,
        } => Plan {
            verb: "diff",
            object: Some(snapshot.clone()),
            view: View::Diff {
                types,
                scripted,
                times,
            },
            request: Request::Diff {
                from: snapshot,
                to: other,
            },
        },
        _ => unreachable!("plan_clone_verbs is called only for clone, promote, rollback, bookmark"),
    }
}

fn plan_destroy(command: Command) -> Result<Plan, Outcome> {
    let Command::Destroy {
        recursive,
        force,
        dry_run,
        verbose,
        parsable,
        defer,
        dependents,
        name,
    } = command
    else {
        unreachable!("plan_destroy is called only for destroy");
    };
    let snapshot = name.contains('@');
    if defer && !snapshot {
        return Err(refuse(
            "destroy",
            Some(&name),
            "-d is supported for snapshots only",
        ));
    }
    if dry_run && !snapshot {
        return Err(refuse(
            "destroy",
            Some(&name),
            "-n is supported for snapshots only",
        ));
    }
    let view = if snapshot {
        View::SnapshotDestroy {
            dry_run,
            verbose,
            parsable,
        }
    } else {
        View::Silent
    };
    Ok(Plan {
        verb: "destroy",
        object: Some(name.clone()),
        view,
        request: Request::DatasetDestroy {
            name,
            recursive,
            force,
            dry_run,
            defer,
            dependents,
        },
    })
}

fn plan_set(mut words: Vec<String>, force: bool) -> Result<Plan, Outcome> {
    let name = words.pop().unwrap_or_default();
    let mut assignments = Vec::new();
    for word in words {
        match word.split_once('=') {
            Some((property, value)) if !property.is_empty() => {
                assignments.push((userspace::resolve_prop(property), value.to_string()));
            }
            _ => {
                return Err(refuse(
                    "set property for",
                    Some(&name),
                    &format!("'{word}' is not of the form property=value"),
                ));
            }
        }
    }
    Ok(silent(
        "set property for",
        &name.clone(),
        Request::DatasetSet {
            name,
            assignments,
            force,
        },
    ))
}

/// Plans `mount` and `unmount`.
fn plan_mount(command: Command, cwd: &Path) -> Plan {
    match command {
        Command::Mount { all, name } => Plan {
            verb: "mount",
            object: name.clone(),
            view: if all || name.is_some() {
                View::Silent
            } else {
                View::Mounts
            },
            request: Request::Mount { name, all },
        },
        Command::Unmount { force, all, target } => {
            // A path names a mountpoint: make it absolute so the daemon can match it.
            let target = target.map(|t| {
                if t.starts_with('.') {
                    cwd.join(&t).display().to_string()
                } else {
                    t
                }
            });
            Plan {
                verb: "unmount",
                object: target.clone(),
                view: View::Silent,
                request: Request::Unmount { target, all, force },
            }
        }
        _ => unreachable!("datasets::plan is called only for dataset verbs"),
    }
}

fn split_list(spec: &str) -> Vec<String> {
    spec.split(',').map(|w| w.trim().to_string()).collect()
}

/// The types `-t` names, normalized (`snap` is `snapshot`).
fn check_type(types: Option<&str>) -> Result<Vec<String>, Outcome> {
    let mut out = Vec::new();
    for word in types.map(split_list).unwrap_or_default() {
        let word = match word.as_str() {
            "filesystem" | "all" | "snapshot" | "volume" | "bookmark" => word,
            "vol" => "volume".to_string(),
            "snap" => "snapshot".to_string(),
            _ => {
                return Err(Outcome::usage(format!(
                    "invalid type '{word}': valid types are filesystem, volume, snapshot, \
                     bookmark, all"
                )));
            }
        };
        out.push(word);
    }
    Ok(out)
}

fn plan_list(args: DatasetListArgs) -> Result<Plan, Outcome> {
    let types = check_type(args.types.as_deref())?;
    let columns = match &args.columns {
        Some(spec) => split_list(spec),
        None => LIST_DEFAULT.iter().map(|c| (*c).to_string()).collect(),
    };
    let mut sort: Vec<(String, bool)> = Vec::new();
    sort.extend(args.sort_ascending.iter().map(|p| (p.clone(), false)));
    sort.extend(args.sort_descending.iter().map(|p| (p.clone(), true)));
    let mut properties = columns.clone();
    properties.extend(sort.iter().map(|(p, _)| p.clone()));
    // `-j` heads each dataset with its type and createtxg (list shows only its columns).
    properties.extend(JSON_HEAD.iter().map(|p| (*p).to_string()));
    properties.sort();
    properties.dedup();
    let object = match args.names.as_slice() {
        [name] => Some(name.clone()),
        _ => None,
    };
    Ok(Plan {
        verb: if object.is_some() {
            "open"
        } else {
            "list datasets"
        },
        object,
        view: View::DatasetList(ListView {
            columns,
            scripted: args.scripted,
            parsable: args.parsable,
            sort,
        }),
        request: Request::DatasetGet(DatasetGet {
            names: args.names,
            recursive: args.recursive,
            depth: args.depth,
            properties,
            types,
        }),
    })
}

/// The words of `get -s`, checked.
fn check_sources(spec: &str) -> Result<Vec<String>, Outcome> {
    let words = split_list(spec);
    for word in &words {
        if !matches!(
            word.as_str(),
            "local" | "default" | "inherited" | "temporary" | "received" | "none"
        ) {
            return Err(Outcome::usage(format!(
                "invalid source '{word}': valid sources are local, default, inherited, \
                 temporary, received, none"
            )));
        }
    }
    Ok(words)
}

fn plan_get(args: DatasetGetArgs) -> Result<Plan, Outcome> {
    let types = match check_type(args.types.as_deref())? {
        // Without -t, every type, as ZFS's `get` (`-r` shows snapshots and bookmarks too;
        // `listsnapshots` is for `list`).
        types if types.is_empty() => vec!["all".into()],
        types => types,
    };
    let fields = match &args.fields {
        Some(spec) => render::get_fields(spec).map_err(Outcome::usage)?,
        None => render::GET_DEFAULT.to_vec(),
    };
    let sources = args.sources.as_deref().map(check_sources).transpose()?;
    let object = match args.names.as_slice() {
        [name] => Some(name.clone()),
        _ => None,
    };
    let typed = split_list(&args.properties);
    let mut properties: Vec<String> = typed.iter().map(|p| userspace::resolve_prop(p)).collect();
    let hidden: Vec<String> = match properties.iter().any(|p| p == "all") {
        true => Vec::new(),
        false => JSON_HEAD
            .iter()
            .filter(|head| !properties.iter().any(|p| p == *head))
            .map(|head| (*head).to_string())
            .collect(),
    };
    let aliases = properties
        .iter()
        .zip(&typed)
        .filter(|(sent, typed)| sent != typed)
        .map(|(sent, typed)| (sent.clone(), typed.clone()))
        .collect();
    properties.extend(hidden.iter().cloned());
    Ok(Plan {
        verb: if object.is_some() {
            "get property for"
        } else {
            "get properties"
        },
        object,
        view: View::DatasetGet(GetView {
            fields,
            scripted: args.scripted,
            parsable: args.parsable,
            sources,
            aliases,
            hidden,
        }),
        request: Request::DatasetGet(DatasetGet {
            names: args.names,
            recursive: args.recursive,
            depth: args.depth,
            properties,
            types,
        }),
    })
}

/// ZFS's full name of a property typed by its short column name (`refer` is `referenced`).
pub(crate) fn canonical(property: &str) -> &str {
    match property {
        "avail" => "available",
        "refer" => "referenced",
        "ratio" => "compressratio",
        "compress" => "compression",
        "lused" => "logicalused",
        "lrefer" => "logicalreferenced",
        "reserv" => "reservation",
        "refreserv" => "refreservation",
        "recsize" => "recordsize",
        "volblock" => "volblocksize",
        "usedsnap" => "usedbysnapshots",
        "usedds" => "usedbydataset",
        "usedchild" => "usedbychildren",
        "usedrefreserv" => "usedbyrefreservation",
        other => other,
    }
}

/// The property of `row` a column names, by the name asked or its full name.
pub(crate) fn prop_of<'a>(row: &'a DatasetRow, property: &str) -> Option<&'a DatasetProp> {
    let canonical = canonical(property);
    row.props
        .iter()
        .find(|p| p.property == property || p.property == canonical)
}

/// The value of `property` in `row` (`-` when it was not returned).
fn cell<'a>(row: &'a DatasetRow, property: &str, parsable: bool) -> &'a str {
    if property == "name" {
        return &row.name;
    }
    prop_of(row, property).map_or("-", |p| if parsable { &p.parsable } else { &p.value })
}

/// The text of a dataset verb's reply (`None`: the reply does not fit the view).
pub(crate) fn show(view: &View, payload: &ReplyPayload) -> Option<String> {
    Some(match (view, payload) {
        (View::DatasetList(view), ReplyPayload::Datasets(rows)) => list(rows, view),
        (View::DatasetGet(view), ReplyPayload::Datasets(rows)) => get(rows, view),
        (View::Userspace(view), ReplyPayload::Userspace(rows)) => userspace::show(rows, view),
        (View::Projects, ReplyPayload::Projects(rows)) => userspace::show_projects(rows),
        (View::Mounts, ReplyPayload::Mounts(rows)) => mounts(rows),
        (
            View::SnapshotDestroy {
                dry_run,
                verbose,
                parsable,
            },
            ReplyPayload::SnapshotsDestroyed { names, reclaimed },
        ) => snapshots_destroyed(names, *reclaimed, *dry_run, *verbose, *parsable),
        (View::Nbd { scripted }, ReplyPayload::NbdExports(rows)) => nbd_exports(rows, *scripted),
        (View::Holds { scripted, parsable }, ReplyPayload::Holds(rows)) => {
            holds(rows, *scripted, *parsable)
        }
        (
            View::Diff {
                types,
                scripted,
                times,
            },
            ReplyPayload::Diff(rows),
        ) => diff(rows, *types, *scripted, *times),
        (View::Silent, ReplyPayload::Mounts(_)) => String::new(),
        _ => return None,
    })
}

/// `tarn diff`: `[TIME\t]CHANGE\t[TYPE\t]PATH[ -> NEW PATH][\t(+N)]`, a line per change, as
/// ZFS prints it: `-H` separates a rename's paths by a tab, and a file whose link count
/// moved ends with the change (`(+1)`, `(-2)`).
fn diff(rows: &[tarn_proto::DiffRow], types: bool, scripted: bool, times: bool) -> String {
    let mut out = String::new();
    for row in rows {
        if times {
            out.push_str(&row.ctime);
            out.push('\t');
        }
        out.push_str(&row.change);
        out.push('\t');
        if types {
            out.push_str(&row.file);
            out.push('\t');
        }
        out.push_str(&row.path);
        if let Some(new) = &row.new_path {
            out.push_str(if scripted { "\t" } else { " -> " });
            out.push_str(new);
        }
        if row.links != 0 {
            out.push_str(&format!("\t({:+})", row.links));
        }
        out.push('\n');
    }
    out
}

/// `tarn nbd`: `VOLUME CONNECTIONS URI TCP`, the URIs a client connects with (TCP `-`
/// when no TCP listener serves the volume: its `org.tarn:nbd_listen`, inherited, asks for
/// none).
fn nbd_exports(rows: &[tarn_proto::NbdExportRow], scripted: bool) -> String {
    let column = |header: &'static str, right: bool| crate::render::Column {
        header: header.into(),
        right,
        width_min: 0,
    };
    let columns = [
        column("VOLUME", false),
        column("CONNECTIONS", true),
        column("URI", false),
        column("TCP", false),
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let uri = format!("nbd+unix:///{}?socket={}", row.volume, row.socket);
            let tcp = row
                .tcp
                .as_ref()
                .map_or_else(|| "-".to_string(), |base| format!("{base}/{}", row.volume));
            vec![row.volume.clone(), row.connections.to_string(), uri, tcp]
        })
        .collect();
    crate::render::table(&columns, &cells, scripted)
}

/// `tarn holds`: ZFS's `NAME TAG TIMESTAMP` table (`-p`: Unix seconds).
fn holds(rows: &[tarn_proto::HoldRow], scripted: bool, parsable: bool) -> String {
    let column = |header: &'static str| crate::render::Column {
        header: header.into(),
        right: false,
        width_min: 0,
    };
    let columns = [column("NAME"), column("TAG"), column("TIMESTAMP")];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let time = if parsable {
                row.time.to_string()
            } else {
                row.when.clone()
            };
            vec![row.name.clone(), row.tag.clone(), time]
        })
        .collect();
    crate::render::table(&columns, &cells, scripted)
}

/// `destroy -v DS@SNAP` (ZFS's `will destroy` / `would destroy` lines and the reclaim).
fn snapshots_destroyed(
    names: &[String],
    reclaimed: u64,
    dry_run: bool,
    verbose: bool,
    parsable: bool,
) -> String {
    if !verbose {
        return String::new();
    }
    let will = if dry_run { "would" } else { "will" };
    let mut out = String::new();
    for name in names {
        out.push_str(&format!("{will} destroy {name}\n"));
    }
    let size = if parsable {
        reclaimed.to_string()
    } else {
        tarn_base::units::format_size(reclaimed)
    };
    out.push_str(&format!("{will} reclaim {size}\n"));
    out
}

/// `tarn list`.
/// The rows of `tarn list` in `-s`/`-S` order.
pub(crate) fn sorted<'a>(rows: &'a [DatasetRow], view: &ListView) -> Vec<&'a DatasetRow> {
    let mut rows: Vec<&DatasetRow> = rows.iter().collect();
    for (property, descending) in view.sort.iter().rev() {
        rows.sort_by(|a, b| {
            let (x, y) = (cell(a, property, true), cell(b, property, true));
            let order = match (x.parse::<f64>(), y.parse::<f64>()) {
                (Ok(x), Ok(y)) => x.total_cmp(&y),
                _ => x.cmp(y),
            };
            if *descending { order.reverse() } else { order }
        });
    }
    rows
}

fn list(rows: &[DatasetRow], view: &ListView) -> String {
    let rows = sorted(rows, view);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            view.columns
                .iter()
                .map(|c| cell(row, c, view.parsable).to_string())
                .collect()
        })
        .collect();
    let columns: Vec<Column> = view
        .columns
        .iter()
        .map(|c| Column {
            header: c.to_ascii_uppercase().into(),
            right: NUMERIC.contains(&c.as_str()),
            width_min: 0,
        })
        .collect();
    render::table(&columns, &cells, view.scripted)
}

/// The properties of a row `tarn get` shows: those `-s` lets through, less those the plan
/// added for `-j` alone.
pub(crate) fn shown_props<'a>(
    row: &'a DatasetRow,
    view: &'a GetView,
) -> impl Iterator<Item = &'a DatasetProp> {
    row.props.iter().filter(|prop| {
        let source_ok = match &view.sources {
            Some(sources) => sources.contains(&prop.source_kind),
            None => true,
        };
        source_ok && !view.hidden.contains(&prop.property)
    })
}

/// `tarn get`.
fn get(rows: &[DatasetRow], view: &GetView) -> String {
    let mut cells = Vec::new();
    for row in rows {
        for prop in shown_props(row, view) {
            cells.push(
                view.fields
                    .iter()
                    .map(|field| match field {
                        GetField::Name => row.name.clone(),
                        GetField::Property => view
                            .aliases
                            .iter()
                            .find(|(sent, _)| *sent == prop.property)
                            .map_or_else(|| prop.property.clone(), |(_, typed)| typed.clone()),
                        GetField::Value if view.parsable => prop.parsable.clone(),
                        GetField::Value => prop.value.clone(),
                        GetField::Source => prop.source.clone(),
                    })
                    .collect(),
            );
        }
    }
    let columns: Vec<Column> = view
        .fields
        .iter()
        .map(|field| Column {
            header: match field {
                GetField::Name => "NAME",
                GetField::Property => "PROPERTY",
                GetField::Value => "VALUE",
                GetField::Source => "SOURCE",
            }
            .into(),
            right: false,
            width_min: 0,
        })
        .collect();
    render::table(&columns, &cells, view.scripted)
}

/// `tarn mount` without arguments: `NAME  MOUNTPOINT` lines, as `zfs mount` prints.
fn mounts(rows: &[MountRow]) -> String {
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0);
    rows.iter()
        .map(|r| format!("{:<width$}  {}\n", r.name, r.mountpoint))
        .collect()
}
