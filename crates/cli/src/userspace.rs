//! Per-owner space: `tarn userspace|groupspace|projectspace` (ZFS's layout: TYPE NAME USED
//! QUOTA), `tarn project` (ZFS's `zfs project`: `   ID F PATH`), and the user and group
//! names of `userquota@alice`, resolved here through the system's passwd and group files
//! (the daemon and engine see numeric ids only).

use std::cmp::Ordering;
use std::path::{Component, Path, PathBuf};

use tarn_base::units::format_size;
use tarn_proto::{ProjectRow, Request, UserspaceRow};

use crate::args::{ProjectArgs, SpaceArgs};
use crate::render::{self, Column};
use crate::run::{Outcome, Plan, View};

/// Where names come from.
const PASSWD: &str = "/etc/passwd";
const GROUP: &str = "/etc/group";

/// Which ids a space command lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Space {
    User,
    Group,
    Project,
}

impl Space {
    fn word(self) -> &'static str {
        match self {
            Space::User => "user",
            Space::Group => "group",
            Space::Project => "project",
        }
    }

    /// ZFS's TYPE column.
    fn type_text(self) -> &'static str {
        match self {
            Space::User => "POSIX User",
            Space::Group => "POSIX Group",
            Space::Project => "Project",
        }
    }

    /// The database of names (`None`: projects are numbers).
    fn names_file(self) -> Option<&'static str> {
        match self {
            Space::User => Some(PASSWD),
            Space::Group => Some(GROUP),
            Space::Project => None,
        }
    }
}

const FIELDS: &[&str] = &["type", "name", "used", "quota", "objused", "objquota"];
const FIELDS_DEFAULT: &[&str] = &["type", "name", "used", "quota"];

/// How a space command shows its rows.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SpaceView {
    pub(crate) space: Space,
    pub(crate) fields: Vec<String>,
    pub(crate) scripted: bool,
    pub(crate) parsable: bool,
    pub(crate) numeric: bool,
    /// (field, descending), most significant first.
    pub(crate) sort: Vec<(String, bool)>,
}

/// `name:...:id:...` lines of a passwd or group file: the id of `name` (field 3).
fn parse_id(text: &str, name: &str) -> Option<u32> {
    text.lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|fields| fields.len() >= 3 && fields[0] == name)
        .and_then(|fields| fields[2].parse().ok())
}

/// The first name with id `id` in a passwd or group file.
fn parse_name(text: &str, id: u32) -> Option<String> {
    text.lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|fields| fields.len() >= 3 && fields[2].parse() == Ok(id))
        .map(|fields| fields[0].to_string())
}

fn read(file: &str) -> String {
    std::fs::read_to_string(file).unwrap_or_default()
}

/// `userquota@alice` -> `userquota@1000` (group names through the group file); names that
/// do not resolve, numeric ids and other properties are returned unchanged (the daemon
/// refuses a name it cannot read as an id, naming it).
pub(crate) fn resolve_prop(property: &str) -> String {
    let Some((prefix, who)) = property.split_once('@') else {
        return property.to_string();
    };
    let file = if prefix.starts_with("user") {
        PASSWD
    } else if prefix.starts_with("group") {
        GROUP
    } else {
        return property.to_string();
    };
    if who.is_empty() || who.bytes().all(|b| b.is_ascii_digit()) {
        return property.to_string();
    }
    match parse_id(&read(file), who) {
        Some(id) => format!("{prefix}@{id}"),
        None => property.to_string(),
    }
}

fn check_field(field: &str) -> Result<(), Outcome> {
    if FIELDS.contains(&field) {
        Ok(())
    } else {
        Err(Outcome::usage(format!(
            "invalid field '{field}': valid fields are {}",
            FIELDS.join(", ")
        )))
    }
}

/// Plans `tarn userspace` and its kin (pure).
pub(crate) fn plan(space: Space, args: SpaceArgs) -> Result<Plan, Outcome> {
    let fields: Vec<String> = match &args.fields {
        Some(spec) => spec.split(',').map(|f| f.trim().to_string()).collect(),
        None => FIELDS_DEFAULT.iter().map(|f| (*f).to_string()).collect(),
    };
    let mut sort: Vec<(String, bool)> = Vec::new();
    sort.extend(args.sort_ascending.iter().map(|f| (f.clone(), false)));
    sort.extend(args.sort_descending.iter().map(|f| (f.clone(), true)));
    if sort.is_empty() {
        sort = vec![("type".into(), false), ("name".into(), false)];
    }
    for field in fields.iter().chain(sort.iter().map(|(f, _)| f)) {
        check_field(field)?;
    }
    Ok(Plan {
        verb: "get space for",
        object: Some(args.name.clone()),
        view: View::Userspace(SpaceView {
            space,
            fields,
            scripted: args.scripted,
            parsable: args.parsable,
            numeric: args.numeric,
            sort,
        }),
        request: Request::Userspace {
            name: args.name,
            space: space.word().into(),
        },
    })
}

/// `cwd/path` with `.` and `..` folded (no I/O: the daemon resolves it in its mounts).
fn absolute(cwd: &Path, path: &Path) -> String {
    let mut out = PathBuf::from("/");
    for part in cwd.join(path).components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out.to_string_lossy().into_owned()
}

/// Plans `tarn project` (pure).
pub(crate) fn plan_project(args: ProjectArgs, cwd: &Path) -> Plan {
    let path = absolute(cwd, &args.path);
    Plan {
        verb: "project",
        object: Some(args.path.display().to_string()),
        view: View::Projects,
        request: Request::Project {
            path,
            id: args.id,
            inherit: args.inherit,
            clear: args.clear,
            keep: args.keep,
            recursive: args.recursive,
        },
    }
}

/// `zfs project`'s listing: id right-aligned in 5, `P` for the inherit flag, the path.
pub(crate) fn show_projects(rows: &[ProjectRow]) -> String {
    rows.iter()
        .map(|r| {
            let flag = if r.inherit { 'P' } else { '-' };
            format!("{:>5} {flag} {}\n", r.id, r.path)
        })
        .collect()
}

fn limit_text(limit: Option<u64>, parsable: bool, size: bool) -> String {
    match limit {
        None => if parsable { "0" } else { "none" }.into(),
        Some(n) if size && !parsable => format_size(n),
        Some(n) => n.to_string(),
    }
}

/// One cell; `names` is the passwd or group file's text.
fn cell(row: &UserspaceRow, field: &str, view: &SpaceView, names: &str) -> String {
    match field {
        "type" => view.space.type_text().into(),
        "name" if view.numeric || view.space == Space::Project => row.id.to_string(),
        "name" => parse_name(names, row.id).unwrap_or_else(|| row.id.to_string()),
        "used" if view.parsable => row.used.to_string(),
        "used" => format_size(row.used),
        "quota" => limit_text(row.quota, view.parsable, true),
        "objused" => row.objused.to_string(),
        "objquota" => limit_text(row.objquota, view.parsable, false),
        _ => "-".into(),
    }
}

/// The sort key of a field: numbers by value, names as text.
fn compare(
    a: &UserspaceRow,
    b: &UserspaceRow,
    field: &str,
    view: &SpaceView,
    names: &str,
) -> Ordering {
    let number = |r: &UserspaceRow| match field {
        "used" => Some(r.used),
        "quota" => Some(r.quota.unwrap_or(0)),
        "objused" => Some(r.objused),
        "objquota" => Some(r.objquota.unwrap_or(0)),
        "name" if view.numeric || view.space == Space::Project => Some(u64::from(r.id)),
        _ => None,
    };
    match (number(a), number(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => cell(a, field, view, names).cmp(&cell(b, field, view, names)),
    }
}

/// The table of a space command.
pub(crate) fn show(rows: &[UserspaceRow], view: &SpaceView) -> String {
    let names = view.space.names_file().map(read).unwrap_or_default();
    let mut rows: Vec<&UserspaceRow> = rows.iter().collect();
    for (field, descending) in view.sort.iter().rev() {
        rows.sort_by(|a, b| {
            let order = compare(a, b, field, view, &names);
            if *descending { order.reverse() } else { order }
        });
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            view.fields
                .iter()
                .map(|f| cell(row, f, view, &names))
                .collect()
        })
        .collect();
    let columns: Vec<Column> = view
        .fields
        .iter()
        .map(|f| Column {
            header: f.to_ascii_uppercase().into(),
            right: false,
            width_min: 0,
        })
        .collect();
    render::table(&columns, &cells, view.scripted)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD_TEXT: &str = "root:x:0:0:root:/root:/bin/bash\n\
                               alice:x:1000:100::/home/alice:/bin/sh\n\
                               broken line\n";

    #[test]
    fn project_paths_and_listing() {
        let cwd = Path::new("/mnt/tank/home");
        assert_eq!(absolute(cwd, Path::new("a/./b/../c")), "/mnt/tank/home/a/c");
        assert_eq!(absolute(cwd, Path::new("/x/y/")), "/x/y");
        let rows = [
            ProjectRow {
                path: "/t/p".into(),
                id: 42,
                inherit: true,
            },
            ProjectRow {
                path: "/t/p/f".into(),
                id: 0,
                inherit: false,
            },
        ];
        assert_eq!(show_projects(&rows), "   42 P /t/p\n    0 - /t/p/f\n");
    }

    #[test]
    fn names_and_ids_from_passwd_text() {
        assert_eq!(parse_id(PASSWD_TEXT, "alice"), Some(1000));
        assert_eq!(parse_id(PASSWD_TEXT, "bob"), None);
        assert_eq!(parse_name(PASSWD_TEXT, 0).as_deref(), Some("root"));
        assert_eq!(parse_name(PASSWD_TEXT, 7), None);
    }

    #[test]
    fn properties_resolve_names_and_keep_the_rest() {
        assert_eq!(resolve_prop("userquota@root"), "userquota@0");
        assert_eq!(resolve_prop("userquota@1234"), "userquota@1234");
        assert_eq!(resolve_prop("projectquota@5"), "projectquota@5");
        assert_eq!(
            resolve_prop("userquota@no-such-user-here"),
            "userquota@no-such-user-here"
        );
        assert_eq!(resolve_prop("quota"), "quota");
    }

    #[test]
    fn table_in_zfs_layout() {
        let view = SpaceView {
            space: Space::User,
            fields: FIELDS_DEFAULT.iter().map(|f| (*f).to_string()).collect(),
            scripted: false,
            parsable: false,
            numeric: true,
            sort: vec![("used".into(), true)],
        };
        let rows = vec![
            UserspaceRow {
                id: 0,
                used: 1536,
                quota: None,
                objused: 2,
                objquota: None,
            },
            UserspaceRow {
                id: 1000,
                used: 10 << 20,
                quota: Some(1 << 30),
                objused: 5,
                objquota: Some(100),
            },
        ];
        assert_eq!(
            show(&rows, &view),
            "TYPE        NAME  USED   QUOTA\n\
             POSIX User  1000  10M    1G\n\
             POSIX User  0     1.50K  none\n"
        );
        let scripted = SpaceView {
            scripted: true,
            parsable: true,
            fields: vec!["name".into(), "used".into(), "objquota".into()],
            ..view
        };
        assert_eq!(show(&rows, &scripted), "1000\t10485760\t100\n0\t1536\t0\n");
    }
}
